//! Commits wake the launcher: a transaction that wrote a table with `services 'auto'` asks for
//! its database's round at once (its compaction may be due now), instead of at the end of the
//! nap; one that wrote a table with a lookup cache on this server asks for its database's
//! lookup round (which only refreshes the caches). Which databases have lookup caches is kept
//! here too: the launcher starts their lookup rounds every `hudi.lookup_refresh_interval`.
//! The requests and the launcher's latch live in shared memory, so this needs the library in
//! `shared_preload_libraries` (without it there is no worker to wake either).

use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;

/// The databases whose round was asked for, and the launcher's latch (0: no launcher).
#[derive(Copy, Clone, Default)]
pub struct Wakeups {
    latch: usize,
    /// Database oids; 0 is a free slot. When all are taken, `overflow` asks for every database.
    databases: [u32; 32],
    overflow: bool,
    /// The databases with lookup caches, as their rounds last found (0: a free slot).
    with_caches: [u32; 32],
    /// The databases whose caches a commit asked to refresh now.
    caches_asked: [u32; 32],
    /// The databases whose write buffer a commit added rows to.
    flushes_asked: [u32; 32],
    /// The databases whose flush round is running: their commits need not wake the launcher.
    flushing: [u32; 32],
    /// The databases with mirrors captured from the WAL: their flush round always runs.
    capturing: [u32; 32],
}

/// Adds `oid` to the slots of `set` (false when they are all taken).
fn insert(set: &mut [u32; 32], oid: u32) -> bool {
    if set.contains(&oid) {
        return true;
    }
    match set.iter_mut().find(|slot| **slot == 0) {
        Some(slot) => {
            *slot = oid;
            true
        }
        None => false,
    }
}

fn members(set: &[u32; 32]) -> Vec<pg_sys::Oid> {
    set.iter().filter(|&&d| d != 0).map(|&d| pg_sys::Oid::from(d)).collect()
}

// SAFETY: plain integers, no pointers into process memory (the latch is in shared memory,
// at the same address in every backend forked from the postmaster).
unsafe impl PGRXSharedMemory for Wakeups {}

static WAKEUPS: PgLwLock<Wakeups> = unsafe { PgLwLock::new(c"pg_hudi wakeups") };

/// Set in the postmaster once the shared memory is requested; inherited by every backend.
static IN_SHARED_MEMORY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Requests the shared memory (only valid during `shared_preload_libraries`).
// The macro tests features of other PostgreSQL versions than this crate has.
#[allow(unexpected_cfgs)]
pub fn init() {
    pgrx::pg_shmem_init!(WAKEUPS);
    IN_SHARED_MEMORY.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn available() -> bool {
    IN_SHARED_MEMORY.load(std::sync::atomic::Ordering::Relaxed)
}

/// The launcher's latch is set by requests from now on (`false`: no longer).
pub fn listen(listening: bool) {
    if available() {
        // SAFETY: MyLatch is the launcher's process latch, in shared memory.
        WAKEUPS.exclusive().latch = if listening { unsafe { pg_sys::MyLatch as usize } } else { 0 };
    }
}

/// Asks for a round of database `database` now, and wakes the launcher.
pub fn request(database: pg_sys::Oid) {
    ask(|wakeups| {
        if !insert(&mut wakeups.databases, database.to_u32()) {
            wakeups.overflow = true;
        }
    });
}

/// Records a request with `record`, then wakes the launcher.
fn ask(record: impl FnOnce(&mut Wakeups)) {
    if !available() {
        return;
    }
    let latch = {
        let mut wakeups = WAKEUPS.exclusive();
        record(&mut wakeups);
        wakeups.latch
    };
    if latch != 0 {
        // SAFETY: the launcher's process latch (a stale one after it exited belongs to a
        // PGPROC slot, and setting it only wakes that slot's process once).
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}

/// Records whether database `database` has lookup caches (its lookup rounds start then).
pub fn set_has_caches(database: pg_sys::Oid, has: bool) {
    if !available() {
        return;
    }
    let mut wakeups = WAKEUPS.exclusive();
    if has {
        // More databases with caches than slots: the others refresh with their full rounds.
        insert(&mut wakeups.with_caches, database.to_u32());
    } else {
        wakeups.with_caches.iter_mut().filter(|slot| **slot == database.to_u32()).for_each(|slot| *slot = 0);
    }
}

/// Asks for a lookup round of database `database` now, and wakes the launcher.
pub fn request_cache_refresh(database: pg_sys::Oid) {
    ask(|wakeups| {
        insert(&mut wakeups.with_caches, database.to_u32());
        insert(&mut wakeups.caches_asked, database.to_u32());
    });
}

/// Asks for a flush round of database `database` (a commit added rows to its write buffer).
/// When every slot is taken, the database's full rounds flush it.
pub fn request_flush(database: pg_sys::Oid) {
    if !available() {
        return;
    }
    // A running flush round sees the commit (it looks at the buffer again after it says it
    // stops, see `set_flushing`): no launcher wakes for each of thousands of commits a second.
    if WAKEUPS.share().flushing.contains(&database.to_u32()) {
        return;
    }
    ask(|wakeups| {
        insert(&mut wakeups.flushes_asked, database.to_u32());
    });
}

/// Forgets that flush rounds run in databases other than `running` (a round that ended by an
/// ERROR could not say it stopped).
pub fn keep_flushing(running: &[pg_sys::Oid]) {
    if !available() {
        return;
    }
    let mut wakeups = WAKEUPS.exclusive();
    for slot in wakeups.flushing.iter_mut().filter(|slot| !running.iter().any(|r| r.to_u32() == **slot)) {
        *slot = 0;
    }
}

/// Says whether a flush round of `database` runs. A round that stops says so first, and then
/// looks at the buffer once more: a commit that found it running had committed before that.
pub fn set_flushing(database: pg_sys::Oid, running: bool) {
    if !available() {
        return;
    }
    let mut wakeups = WAKEUPS.exclusive();
    if running {
        insert(&mut wakeups.flushing, database.to_u32());
    } else {
        wakeups.flushing.iter_mut().filter(|slot| **slot == database.to_u32()).for_each(|slot| *slot = 0);
    }
}

/// Records whether database `database` has mirrors captured from the WAL (its flush round
/// then runs all the time, decoding them). With more such databases than slots (32), the
/// others' mirrors wait until a commit to one of their buffered tables starts their flush
/// round (which then runs all the time too).
pub fn set_capturing(database: pg_sys::Oid, capturing: bool) {
    if !available() {
        return;
    }
    let mut wakeups = WAKEUPS.exclusive();
    if capturing {
        insert(&mut wakeups.capturing, database.to_u32());
    } else {
        wakeups.capturing.iter_mut().filter(|slot| **slot == database.to_u32()).for_each(|slot| *slot = 0);
    }
}

/// The databases whose flush round commits asked for since the last call, and those with
/// mirrors captured from the WAL.
pub fn take_flush_requests() -> Vec<pg_sys::Oid> {
    if !available() {
        return Vec::new();
    }
    let mut wakeups = WAKEUPS.exclusive();
    let mut asked = members(&wakeups.flushes_asked);
    wakeups.flushes_asked = [0; 32];
    for database in members(&wakeups.capturing) {
        if !asked.contains(&database) {
            asked.push(database);
        }
    }
    asked
}

/// The databases with lookup caches, and those whose refresh commits asked for since the
/// last call.
pub fn take_cache_requests() -> (Vec<pg_sys::Oid>, Vec<pg_sys::Oid>) {
    if !available() {
        return (Vec::new(), Vec::new());
    }
    let mut wakeups = WAKEUPS.exclusive();
    let asked = members(&wakeups.caches_asked);
    wakeups.caches_asked = [0; 32];
    (members(&wakeups.with_caches), asked)
}

/// The requests since the last call: the databases asked for, or `None` for all of them.
pub fn take_requests() -> Option<Vec<pg_sys::Oid>> {
    if !available() {
        return Some(Vec::new());
    }
    let mut wakeups = WAKEUPS.exclusive();
    let asked = members(&wakeups.databases);
    let overflow = std::mem::take(&mut wakeups.overflow);
    wakeups.databases = [0; 32];
    (!overflow).then_some(asked)
}
