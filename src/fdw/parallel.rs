//! Parallel scans: a partial path whose units (file slices, or parts of a slice's base file
//! where the slice needs no merge) the leader and PostgreSQL's parallel workers take one at a
//! time from a counter in dynamic shared memory. The leader puts its snapshot there (the
//! timeline listing its reader was loaded from, the writes it sees as decided, the slices,
//! their units and the scan's options), so that a worker reads exactly what the leader would
//! have, whatever committed since. Units a few times more than the processes let them finish
//! together, and start on a small unit each. Aggregates that are not pushed run on top as PostgreSQL's
//! Partial Aggregate → Gather → Finalize Aggregate.
//!
//! A scan that each worker runs whole (the inner side of a join under `Gather`, or any scan
//! below `debug_parallel_query`) must read the table as the leader does, not as of the moment
//! the worker starts: the leader publishes its read state of each such table in the setting
//! `hudi.parallel_read_states`, which PostgreSQL hands its workers with the other settings,
//! and a worker opens the table at that state. Lookup paths never run in a worker.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use engine::read::prefetch::ScanUnit;
use engine::read::{ReaderState, ScanOptions, ScanStats, TableReader};
use engine::view::FileSlice;
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use crate::error::{raise, OrReport};
use crate::fdw::scan::{self, ScanState, Source};
use crate::fdw::table::ForeignHudiTable;
use crate::runtime::block_on;

/// What the leader's scan shares, as JSON after the [`Shared`] header.
#[derive(serde::Serialize, serde::Deserialize)]
struct SharedScan {
    state: ReaderState,
    options: ScanOptions,
    slices: Vec<FileSlice>,
    units: Vec<ScanUnit>,
}

/// How many units a parallel scan hands each process, about: the last units to finish are
/// what the others wait for.
const UNITS_PER_PROCESS: usize = 16;

/// The head of the scan's shared memory.
#[repr(C)]
struct Shared {
    /// The next unit to hand out.
    next: AtomicU32,
    /// Rows the row filter removed, in all processes (for EXPLAIN ANALYZE).
    filtered: AtomicU64,
    /// Bytes of JSON that follow.
    length: u32,
}

/// A claim on the units of `shared`, which lives as long as the parallel query.
fn claims(shared: *const Shared) -> engine::read::prefetch::Claim {
    // SAFETY: the shared memory outlives every read of the scan (PostgreSQL re-initializes
    // the scan, and calls InitializeDSMForeignScan again, before a new one).
    Box::new(move || Some(unsafe { (*shared).next.fetch_add(1, Ordering::Relaxed) } as usize))
}

/// `IsForeignScanParallelSafe`: a table this transaction writes is read by the leader alone
/// (its unwritten rows and own files are the leader's), and so is a table with a write
/// buffer (whose rows the leader's reader holds in memory).
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn is_foreign_scan_parallel_safe(
    _root: *mut pg_sys::PlannerInfo,
    _rel: *mut pg_sys::RelOptInfo,
    rte: *mut pg_sys::RangeTblEntry,
) -> bool {
    let table = ForeignHudiTable::of_relation((*rte).relid);
    !crate::buffer::is_buffered(&table) && !crate::xact::writes_to(&table.uri.to_string())
}

/// Adds the partial path of a scan of `slices` slices of `bytes`, `rows` rows in all, whose
/// serial run costs `(startup, run)`, when the table is large enough for PostgreSQL's
/// `min_parallel_table_scan_size`.
pub unsafe fn add_partial_path(
    root: *mut pg_sys::PlannerInfo,
    baserel: *mut pg_sys::RelOptInfo,
    rows: f64,
    slices: usize,
    bytes: u64,
    (startup, run): (f64, f64),
) {
    let large = bytes >= pg_sys::min_parallel_table_scan_size.max(0) as u64 * pg_sys::BLCKSZ as u64;
    let workers = (pg_sys::max_parallel_workers_per_gather.max(0) as usize).min(slices.saturating_sub(1));
    if !(*baserel).consider_parallel || !large || workers == 0 {
        return;
    }
    // PostgreSQL's divisor of a partial scan's rows: the leader scans too, less with more workers.
    let leader = if pg_sys::parallel_leader_participation { (1.0 - 0.3 * workers as f64).max(0.0) } else { 0.0 };
    let share = 1.0 / (workers as f64 + leader);
    let path = pg_sys::create_foreignscan_path(
        root,
        baserel,
        std::ptr::null_mut(),
        rows * share,
        startup,
        startup + run * share,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    (*path).path.parallel_aware = true;
    (*path).path.parallel_safe = true;
    (*path).path.parallel_workers = workers as i32;
    pg_sys::add_partial_path(baserel, path.cast());
}

/// The leader's scan, as JSON for its workers, and its units (made once for the `pcxt`'s
/// processes, kept in the state between estimating and writing the shared memory).
unsafe fn shared_scan(node: *mut pg_sys::ForeignScanState, pcxt: *mut pg_sys::ParallelContext) -> Option<(String, Vec<ScanUnit>)> {
    let state = ((*node).fdw_state as *mut ScanState).as_mut()?;
    if state.shared.is_none() {
        let Source::Lake(scan) = &state.source else { return None };
        let (reader, options, slices) = scan.parts();
        let processes = (*pcxt).nworkers.max(0) as usize + usize::from(pg_sys::parallel_leader_participation);
        let units = scan.shared_units(processes, UNITS_PER_PROCESS);
        let shared = SharedScan { state: reader.state(), options: options.clone(), slices: slices.to_vec(), units: units.clone() };
        state.shared = Some((serde_json::to_string(&shared).unwrap_or_default(), units));
    }
    state.shared.clone()
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn estimate_dsm(node: *mut pg_sys::ForeignScanState, pcxt: *mut pg_sys::ParallelContext) -> pg_sys::Size {
    std::mem::size_of::<Shared>() + shared_scan(node, pcxt).map_or(0, |(json, _)| json.len())
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn initialize_dsm(node: *mut pg_sys::ForeignScanState, pcxt: *mut pg_sys::ParallelContext, coordinate: *mut std::ffi::c_void) {
    let shared = coordinate as *mut Shared;
    let (json, units) = shared_scan(node, pcxt).unwrap_or_default();
    std::ptr::write(shared, Shared { next: AtomicU32::new(0), filtered: AtomicU64::new(0), length: json.len() as u32 });
    std::ptr::copy_nonoverlapping(json.as_ptr(), (shared as *mut u8).add(std::mem::size_of::<Shared>()), json.len());
    // The leader takes units from the counter too.
    if let Some(state @ ScanState { source: Source::Lake(_), .. }) = ((*node).fdw_state as *mut ScanState).as_mut() {
        let mut removed = 0;
        if let Source::Lake(scan) = &mut state.source {
            scan.claiming(claims(shared), units);
            removed = scan.rows_filtered();
        }
        state.filtered_count = Some(FilteredCount { shared: &(*shared).filtered, added: removed, total: None });
    }
}

#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn reinitialize_dsm(_node: *mut pg_sys::ForeignScanState, _pcxt: *mut pg_sys::ParallelContext, coordinate: *mut std::ffi::c_void) {
    (*(coordinate as *mut Shared)).next.store(0, Ordering::Relaxed);
}

/// `InitializeWorkerForeignScan`: the worker's scan of the leader's snapshot and slices.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn initialize_worker(node: *mut pg_sys::ForeignScanState, _toc: *mut pg_sys::shm_toc, coordinate: *mut std::ffi::c_void) {
    let shared = coordinate as *const Shared;
    let json = std::slice::from_raw_parts((shared as *const u8).add(std::mem::size_of::<Shared>()), (*shared).length as usize);
    let Ok(plan) = serde_json::from_slice::<SharedScan>(json) else {
        raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "a parallel scan's shared state cannot be read", None)
    };
    let relid = (*(*node).ss.ss_currentRelation).rd_id;
    let table = ForeignHudiTable::of_relation(relid);
    engine::read::merge_cache::set_capacity(crate::guc::merge_cache_bytes());
    let reader = block_on(TableReader::at_state(table.storage(), &plan.state)).or_report();
    let stats = ScanStats { slices_total: plan.slices.len(), slices_kept: plan.slices.len(), ..Default::default() };
    let converted = scan::PlanInfo::of_plan(node).converted;
    let mut state = scan::lake_scan(node, &table, scan::read_spec(&table), reader, plan.options, plan.slices, stats, converted.as_deref());
    if let Source::Lake(scan) = &mut state.source {
        scan.claiming(claims(shared), plan.units);
    }
    state.filtered_count = Some(FilteredCount { shared: &(*shared).filtered, added: 0, total: None });
    scan::install_state(node, state);
}

/// The count of rows a parallel scan's row filter removed, kept in the scan's shared memory:
/// each process adds what its own filter removed.
pub(crate) struct FilteredCount {
    shared: *const AtomicU64,
    /// What this process added so far.
    added: u64,
    /// The total, read when the leader's scan shuts down (its shared memory goes after).
    pub(crate) total: Option<u64>,
}

impl FilteredCount {
    /// Adds what this process's filter removed since the last call (`removed` in all).
    pub(crate) fn report(&mut self, removed: u64) {
        if self.total.is_none() && removed > self.added {
            // SAFETY: the shared memory outlives the scan's reads (see `claims`).
            unsafe { (*self.shared).fetch_add(removed - self.added, Ordering::Relaxed) };
            self.added = removed;
        }
    }
}

/// `ShutdownForeignScan`: the leader keeps the processes' count before the shared memory goes.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn shutdown(node: *mut pg_sys::ForeignScanState) {
    if crate::fdw::aggregate::is_pushed(node) {
        return;
    }
    if let Some(ScanState { source: Source::Lake(scan), filtered_count: Some(count), .. }) = ((*node).fdw_state as *mut ScanState).as_mut() {
        count.report(scan.rows_filtered());
        if count.total.is_none() {
            count.total = Some((*count.shared).load(Ordering::Relaxed));
        }
    }
}

thread_local! {
    /// The read states this backend published, by table URI.
    static PUBLISHED: std::cell::RefCell<std::collections::BTreeMap<String, ReaderState>> = Default::default();
}

/// Publishes `reader`'s state of the table at `uri` for the parallel workers of the statement
/// starting, when the scan `node` may run in one (its plan is parallel-safe in a plan with
/// workers). Called by the leader before it starts the workers.
pub(crate) unsafe fn publish_read_state(node: *mut pg_sys::ForeignScanState, uri: &str, reader: &TableReader) {
    let plan = (*node).ss.ps.plan;
    let statement = (*(*node).ss.ps.state).es_plannedstmt;
    // (A statement run inside a parallel operation, by a function, starts no workers of its
    // own, and may not change settings.)
    if pg_sys::ParallelWorkerNumber >= 0
        || pg_sys::IsInParallelMode()
        || !(*plan).parallel_safe
        || statement.is_null()
        || !(*statement).parallelModeNeeded
    {
        return;
    }
    let json = PUBLISHED.with(|published| {
        let mut published = published.borrow_mut();
        published.insert(uri.to_owned(), reader.state());
        serde_json::to_string(&*published).unwrap_or_default()
    });
    let value = std::ffi::CString::new(json).unwrap_or_default();
    pg_sys::set_config_option(
        c"hudi.parallel_read_states".as_ptr(),
        value.as_ptr(),
        pg_sys::GucContext::PGC_SUSET,
        pg_sys::GucSource::PGC_S_SESSION,
        pg_sys::GucAction::GUC_ACTION_SET,
        true,
        pgrx::PgLogLevel::ERROR as i32,
        false,
    );
}

/// In a parallel worker, the table at `uri` at the state its leader published; `None`
/// elsewhere, or when the leader published none (a query the worker runs on its own, in a
/// parallel-safe function).
pub(crate) fn published_reader(table: &ForeignHudiTable) -> Option<TableReader> {
    // SAFETY: a backend global, read on the backend's thread.
    if unsafe { pg_sys::ParallelWorkerNumber } < 0 {
        return None;
    }
    let states: std::collections::BTreeMap<String, ReaderState> = serde_json::from_str(&crate::guc::string_value(&crate::guc::PARALLEL_READ_STATES)).ok()?;
    let state = states.get(&table.uri.to_string())?;
    Some(block_on(TableReader::at_state(table.storage(), state)).or_report())
}
