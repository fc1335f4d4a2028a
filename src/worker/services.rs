//! The table services the worker runs by itself, for every `hudi_fdw` foreign table of its
//! database whose option `services` is `auto`: rollback of failed writes, compaction of the
//! file groups that are due, cleaning, and archival. Each table is served in a transaction of its own as
//! the table's owner (so that its privileges and `file://` roots apply, not the worker's), and
//! an ERROR of one table's services is logged and rolled back without touching the others or
//! the worker; that table is tried again after a wait that doubles with every failure.

use engine::services::compaction;
use pgrx::prelude::*;
use pgrx::PgRelation;

use crate::fdw::table::ForeignHudiTable;
use crate::guc::{heartbeat_expiry, lock_options};
use crate::runtime::block_on;

/// What one round did for one table, for the log.
#[derive(Debug, Default)]
struct Done {
    rolled_back: usize,
    compacted_groups: usize,
    cleaned_files: usize,
    archived_instants: usize,
}

impl std::fmt::Display for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rolled back {} failed writes, compacted {} file groups, cleaned {} files, archived {} instants",
            self.rolled_back, self.compacted_groups, self.cleaned_files, self.archived_instants
        )
    }
}

/// The foreign tables of this database that have `services 'auto'`, with their owners.
fn served_tables() -> Vec<(pg_sys::Oid, pg_sys::Oid)> {
    Spi::connect(|client| {
        let rows = client
            .select(
                "SELECT c.oid, c.relowner FROM pg_catalog.pg_foreign_table t \
                 JOIN pg_catalog.pg_class c ON c.oid = t.ftrelid \
                 JOIN pg_catalog.pg_foreign_server s ON s.oid = t.ftserver \
                 JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw \
                 WHERE w.fdwname = 'hudi_fdw' AND 'services=auto' = ANY (t.ftoptions) ORDER BY c.oid",
                None,
                &[],
            )
            .unwrap_or_else(|e| crate::error::raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, e.to_string(), None));
        rows.filter_map(|row| Some((row.get::<pg_sys::Oid>(1).ok()??, row.get::<pg_sys::Oid>(2).ok()??))).collect()
    })
}

/// Runs `f` in a subtransaction: an ERROR inside rolls it back and comes back as its message.
pub(crate) fn in_subtransaction<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    // SAFETY: the pattern PL/pgSQL uses for exception blocks, on the main thread inside a
    // transaction: the memory context and resource owner are restored on both paths.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        // The closure runs once, and what it touched is rolled back with the subtransaction.
        PgTryBuilder::new(std::panic::AssertUnwindSafe(|| {
            let result = f();
            pg_sys::ReleaseCurrentSubTransaction();
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
            Ok(result)
        }))
        .catch_others(|error| {
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            pg_sys::MemoryContextSwitchTo(context);
            pg_sys::CurrentResourceOwner = owner;
            Err(match &error {
                pg_sys::panic::CaughtError::PostgresError(report) | pg_sys::panic::CaughtError::ErrorReport(report) => {
                    report.message().to_owned()
                }
                pg_sys::panic::CaughtError::RustPanic { ereport, .. } => ereport.message().to_owned(),
            })
        })
        .execute()
    }
}

/// Runs `f` as `role`, as a SECURITY DEFINER function owned by it would.
fn as_role<R>(role: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let (mut user, mut context) = (pg_sys::Oid::INVALID, 0);
    // SAFETY: saving and restoring the user id, on the main thread inside a transaction; an
    // ERROR inside resets it with the subtransaction's abort.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(role, context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
    }
    let result = f();
    // SAFETY: as above.
    unsafe { pg_sys::SetUserIdAndSecContext(user, context) };
    result
}

/// `relid`, opened for a service call (which checks ownership and options again).
fn relation(relid: pg_sys::Oid) -> PgRelation {
    // SAFETY: `relid` was listed in this transaction; a table dropped since is an ERROR here,
    // caught with the rest of its services.
    unsafe { PgRelation::with_lock(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE) }
}

/// The services of one table, as its owner.
fn serve(relid: pg_sys::Oid) -> Done {
    let mut done = Done::default();
    done.rolled_back = crate::api::tables::rollback_failed_writes(relation(relid)).count();
    let table = ForeignHudiTable::of_relation(relid);
    let due = table.count_option("compaction_delta_commits", compaction::DEFAULT_DELTA_COMMITS);
    let storage = table.storage();
    let writer = crate::fdw::modify::writer_id();
    let scheduled = block_on(compaction::schedule_due_compaction(&storage, &writer, &lock_options(), due)).unwrap_or_else(|e| crate::error::report(e));
    if let Some(instant) = scheduled {
        let outcome = block_on(compaction::run_compaction(&storage, &instant, &writer, &lock_options(), heartbeat_expiry()));
        done.compacted_groups = outcome.unwrap_or_else(|e| crate::error::report(e)).file_groups;
    }
    done.cleaned_files = crate::api::clean::clean(relation(relid)).map(|c| c.2 as usize).sum();
    done.archived_instants = crate::api::archive::archive(relation(relid)).map(|a| a.0 as usize).sum();
    done
}

/// Tables whose services failed: how often in a row, and when to try again.
#[derive(Default)]
pub struct Backoff {
    failed: std::collections::HashMap<pg_sys::Oid, (u32, std::time::Instant)>,
}

/// The longest a failing table waits between two attempts.
const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(600);

impl Backoff {
    fn due(&self, relid: pg_sys::Oid) -> bool {
        self.failed.get(&relid).is_none_or(|(_, next)| *next <= std::time::Instant::now())
    }

    /// Another failure: the wait doubles from one nap, up to [`MAX_BACKOFF`].
    fn failed(&mut self, relid: pg_sys::Oid, nap: std::time::Duration) -> std::time::Duration {
        let failures = self.failed.get(&relid).map_or(0, |(n, _)| *n) + 1;
        let wait = nap.saturating_mul(1 << failures.min(16)).min(MAX_BACKOFF);
        self.failed.insert(relid, (failures, std::time::Instant::now() + wait));
        wait
    }
}

/// One round over the served tables that are due, each in a transaction of its own.
pub fn run_round(worker: &str, backoff: &mut Backoff) {
    let tables = pgrx::bgworkers::BackgroundWorker::transaction(served_tables);
    for (relid, owner) in tables {
        if crate::runtime::stopping() {
            return;
        }
        if !backoff.due(relid) {
            continue;
        }
        let (name, outcome) = pgrx::bgworkers::BackgroundWorker::transaction(|| {
            let outcome = in_subtransaction(|| as_role(owner, || serve(relid)));
            (crate::fdw::table::relation_name(relid), outcome)
        });
        match outcome {
            Ok(done) => {
                backoff.failed.remove(&relid);
                if done.rolled_back + done.compacted_groups + done.cleaned_files + done.archived_instants > 0 {
                    log!("{worker}: table {name}: {done}")
                }
            }
            Err(_) if crate::runtime::stopping() => return,
            Err(e) => {
                let wait = backoff.failed(relid, crate::guc::worker_naptime());
                log!("{worker}: services of table {name} failed: {e}; next attempt in {} s", wait.as_secs())
            }
        }
    }
}
