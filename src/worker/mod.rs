//! The background processes: a launcher, and a worker per database and round.
//!
//! The launcher (`pg_hudi launcher`), started with the server, connects to
//! `hudi.worker_database` only to list the databases. Every `hudi.worker_naptime` it starts a
//! `pg_hudi worker` for each database that allows connections (those named in
//! `hudi.worker_databases`, when set), at most `hudi.max_database_workers` at once. A worker
//! connects to its database and, when the extension is installed there, finishes the Hudi
//! writes whose PostgreSQL transaction committed but whose completion did not happen
//! ([`crate::intents`]) and runs the table services of its tables with `services 'auto'`
//! ([`services`]), then exits. No process stays connected to a database between rounds, so
//! `DROP DATABASE` does not fail on one (it waits out a round in progress, and `WITH (FORCE)`
//! stops the round at its next safe point), and a database gains a worker within a nap of
//! `CREATE EXTENSION`. A commit to a table with `services 'auto'` wakes the launcher, which
//! then starts that database's round without waiting out the nap ([`wake`]; at most one round
//! a second). A database with lookup caches also gets a lookup round every
//! `hudi.lookup_refresh_interval`, or at once after a commit to a cached table on this server:
//! a short-lived worker that only brings the caches up to date, beside the full rounds. Both
//! exit cleanly on SIGTERM or when the postmaster dies.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder};
use pgrx::prelude::*;

use crate::guc;

pub(crate) mod services;
pub mod signals;
pub mod wake;

/// The launcher's name and its `backend_type` in `pg_stat_activity`.
pub const LAUNCHER_NAME: &str = "pg_hudi launcher";
/// The per-database worker's `backend_type`.
pub const WORKER_NAME: &str = "pg_hudi worker";

/// Registers the launcher with the postmaster and requests its shared memory (only valid
/// during `shared_preload_libraries`).
pub fn register() {
    wake::init();
    crate::buffer::limit::init();
    crate::stream::init();
    BackgroundWorkerBuilder::new(LAUNCHER_NAME)
        .set_type(LAUNCHER_NAME)
        .set_library("pg_hudi")
        .set_function("pg_hudi_launcher_main")
        .enable_spi_access()
        // A failed launcher is restarted after this delay; it never takes the cluster down.
        .set_restart_time(Some(Duration::from_secs(10)))
        .load();
}

/// The launcher's entry point, looked up by name by the postmaster (hence exported unmangled).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_hudi_launcher_main(_argument: pg_sys::Datum) {
    signals::attach();
    let database = guc::string_value(&guc::WORKER_DATABASE);
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    crate::role::pin_search_path();
    log!("{LAUNCHER_NAME} started (listing databases from \"{database}\")");
    wake::listen(true);
    let mut launched = Launched::new(Round::Full);
    let mut lookups = Launched::new(Round::Lookup);
    let mut flushes = Launched::new(Round::Flush);
    let mut served = Vec::new();
    let mut swept: Option<Instant> = None;
    loop {
        let databases = BackgroundWorker::transaction(databases_to_serve);
        if swept.is_none_or(|t| t.elapsed() >= guc::worker_naptime()) {
            // The caches of dropped databases, which no round of theirs will remove.
            let existing = BackgroundWorker::transaction(all_databases);
            crate::services::lookup_cache::remove_caches_of_dropped_databases(&existing);
            swept = Some(Instant::now());
        }
        let names: Vec<&str> = databases.iter().map(|(_, name)| name.as_str()).collect();
        if names != served {
            if names.is_empty() {
                log!("{LAUNCHER_NAME}: serving no database (see hudi.worker_databases)");
            } else {
                log!("{LAUNCHER_NAME}: serving databases {}", names.join(", "));
            }
            served = names.iter().map(|n| n.to_string()).collect();
        }
        launched.reap();
        launched.want(wake::take_requests(), &databases);
        let max = guc::MAX_DATABASE_WORKERS.get().max(1) as usize;
        for (oid, name) in launched.due(&databases, guc::worker_naptime(), max) {
            if !launched.start(oid, &name) {
                log!("{LAUNCHER_NAME}: no background worker slot for database \"{name}\" (max_worker_processes); trying again next round");
                break;
            }
        }
        lookups.reap();
        let (with_caches, asked) = wake::take_cache_requests();
        lookups.want(Some(asked), &databases);
        let cached: Vec<(pg_sys::Oid, String)> = databases.iter().filter(|(oid, _)| with_caches.contains(oid)).cloned().collect();
        for (oid, name) in lookups.due(&cached, guc::lookup_refresh_interval(), max) {
            if !lookups.start(oid, &name) {
                break;
            }
        }
        // A flush round runs while its database's write buffer holds rows: one starts when a
        // commit asks for it and none is running.
        flushes.reap();
        wake::keep_flushing(&flushes.running.keys().copied().collect::<Vec<_>>());
        flushes.want(Some(wake::take_flush_requests()), &databases);
        let asked: Vec<(pg_sys::Oid, String)> = databases.iter().filter(|(oid, _)| flushes.wanted.contains(oid)).cloned().collect();
        for (oid, name) in flushes.due(&asked, Duration::ZERO, max) {
            if !flushes.start(oid, &name) {
                break;
            }
        }
        let wake = launched.next_wake(guc::worker_naptime());
        let wake = if cached.is_empty() { wake } else { wake.min(lookups.next_wake(guc::lookup_refresh_interval())) };
        // A worker's start and exit set the latch too (it notifies the launcher).
        if !signals::wait(wake) {
            break;
        }
        signals::reload_if_asked();
    }
    // The wait returns false on SIGTERM or postmaster death; returning exits with status 0,
    // which tells the postmaster not to restart us. Running workers finish their rounds.
    wake::listen(false);
    log!("{LAUNCHER_NAME} exiting");
}

/// Every database's oid.
fn all_databases() -> Vec<pg_sys::Oid> {
    Spi::connect(|client| {
        let rows = client
            .select("SELECT oid FROM pg_catalog.pg_database", None, &[])
            .unwrap_or_else(|e| crate::error::spi_failed("listing databases", e));
        rows.filter_map(|row| row.get::<pg_sys::Oid>(1).ok().flatten()).collect()
    })
}

/// The databases that allow connections, by oid, restricted to `hudi.worker_databases`.
fn databases_to_serve() -> Vec<(pg_sys::Oid, String)> {
    let all: Vec<(pg_sys::Oid, String)> = Spi::connect(|client| {
        let rows = client
            .select(
                "SELECT oid, datname::text FROM pg_catalog.pg_database WHERE datallowconn AND NOT datistemplate ORDER BY oid",
                None,
                &[],
            )
            .unwrap_or_else(|e| crate::error::spi_failed("listing databases", e));
        rows.filter_map(|row| Some((row.get::<pg_sys::Oid>(1).ok()??, row.get::<String>(2).ok()??))).collect()
    });
    all.into_iter().filter(|(_, name)| guc::serves_database(name)).collect()
}

/// What a database worker does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// Finishes committed writes, runs the table services, refreshes the lookup caches.
    Full,
    /// Refreshes the lookup caches only.
    Lookup,
    /// Flushes the write buffer while it holds rows.
    Flush,
}

impl Round {
    /// The worker's argument: the database, and in the high half the kind of round.
    fn argument(self, database: pg_sys::Oid) -> pg_sys::Datum {
        let kind = match self {
            Round::Full => 0u64,
            Round::Lookup => 1,
            Round::Flush => 2,
        };
        pg_sys::Datum::from(u64::from(database.to_u32()) | kind << 32)
    }

    fn of_argument(argument: pg_sys::Datum) -> (pg_sys::Oid, Round) {
        let value = argument.value() as u64;
        let round = match value >> 32 {
            1 => Round::Lookup,
            2 => Round::Flush,
            _ => Round::Full,
        };
        (pg_sys::Oid::from(value as u32), round)
    }

    /// The least time between two rounds of a database that commits ask for.
    fn wake_spacing(self) -> Duration {
        match self {
            Round::Full => Duration::from_secs(1),
            // A lookup round is short and its commit waits to be seen.
            Round::Lookup | Round::Flush => Duration::ZERO,
        }
    }
}

/// The workers of one kind of round the launcher started: those running, when each
/// database's last one started (rounds start a nap apart, as autovacuum's do, or back to back
/// when one takes longer), and the databases a commit asked a round for.
struct Launched {
    round: Round,
    running: HashMap<pg_sys::Oid, *mut pg_sys::BackgroundWorkerHandle>,
    started: HashMap<pg_sys::Oid, Instant>,
    wanted: HashSet<pg_sys::Oid>,
}

impl Launched {
    fn new(round: Round) -> Launched {
        Launched { round, running: HashMap::new(), started: HashMap::new(), wanted: HashSet::new() }
    }

    /// Forgets the workers that exited.
    fn reap(&mut self) {
        self.running.retain(|_, handle| {
            let mut pid = 0;
            // SAFETY: a handle from RegisterDynamicBackgroundWorker in this process, freed
            // only here, once its worker stopped.
            let status = unsafe { pg_sys::GetBackgroundWorkerPid(*handle, &mut pid) };
            if status == pg_sys::BgwHandleStatus::BGWH_STOPPED {
                unsafe { pg_sys::pfree((*handle).cast()) };
                return false;
            }
            true
        });
    }

    /// Adds the databases commits asked a round for (`None`: all of them).
    fn want(&mut self, asked: Option<Vec<pg_sys::Oid>>, databases: &[(pg_sys::Oid, String)]) {
        let served = |oid: &pg_sys::Oid| databases.iter().any(|(d, _)| d == oid);
        match asked {
            Some(asked) => self.wanted.extend(asked.into_iter().filter(served)),
            None => self.wanted.extend(databases.iter().map(|(oid, _)| *oid)),
        }
    }

    /// How long after its last start a round of `oid` is due: a nap, or less when a commit
    /// asked for it.
    fn spacing(&self, oid: &pg_sys::Oid, nap: Duration) -> Duration {
        if self.wanted.contains(oid) { nap.min(self.round.wake_spacing()) } else { nap }
    }

    /// The databases whose worker should start now: without one running and without one that
    /// started less than its spacing ago, those waiting longest first, up to `max` running.
    fn due(&self, databases: &[(pg_sys::Oid, String)], nap: Duration, max: usize) -> Vec<(pg_sys::Oid, String)> {
        let mut due: Vec<&(pg_sys::Oid, String)> = databases
            .iter()
            .filter(|(oid, _)| {
                !self.running.contains_key(oid) && self.started.get(oid).is_none_or(|t| t.elapsed() >= self.spacing(oid, nap))
            })
            .collect();
        due.sort_by_key(|(oid, _)| self.started.get(oid).copied());
        due.into_iter().take(max.saturating_sub(self.running.len())).cloned().collect()
    }

    /// Starts the worker of database `oid`; false when no slot is free.
    fn start(&mut self, oid: pg_sys::Oid, name: &str) -> bool {
        // SAFETY: a zeroed BackgroundWorker filled as the postmaster expects; the handle is
        // allocated in the launcher's top memory context (outside any transaction).
        unsafe {
            let mut worker: pg_sys::BackgroundWorker = std::mem::zeroed();
            let what = match self.round {
                Round::Full => "",
                Round::Lookup => " (lookup caches)",
                Round::Flush => " (write buffer)",
            };
            copy_name(&mut worker.bgw_name, &format!("{WORKER_NAME} for database {name}{what}"));
            copy_name(&mut worker.bgw_type, WORKER_NAME);
            copy_name(&mut worker.bgw_library_name, "pg_hudi");
            copy_name(&mut worker.bgw_function_name, "pg_hudi_database_worker_main");
            worker.bgw_flags = (pg_sys::BGWORKER_SHMEM_ACCESS | pg_sys::BGWORKER_BACKEND_DATABASE_CONNECTION) as i32;
            worker.bgw_start_time = pg_sys::BgWorkerStartTime::BgWorkerStart_RecoveryFinished;
            worker.bgw_restart_time = pg_sys::BGW_NEVER_RESTART as i32;
            worker.bgw_main_arg = self.round.argument(oid);
            worker.bgw_notify_pid = pg_sys::MyProcPid;
            let mut handle = std::ptr::null_mut();
            let context = pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
            let started = pg_sys::RegisterDynamicBackgroundWorker(&mut worker, &mut handle);
            pg_sys::MemoryContextSwitchTo(context);
            if started {
                self.running.insert(oid, handle);
                self.started.insert(oid, Instant::now());
                self.wanted.remove(&oid);
            }
            started
        }
    }

    /// How long to sleep: until the next database is due (a worker's exit wakes us earlier).
    fn next_wake(&self, nap: Duration) -> Duration {
        let soonest = self
            .started
            .iter()
            .filter(|(oid, _)| !self.running.contains_key(oid))
            .map(|(oid, t)| self.spacing(oid, nap).saturating_sub(t.elapsed()))
            .filter(|d| !d.is_zero())
            .min();
        soonest.unwrap_or(nap).max(Duration::from_millis(20))
    }
}

/// Copies `text` into a fixed-size C name buffer, cut to fit, NUL-terminated.
fn copy_name(buffer: &mut [std::ffi::c_char], text: &str) {
    let bytes = text.as_bytes();
    let n = bytes.len().min(buffer.len() - 1);
    for (slot, &b) in buffer.iter_mut().zip(&bytes[..n]) {
        *slot = b as std::ffi::c_char;
    }
    buffer[n] = 0;
}

/// A database worker's entry point: one round in the database `argument` (an oid).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_hudi_database_worker_main(argument: pg_sys::Datum) {
    signals::attach();
    let (database, round) = Round::of_argument(argument);
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(database), None);
    crate::role::pin_search_path();
    crate::runtime::in_worker();
    let installed = BackgroundWorker::transaction(|| {
        Spi::get_one::<bool>("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_hudi')")
            .ok()
            .flatten()
            .unwrap_or(false)
    });
    if !installed {
        // Without the extension (dropped): no caches, and no mirrors, either.
        wake::set_has_caches(database, false);
        crate::services::lookup_cache::remove_database_caches();
        wake::set_capturing(database, false);
        crate::buffer::capture::drop_database_slots();
        return;
    }
    match round {
        Round::Lookup => return refresh_lookup_caches(),
        Round::Flush => return crate::buffer::flush::flush_until_empty(),
        Round::Full => {}
    }
    finish_pending_commits();
    // Rows a flush round did not take (one cut short, or the server restarted); mirrors
    // captured from the WAL and subscriptions have their flush round run all the time.
    crate::buffer::flush::flush_all();
    let capturing = BackgroundWorker::transaction(|| crate::buffer::capture::has_wal_mirrors() || crate::subscription::exist());
    wake::set_capturing(database, capturing);
    services::run_round();
    if !crate::runtime::stopping() {
        refresh_lookup_caches();
    }
    if crate::runtime::stopping() {
        log!("{WORKER_NAME} stopped before the end of its round");
    }
}

/// Brings this database's lookup caches up to date, in a transaction of its own; a failed
/// cache is recorded in `hudi.lookup_caches` and logged.
fn refresh_lookup_caches() {
    BackgroundWorker::transaction(|| {
        for (relid, outcome) in crate::services::lookup_cache::refresh_all() {
            if let Err(e) = outcome {
                log!("{WORKER_NAME}: refreshing the lookup cache of table {} failed: {e}", crate::fdw::table::relation_name(relid));
            }
        }
    });
}

/// One round of finishing committed writes ([`crate::intents`]), in a transaction of its own.
/// Failures are kept in the intents; none raises an ERROR.
fn finish_pending_commits() {
    BackgroundWorker::transaction(|| {
        // A stop requested during a storage wait arrives as an ERROR.
        let finished = crate::role::in_subtransaction(|| {
            if crate::intents::table_exists() {
                for (intent, outcome) in crate::intents::finish_committed(None, false) {
                    let (instant, location) = (&intent.commit.instant, &intent.location);
                    // A completion is the normal end of a write whose backend did not complete
                    // it; a lost or failed one is news for the administrator.
                    match outcome {
                        crate::intents::Finished::Completed { completion } => {
                            debug1!("{WORKER_NAME}: completed the committed write {instant} to {location} (completion time {completion})")
                        }
                        crate::intents::Finished::Lost(why) => {
                            warning!("{WORKER_NAME}: the committed write {instant} to {location} was rolled back by another writer: {why}")
                        }
                        crate::intents::Finished::Failed(why) => log!("{WORKER_NAME}: completing the committed write {instant} to {location} failed, tried again later: {why}"),
                    }
                }
            }
        });
        if let Err(e) = finished {
            log!("{WORKER_NAME}: finishing committed writes stopped: {e}");
        }
    });
}
