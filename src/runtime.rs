//! One current-thread tokio runtime per backend, built on first use (never in the postmaster,
//! never before fork), that drives the engine's async I/O on the backend's main thread.

use std::cell::OnceCell;
use std::future::Future;
use std::time::Duration;

thread_local! {
    static RUNTIME: OnceCell<tokio::runtime::Runtime> = const { OnceCell::new() };
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
pub fn block_on<F: Future>(future: F) -> F::Output {
    RUNTIME.with(|cell| {
        let runtime = cell.get_or_init(build_runtime);
        runtime.block_on(async {
            tokio::pin!(future);
            loop {
                tokio::select! {
                    output = &mut future => return output,
                    _ = tokio::time::sleep(INTERRUPT_CHECK_INTERVAL) => {
                        if !engine::write::time::holding_a_lock() {
                            pgrx::check_for_interrupts!();
                        }
                    }
                }
            }
        })
    })
}
