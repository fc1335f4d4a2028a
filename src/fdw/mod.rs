//! The `hudi_fdw` foreign-data wrapper: handler and option validation. Planning, scanning and
//! modification callbacks are filled in by the read and write paths.

pub mod options;

use pgrx::prelude::*;
use pgrx::{PgBox, PgSqlErrorCode};

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
    // Planning starts here for every query on a foreign table, so no other scan callback can
    // be reached before this one refuses.
    routine.GetForeignRelSize = Some(get_foreign_rel_size);
    pg_sys::Datum::from(routine.into_pg())
}

#[pg_guard]
extern "C-unwind" fn get_foreign_rel_size(
    _root: *mut pg_sys::PlannerInfo,
    _baserel: *mut pg_sys::RelOptInfo,
    _foreigntableid: pg_sys::Oid,
) {
    crate::error::raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        "reading hudi_fdw foreign tables is not available in this version of pg_hudi",
        None,
    );
}
