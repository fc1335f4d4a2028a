//! Waiting for a table's next commit: what `hudi.consume(..., wait => ...)` does while there
//! are no changes after its consumer's position.
//!
//! A waiting session sleeps on its latch. Commits made on this server wake the waiters of
//! their table at once (the committing backend sets their latches after its completions).
//! Commits of other servers and engines are found by listing the table's timeline every
//! `hudi.stream_check_interval`: once per interval and table for the whole server, by whichever
//! waiter finds the check due (the others sleep until it is done or due again), however many
//! sessions wait on the table. The state is in shared memory: the watched tables (by a hash of
//! their location), the latest completion each check found, and the waiting sessions' latches.
//! Without shared memory (the library not preloaded) every waiter lists for itself.

use std::time::Duration;

use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;

/// How many tables can be watched at once; the waiters of others list for themselves.
const TABLES: usize = 64;
/// How many sessions can wait at once; the others poll every check interval.
const WAITERS: usize = 256;
/// A check that started this long ago and did not finish (its session failed) is taken over.
const CHECK_TAKEN_OVER: Duration = Duration::from_secs(30);

/// The longest location kept for `hudi.stream_watches` (cut there).
const LOCATION_BYTES: usize = 256;

/// One watched table.
#[derive(Copy, Clone)]
struct Watched {
    /// A hash of the table's location (0: a free slot).
    key: u64,
    location: [u8; LOCATION_BYTES],
    /// The latest completion time the last check found, as a number (0: none yet).
    latest: u64,
    /// When the last check finished and when the current one started (microseconds since
    /// PostgreSQL's epoch; 0: never, none).
    checked_at: i64,
    checking_since: i64,
    /// A commit on this server since the last check: the next waiter checks at once.
    changed: bool,
    /// How many timeline listings the checks made.
    listings: u64,
    /// How many commits on this server completed since the table was watched.
    commits: u64,
}

impl Watched {
    const FREE: Watched =
        Watched { key: 0, location: [0; LOCATION_BYTES], latest: 0, checked_at: 0, checking_since: 0, changed: false, listings: 0, commits: 0 };

    fn new(key: u64, location: &str) -> Watched {
        let mut watched = Watched { key, ..Watched::FREE };
        // Cut at a character boundary, so that the text read back is valid.
        let mut end = location.len().min(LOCATION_BYTES);
        while !location.is_char_boundary(end) {
            end -= 1;
        }
        watched.location[..end].copy_from_slice(&location.as_bytes()[..end]);
        watched
    }

    fn location(&self) -> String {
        let end = self.location.iter().position(|&b| b == 0).unwrap_or(LOCATION_BYTES);
        String::from_utf8_lossy(&self.location[..end]).into_owned()
    }
}

/// One waiting session.
#[derive(Copy, Clone, Default)]
struct Waiter {
    /// The watched table's key (0: a free slot).
    key: u64,
    /// The session's process latch, in shared memory.
    latch: usize,
}

/// The watched tables and the waiting sessions.
#[derive(Copy, Clone)]
pub struct Streams {
    tables: [Watched; TABLES],
    waiters: [Waiter; WAITERS],
}

impl Default for Streams {
    fn default() -> Self {
        Streams { tables: [Watched::FREE; TABLES], waiters: [Waiter::default(); WAITERS] }
    }
}

// SAFETY: plain integers; the latches are in shared memory, at the same address in every
// backend forked from the postmaster.
unsafe impl PGRXSharedMemory for Streams {}

static STREAMS: PgLwLock<Streams> = unsafe { PgLwLock::new(c"pg_hudi streams") };
static IN_SHARED_MEMORY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Requests the shared memory (only valid during `shared_preload_libraries`).
#[allow(unexpected_cfgs)]
pub fn init() {
    pgrx::pg_shmem_init!(STREAMS = Streams::default());
    IN_SHARED_MEMORY.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn available() -> bool {
    IN_SHARED_MEMORY.load(std::sync::atomic::Ordering::Relaxed)
}

fn now() -> i64 {
    // SAFETY: reads the clock.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// The key of the table at `location` (never 0).
fn key_of(location: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    location.hash(&mut hasher);
    hasher.finish().max(1)
}

/// A completion time (or instant) as a number that orders as the text does (instants are
/// digits of one length per table); 0 for the start (`''`) or text that is not one.
fn number_of(time: &str) -> u64 {
    time.parse().unwrap_or(0)
}

/// Wakes the sessions waiting for a commit of the table at `location`, which this backend
/// just completed.
pub fn committed(location: &str) {
    if !available() {
        return;
    }
    let key = key_of(location);
    let latches: Vec<usize> = {
        let mut streams = STREAMS.exclusive();
        let Some(table) = streams.tables.iter_mut().find(|t| t.key == key) else { return };
        table.changed = true;
        table.commits += 1;
        streams.waiters.iter().filter(|w| w.key == key).map(|w| w.latch).collect()
    };
    for latch in latches {
        // SAFETY: a process latch in shared memory (one of a session that stopped waiting is
        // set once more, which only wakes its process).
        unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
    }
}

/// Has commits on this server to the table at `location` wake this process from now on (until
/// [`unfollow_all`]), as a waiting session is: for a worker that applies them. Returns how
/// many there were since the table was watched, to tell whether there are new ones (0 without
/// shared memory or a free slot: then only the worker's own checks find them).
pub fn follow(location: &str) -> u64 {
    if !available() {
        return 0;
    }
    let key = key_of(location);
    let mut streams = STREAMS.exclusive();
    let streams = &mut *streams;
    let table = match streams.tables.iter().position(|t| t.key == key) {
        Some(i) => i,
        None => match free_table(streams, now()) {
            Some(i) => {
                streams.tables[i] = Watched::new(key, location);
                i
            }
            None => return 0,
        },
    };
    // SAFETY: a read of this backend's latch.
    let latch = unsafe { pg_sys::MyLatch } as usize;
    // A slot of the same latch and table is this process's (or a process's that had its
    // PGPROC before it and did not free it).
    if !streams.waiters.iter().any(|w| w.key == key && w.latch == latch) {
        free_slots_at_exit();
        if let Some(slot) = streams.waiters.iter_mut().find(|w| w.key == 0) {
            *slot = Waiter { key, latch };
        }
    }
    streams.tables[table].commits
}

thread_local! {
    static EXIT_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Has this process's waiter slots freed when it exits: a FATAL (pg_terminate_backend during
/// a wait) exits without unwinding the wait, which would leave its slot taken.
fn free_slots_at_exit() {
    if EXIT_CALLBACK.with(|c| c.replace(true)) {
        return;
    }
    #[pg_guard]
    unsafe extern "C-unwind" fn free_slots(_code: std::ffi::c_int, _arg: pg_sys::Datum) {
        unfollow_all();
    }
    // SAFETY: a callback for the rest of the process's life.
    unsafe { pg_sys::before_shmem_exit(Some(free_slots), pg_sys::Datum::from(0)) };
}

/// Stops [`follow`]ing: frees this process's waiter slots.
pub fn unfollow_all() {
    if !available() {
        return;
    }
    // SAFETY: a read of this backend's latch.
    let latch = unsafe { pg_sys::MyLatch } as usize;
    let mut streams = STREAMS.exclusive();
    for waiter in streams.waiters.iter_mut().filter(|w| w.latch == latch) {
        *waiter = Waiter::default();
    }
}

/// What a waiter should do next.
enum Next {
    /// A commit after the position is known.
    Found,
    /// This session checks the timeline now.
    Check,
    /// Sleep, at most this long.
    Sleep(Duration),
    /// No table slot is free: this session lists for itself.
    Alone,
}

/// This session's waiter slot, freed when it stops waiting (also by an ERROR: a cancel or a
/// statement timeout).
struct Registered {
    slot: Option<usize>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            let mut streams = STREAMS.exclusive();
            streams.waiters[slot] = Waiter::default();
        }
    }
}

/// A check this session started, ended when dropped (by an ERROR too: the next waiter takes
/// it up) with the latest completion it found, if it got that far.
struct Checking {
    key: u64,
    found: Option<u64>,
}

impl Drop for Checking {
    fn drop(&mut self) {
        let latches: Vec<usize> = {
            let mut streams = STREAMS.exclusive();
            let streams = &mut *streams;
            let Some(table) = streams.tables.iter_mut().find(|t| t.key == self.key) else { return };
            table.checking_since = 0;
            let Some(found) = self.found else { return };
            table.checked_at = now();
            table.listings += 1;
            if found == table.latest {
                return;
            }
            table.latest = found;
            streams.waiters.iter().filter(|w| w.key == self.key).map(|w| w.latch).collect()
        };
        for latch in latches {
            // SAFETY: as in `committed`.
            unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
        }
    }
}

/// Waits until the table at `location` has a commit completed after `after` (a completion
/// time, `''` for the start), found by `latest` (one listing of its timeline: the latest
/// completion time), or until `deadline` (a timestamp): whether one was found. Cancellable; no
/// transaction id is taken.
pub fn wait_for_commit(location: &str, after: &str, deadline: i64, latest: impl Fn() -> Option<String>) -> bool {
    let after = number_of(after);
    let interval = crate::guc::stream_check_interval();
    if !available() {
        return wait_alone(after, deadline, interval, &latest);
    }
    let key = key_of(location);
    let mut registered = Registered { slot: None };
    loop {
        pgrx::check_for_interrupts!();
        let next = {
            let mut streams = STREAMS.exclusive();
            let streams = &mut *streams;
            let at = now();
            let table = match streams.tables.iter().position(|t| t.key == key) {
                Some(i) => Some(i),
                None => free_table(streams, at).inspect(|&i| streams.tables[i] = Watched::new(key, location)),
            };
            match table.map(|i| &mut streams.tables[i]) {
                None => Next::Alone,
                Some(table) if table.checked_at != 0 && table.latest > after => Next::Found,
                Some(table) => {
                    let due = table.changed || table.checked_at == 0 || at - table.checked_at >= micros(interval);
                    let stuck = table.checking_since != 0 && at - table.checking_since >= micros(CHECK_TAKEN_OVER);
                    if due && (table.checking_since == 0 || stuck) {
                        table.checking_since = at;
                        table.changed = false;
                        Next::Check
                    } else {
                        // A check under way is looked at again shortly.
                        let next_check = if due { micros(Duration::from_millis(50)) } else { table.checked_at + micros(interval) - at };
                        if registered.slot.is_none() {
                            free_slots_at_exit();
                            // SAFETY: a read of this backend's latch.
                            let me = Waiter { key, latch: unsafe { pg_sys::MyLatch } as usize };
                            registered.slot = streams.waiters.iter().position(|w| w.key == 0);
                            if let Some(slot) = registered.slot {
                                streams.waiters[slot] = me;
                            }
                        }
                        // Without a slot no commit wakes this session: it looks again after a
                        // check interval at the latest.
                        Next::Sleep(Duration::from_micros(next_check.min(deadline - at).max(0) as u64))
                    }
                }
            }
        };
        match next {
            Next::Found => return true,
            Next::Alone => return wait_alone(after, deadline, interval, &latest),
            Next::Check => {
                let mut checking = Checking { key, found: None };
                checking.found = Some(latest().as_deref().map_or(0, number_of));
                drop(checking);
            }
            Next::Sleep(_) if now() >= deadline => return false,
            Next::Sleep(sleep) => sleep_on_latch(sleep),
        }
    }
}

/// A free table slot: an unused one, or one that no session waits on and that was last
/// checked longest ago.
fn free_table(streams: &Streams, at: i64) -> Option<usize> {
    if let Some(free) = streams.tables.iter().position(|t| t.key == 0) {
        return Some(free);
    }
    let waited_on = |key: u64| streams.waiters.iter().any(|w| w.key == key);
    streams
        .tables
        .iter()
        .enumerate()
        .filter(|(_, t)| t.checking_since == 0 && !waited_on(t.key) && at - t.checked_at >= 0)
        .min_by_key(|(_, t)| t.checked_at)
        .map(|(i, _)| i)
}

/// [`wait_for_commit`] without shared state: lists the timeline every check interval.
fn wait_alone(after: u64, deadline: i64, interval: Duration, latest: &impl Fn() -> Option<String>) -> bool {
    loop {
        if latest().as_deref().map_or(0, number_of) > after {
            return true;
        }
        let at = now();
        if at >= deadline {
            return false;
        }
        sleep_on_latch(Duration::from_micros(micros(interval).min(deadline - at) as u64));
    }
}

fn micros(duration: Duration) -> i64 {
    duration.as_micros().min(i64::MAX as u128) as i64
}

/// Sleeps on the process latch for at most `timeout`; a cancel, a statement timeout or a
/// termination raise their ERROR after it.
fn sleep_on_latch(timeout: Duration) {
    let flags = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH;
    let millis = timeout.as_millis().clamp(1, i32::MAX as u128) as std::ffi::c_long;
    // SAFETY: the process latch, on the main thread.
    unsafe {
        pg_sys::WaitLatch(pg_sys::MyLatch, flags as i32, millis, pg_sys::PG_WAIT_EXTENSION);
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pgrx::check_for_interrupts!();
}

/// The watched tables of this server: `(location, sessions waiting, listings, last check)`.
pub fn watched() -> Vec<(String, i32, i64, Option<i64>)> {
    if !available() {
        return Vec::new();
    }
    let streams = STREAMS.share();
    streams
        .tables
        .iter()
        .filter(|t| t.key != 0)
        .map(|t| {
            let waiting = streams.waiters.iter().filter(|w| w.key == t.key).count() as i32;
            (t.location(), waiting, t.listings as i64, (t.checked_at != 0).then_some(t.checked_at))
        })
        .collect()
}
