//! Commits wake the launcher: a transaction that wrote a table with `services 'auto'` asks for
//! its database's round at once (its compaction may be due now), instead of at the end of the
//! nap. The requests and the launcher's latch live in shared memory, so this needs the library
//! in `shared_preload_libraries` (without it there is no worker to wake either).

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
    if !available() {
        return;
    }
    let latch = {
        let mut wakeups = WAKEUPS.exclusive();
        let oid = database.to_u32();
        if !wakeups.databases.contains(&oid) {
            match wakeups.databases.iter_mut().find(|slot| **slot == 0) {
                Some(slot) => *slot = oid,
                None => wakeups.overflow = true,
            }
        }
        wakeups.latch
    };
    if latch != 0 {
        // SAFETY: the launcher's process latch (a stale one after it exited belongs to a
        // PGPROC slot, and setting it only wakes that slot's process once).
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}

/// The requests since the last call: the databases asked for, or `None` for all of them.
pub fn take_requests() -> Option<Vec<pg_sys::Oid>> {
    if !available() {
        return Some(Vec::new());
    }
    let mut wakeups = WAKEUPS.exclusive();
    let asked: Vec<pg_sys::Oid> = wakeups.databases.iter().filter(|&&d| d != 0).map(|&d| pg_sys::Oid::from(d)).collect();
    let overflow = std::mem::take(&mut wakeups.overflow);
    wakeups.databases = [0; 32];
    (!overflow).then_some(asked)
}
