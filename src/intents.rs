//! Commit intents (`hudi.commit_intents`, DESIGN.md "Commit protocol"): the PostgreSQL side of
//! a Hudi write's commit. A transaction records one intent per written table at PRE_COMMIT, in
//! the transaction itself, so the intent exists exactly when the transaction committed. The
//! completed instant is created after PostgreSQL committed; an intent whose completion did not
//! happen (the backend was killed, storage was down) is finished from its row by the
//! background worker, `hudi.finish_pending_commits()` or `hudi.rollback_failed_writes`, and
//! readers on this server see its write meanwhile.

use std::cell::RefCell;

use engine::storage::{Storage, StorageUri};
use engine::write::PreparedCommit;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::role::as_pg_hudi;
use crate::runtime::block_on;

/// One committed (or committing) Hudi write, as its row holds it.
#[derive(Debug, Clone)]
pub struct Intent {
    pub location: String,
    pub relation: pg_sys::Oid,
    /// The role whose user mapping opens the table's storage.
    pub writer: pg_sys::Oid,
    /// The writing transaction (PostgreSQL's full transaction id).
    pub transaction: i64,
    pub commit: PreparedCommit,
}

/// What finishing an intent did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// The completed instant exists now (this call created it or found it).
    Completed { completion: String },
    /// The write is gone from the timeline: it was rolled back by someone who could not know
    /// that it committed (another server or a Hudi writer, past its heartbeat expiry).
    Lost(String),
    /// Not finished; tried again later.
    Failed(String),
}

thread_local! {
    /// Intents this backend completed after its transaction committed; their rows are deleted
    /// at the commit of its next transaction that may ([`may_forget`]): a committed
    /// transaction can no longer change rows.
    static COMPLETED: RefCell<Vec<(String, String)>> = const { RefCell::new(Vec::new()) };
}

fn spi_error(e: pgrx::spi::SpiError) -> ! {
    crate::error::spi_failed("commit intents", e)
}

/// The current transaction's full id, assigning one if it has none yet.
pub fn current_transaction() -> i64 {
    // SAFETY: called inside a transaction, on the main thread.
    unsafe { pg_sys::GetTopFullTransactionId().value as i64 }
}

/// Records `intents` in the current transaction, and forgets the intents this backend
/// completed before (one round trip for both).
pub fn record(intents: &[Intent]) {
    let completed = if may_forget() { COMPLETED.with(|c| std::mem::take(&mut *c.borrow_mut())) } else { Vec::new() };
    as_pg_hudi(|| {
        Spi::connect_mut(|client| {
            for intent in intents {
                let args: Vec<DatumWithOid> = vec![
                    intent.location.as_str().into(),
                    intent.commit.instant.as_str().into(),
                    intent.relation.into(),
                    intent.writer.into(),
                    intent.transaction.into(),
                    intent.commit.timeline_dir.as_str().into(),
                    intent.commit.metadata.as_ref().into(),
                ];
                client
                    .update(
                        "INSERT INTO hudi.commit_intents (location, instant, relation, writer, transaction, timeline_dir, metadata) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7)",
                        None,
                        &args,
                    )
                    .unwrap_or_else(|e| spi_error(e));
            }
            delete(client, &completed);
        })
    })
}

fn delete(client: &mut pgrx::spi::SpiClient<'_>, keys: &[(String, String)]) {
    if keys.is_empty() {
        return;
    }
    let (locations, instants): (Vec<String>, Vec<String>) = keys.iter().cloned().unzip();
    let args: Vec<DatumWithOid> = vec![locations.into(), instants.into()];
    // Rows a finisher has locked are its to delete.
    client
        .update(
            "DELETE FROM hudi.commit_intents WHERE ctid IN (SELECT i.ctid FROM hudi.commit_intents i \
             JOIN unnest($1::text[], $2::text[]) AS done(location, instant) USING (location, instant) \
             FOR UPDATE OF i SKIP LOCKED)",
            None,
            &args,
        )
        .unwrap_or_else(|e| spi_error(e));
}

/// Remembers that this backend completed `(location, instant)`, to forget its intent later.
pub fn completed_after_commit(location: String, instant: String) {
    COMPLETED.with(|c| c.borrow_mut().push((location, instant)));
}

/// Whether the current transaction may delete intents: it may write, and reads committed
/// data (under REPEATABLE READ and SERIALIZABLE, deleting a row a finisher deleted after the
/// snapshot fails the user's transaction with 40001; the finishers delete those rows then).
fn may_forget() -> bool {
    // SAFETY: plain reads of backend globals.
    unsafe { !pg_sys::XactReadOnly && !pg_sys::RecoveryInProgress() && pg_sys::XactIsoLevel == pg_sys::XACT_READ_COMMITTED as i32 }
}

/// Forgets the intents this backend completed, if the current transaction may ([`may_forget`];
/// and the table is still there: this runs at the commit of any later transaction, DROP
/// EXTENSION too).
pub fn forget_completed() {
    if !may_forget() || COMPLETED.with(|c| c.borrow().is_empty()) {
        return;
    }
    let completed = COMPLETED.with(|c| std::mem::take(&mut *c.borrow_mut()));
    if !table_exists() {
        return;
    }
    as_pg_hudi(|| Spi::connect_mut(|client| delete(client, &completed)));
}

/// The instants of the committed intents of the table at `location` (what reads need): those
/// of transactions committed by now. Read by a heap scan with `SnapshotSelf`, not with SQL: an
/// MVCC read would take predicate locks in SERIALIZABLE transactions, so that every reader of
/// any Hudi table would conflict with every writer's intent and fail with 40001 for nothing
/// (the Hudi tables themselves are not predicate-locked; their timeline is read as of now, and
/// so are the intents).
pub fn committed_instants(location: &str) -> Vec<String> {
    let Some(relid) = own_table(c"commit_intents") else { return Vec::new() };
    // SAFETY: a read-only scan of pg_hudi's own heap table inside a transaction, on the main
    // thread; the relation is locked while it is read, and every datum is copied out.
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let relation = pg_sys::table_open(relid, lock);
        let tupdesc = (*relation).rd_att;
        let natts = (*tupdesc).natts as usize;
        let attributes = (*tupdesc).attrs.as_slice(natts);
        let column = |name: &str| attributes.iter().position(|a| !a.attisdropped && pgrx::name_data_to_str(&a.attname) == name);
        let (Some(location_column), Some(instant_column)) = (column("location"), column("instant")) else {
            pg_sys::table_close(relation, lock);
            return Vec::new();
        };
        let scan = pg_sys::table_beginscan(relation, &raw mut pg_sys::SnapshotSelfData, 0, std::ptr::null_mut());
        let (mut values, mut nulls) = (vec![pg_sys::Datum::from(0); natts], vec![true; natts]);
        let mut instants = Vec::new();
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            pg_sys::heap_deform_tuple(tuple, tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
            let text = |i: usize| String::from_datum(values[i], nulls[i]);
            if text(location_column).as_deref() == Some(location) {
                instants.extend(text(instant_column));
            }
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(relation, lock);
        instants
    }
}

/// Committed intents to finish, of the table at `location` (all tables: `None`), all of them
/// or those of `instants`, of the foreign tables `owner` owns (or is a member of the owner
/// role of; any table: `None`): each locked until the end of the transaction, and those
/// another finisher has locked left to it (so finishers never wait on, or deadlock with, each
/// other or a backend forgetting its own). Only the rows chosen are locked: a caller's open
/// transaction holds no other table's intents back.
pub fn to_finish(location: Option<&str>, instants: Option<&[String]>, owner: Option<pg_sys::Oid>) -> Vec<Intent> {
    // Locking a row a finisher deleted after the snapshot would fail a REPEATABLE READ or
    // SERIALIZABLE transaction; there the rows are only read (and not changed, see `finish`).
    let locking = if may_forget() { " FOR UPDATE OF i SKIP LOCKED" } else { "" };
    let query = format!(
        "SELECT location, instant, relation, writer, transaction, timeline_dir, metadata FROM hudi.commit_intents i \
         WHERE ($1::pg_catalog.text IS NULL OR location OPERATOR(pg_catalog.=) $1) \
           AND ($2::pg_catalog.text[] IS NULL OR instant OPERATOR(pg_catalog.=) ANY($2)) \
           AND ($3::pg_catalog.oid IS NULL OR EXISTS (SELECT FROM pg_catalog.pg_class c \
                 WHERE c.oid OPERATOR(pg_catalog.=) i.relation AND pg_catalog.pg_has_role($3, c.relowner, 'USAGE'))) \
         ORDER BY location, instant{locking}"
    );
    let args: Vec<DatumWithOid> = vec![location.into(), instants.map(|i| i.to_vec()).into(), owner.into()];
    as_pg_hudi(|| {
        Spi::connect_mut(|client| {
            let rows = client.update(query.as_str(), None, &args).unwrap_or_else(|e| spi_error(e));
            rows.map(|row| {
                let text = |i| row.get::<String>(i).ok().flatten().unwrap_or_default();
                Intent {
                    location: text(1),
                    relation: row.get::<pg_sys::Oid>(3).ok().flatten().unwrap_or(pg_sys::Oid::INVALID),
                    writer: row.get::<pg_sys::Oid>(4).ok().flatten().unwrap_or(pg_sys::Oid::INVALID),
                    transaction: row.get::<i64>(5).ok().flatten().unwrap_or_default(),
                    commit: PreparedCommit {
                        instant: text(2),
                        timeline_dir: text(6),
                        metadata: row.get::<Vec<u8>>(7).ok().flatten().unwrap_or_default().into(),
                    },
                }
            })
            .collect()
        })
    })
}

/// What PostgreSQL knows of the transaction `transaction` of this cluster: `in progress`,
/// `committed` or `aborted` (a crashed one counts as aborted); `None` when it is too old to
/// tell.
pub fn transaction_status(transaction: i64) -> Option<String> {
    let args: Vec<DatumWithOid> = vec![transaction.to_string().into()];
    Spi::get_one_with_args::<String>("SELECT pg_catalog.pg_xact_status($1::pg_catalog.text::pg_catalog.xid8)", &args)
        .unwrap_or_else(|e| spi_error(e))
}

/// The storage of an intent's table, opened with its writer's credentials.
fn storage_of(intent: &Intent) -> Result<Storage, String> {
    // SAFETY: catalog lookups on the main thread; a dropped relation is reported, not read.
    unsafe {
        let exists = !pg_sys::get_rel_name(intent.relation).is_null()
            && pg_sys::get_rel_relkind(intent.relation) == pg_sys::RELKIND_FOREIGN_TABLE as std::ffi::c_char;
        if !exists {
            return Err(format!("foreign table {} was dropped; its write cannot be opened", intent.relation.to_u32()));
        }
        let table = pg_sys::GetForeignTable(intent.relation);
        let uri = StorageUri::parse(&intent.location).map_err(|e| e.to_string())?;
        let settings = crate::fdw::table::store_settings(intent.writer, (*table).serverid, &uri);
        Storage::open(&uri, &settings).map_err(|e| e.to_string())
    }
}

/// Completes `intent` (idempotent), without raising an ERROR: the answer says what happened.
/// A completed or lost intent is forgotten, a failed one keeps its row with the error, when
/// the current transaction may write.
pub fn finish(intent: &Intent) -> Finished {
    let owner = crate::writer::writer_id().owner();
    let outcome = match storage_of(intent) {
        Err(e) => Finished::Failed(e),
        Ok(storage) => match block_on(async {
            match intent.commit.completed(&storage).await? {
                Some(completion) => {
                    // Completed by its writer, whose cleanup may not have happened.
                    let _ = engine::write::prepared::clear(&storage, &intent.commit.instant).await;
                    Ok::<_, engine::Error>(completion)
                }
                None => Ok(intent.commit.complete(&storage, &owner, &crate::guc::lock_options()).await?.completion),
            }
        }) {
            Ok(completion) => Finished::Completed { completion },
            Err(e) if e.kind() == engine::ErrorKind::NotFound => Finished::Lost(e.to_string()),
            Err(e) => Finished::Failed(e.to_string()),
        },
    };
    if !may_forget() {
        return outcome;
    }
    let key = [(intent.location.clone(), intent.commit.instant.clone())];
    as_pg_hudi(|| {
        Spi::connect_mut(|client| match &outcome {
            Finished::Completed { .. } => delete(client, &key),
            Finished::Lost(e) => {
                pgrx::warning!(
                    "pg_hudi: the committed write {} to {} was rolled back by another writer before it could complete: {e}",
                    intent.commit.instant,
                    intent.location
                );
                delete(client, &key)
            }
            Finished::Failed(e) => {
                let args: Vec<DatumWithOid> = vec![key[0].0.as_str().into(), key[0].1.as_str().into(), e.as_str().into()];
                client
                    .update(
                        "UPDATE hudi.commit_intents SET attempts = attempts + 1, last_error = $3 WHERE location = $1 AND instant = $2",
                        None,
                        &args,
                    )
                    .unwrap_or_else(|e| spi_error(e));
            }
        })
    });
    outcome
}

/// Finishes the committed intents of the table at `location` (all tables: `None`), of the
/// tables the current role owns only when `owned_only`.
pub fn finish_committed(location: Option<&str>, owned_only: bool) -> Vec<(Intent, Finished)> {
    // SAFETY: a plain read of the backend's current user.
    let owner = owned_only.then(|| unsafe { pg_sys::GetUserId() });
    to_finish(location, None, owner)
        .into_iter()
        .map(|intent| {
            let outcome = finish(&intent);
            (intent, outcome)
        })
        .collect()
}

/// Whether this database has pg_hudi's intents table (the worker may run where it has not;
/// DROP EXTENSION may have removed it).
pub fn table_exists() -> bool {
    own_table(c"commit_intents").is_some()
}

/// The oid of pg_hudi's own table `name` in schema `hudi`, by catalog lookups without SQL;
/// `None` where the extension is not installed.
pub(crate) fn own_table(name: &std::ffi::CStr) -> Option<pg_sys::Oid> {
    // SAFETY: syscache lookups inside a transaction, on the main thread.
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"hudi".as_ptr(), true);
        if schema == pg_sys::Oid::INVALID {
            return None;
        }
        Some(pg_sys::get_relname_relid(name.as_ptr(), schema)).filter(|oid| *oid != pg_sys::Oid::INVALID)
    }
}
