//! Running code as another role, and the search path every query of pg_hudi's own runs with.
//!
//! [`as_role`] is the one way pg_hudi runs code for a table as its owner (the worker's
//! services and lookup rounds) or as pg_hudi itself ([`as_pg_hudi`]: its catalog tables,
//! closed to roles): as a SECURITY DEFINER function with `SET search_path = pg_catalog,
//! pg_temp` would run — the user id changed for the duration, a security-restricted operation
//! (no temporary objects, no `SET ROLE`, no deferred code of the role's left behind), and every
//! setting changed inside rolled back at its end. No role's function or operator can stand in
//! for the ones pg_hudi's queries name: their schemas are not on the path.

use pgrx::pg_sys;
use pgrx::prelude::*;

/// The search path of every query pg_hudi runs for itself.
pub const SEARCH_PATH: &std::ffi::CStr = c"pg_catalog, pg_temp";

/// Runs `f` as `role` (see the module's comment), with a snapshot when none is active (at
/// PRE_COMMIT the statement's is gone already; SPI needs one). An ERROR inside `f` leaves the
/// restoring to the (sub)transaction's abort, as `fmgr_security_definer` does: the caller
/// runs `f` in a transaction or [`in_subtransaction`] that an ERROR rolls back.
pub(crate) fn as_role<R>(role: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let (mut user, mut context) = (pg_sys::Oid::INVALID, 0);
    // SAFETY: saving and changing the backend's user and settings, as fmgr_security_definer
    // does, on the main thread inside a transaction.
    let (level, pushed) = unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            role,
            context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32 | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
        let level = pg_sys::NewGUCNestLevel();
        set_search_path_here();
        let pushed = !pg_sys::ActiveSnapshotSet();
        if pushed {
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
        (level, pushed)
    };
    let out = f();
    // SAFETY: as above; undoes exactly what was done there.
    unsafe {
        if pushed {
            pg_sys::PopActiveSnapshot();
        }
        pg_sys::AtEOXact_GUC(true, level);
        pg_sys::SetUserIdAndSecContext(user, context);
    }
    out
}

/// Runs `f` as pg_hudi itself: the bootstrap superuser, which owns the extension's catalog
/// tables (closed to roles, so that no role can forge a commit intent or a cache's state).
pub(crate) fn as_pg_hudi<R>(f: impl FnOnce() -> R) -> R {
    as_role(pg_sys::Oid::from(pg_sys::BOOTSTRAP_SUPERUSERID), f)
}

/// Runs `f` with the search path [`SEARCH_PATH`], as the current role: for pg_hudi's own
/// queries in a role's session, whose search path may name schemas that shadow
/// `pg_catalog`'s operators and functions (a superuser's session included).
pub(crate) fn pinned_search_path<R>(f: impl FnOnce() -> R) -> R {
    with_setting(c"search_path", SEARCH_PATH, pg_sys::GucContext::PGC_USERSET, f)
}

/// Runs `f` with setting `name` at `value` (as a caller of `context` may set it), in a GUC
/// nest level of its own: undone after `f`, or by the (sub)transaction's abort of an ERROR
/// inside it.
pub(crate) fn with_setting<R>(name: &std::ffi::CStr, value: &std::ffi::CStr, context: pg_sys::GucContext::Type, f: impl FnOnce() -> R) -> R {
    // SAFETY: a setting of this backend, on its main thread inside a transaction, restored
    // below.
    let level = unsafe {
        let level = pg_sys::NewGUCNestLevel();
        set_here(name, value, context);
        level
    };
    let out = f();
    // SAFETY: undoes the nest level made above.
    unsafe { pg_sys::AtEOXact_GUC(true, level) };
    out
}

/// Sets the search path to [`SEARCH_PATH`] in the current GUC nest level.
///
/// # Safety
/// On the main thread inside a transaction, after `NewGUCNestLevel`.
unsafe fn set_search_path_here() {
    set_here(c"search_path", SEARCH_PATH, pg_sys::GucContext::PGC_USERSET);
}

/// Sets `name` to `value` in the current GUC nest level.
///
/// # Safety
/// On the main thread inside a transaction, after `NewGUCNestLevel`.
unsafe fn set_here(name: &std::ffi::CStr, value: &std::ffi::CStr, context: pg_sys::GucContext::Type) {
    pg_sys::set_config_option(
        name.as_ptr(),
        value.as_ptr(),
        context,
        pg_sys::GucSource::PGC_S_SESSION,
        pg_sys::GucAction::GUC_ACTION_SAVE,
        true,
        0,
        false,
    );
}

/// Pins this process's search path to [`SEARCH_PATH`] above any database or role setting:
/// for the launcher and the workers, which run as a superuser in databases whose owners may
/// set `search_path` for their database (`ALTER DATABASE ... SET`), and so could otherwise
/// slip their own operators into the worker's queries.
pub(crate) fn pin_search_path() {
    // SAFETY: a setting of this process, on its main thread.
    unsafe {
        pg_sys::SetConfigOption(
            c"search_path".as_ptr(),
            SEARCH_PATH.as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        );
    }
}

/// Runs `f` in a subtransaction: an ERROR inside rolls it back (with whatever `f` changed:
/// user, settings, catalog rows) and comes back as its message.
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
            Err(crate::error::caught_message(&error))
        })
        .execute()
    }
}
