//! One current-thread tokio runtime per backend, built on first use (never in the postmaster,
//! never before fork), that drives the engine's async I/O on the backend's main thread.

use std::cell::OnceCell;

use pgrx::pg_sys;
use std::future::Future;
use std::time::Duration;

thread_local! {
    static RUNTIME: OnceCell<tokio::runtime::Runtime> = const { OnceCell::new() };
    /// Set in the background worker, whose SIGTERM handler only raises a flag: a wait there
    /// checks the flag (and the postmaster) instead of PostgreSQL's interrupts.
    static IN_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static STOPPING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this process as the background worker (see [`stopping`]).
pub fn in_worker() {
    IN_WORKER.with(|w| w.set(true));
}

/// Whether this process is the background worker.
pub fn is_worker() -> bool {
    IN_WORKER.with(|w| w.get())
}

/// In the worker: whether it was asked to stop (SIGTERM) or lost its postmaster, and should
/// end its round and exit; a wait in [`block_on`] that notices it ends with an ERROR. Once
/// true, true for good, so that later waits (giving up a lease) still know the worker is
/// stopping.
pub fn stopping() -> bool {
    if !IN_WORKER.with(|w| w.get()) {
        return false;
    }
    if STOPPING.with(|s| s.get()) {
        return true;
    }
    // SAFETY: a plain read of a backend global. A process whose postmaster died has been
    // reparented.
    let orphaned = unsafe { libc::getppid() != pg_sys::PostmasterPid };
    let stop = crate::worker::signals::stop_requested() || orphaned;
    if stop {
        STOPPING.with(|s| s.set(true));
    }
    stop
}

/// How often a waiting backend checks for query cancel and termination.
const INTERRUPT_CHECK_INTERVAL: Duration = Duration::from_millis(100);

fn build_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        // Time for waits and retries; I/O for object stores' HTTP clients.
        .enable_all()
        // Blocking-pool threads (local file I/O) must never run PostgreSQL's signal handlers:
        // those belong to the main thread only.
        .on_thread_start(block_all_signals)
        .build()
        .unwrap_or_else(|e| {
            crate::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_SYSTEM_ERROR,
                format!("pg_hudi could not start its I/O runtime: {e}"),
                None,
            )
        })
}

fn block_all_signals() {
    // SAFETY: plain libc calls on a stack-allocated, initialised signal set.
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigfillset(set.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut());
    }
}

/// Runs `future` to completion on this backend's runtime, answering query cancel and
/// termination requests while it waits (the future is dropped when one arrives) — except while
/// it holds a table lock: that section is bounded by the lock's lease, and is let finish, so
/// that the lock is released and no storage write of it lands after the lock has passed on.
/// While a [`crate::activity::ServiceActivity`] is shown, the progress the future reports
/// appears in `pg_stat_activity`.
pub fn block_on<F: Future>(future: F) -> F::Output {
    drive(future, false).expect("only a wait that gives up returns nothing")
}

/// [`block_on`] for work after PostgreSQL committed, where interrupts are held and no ERROR may
/// be raised: `None` when the backend is asked to terminate while the future holds no table
/// lock (it waits for one, or does I/O outside it). A terminated backend then exits at once
/// instead of after the lock's timeout; what it did not do stays in the commit intents, for
/// their finishers.
pub fn block_on_unless_terminated<F: Future>(future: F) -> Option<F::Output> {
    drive(future, true)
}

fn drive<F: Future>(future: F, give_up_on_terminate: bool) -> Option<F::Output> {
    let progress = crate::activity::progress().unwrap_or_default();
    RUNTIME.with(|cell| {
        let runtime = cell.get_or_init(build_runtime);
        runtime.block_on(async {
            let future = progress.track(future);
            tokio::pin!(future);
            loop {
                tokio::select! {
                    output = &mut future => return Some(output),
                    _ = tokio::time::sleep(INTERRUPT_CHECK_INTERVAL) => {
                        crate::activity::refresh();
                        if !engine::write::time::holding_a_lock() {
                            // SAFETY: a plain read of a flag set by the backend's signal handler.
                            if give_up_on_terminate && unsafe { pg_sys::ProcDiePending != 0 } {
                                return None;
                            }
                            pgrx::check_for_interrupts!();
                            if stopping() {
                                crate::error::raise(
                                    pgrx::PgSqlErrorCode::ERRCODE_ADMIN_SHUTDOWN,
                                    "the pg_hudi worker is stopping",
                                    None,
                                );
                            }
                        }
                    }
                }
            }
        })
    })
}
