//! The `pg_hudi worker` background process. In its database (`hudi.worker_database`), every
//! round (`hudi.worker_naptime`) it finishes the Hudi writes whose PostgreSQL transaction
//! committed but whose completion did not happen (first at start, which follows every crash
//! restart), and runs the table services of the tables with `services 'auto'`
//! ([`services`]). It exits cleanly on SIGTERM or when the postmaster dies.

use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, SignalWakeFlags};
use pgrx::prelude::*;

use crate::guc;

mod services;

/// The worker's name and its `backend_type` in `pg_stat_activity`.
pub const WORKER_NAME: &str = "pg_hudi worker";

/// Registers the worker with the postmaster (only valid during `shared_preload_libraries`).
pub fn register() {
    BackgroundWorkerBuilder::new(WORKER_NAME)
        .set_type(WORKER_NAME)
        .set_library("pg_hudi")
        .set_function("pg_hudi_worker_main")
        .enable_spi_access()
        // A failed worker is restarted after this delay; it never takes the cluster down.
        .set_restart_time(Some(Duration::from_secs(10)))
        .load();
}

/// Entry point, looked up by name by the postmaster (hence exported unmangled).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_hudi_worker_main(_argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = guc::string_value(&guc::WORKER_DATABASE);
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    log!("{WORKER_NAME} started (database \"{database}\")");

    crate::runtime::in_worker();
    let mut backoff = services::Backoff::default();
    loop {
        finish_pending_commits();
        services::run_round(WORKER_NAME, &mut backoff);
        // A storage wait that SIGTERM (or the postmaster's death) cut short ends the worker.
        if crate::runtime::stopping() || !BackgroundWorker::wait_latch(Some(guc::worker_naptime())) {
            break;
        }
        if BackgroundWorker::sighup_received() {
            // SAFETY: called on the worker's main thread, outside any transaction.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
    }
    // wait_latch returns false on SIGTERM or postmaster death; returning exits with status 0,
    // which tells the postmaster not to restart us.
    log!("{WORKER_NAME} exiting");
}

/// One round of finishing committed writes ([`crate::intents`]), in a transaction of its own.
/// Failures are kept in the intents; none raises an ERROR.
fn finish_pending_commits() {
    BackgroundWorker::transaction(|| {
        // A stop requested during a storage wait arrives as an ERROR.
        let finished = services::in_subtransaction(|| {
            if crate::intents::table_exists() {
                for (intent, outcome) in crate::intents::finish_committed(None, false) {
                    log!("{WORKER_NAME}: write {} to {}: {outcome:?}", intent.commit.instant, intent.location);
                }
            }
        });
        if let Err(e) = finished {
            log!("{WORKER_NAME}: finishing committed writes stopped: {e}");
        }
    });
}
