//! This backend's open caches (RocksDB secondaries, caught up once per statement), and how
//! fresh a lookup must be.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;

use arrow::datatypes::{Schema, SchemaRef};
use engine::lookup::{CacheGenerations, LookupCache};
use pgrx::pg_sys;

use super::CacheShape;

struct OpenCache {
    generation: u64,
    cache: LookupCache,
    /// The statement that last caught up: `(local transaction, statement start)`.
    statement: (u32, i64),
}

thread_local! {
    /// This backend's open caches, by table.
    static OPEN: RefCell<HashMap<u32, OpenCache>> = RefCell::new(HashMap::new());
    /// The reader directories this backend made, removed when it exits.
    static READER_DIRS: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) };
    /// The completion time of this session's latest commit to each Hudi table, by location:
    /// a commit through one foreign table is the session's own for every foreign table on it.
    static COMMITTED: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
}

/// How long a lookup waits for its cache to take in a commit before it reads the lake.
const FRESHNESS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Records that this session's commit to the Hudi table at `location` completed at
/// `completion`: its later lookups of the table, through any foreign table, see it.
pub fn committed(location: &str, completion: &str) {
    COMMITTED.with(|c| {
        let mut c = c.borrow_mut();
        let latest = c.entry(location.to_owned()).or_default();
        if latest.as_str() < completion {
            *latest = completion.to_owned();
        }
    });
}

/// The commit (a completion time) that a lookup's cache must hold before it answers.
pub(super) enum Freshness {
    /// The cache at its position will do.
    Current,
    /// This session's own latest commit to the table, which the cache misses.
    OwnCommit(String),
    /// Under `lookup_max_lag` with `lookup_on_stale 'wait'`: the table's latest commit (and
    /// the session's own), as the cache misses one older than the lag allows.
    Latest(String),
}

/// What `relid`'s open cache at `position` must hold for this lookup ([`Freshness`]).
/// `Err(())`: read the lake instead.
pub(super) unsafe fn freshness_target(relid: pg_sys::Oid, position: &str) -> Result<Freshness, ()> {
    // The last refresh failed (hudi.lookup_caches shows why): the cache may stay behind for
    // as long as it keeps failing, so the lake answers until a refresh succeeds.
    if last_refresh_failed(relid) {
        return Err(());
    }
    let location = crate::fdw::table::foreign_table_location(relid).ok_or(())?.to_string();
    let own = COMMITTED.with(|c| c.borrow().get(&location).cloned()).filter(|c| c.as_str() > position);
    let current = || Ok(own.clone().map_or(Freshness::Current, Freshness::OwnCommit));
    let options = crate::fdw::table::options_of((*pg_sys::GetForeignTable(relid)).options);
    let Some(max_lag) = options.get("lookup_max_lag") else { return current() };
    let reader = crate::fdw::table::ForeignHudiTable::of_relation(relid).open_reader();
    let lag = engine::lookup::Lag::of(&reader, position);
    let Some(latest) = lag.latest.clone() else { return current() };
    if (lag.oldest_missing_age_ms as f64) <= interval_ms(max_lag) {
        return current();
    }
    match options.get("lookup_on_stale").map_or("wait", String::as_str) {
        "scan" => Err(()),
        "error" => crate::error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "the lookup cache of \"{}\" misses {} commits, the oldest from {:.1} s ago, more than lookup_max_lag ({max_lag})",
                crate::fdw::table::relation_name(relid),
                lag.commits,
                lag.oldest_missing_age_ms as f64 / 1000.0
            ),
            Some("Wait for the worker's refresh, call hudi.refresh_lookup_cache, or set lookup_on_stale to 'wait' or 'scan'.".into()),
        ),
        _ => Ok(Freshness::Latest(match own {
            Some(own) => own.max(latest),
            None => latest,
        })),
    }
}

/// Whether the last refresh of `relid`'s cache failed.
fn last_refresh_failed(relid: pg_sys::Oid) -> bool {
    let args: Vec<pgrx::datum::DatumWithOid> = vec![relid.into()];
    crate::role::as_pg_hudi(|| {
        pgrx::Spi::get_one_with_args::<bool>(
            "SELECT state OPERATOR(pg_catalog.=) 'failed' FROM hudi.lookup_cache_state WHERE relation OPERATOR(pg_catalog.=) $1",
            &args,
        )
    })
    .ok()
    .flatten()
    .unwrap_or(false)
}

/// An interval option in milliseconds, as PostgreSQL reads it.
fn interval_ms(value: &str) -> f64 {
    let args: Vec<pgrx::datum::DatumWithOid> = vec![value.into()];
    let query = "SELECT pg_catalog.date_part('epoch', $1::pg_catalog.interval)::pg_catalog.float8 OPERATOR(pg_catalog.*) 1000";
    crate::role::pinned_search_path(|| pgrx::Spi::get_one_with_args::<f64>(query, &args))
        .ok()
        .flatten()
        .unwrap_or(f64::INFINITY)
}

/// Waits, a bounded while, for `relid`'s open cache to hold the commit completed at
/// `target`: refreshes it here (as its owner `owner`) when no other writer is at it, else asks
/// the worker for a refresh and catches up until then. Whether it got there.
pub(super) fn wait_for(relid: pg_sys::Oid, owner: pg_sys::Oid, target: &str, table_schema: &mut dyn FnMut() -> SchemaRef) -> bool {
    if !crate::services::lookup_cache::catch_up_here(relid, owner) {
        // SAFETY: plain reads of backend globals.
        crate::worker::wake::request_cache_refresh(unsafe { pg_sys::MyDatabaseId });
    }
    let deadline = std::time::Instant::now() + FRESHNESS_WAIT;
    loop {
        // Caught up again within this statement: it waits for this, before any row.
        OPEN.with(|open| open.borrow_mut().get_mut(&relid.to_u32()).map(|entry| entry.statement = (0, 0)));
        if !refresh_open(relid, true, table_schema) {
            return false;
        }
        if cached_position(relid).is_some_and(|p| p.as_str() >= target) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        // SAFETY: this backend's latch, on its main thread.
        unsafe {
            let events = (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32;
            pg_sys::WaitLatch(pg_sys::MyLatch, events, 10, pg_sys::PG_WAIT_EXTENSION);
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        pgrx::check_for_interrupts!();
    }
}

fn current_statement() -> (u32, i64) {
    // SAFETY: plain reads of backend state.
    unsafe { ((*pg_sys::MyProc).lxid, pg_sys::GetCurrentStatementStartTimestamp()) }
}

unsafe extern "C-unwind" fn remove_reader_dirs(_code: i32, _arg: pg_sys::Datum) {
    READER_DIRS.with(|dirs| {
        for dir in dirs.borrow().iter() {
            let _ = std::fs::remove_dir_all(dir);
        }
    });
}

/// This backend's directory for reading `relid`'s cache.
fn reader_dir(relid: pg_sys::Oid) -> PathBuf {
    // SAFETY: a plain read of a backend global.
    let pid = unsafe { pg_sys::MyProcPid };
    let dir = crate::services::lookup_cache::cache_root(relid).join("readers").join(pid.to_string());
    READER_DIRS.with(|dirs| {
        let mut dirs = dirs.borrow_mut();
        if dirs.is_empty() {
            // SAFETY: registering a callback for the rest of the backend's life.
            unsafe { pg_sys::on_proc_exit(Some(remove_reader_dirs), pg_sys::Datum::from(0)) };
        }
        if !dirs.contains(&dir) {
            dirs.push(dir.clone());
        }
    });
    dir
}

/// Makes `OPEN` hold `relid`'s current generation, caught up when `catch_up` (at most once a
/// statement); `false` when the table has no loaded cache (or it cannot be read: the lake
/// answers then). `table_schema` gives the table's columns when a generation must be opened.
pub(super) fn refresh_open(relid: pg_sys::Oid, catch_up: bool, table_schema: &mut dyn FnMut() -> SchemaRef) -> bool {
    let generations = CacheGenerations::new(&crate::services::lookup_cache::cache_root(relid));
    let Ok(Some(generation)) = generations.current() else {
        OPEN.with(|open| open.borrow_mut().remove(&relid.to_u32()));
        return false;
    };
    let statement = current_statement();
    let kept = OPEN.with(|open| {
        let mut open = open.borrow_mut();
        let Some(entry) = open.get_mut(&relid.to_u32()) else { return false };
        if entry.generation != generation {
            return false;
        }
        if !catch_up || entry.statement == statement {
            return true;
        }
        entry.statement = statement;
        // A failed catch-up (the writer removed a file the reader had not opened yet) is
        // answered by opening the cache again.
        entry.cache.catch_up().is_ok()
    });
    if kept {
        return true;
    }
    OPEN.with(|open| open.borrow_mut().remove(&relid.to_u32()));
    let dir = reader_dir(relid);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        pgrx::debug1!("pg_hudi: cannot create {}: {e}", dir.display());
        return false;
    }
    match LookupCache::open_reader(&generations.dir(generation), &dir, &table_schema()) {
        Ok(cache) => {
            OPEN.with(|open| open.borrow_mut().insert(relid.to_u32(), OpenCache { generation, cache, statement }));
            true
        }
        Err(e) => {
            pgrx::debug1!("pg_hudi: cannot open the lookup cache of {}: {e}", crate::fdw::table::relation_name(relid));
            false
        }
    }
}

/// Runs `f` with this backend's open cache of `relid`, as [`begin`] left it.
pub(super) fn with_open<R>(relid: pg_sys::Oid, f: impl FnOnce(&LookupCache) -> R) -> Option<R> {
    OPEN.with(|open| open.borrow().get(&relid.to_u32()).map(|entry| f(&entry.cache)))
}

/// The shape of `relid`'s cache for planning a latest-snapshot read of it (`None`: none is
/// ready, lookups are off, or this transaction wrote the table, whose own rows the cache
/// cannot show).
pub fn shape(relid: pg_sys::Oid, location: &str, table_schema: &Schema) -> Option<CacheShape> {
    if !crate::guc::ENABLE_LOOKUP_CACHE.get() || crate::xact::writes_to(location) {
        return None;
    }
    if !refresh_open(relid, false, &mut || std::sync::Arc::new(table_schema.clone())) {
        return None;
    }
    with_open(relid, |cache| CacheShape {
        record_key: cache.record_key_fields().map(<[String]>::to_vec),
        secondary: cache.secondary_indexes().to_vec(),
        columns: cache.schema().fields().iter().map(|f| f.name().clone()).collect(),
    })
}

/// The cached columns of `relid`'s open cache.
pub fn cached_schema(relid: pg_sys::Oid) -> Option<SchemaRef> {
    with_open(relid, |cache| cache.schema().clone())
}

/// The cached instant of `relid`'s open cache, for EXPLAIN.
pub fn cached_position(relid: pg_sys::Oid) -> Option<String> {
    with_open(relid, |cache| cache.position().map(str::to_owned)).flatten()
}
