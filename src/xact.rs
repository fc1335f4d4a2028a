//! Writes and PostgreSQL transactions: one Hudi deltacommit per table per PostgreSQL
//! transaction. Rows are buffered per table and flushed to log files as they pile up. At
//! PRE_COMMIT the logs are flushed, the commit metadata prepared and one commit intent per table
//! recorded in the transaction ([`crate::intents`]); once PostgreSQL has committed, the
//! deltacommits complete. An abort, before or after PRE_COMMIT, deletes what the transaction
//! wrote. So a Hudi write commits if and only if its PostgreSQL transaction does.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use engine::write::heartbeat::{HeartbeatKeeper, KeptHeartbeat};
use engine::write::{BaseRow, Change, PendingBlocks, Transaction};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::datum::{ConversionError, PgKind, RowBuffer};
use crate::intents::Intent;
use crate::runtime::block_on;

/// An open deltacommit of one table, with the rows not yet written. Upserts and deletes are
/// buffered apart; switching from one to the other writes the buffered ones first, so log
/// blocks keep statement order.
pub struct OpenWrite {
    pub transaction: Transaction,
    /// The written table's location and foreign table, and the role whose credentials it
    /// was opened with.
    location: String,
    relation: pg_sys::Oid,
    /// The table has `services 'auto'`: the commit wakes the worker.
    wakes_worker: bool,
    writer: pg_sys::Oid,
    pub upserts: PendingRows,
    pub deletes: PendingRows,
    /// The last flush's log blocks, being encoded on a helper thread while more rows are
    /// buffered; written by the next flush, at the end of the statement, or before a read.
    encoding: Option<PendingBlocks>,
    /// The write's heartbeat, kept fresh while the transaction is open, busy or idle.
    heartbeat: Option<KeptHeartbeat>,
    /// Why a flush failed: rows may be lost, so the write cannot commit any more.
    broken: Option<String>,
    /// An UPDATE wrote rows it read: a truncate it did not see must stop its commit.
    pub updates_rows: bool,
}

/// Buffered rows, each with where an UPDATE or DELETE read it (see [`crate::fdw::positions`]).
pub struct PendingRows {
    rows: RowBuffer,
    read_at: Vec<Option<BaseRow>>,
}

impl PendingRows {
    fn new(schema: arrow::datatypes::SchemaRef) -> PendingRows {
        PendingRows { rows: RowBuffer::new(schema), read_at: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Appends one row (as [`RowBuffer::push`]) read at `read_at`.
    pub fn push(&mut self, values: &[Option<(pg_sys::Datum, PgKind)>], read_at: Option<BaseRow>) -> Result<(), ConversionError> {
        self.rows.push(values)?;
        self.read_at.push(read_at);
        Ok(())
    }

    /// The buffered rows and where they were read; the buffer starts over empty.
    fn take(&mut self) -> (arrow::record_batch::RecordBatch, Vec<Option<BaseRow>>) {
        (self.rows.take(), std::mem::take(&mut self.read_at))
    }
}

/// Has the backend's heartbeat thread keep `transaction`'s heartbeat fresh while the handle
/// lives (`None` when no thread could be started).
fn keep_heartbeat(transaction: &Transaction) -> Option<KeptHeartbeat> {
    // A beat every quarter of the expiry (at least every minute) outlives a missed one or two.
    let every = (crate::guc::heartbeat_expiry() / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
    KEEPER.with(|keeper| {
        let keeper = keeper.get_or_init(HeartbeatKeeper::start);
        keeper.as_ref().map(|k| k.keep(transaction.storage(), transaction.instant(), every))
    })
}

impl OpenWrite {
    /// A write of `transaction` to the table at `location` (foreign table `relation`);
    /// `wakes_worker`: its commit wakes the database's worker (the table has `services 'auto'`).
    pub fn new(transaction: Transaction, location: String, relation: pg_sys::Oid, wakes_worker: bool) -> OpenWrite {
        let schema = transaction.data_schema().clone();
        crate::locks::hold_live_write(&location, transaction.instant());
        let heartbeat = keep_heartbeat(&transaction);
        // SAFETY: a plain read of the backend's current user.
        let writer = unsafe { pg_sys::GetUserId() };
        OpenWrite {
            transaction,
            location,
            relation,
            wakes_worker,
            writer,
            upserts: PendingRows::new(schema.clone()),
            deletes: PendingRows::new(schema),
            encoding: None,
            heartbeat,
            broken: None,
            updates_rows: false,
        }
    }

    /// Deletes what the write wrote.
    fn abort(mut self) -> engine::Result<()> {
        drop(self.heartbeat.take());
        block_on(self.transaction.abort())
    }

    /// Starts writing the buffered rows as log files: their blocks are encoded on a helper
    /// thread while the caller goes on, and written by the next flush or [`Self::finish`]. A
    /// flush that fails or is cancelled midway has taken rows out of the buffer and may have
    /// written part of them, so the write is broken for good: every later flush fails and the
    /// transaction cannot commit — even if the ERROR was caught (a read inside a savepoint
    /// flushes too).
    pub fn flush(&mut self) -> engine::Result<()> {
        release_freed_memory();
        self.guarded(Self::start_buffered)
    }

    /// Writes the last flush's blocks, once encoded (at the end of a statement: its errors are
    /// the statement's).
    pub fn finish_flush(&mut self) -> engine::Result<()> {
        self.guarded(Self::write_encoded)
    }

    /// Starts writing `rows` as log blocks of `change`, after the rows buffered so far (a flush
    /// of the write buffer, whose rows are Arrow already).
    pub fn write_rows(&mut self, change: Change, rows: arrow::record_batch::RecordBatch) -> engine::Result<()> {
        self.guarded(|write| {
            write.start_buffered()?;
            write.write_encoded()?;
            write.encoding = Some(write.transaction.encode(change, rows, Vec::new()));
            Ok(())
        })
    }

    /// Writes every buffered row as log files, and waits until they are written.
    pub fn finish(&mut self) -> engine::Result<()> {
        self.guarded(|write| {
            write.start_buffered()?;
            write.write_encoded()
        })
    }

    fn guarded(&mut self, step: impl FnOnce(&mut Self) -> engine::Result<()>) -> engine::Result<()> {
        if let Some(why) = &self.broken {
            crate::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE,
                format!("an earlier write to this Hudi table failed in this transaction ({why})"),
                Some("Roll the transaction back.".into()),
            );
        }
        self.broken = Some("it was interrupted".into());
        let written = step(self);
        self.broken = written.as_ref().err().map(ToString::to_string);
        written
    }

    /// Writes the blocks being encoded, if any.
    fn write_encoded(&mut self) -> engine::Result<()> {
        match self.encoding.take() {
            Some(pending) => block_on(self.transaction.write_blocks(pending)),
            None => Ok(()),
        }
    }

    /// Starts encoding the buffered upserts, then deletes (each waits for the blocks ahead of
    /// it, which are numbered before it).
    fn start_buffered(&mut self) -> engine::Result<()> {
        for change in [Change::Upsert, Change::Delete] {
            let pending = match change {
                Change::Upsert => &mut self.upserts,
                Change::Delete => &mut self.deletes,
            };
            if pending.len() > 0 {
                let (batch, read_at) = pending.take();
                self.write_encoded()?;
                self.encoding = Some(self.transaction.encode(change, batch, read_at));
            }
        }
        Ok(())
    }
}

/// Returns memory freed since the last batch (decoded file slices, encoded blocks, freed on the
/// helper threads' malloc arenas as much as on the backend's) to the system. Without it, a
/// statement that writes millions of rows keeps tens of MiB more resident than it uses, in
/// every arena its threads touched (bench/update in bench/README.md); once per batch of rows
/// it costs nothing measurable.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: glibc's malloc_trim only walks its own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A write whose PostgreSQL transaction is committing: flushed, its intent recorded, its
/// heartbeat still kept until the completed instant exists.
struct PreparedWrite {
    write: OpenWrite,
    intent: Intent,
}

impl PreparedWrite {
    /// Creates the completed instant, after PostgreSQL committed: never raises an ERROR (the
    /// transaction cannot abort any more). What fails stays in the intent, for a retry.
    fn complete(self) {
        let PreparedWrite { mut write, intent } = self;
        let owner = crate::writer::writer_id().owner();
        let storage = write.transaction.storage().clone();
        // The completion ends the heartbeat itself: the keeper must not renew it after that.
        // Its last beat is fresh for the short while the completion takes.
        drop(write.heartbeat.take());
        let completed = crate::runtime::block_on_unless_terminated(intent.commit.complete(&storage, &owner, &crate::guc::lock_options()))
            .unwrap_or_else(|| Err(engine::Error::new(engine::ErrorKind::InUse, "the backend was asked to terminate before the completion was done")));
        match completed {
            Ok(done) => {
                crate::fdw::lookup::committed(&write.location, &done.completion);
                crate::intents::completed_after_commit(intent.location, intent.commit.instant)
            }
            Err(e) => {
                // Kept alive again, for as long as this backend lives: a Hudi writer that rolls
                // back writes with expired heartbeats (and knows nothing of prepared marks)
                // must not take this committed one.
                if let Some(heartbeat) = keep_heartbeat(&write.transaction) {
                    UNFINISHED.with(|u| u.borrow_mut().push(heartbeat));
                }
                pgrx::warning!(
                    "pg_hudi: the transaction committed, but its write {} to {} is not completed yet ({e}); it will be, see hudi.pending_commits",
                    intent.commit.instant,
                    intent.location
                )
            }
        }
    }
}

thread_local! {
    /// The backend's heartbeat thread, started with its first write.
    static KEEPER: std::cell::OnceCell<Option<HeartbeatKeeper>> = const { std::cell::OnceCell::new() };
    // Boxed: a write is taken out of the map and put back for every row.
    static OPEN: RefCell<BTreeMap<u32, Box<OpenWrite>>> = const { RefCell::new(BTreeMap::new()) };
    /// Writes prepared at PRE_COMMIT, completed at COMMIT or removed at ABORT.
    static PREPARED: RefCell<Vec<PreparedWrite>> = const { RefCell::new(Vec::new()) };
    /// Heartbeats of committed writes whose completion failed here (a finisher completes them).
    static UNFINISHED: RefCell<Vec<KeptHeartbeat>> = const { RefCell::new(Vec::new()) };
    static REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The committing transaction wrote to the write buffer: its commit wakes the flusher.
    static BUFFERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` on the open write of `relid`, beginning one with `begin` if there is none.
pub fn with_open_write<R>(
    relid: pg_sys::Oid,
    begin: impl FnOnce() -> OpenWrite,
    f: impl FnOnce(&mut OpenWrite) -> R,
) -> R {
    register_callbacks();
    let key = relid.to_u32();
    let exists = OPEN.with(|open| open.borrow().contains_key(&key));
    if !exists {
        let write = Box::new(begin());
        OPEN.with(|open| open.borrow_mut().insert(key, write));
    }
    // Take it out while `f` runs: `f` may raise an ERROR, whose abort callback needs the map.
    let mut write = OPEN.with(|open| open.borrow_mut().remove(&key)).expect("inserted above");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut write)));
    OPEN.with(|open| open.borrow_mut().insert(key, write));
    match result {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Makes `truncate()`, a truncating write of `relid`, this transaction's write to the table at
/// `location`: what the transaction wrote there before (through any foreign table) is deleted.
pub fn truncate(relid: pg_sys::Oid, location: &str, truncate: impl FnOnce() -> OpenWrite) {
    register_callbacks();
    let earlier: Vec<OpenWrite> = OPEN.with(|open| {
        let mut open = open.borrow_mut();
        let keys: Vec<u32> = open.iter().filter(|(_, w)| w.location == location).map(|(k, _)| *k).collect();
        keys.iter().filter_map(|k| open.remove(k)).map(|w| *w).collect()
    });
    for write in earlier {
        write.abort().unwrap_or_else(|e| crate::error::report(e));
    }
    let write = Box::new(truncate());
    OPEN.with(|open| open.borrow_mut().insert(relid.to_u32(), write));
}

/// Writes the last flush's blocks of the open write of `relid`, if it has one.
pub fn finish_flush(relid: pg_sys::Oid) {
    if OPEN.with(|open| open.borrow().contains_key(&relid.to_u32())) {
        with_open_write(relid, || unreachable!("the write is open"), |write| {
            write.finish_flush().unwrap_or_else(|e| crate::error::report(e));
        });
    }
}

/// What a read of a table must see of this transaction's own writes to it.
#[derive(Default)]
pub struct OwnWrites {
    /// The instants of the transaction's open writes.
    pub instants: Vec<String>,
    /// The data files they wrote, as `(path relative to the table, size)`.
    pub files: Vec<(String, u64)>,
    /// The table's schema as one of them changed it (ALTER FOREIGN TABLE).
    pub schema: Option<String>,
}

/// Whether this transaction has an open write to the table at `location` (its reads must see
/// it, which only a read of the table's files does).
pub fn writes_to(location: &str) -> bool {
    OPEN.with(|open| open.borrow().values().any(|w| w.location == location))
}

/// The schema of the table at `location` as an ALTER of this transaction changed it, if one
/// did: its commit, and so the schema, is not in storage before the transaction commits.
pub fn changed_schema_of(location: &str) -> Option<String> {
    OPEN.with(|open| open.borrow().values().filter(|w| w.location == location).find_map(|w| w.transaction.changed_schema().map(str::to_owned)))
}

/// Prepares a read of the table at `location` in this transaction: writes out the rows its
/// open writes buffered, and returns what they wrote, which the read must see (a transaction
/// reads its own writes).
pub fn own_writes_to(location: &str) -> OwnWrites {
    let keys: Vec<u32> =
        OPEN.with(|open| open.borrow().iter().filter(|(_, w)| w.location == location).map(|(k, _)| *k).collect());
    let mut own = OwnWrites::default();
    for key in keys {
        with_open_write(key.into(), || unreachable!("the write is open"), |write| {
            write.finish().unwrap_or_else(|e| crate::error::report(e));
            own.instants.push(write.transaction.instant().to_owned());
            own.files.extend(write.transaction.written_files());
            if let Some(schema) = write.transaction.changed_schema() {
                own.schema = Some(schema.to_owned());
            }
        });
    }
    own
}

/// Deletes what the open write of `relid` wrote, if there is one, and forgets it: for a write
/// of a subtransaction that an ERROR rolled back (the flush of a write buffer).
pub fn discard_write(relid: pg_sys::Oid) {
    if let Some(write) = OPEN.with(|open| open.borrow_mut().remove(&relid.to_u32())) {
        let instant = write.transaction.instant().to_owned();
        if let Err(e) = write.abort() {
            pgrx::warning!("pg_hudi could not remove the files of aborted write {instant}: {e}");
        }
    }
}

pub(crate) fn register_callbacks() {
    if REGISTERED.with(|r| r.replace(true)) {
        return;
    }
    // SAFETY: registering a callback for the rest of the backend's life.
    unsafe { pg_sys::RegisterXactCallback(Some(on_transaction_event), std::ptr::null_mut()) };
}

fn take_all() -> Vec<OpenWrite> {
    OPEN.with(|open| std::mem::take(&mut *open.borrow_mut()).into_values().map(|w| *w).collect())
}

/// PRE_COMMIT: everything that may fail, and may be cancelled, happens here, while an ERROR
/// still aborts the whole transaction (and with it every write): the logs are written out, the
/// commit metadata prepared, the intents recorded in the transaction, and each write marked
/// prepared in its table's storage (for other servers' rollbacks).
unsafe fn prepare_writes() {
    if crate::buffer::prepare_commit() {
        BUFFERED.with(|b| b.set(true));
    }
    let keys = OPEN.with(|open| open.borrow().keys().copied().collect::<Vec<_>>());
    if keys.is_empty() {
        crate::intents::forget_completed();
        return;
    }
    let transaction = crate::intents::current_transaction();
    for key in keys {
        let intent = with_open_write(key.into(), || unreachable!("the write is open"), |write| {
            write.finish()?;
            let commit = block_on(write.transaction.prepare())?;
            Ok::<_, engine::Error>(Intent { location: write.location.clone(), relation: write.relation, writer: write.writer, transaction, commit })
        })
        .unwrap_or_else(|e| crate::error::report(e));
        // Moved at once, so that an ERROR of a later table aborts this one too (ABORT takes
        // both lists); paired by table, never by instant (two tables may share one).
        let write = OPEN.with(|open| open.borrow_mut().remove(&key)).expect("prepared above");
        PREPARED.with(|p| p.borrow_mut().push(PreparedWrite { write: *write, intent }));
    }
    let intents: Vec<Intent> = PREPARED.with(|p| p.borrow().iter().map(|p| p.intent.clone()).collect());
    crate::intents::record(&intents);
    // The marks name this transaction's id: it must be on disk before them, or after a crash
    // that lost it the id could be handed out again, to a transaction that commits.
    pg_sys::XLogFlush(pg_sys::XactLastRecEnd);
    let mark = engine::write::prepared::PreparedMark { node: crate::writer::writer_id().node, transaction: transaction as u64 };
    let to_mark: Vec<(engine::storage::Storage, engine::write::PreparedCommit, String)> = PREPARED.with(|p| {
        p.borrow().iter().map(|w| (w.write.transaction.storage().clone(), w.intent.commit.clone(), w.intent.location.clone())).collect()
    });
    for (storage, commit, location) in to_mark {
        block_on(engine::write::prepared::mark(&storage, &commit.instant, &mark)).unwrap_or_else(|e| crate::error::report(e));
        // A rollback of failed writes (another server's, or one that took this writer for
        // dead) that got there first means the write is gone: the transaction must not commit.
        match block_on(commit.confirm_pending(&storage)) {
            Ok(()) => {}
            Err(e) if e.kind() == engine::ErrorKind::NotFound => crate::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
                format!("the write {} to {location} was rolled back before its transaction could commit", commit.instant),
                Some("A rollback of failed writes took it for the write of a dead writer; retry the transaction.".into()),
            ),
            Err(e) => crate::error::report(e),
        }
    }
    // An UPDATE computed its rows from a snapshot: a truncate it did not see (pending, or
    // completed after it began) would see them come back. Checked after the mark: a truncate
    // that did not find the mark is on the timeline now (Transaction::begin_truncate).
    let truncated: Vec<(String, engine::Result<Option<String>>)> = PREPARED.with(|p| {
        let prepared = p.borrow();
        let updating = prepared.iter().filter(|w| w.write.updates_rows);
        updating.map(|w| (w.intent.location.clone(), block_on(w.write.transaction.truncated_since()))).collect()
    });
    for (location, truncate) in truncated {
        match truncate {
            Ok(None) => {}
            Ok(Some(instant)) => crate::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
                format!("could not serialize access due to a concurrent truncate of {location} (instant {instant})"),
                Some("The rows this UPDATE read were truncated; retry the transaction.".into()),
            ),
            Err(e) => crate::error::report(e),
        }
    }
    // The completions follow PostgreSQL's commit record: it must be on disk first, even under
    // synchronous_commit = off, or a crash could keep the Hudi commit and lose the transaction.
    pg_sys::ForceSyncCommit();
    let pause = crate::guc::DEBUG_PAUSE_BEFORE_COMMIT.get();
    if pause > 0 {
        // Made inside the runtime: a tokio timer needs its context.
        block_on(async { tokio::time::sleep(Duration::from_millis(pause as u64)).await });
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_transaction_event(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    match event {
        pg_sys::XactEvent::XACT_EVENT_PRE_COMMIT => prepare_writes(),
        pg_sys::XactEvent::XACT_EVENT_PRE_PREPARE => {
            if OPEN.with(|open| !open.borrow().is_empty()) || crate::buffer::writes() {
                crate::error::raise(
                    pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    "PREPARE TRANSACTION is not supported for transactions that write Hudi tables",
                    None,
                );
            }
        }
        pg_sys::XactEvent::XACT_EVENT_COMMIT | pg_sys::XactEvent::XACT_EVENT_PARALLEL_COMMIT => {
            crate::fdw::positions::forget_all();
            crate::buffer::chunks::committed();
            // PostgreSQL committed: the completions must happen, and must not be interrupted
            // (a cancel would leave the table lock to its lease). Interrupts that arrive
            // meanwhile are served afterwards; failures are warnings and stay in the intents.
            let prepared = PREPARED.with(|p| std::mem::take(&mut *p.borrow_mut()));
            // Saved and restored, not counted down: a PostgreSQL error caught below resets it.
            let holdoff = pg_sys::InterruptHoldoffCount;
            pg_sys::InterruptHoldoffCount += 1;
            let wake_worker = prepared.iter().any(|p| p.write.wakes_worker);
            // A database with lookup caches on this server: their refresh follows a commit that
            // completed writes (a cache of another foreign table on the same Hudi table needs
            // it too). Buffered rows reach the caches with their flush, whose commit this is for
            // the worker: a buffered commit does not look (a directory read per commit).
            let refresh_caches = !prepared.is_empty() && crate::services::lookup_cache::database_has_caches();
            for write in prepared {
                let instant = write.intent.commit.instant.clone();
                let location = write.intent.location.clone();
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write.complete())).is_err() {
                    pgrx::warning!("pg_hudi: completing the committed write {instant} failed; it stays pending");
                }
                // Sessions waiting for the table's next commit look at once.
                crate::stream::committed(&location);
            }
            pg_sys::InterruptHoldoffCount = holdoff;
            if BUFFERED.with(|b| b.replace(false)) {
                crate::worker::wake::request_flush(pg_sys::MyDatabaseId);
            }
            // After the completions: the rounds they start see them.
            if wake_worker {
                crate::worker::wake::request(pg_sys::MyDatabaseId);
            }
            if refresh_caches {
                crate::worker::wake::request_cache_refresh(pg_sys::MyDatabaseId);
            }
        }
        pg_sys::XactEvent::XACT_EVENT_ABORT | pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT => {
            crate::fdw::positions::forget_all();
            crate::buffer::forget();
            BUFFERED.with(|b| b.set(false));
            let prepared = PREPARED.with(|p| std::mem::take(&mut *p.borrow_mut()));
            for write in take_all().into_iter().chain(prepared.into_iter().map(|p| p.write)) {
                let instant = write.transaction.instant().to_owned();
                if let Err(e) = write.abort() {
                    // An abort must not fail; what is left is cleaned by hudi.rollback_failed_writes.
                    pgrx::warning!("pg_hudi could not remove the files of aborted write {instant}: {e}");
                }
            }
        }
        _ => {}
    }
}
