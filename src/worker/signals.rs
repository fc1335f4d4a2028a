//! Signals of the launcher and the database workers.
//!
//! The handlers are PostgreSQL's own, which only set a flag and the process latch
//! (`SignalHandlerForConfigReload`, `SignalHandlerForShutdownRequest`), installed by their C
//! addresses. pgrx's handlers call `SetLatch` through its FFI guard, which panics — and so
//! aborts the process, and the postmaster restarts the cluster — when the kernel runs the
//! handler on a thread PostgreSQL did not start (a RocksDB thread that did not block signals;
//! every thread pg_hudi starts blocks them, see `engine::threads`). The flags are read on the
//! main thread only, here.

use std::time::Duration;

use pgrx::pg_sys;

// The handlers themselves, not pgrx's guarded wrappers of them (see the module's comment).
unsafe extern "C" {
    #[link_name = "SignalHandlerForConfigReload"]
    fn postgres_reload_handler(signal: std::ffi::c_int);
    #[link_name = "SignalHandlerForShutdownRequest"]
    fn postgres_shutdown_handler(signal: std::ffi::c_int);
}

/// Installs the handlers for SIGHUP (reload the configuration) and SIGTERM (stop), and
/// unblocks signals. Called first thing on the main thread of a launcher or worker.
pub fn attach() {
    type Handler = unsafe extern "C-unwind" fn(std::ffi::c_int);
    // SAFETY: both are `void (*)(SIGNAL_ARGS)` C functions of the server; only the ABI name
    // of the pointer type differs (they never unwind).
    let (reload, shutdown) = unsafe {
        (
            std::mem::transmute::<unsafe extern "C" fn(std::ffi::c_int), Handler>(postgres_reload_handler),
            std::mem::transmute::<unsafe extern "C" fn(std::ffi::c_int), Handler>(postgres_shutdown_handler),
        )
    };
    // SAFETY: on the process's main thread, before any other thread exists.
    unsafe {
        pg_sys::pqsignal(pg_sys::SIGHUP as i32, Some(reload));
        pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(shutdown));
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

/// Whether a stop was asked for (SIGTERM). It stays asked for.
pub fn stop_requested() -> bool {
    // SAFETY: a plain read of a flag the handler sets.
    unsafe { std::ptr::read_volatile(&raw const pg_sys::ShutdownRequestPending) != 0 }
}

/// Whether the configuration file is to be read again (SIGHUP): reads it when so.
pub fn reload_if_asked() {
    // SAFETY: plain reads and writes of a flag the handler sets; the reload runs on the main
    // thread, outside any transaction (as the callers are).
    unsafe {
        if std::ptr::read_volatile(&raw const pg_sys::ConfigReloadPending) != 0 {
            std::ptr::write_volatile(&raw mut pg_sys::ConfigReloadPending, 0);
            pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
        }
    }
}

/// Waits on the process latch for at most `timeout`: false when the process should exit (a
/// stop was asked for, or the postmaster died).
pub fn wait(timeout: Duration) -> bool {
    let flags = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_POSTMASTER_DEATH;
    let millis = timeout.as_millis().min(i32::MAX as u128) as std::ffi::c_long;
    // SAFETY: the process latch, on the main thread.
    let events = unsafe {
        let events = pg_sys::WaitLatch(pg_sys::MyLatch, flags as i32, millis, pg_sys::PG_WAIT_EXTENSION);
        pg_sys::ResetLatch(pg_sys::MyLatch);
        events
    };
    pgrx::check_for_interrupts!();
    events & pg_sys::WL_POSTMASTER_DEATH as i32 == 0 && !stop_requested()
}
