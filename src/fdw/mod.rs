//! The `hudi_fdw` foreign-data wrapper: the handler's routine table, option validation,
//! scans and `IMPORT FOREIGN SCHEMA`.

pub mod aggregate;
pub mod alter;
pub mod conditions;
pub mod import;
pub mod lookup;
pub mod modify;
pub mod on_conflict;
pub mod options;
pub mod parallel;
pub mod positions;
pub mod pushdown;
pub mod scan;
pub mod table;
pub mod table_state;

use pgrx::prelude::*;
use pgrx::PgBox;

/// Planning data in a `fdw_private` list (of a path or a plan, so copied with it): one String
/// node holding `value` as JSON.
pub(crate) unsafe fn private_list(value: &impl serde::Serialize) -> *mut pg_sys::List {
    let json = std::ffi::CString::new(serde_json::to_string(value).unwrap_or_default()).unwrap_or_default();
    let node = pg_sys::makeString(pg_sys::pstrdup(json.as_ptr()));
    pg_sys::lappend(std::ptr::null_mut(), node.cast())
}

/// What [`private_list`] stored in `list` (`None`: an empty list, or data of another kind).
pub(crate) unsafe fn from_private_list<T: serde::de::DeserializeOwned>(list: *mut pg_sys::List) -> Option<T> {
    if list.is_null() || (*list).length < 1 {
        return None;
    }
    let node = (*(*list).elements).ptr_value as *mut pg_sys::String;
    serde_json::from_str(&std::ffi::CStr::from_ptr((*node).sval).to_string_lossy()).ok()
}

/// `fmgr` info record for the handler, which is declared by hand in `sql/fdw.sql`.
#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_hudi_fdw_handler() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// The FDW handler: returns the routine table PostgreSQL calls for `hudi_fdw` tables.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn hudi_fdw_handler(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let mut routine = unsafe { PgBox::<pg_sys::FdwRoutine>::alloc_node(pg_sys::NodeTag::T_FdwRoutine) };
    routine.GetForeignRelSize = Some(scan::get_foreign_rel_size);
    routine.GetForeignPaths = Some(scan::get_foreign_paths);
    routine.GetForeignPlan = Some(scan::get_foreign_plan);
    routine.BeginForeignScan = Some(scan::begin_foreign_scan);
    routine.IterateForeignScan = Some(scan::iterate_foreign_scan);
    routine.ReScanForeignScan = Some(scan::rescan_foreign_scan);
    routine.EndForeignScan = Some(scan::end_foreign_scan);
    routine.ExplainForeignScan = Some(scan::explain_foreign_scan);
    routine.GetForeignUpperPaths = Some(aggregate::get_foreign_upper_paths);
    routine.IsForeignScanParallelSafe = Some(parallel::is_foreign_scan_parallel_safe);
    routine.EstimateDSMForeignScan = Some(parallel::estimate_dsm);
    routine.InitializeDSMForeignScan = Some(parallel::initialize_dsm);
    routine.ReInitializeDSMForeignScan = Some(parallel::reinitialize_dsm);
    routine.InitializeWorkerForeignScan = Some(parallel::initialize_worker);
    routine.ShutdownForeignScan = Some(parallel::shutdown);
    routine.AnalyzeForeignTable = Some(scan::analyze_foreign_table);
    routine.ImportForeignSchema = Some(import::import_foreign_schema);
    routine.IsForeignRelUpdatable = Some(modify::is_foreign_rel_updatable);
    routine.BeginForeignModify = Some(modify::begin_foreign_modify);
    routine.BeginForeignInsert = Some(modify::begin_foreign_insert);
    routine.ExecForeignInsert = Some(modify::exec_foreign_insert);
    routine.GetForeignModifyBatchSize = Some(modify::get_foreign_modify_batch_size);
    routine.ExecForeignBatchInsert = Some(modify::exec_foreign_batch_insert);
    routine.AddForeignUpdateTargets = Some(modify::add_foreign_update_targets);
    routine.ExecForeignUpdate = Some(modify::exec_foreign_update);
    routine.ExecForeignDelete = Some(modify::exec_foreign_delete);
    routine.EndForeignModify = Some(modify::end_foreign_modify);
    routine.EndForeignInsert = Some(modify::end_foreign_modify);
    routine.ExecForeignTruncate = Some(modify::exec_foreign_truncate);
    pg_sys::Datum::from(routine.into_pg())
}

