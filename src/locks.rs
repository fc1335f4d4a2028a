//! pg_hudi's own locks in PostgreSQL's lock manager. They are object locks of classes no
//! catalog has, so no SQL can take them or wait for them: an advisory lock, which any role can
//! take on any key, let a role without privileges freeze another role's lookup cache. They
//! show in `pg_locks` as `object` locks with `classid` 1886942564 (`phud`, a live write) or
//! 1886942563 (a lookup cache's writer).

use pgrx::pg_sys;

/// The class of the lock a backend holds while it writes an instant ([`hold_live_write`]).
const LIVE_WRITE_CLASS: u32 = 0x7068_7564;
/// The class of the lock a lookup cache's writer holds ([`try_lock_cache_writer`]).
const CACHE_WRITER_CLASS: u32 = 0x7068_7563;

fn object_tag(database: pg_sys::Oid, class: u32, object: u32, sub: u16) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: database.to_u32(),
        locktag_field2: class,
        locktag_field3: object,
        locktag_field4: sub,
        locktag_type: pg_sys::LockTagType::LOCKTAG_OBJECT as u8,
        locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
    }
}

/// The lock of a write of `instant` to the table at `location`, the same in every database of
/// the server (48 bits of a hash of both: a collision only makes a rollback wait longer).
fn live_write_tag(location: &str, instant: &str) -> pg_sys::LOCKTAG {
    // FNV-1a: stable across processes and builds, unlike std's hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in location.bytes().chain([0]).chain(instant.bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    object_tag(pg_sys::Oid::INVALID, LIVE_WRITE_CLASS, hash as u32, (hash >> 32) as u16)
}

/// Takes `tag` in `mode` for the current transaction; `wait`: until it is free, or else
/// only when it is free now. Whether it was taken.
fn acquire(tag: &pg_sys::LOCKTAG, mode: u32, wait: bool) -> bool {
    // SAFETY: the lock manager, on the main thread inside a transaction; a transaction lock
    // is released at its end (or with the subtransaction that took it).
    let taken = unsafe { pg_sys::LockAcquire(tag, mode as pg_sys::LOCKMODE, false, !wait) };
    taken != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Says, until the end of the current transaction, that this backend is writing `instant` to
/// the table at `location`: a rollback of failed writes on this server never rolls back a
/// write whose backend is alive ([`write_is_live_here`]), whatever its heartbeat says. After
/// the transaction, its prepared mark and transaction decide (see [`crate::intents`]).
pub(crate) fn hold_live_write(location: &str, instant: &str) {
    acquire(&live_write_tag(location, instant), pg_sys::ExclusiveLock, true);
}

/// Whether a backend of this server is writing `instant` to the table at `location`.
pub(crate) fn write_is_live_here(location: &str, instant: &str) -> bool {
    let tag = live_write_tag(location, instant);
    if !acquire(&tag, pg_sys::ShareLock, false) {
        return true;
    }
    // SAFETY: releases the lock taken just above.
    unsafe { pg_sys::LockRelease(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false) };
    false
}

fn cache_writer_tag(relid: pg_sys::Oid) -> pg_sys::LOCKTAG {
    // SAFETY: a plain read of a backend global.
    let database = unsafe { pg_sys::MyDatabaseId };
    object_tag(database, CACHE_WRITER_CLASS, relid.to_u32(), 0)
}

/// Makes this transaction the writer of `relid`'s lookup cache, when no other holds it: one
/// writer at a time (a worker's round, a refresh from SQL).
pub(crate) fn try_lock_cache_writer(relid: pg_sys::Oid) -> bool {
    acquire(&cache_writer_tag(relid), pg_sys::ExclusiveLock, false)
}

/// [`try_lock_cache_writer`], waiting (cancellably) for the writer that holds it.
pub(crate) fn lock_cache_writer(relid: pg_sys::Oid) {
    acquire(&cache_writer_tag(relid), pg_sys::ExclusiveLock, true);
}

/// Gives up the writer's lock of `relid`'s lookup cache that this transaction took, before
/// the transaction ends (a lookup's refresh in a reading transaction, which may run long).
pub(crate) fn release_cache_writer(relid: pg_sys::Oid) {
    // SAFETY: releases a lock this transaction holds (or does nothing).
    unsafe { pg_sys::LockRelease(&cache_writer_tag(relid), pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false) };
}
