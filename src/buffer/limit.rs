//! The bound on the write buffer (`hudi.write_buffer_max_rows`): a writer is refused when the
//! buffer of its database holds that many rows, because flushing has fallen behind.
//!
//! Counting the buffer is a scan of `hudi.write_buffer`; done by every writer for itself once a
//! second, it was a tenth of all CPU under eight clients. So a count is shared: the flush round
//! publishes the sum it computes on every look at the buffer, a writer that finds no count
//! younger than a second counts and publishes, and every writer adds the rows it writes to the
//! shared count (flushes take theirs off only with the next count: the bound errs on the side
//! of refusing a little early). Without shared memory (the library not preloaded) each backend
//! keeps its own count.

use std::time::Duration;

use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use pgrx::PgSqlErrorCode;

use crate::error::raise;
use crate::role::as_pg_hudi;

/// How old a count may be.
const FRESH: Duration = Duration::from_secs(1);
const SLOTS: usize = 32;

/// Per database: its oid (0: a free slot), the buffered rows counted, and when (microseconds
/// since PostgreSQL's epoch).
#[derive(Copy, Clone, Default)]
pub struct Counts {
    slots: [(u32, i64, i64); SLOTS],
}

// SAFETY: plain integers.
unsafe impl PGRXSharedMemory for Counts {}

static COUNTS: PgLwLock<Counts> = unsafe { PgLwLock::new(c"pg_hudi write buffer counts") };
static IN_SHARED_MEMORY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

thread_local! {
    /// This backend's count when there is no shared memory.
    static OWN: std::cell::Cell<Option<(i64, i64)>> = const { std::cell::Cell::new(None) };
}

/// Requests the shared memory (only valid during `shared_preload_libraries`).
#[allow(unexpected_cfgs)]
pub fn init() {
    pgrx::pg_shmem_init!(COUNTS);
    IN_SHARED_MEMORY.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn now() -> i64 {
    // SAFETY: reads the clock.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

fn database() -> u32 {
    // SAFETY: a read of the backend's database.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// Updates this database's count with `f` (rows, counted at), under the lock.
fn with_count<R>(f: impl FnOnce(&mut Option<(i64, i64)>) -> R) -> R {
    if !IN_SHARED_MEMORY.load(std::sync::atomic::Ordering::Relaxed) {
        return OWN.with(|own| {
            let mut count = own.get();
            let out = f(&mut count);
            own.set(count);
            out
        });
    }
    let database = database();
    let mut counts = COUNTS.exclusive();
    let slot = match counts.slots.iter().position(|s| s.0 == database) {
        Some(at) => at,
        // A free slot, or else the stalest (its database counts anew).
        None => {
            let at = counts.slots.iter().enumerate().min_by_key(|(_, s)| (s.0 != 0, s.2)).map_or(0, |(at, _)| at);
            counts.slots[at] = (database, 0, i64::MIN);
            at
        }
    };
    let (_, rows, at) = counts.slots[slot];
    let mut count = (at != i64::MIN).then_some((rows, at));
    let out = f(&mut count);
    counts.slots[slot] = match count {
        Some((rows, at)) => (database, rows, at),
        None => (database, 0, i64::MIN),
    };
    out
}

/// Publishes `rows` as the buffer's count now (the flush round's sum).
pub fn counted(rows: i64) {
    let at = now();
    with_count(|count| *count = Some((rows, at)));
}

/// Counts the buffer's rows now and publishes the count.
fn count_now() {
    let rows = as_pg_hudi(|| crate::spi::read_one::<i64>("SELECT COALESCE(pg_catalog.sum(row_count), 0)::int8 FROM hudi.write_buffer", &[]))
        .unwrap_or_else(|e| crate::error::spi_failed("the write buffer", e))
        .unwrap_or(0);
    counted(rows);
}

/// Refuses `adding` rows more when the buffer holds `hudi.write_buffer_max_rows` already
/// (flushing has fallen behind), else counts them in — with the shared count while it is
/// fresh (one look under the lock), else with one counted now.
pub fn check(adding: usize) {
    let limit = crate::guc::WRITE_BUFFER_MAX_ROWS.get() as i64;
    let adding = adding as i64;
    let fresh_since = now() - FRESH.as_micros() as i64;
    // Err: the count that refuses; None: no fresh count.
    let take = |count: &mut Option<(i64, i64)>| match count {
        Some((rows, at)) if *at >= fresh_since => {
            if adding > 0 && *rows + adding > limit {
                return Some(Err(*rows));
            }
            *rows += adding;
            Some(Ok(()))
        }
        _ => None,
    };
    // A count made now is fresh: the same look then decides.
    let outcome = with_count(take).or_else(|| {
        count_now();
        with_count(take)
    });
    if let Some(Err(rows)) = outcome {
        raise(
            PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
            format!("the write buffer holds {rows} rows, and hudi.write_buffer_max_rows is {limit}"),
            Some("Flushing into Hudi has fallen behind (see hudi.buffered_writes and the server log); retry later.".into()),
        );
    }
}
