//! Writes and PostgreSQL transactions: one Hudi deltacommit per table per PostgreSQL
//! transaction. Rows are buffered per table and flushed to log files as they pile up; the
//! deltacommit completes at PRE_COMMIT, and an abort deletes what the transaction wrote.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use engine::write::heartbeat::{HeartbeatKeeper, KeptHeartbeat};
use engine::write::{BaseRow, Transaction};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::datum::{ConversionError, PgKind, RowBuffer};
use crate::runtime::block_on;

/// Rows buffered per table before they are written as log blocks: bounds a backend's memory.
pub const FLUSH_ROWS: usize = 100_000;

/// An open deltacommit of one table, with the rows not yet written. Upserts and deletes are
/// buffered apart; switching from one to the other writes the buffered ones first, so log
/// blocks keep statement order.
pub struct OpenWrite {
    pub transaction: Transaction,
    pub upserts: PendingRows,
    pub deletes: PendingRows,
    /// The write's heartbeat, kept fresh while the transaction is open, busy or idle.
    heartbeat: Option<KeptHeartbeat>,
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

impl OpenWrite {
    pub fn new(transaction: Transaction) -> OpenWrite {
        let schema = transaction.data_schema().clone();
        // A beat every quarter of the expiry (at least every minute) outlives a missed one or two.
        let every = (crate::guc::heartbeat_expiry() / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
        let heartbeat = KEEPER.with(|keeper| {
            let keeper = keeper.get_or_init(HeartbeatKeeper::start);
            keeper.as_ref().map(|k| k.keep(transaction.storage(), transaction.instant(), every))
        });
        OpenWrite { transaction, upserts: PendingRows::new(schema.clone()), deletes: PendingRows::new(schema), heartbeat }
    }

    /// Completes the deltacommit of what was written (flush first).
    fn commit(mut self) -> engine::Result<()> {
        // The commit ends the heartbeat itself: the keeper must not renew it after that.
        drop(self.heartbeat.take());
        block_on(self.transaction.commit()).map(|_| ())
    }

    /// Deletes what the write wrote.
    fn abort(mut self) -> engine::Result<()> {
        drop(self.heartbeat.take());
        block_on(self.transaction.abort())
    }

    /// Writes the buffered rows as log files.
    pub fn flush(&mut self) -> engine::Result<()> {
        if self.upserts.len() > 0 {
            let (batch, read_at) = self.upserts.take();
            block_on(self.transaction.upsert_with_positions(&batch, &read_at))?;
        }
        if self.deletes.len() > 0 {
            let (batch, read_at) = self.deletes.take();
            block_on(self.transaction.delete_rows_with_positions(&batch, &read_at))?;
        }
        Ok(())
    }
}

thread_local! {
    /// The backend's heartbeat thread, started with its first write.
    static KEEPER: std::cell::OnceCell<Option<HeartbeatKeeper>> = const { std::cell::OnceCell::new() };
    // Boxed: a write is taken out of the map and put back for every row.
    static OPEN: RefCell<BTreeMap<u32, Box<OpenWrite>>> = const { RefCell::new(BTreeMap::new()) };
    static REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
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

fn register_callbacks() {
    if REGISTERED.with(|r| r.replace(true)) {
        return;
    }
    // SAFETY: registering a callback for the rest of the backend's life.
    unsafe { pg_sys::RegisterXactCallback(Some(on_transaction_event), std::ptr::null_mut()) };
}

fn take_all() -> Vec<OpenWrite> {
    OPEN.with(|open| std::mem::take(&mut *open.borrow_mut()).into_values().map(|w| *w).collect())
}

#[pg_guard]
unsafe extern "C-unwind" fn on_transaction_event(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    match event {
        pg_sys::XactEvent::XACT_EVENT_PRE_COMMIT => {
            // Writing out what is buffered may take long, and may be cancelled; the writes stay
            // open meanwhile, so that an ERROR's abort removes them all.
            for key in OPEN.with(|open| open.borrow().keys().copied().collect::<Vec<_>>()) {
                let flushed = with_open_write(key.into(), || unreachable!("the write is open"), OpenWrite::flush);
                if let Err(e) = flushed {
                    crate::error::report(e);
                }
            }
            let writes = take_all();
            // Completing the deltacommits is not interrupted: a cancel that dropped it midway
            // would leave the table lock to its lease, or abort a transaction whose write is
            // already visible. Interrupts that arrive meanwhile are served after the callback.
            pg_sys::InterruptHoldoffCount += 1;
            let mut failure = None;
            for write in writes {
                match failure {
                    Some(_) => drop(write.abort()),
                    None => failure = write.commit().err(),
                }
            }
            pg_sys::InterruptHoldoffCount -= 1;
            if let Some(e) = failure {
                crate::error::report(e);
            }
        }
        pg_sys::XactEvent::XACT_EVENT_PRE_PREPARE => {
            if OPEN.with(|open| !open.borrow().is_empty()) {
                crate::error::raise(
                    pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    "PREPARE TRANSACTION is not supported for transactions that write Hudi tables",
                    None,
                );
            }
        }
        pg_sys::XactEvent::XACT_EVENT_COMMIT | pg_sys::XactEvent::XACT_EVENT_PARALLEL_COMMIT => {
            crate::fdw::positions::forget_all();
        }
        pg_sys::XactEvent::XACT_EVENT_ABORT | pg_sys::XactEvent::XACT_EVENT_PARALLEL_ABORT => {
            crate::fdw::positions::forget_all();
            for write in take_all() {
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
