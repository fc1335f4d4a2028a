//! The table services a database's worker runs by itself, for every `hudi_fdw` foreign table
//! of its database whose option `services` is `auto`: rollback of failed writes, compaction of
//! the file groups that are due, cleaning, and archival. Each service of each table runs in a
//! transaction of its own as the table's owner (so that its privileges and `file://` roots
//! apply, not the worker's); an ERROR is rolled back without touching the other services or
//! tables. What a run did or why it failed is recorded in `hudi.service_state` and
//! `hudi.service_runs` (the views `hudi.table_services` and `hudi.service_history`), and the
//! worker's `pg_stat_activity.query` names the service running and its progress
//! ([`crate::activity`]). A failing service is tried
//! again after a wait that doubles with every failure in a row.

use engine::services::lease::ServiceLease;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::PgRelation;

use crate::activity::ServiceActivity;
use crate::services::{self, ServiceTable};
use crate::fdw::table::ForeignHudiTable;
use crate::guc::heartbeat_expiry;
use crate::role::{as_role, in_subtransaction};
use crate::runtime::block_on;

/// The services, in the order a round runs them: failed writes go before anything plans
/// around them, compaction before the clean that removes what it replaced, archival last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Service {
    Rollback,
    Compaction,
    Clean,
    Archive,
}

impl Service {
    const ALL: [Service; 4] = [Service::Rollback, Service::Compaction, Service::Clean, Service::Archive];

    /// The name in `hudi.table_services`.
    fn name(self) -> &'static str {
        match self {
            Service::Rollback => "rollback",
            Service::Compaction => "compaction",
            Service::Clean => "clean",
            Service::Archive => "archive",
        }
    }

    /// Runs the service on `relid` as the current role: what it did (`None` when nothing was
    /// due), and what holds it back, if anything.
    fn run(self, relid: pg_sys::Oid) -> (Option<String>, Option<String>) {
        let table = ServiceTable::open(&relation(relid), self.name());
        match self {
            Service::Rollback => {
                let rolled_back = services::rollback::rollback_failed_writes(&table);
                let detail = (!rolled_back.is_empty()).then(|| {
                    let instants: Vec<&str> = rolled_back.iter().map(|r| r.instant.as_str()).collect();
                    format!("rolled back {} failed writes ({})", instants.len(), instants.join(", "))
                });
                (detail, None)
            }
            Service::Compaction => (services::compaction::compact_due(&table), None),
            Service::Clean => {
                let (cleaned, held_back) = services::clean::clean_table(&table);
                let detail = cleaned.map(|c| {
                    format!(
                        "clean {}: deleted {} files ({} bytes); earliest commit to retain {}",
                        c.instant, c.files_deleted, c.bytes_freed, c.earliest_commit_to_retain
                    )
                });
                (detail, held_back)
            }
            Service::Archive => {
                let outcome = services::archive::archive(&table, services::archive::Trigger::AboveMidpoint);
                let detail = outcome
                    .archived
                    .map(|a| format!("archived {} instants ({} commits) from {} to {}", a.actions, a.commits, a.first, a.last));
                (detail, outcome.held_back)
            }
        }
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
            .unwrap_or_else(|e| spi_error(e));
        rows.filter_map(|row| Some((row.get::<pg_sys::Oid>(1).ok()??, row.get::<pg_sys::Oid>(2).ok()??))).collect()
    })
}

/// `relid`, opened for a service call (which checks ownership and options again).
fn relation(relid: pg_sys::Oid) -> PgRelation {
    // SAFETY: `relid` was listed in this transaction; a table dropped since is an ERROR here,
    // caught with the rest of its services.
    unsafe { PgRelation::with_lock(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE) }
}

/// The most runs of one table `hudi.service_runs` keeps.
const HISTORY_PER_TABLE: i64 = 1000;
/// The longest a failing service waits between two attempts.
const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(600);

fn spi_error(e: pgrx::spi::SpiError) -> ! {
    crate::error::spi_failed("table services", e)
}

/// Whether `service` of `relid` may run now: not while it waits after a failure.
fn is_due(relid: pg_sys::Oid, service: Service) -> bool {
    let args: Vec<DatumWithOid> = vec![relid.into(), service.name().into()];
    Spi::get_one_with_args::<bool>(
        "SELECT next_attempt > pg_catalog.clock_timestamp() FROM hudi.service_state \
         WHERE relation = $1 AND service = $2 AND failures > 0",
        &args,
    )
    .unwrap_or_else(|e| match e {
        pgrx::spi::SpiError::InvalidPosition => None,
        e => spi_error(e),
    })
    .is_none_or(|waiting| !waiting)
}

/// Records a run of `service` on `relid` that began at `started`: every run sets when the
/// worker last ran it (`next_due` in `hudi.table_services` counts from there), `Ok(None)`
/// (nothing was due) also clears a failure streak, and a run that did something or failed
/// goes into the history. Returns the wait before the next attempt after a failure.
fn record(relid: pg_sys::Oid, service: Service, started: pgrx::datum::TimestampWithTimeZone, outcome: &Result<Option<String>, String>) -> Option<std::time::Duration> {
    let key = || -> [DatumWithOid<'static>; 2] { [relid.into(), service.name().into()] };
    let run = |outcome: &str, detail: &str| {
        // The DELETE does not see the row the same statement inserts: it keeps one fewer.
        let kept_before = HISTORY_PER_TABLE - 1;
        let args: Vec<DatumWithOid> = key().into_iter().chain([started.into(), outcome.into(), detail.into(), kept_before.into()]).collect();
        Spi::run_with_args(
            "WITH added AS (INSERT INTO hudi.service_runs (relation, service, started, finished, outcome, detail) \
                            VALUES ($1, $2, $3, pg_catalog.clock_timestamp(), $4, $5) RETURNING id) \
             DELETE FROM hudi.service_runs WHERE relation = $1 AND id <= \
                 (SELECT id FROM hudi.service_runs WHERE relation = $1 ORDER BY id DESC OFFSET $6 LIMIT 1)",
            &args,
        )
        .unwrap_or_else(|e| spi_error(e));
    };
    match outcome {
        Ok(None) => {
            let args: Vec<DatumWithOid> = key().into();
            Spi::run_with_args(
                "INSERT INTO hudi.service_state AS s (relation, service, last_checked) VALUES ($1, $2, pg_catalog.clock_timestamp()) \
                 ON CONFLICT (relation, service) DO UPDATE SET failures = 0, next_attempt = NULL, last_checked = excluded.last_checked",
                &args,
            )
            .unwrap_or_else(|e| spi_error(e));
            None
        }
        Ok(Some(detail)) => {
            run("succeeded", detail);
            let args: Vec<DatumWithOid> = key().into_iter().chain([detail.as_str().into()]).collect();
            Spi::run_with_args(
                "INSERT INTO hudi.service_state AS s (relation, service, last_run, last_success, last_detail, last_checked) \
                 VALUES ($1, $2, pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(), $3, pg_catalog.clock_timestamp()) \
                 ON CONFLICT (relation, service) DO UPDATE SET failures = 0, next_attempt = NULL, \
                     last_run = excluded.last_run, last_success = excluded.last_success, last_detail = excluded.last_detail, \
                     last_checked = excluded.last_checked",
                &args,
            )
            .unwrap_or_else(|e| spi_error(e));
            None
        }
        Err(error) => {
            run("failed", error);
            let args: Vec<DatumWithOid> = key().into();
            let failures = Spi::get_one_with_args::<i32>(
                "SELECT failures FROM hudi.service_state WHERE relation = $1 AND service = $2",
                &args,
            )
            .unwrap_or(None)
            .unwrap_or(0)
                + 1;
            let nap = crate::guc::worker_naptime();
            let wait = nap.saturating_mul(1 << failures.clamp(1, 16)).min(MAX_BACKOFF);
            let args: Vec<DatumWithOid> =
                key().into_iter().chain([error.as_str().into(), failures.into(), (wait.as_millis() as f64 / 1000.0).into()]).collect();
            Spi::run_with_args(
                "INSERT INTO hudi.service_state AS s (relation, service, failures, last_run, last_error, next_attempt, last_checked) \
                 VALUES ($1, $2, $4, pg_catalog.clock_timestamp(), $3, \
                         pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => $5), pg_catalog.clock_timestamp()) \
                 ON CONFLICT (relation, service) DO UPDATE SET failures = excluded.failures, \
                     last_run = excluded.last_run, last_error = excluded.last_error, next_attempt = excluded.next_attempt, \
                     last_checked = excluded.last_checked",
                &args,
            )
            .unwrap_or_else(|e| spi_error(e));
            Some(wait)
        }
    }
}

/// Takes the service lease of `relid` for this process, or renews `held`: `None` while another
/// process holds it (logged at DEBUG1) or the table is gone.
fn lease_of(relid: pg_sys::Oid, held: Option<ServiceLease>) -> Option<ServiceLease> {
    let duration = heartbeat_expiry();
    let taken = match held {
        Some(lease) => block_on(lease.renew(duration)),
        None => {
            let storage = ForeignHudiTable::of_relation(relid).storage();
            // Only where a table is: a lease would create its location.
            block_on(async {
                engine::table::load_config(&storage).await?;
                ServiceLease::take(&storage, &crate::writer::writer_id().owner(), duration).await
            })
        }
    };
    match taken.unwrap_or_else(|e| crate::error::report(e)) {
        Ok(lease) => Some(lease),
        Err(holder) => {
            debug1!("table {}: services run by {} for {} s more", crate::fdw::table::relation_name(relid), holder.owner, holder.expires_in.as_secs());
            None
        }
    }
}

/// What one service's transaction came to.
enum Step {
    /// Not due, or the table is gone.
    Skipped,
    /// Another process holds the table's service lease: the table waits for the next round.
    Leased,
    /// A session holds a lock on the foreign table that excludes readers (an open ALTER
    /// FOREIGN TABLE): the table waits for the next round, the others do not wait for it. With
    /// its name, looked up inside the transaction (a catalog lookup outside one crashes).
    Busy(String),
    /// Ran: what it did, or its error, and then the wait before the next attempt.
    Ran(String, Result<Option<String>, String>, Option<std::time::Duration>),
    /// The lease could not be taken (the store is unreachable, or the table is not there):
    /// as `Ran` with an error, and the table's other services are not tried this round.
    Unreachable(String, Result<Option<String>, String>, Option<std::time::Duration>),
}

/// Records what holds `service` of `relid` back (`None`: nothing), when that changed.
fn record_note(relid: pg_sys::Oid, service: Service, note: Option<&str>) {
    let args: Vec<DatumWithOid> = vec![relid.into(), service.name().into(), note.into()];
    Spi::run_with_args(
        "INSERT INTO hudi.service_state AS s (relation, service, note) VALUES ($1, $2, $3) \
         ON CONFLICT (relation, service) DO UPDATE SET note = excluded.note WHERE s.note IS DISTINCT FROM excluded.note",
        &args,
    )
    .unwrap_or_else(|e| spi_error(e));
}

/// One round over the served tables, each service of each table in a transaction of its own.
/// The table's service lease is taken (or, past half its time, renewed) in the transaction of
/// its first due service, under that service's activity, and given up after the last.
pub fn run_round() {
    use pgrx::bgworkers::BackgroundWorker;
    let tables = BackgroundWorker::transaction(served_tables);
    for (relid, owner) in tables {
        let mut lease: Option<ServiceLease> = None;
        let mut stop = false;
        for service in Service::ALL {
            stop = crate::runtime::stopping();
            if stop {
                break;
            }
            // The lease holds its table's store, which is not unwind-safe; after an ERROR
            // nothing of it is used but to give it up.
            let step = BackgroundWorker::transaction(std::panic::AssertUnwindSafe(|| {
                // A table dropped since the listing is skipped.
                let args: Vec<DatumWithOid> = vec![relid.into()];
                let exists = Spi::get_one_with_args::<bool>("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE oid = $1)", &args);
                if !exists.ok().flatten().unwrap_or(false) || !is_due(relid, service) {
                    return Step::Skipped;
                }
                // As autovacuum does: a table someone holds is skipped, not waited for. The
                // lock is kept until the end of this service's transaction.
                // SAFETY: the lock manager, on the main thread inside a transaction.
                if !unsafe { pg_sys::ConditionalLockRelationOid(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE) } {
                    return Step::Busy(crate::fdw::table::relation_name(relid));
                }
                let started = Spi::get_one::<pgrx::datum::TimestampWithTimeZone>("SELECT pg_catalog.clock_timestamp()")
                    .unwrap_or_else(|e| spi_error(e))
                    .unwrap_or_else(|| spi_error(pgrx::spi::SpiError::InvalidPosition));
                if lease.as_ref().is_none_or(|l| l.remaining() < heartbeat_expiry() / 2) {
                    let leasing = ServiceActivity::begin(service.name(), relid);
                    leasing.phase("taking the service lease");
                    let held = lease.take();
                    let taken = in_subtransaction(move || as_role(owner, move || lease_of(relid, held)));
                    drop(leasing);
                    match taken {
                        Ok(Some(taken)) => lease = Some(taken),
                        Ok(None) => return Step::Leased,
                        // Unreachable storage or no table there: this service's failure,
                        // and the table's other services wait for the next round (each would
                        // wait out the same store's retries, and hold up the other tables).
                        Err(error) => {
                            let outcome = Err(error);
                            let wait = record(relid, service, started, &outcome);
                            return Step::Unreachable(crate::fdw::table::relation_name(relid), outcome, wait);
                        }
                    }
                }
                let running = ServiceActivity::begin(service.name(), relid);
                let outcome = in_subtransaction(|| as_role(owner, || service.run(relid)));
                drop(running);
                if crate::runtime::stopping() {
                    // Stopped midway: not a failure of the service.
                    return Step::Skipped;
                }
                let outcome = outcome.map(|(detail, note)| {
                    record_note(relid, service, note.as_deref());
                    detail
                });
                let wait = record(relid, service, started, &outcome);
                Step::Ran(crate::fdw::table::relation_name(relid), outcome, wait)
            }));
            let unreachable = matches!(step, Step::Unreachable(..));
            match step {
                Step::Ran(name, Ok(Some(detail)), _) => log!("{}: table {name}: {detail}", super::WORKER_NAME),
                Step::Ran(name, Err(e), wait) | Step::Unreachable(name, Err(e), wait) => log!(
                    "{}: {} of table {name} failed: {e}; next attempt in {} s",
                    super::WORKER_NAME,
                    service.name(),
                    wait.unwrap_or_default().as_secs()
                ),
                Step::Leased => break,
                Step::Busy(name) => {
                    debug1!("{}: table {name} is locked; its services wait for the next round", super::WORKER_NAME);
                    break;
                }
                Step::Ran(..) | Step::Unreachable(..) | Step::Skipped => {}
            }
            if unreachable {
                break;
            }
        }
        // Also when stopping: another server need not wait out the lease. A stop noticed
        // during the release ends it with an ERROR, and the lease then expires by itself.
        if let Some(lease) = lease {
            BackgroundWorker::transaction(std::panic::AssertUnwindSafe(move || {
                let release = move || block_on(lease.release()).unwrap_or_else(|e| crate::error::report(e));
                if let Err(e) = in_subtransaction(move || as_role(owner, release)) {
                    log!("{}: giving up the service lease of table {} failed: {e}", super::WORKER_NAME, crate::fdw::table::relation_name(relid));
                }
            }));
        }
        if stop {
            return;
        }
    }
}
