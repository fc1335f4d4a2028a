//! `INSERT … ON CONFLICT DO UPDATE` on a Hudi table: refused at parse analysis with a message
//! that says what to write instead. (PostgreSQL itself would refuse it later, at planning, with
//! "there is no unique or exclusion constraint matching the ON CONFLICT specification": a
//! foreign table has no indexes to infer an arbiter from.) `DO NOTHING` is carried out by
//! [`crate::fdw::modify`].

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

static mut PREVIOUS: pg_sys::post_parse_analyze_hook_type = None;

/// Installs the hook, after whatever hook was there (called once, from `_PG_init`).
pub fn install() {
    // SAFETY: hooks are plain globals set while the library loads, on the main thread.
    unsafe {
        PREVIOUS = pg_sys::post_parse_analyze_hook;
        pg_sys::post_parse_analyze_hook = Some(analyze);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn analyze(pstate: *mut pg_sys::ParseState, query: *mut pg_sys::Query, jstate: *mut pg_sys::JumbleState) {
    if let Some(previous) = PREVIOUS {
        previous(pstate, query, jstate);
    }
    refuse_do_update(query);
}

/// Raises the error for an `ON CONFLICT DO UPDATE` into a Hudi table in `query` or its WITH
/// queries (where data-modifying statements may also be).
unsafe fn refuse_do_update(query: *mut pg_sys::Query) {
    if query.is_null() {
        return;
    }
    let conflict = (*query).onConflict;
    if !conflict.is_null() && (*conflict).action == pg_sys::OnConflictAction::ONCONFLICT_UPDATE && (*query).resultRelation > 0 {
        let rtable = crate::fdw::pushdown::list_items::<pg_sys::RangeTblEntry>((*query).rtable);
        let rte = rtable[(*query).resultRelation as usize - 1];
        if crate::fdw::table::is_hudi_table((*rte).relid) {
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("INSERT … ON CONFLICT DO UPDATE is not supported on Hudi table \"{}\"", crate::fdw::table::relation_name((*rte).relid)),
                Some(
                    "A plain INSERT into a Hudi table is already an upsert by key: the row replaces the one with the same key (by the table's merge rules). ON CONFLICT DO NOTHING keeps existing rows instead."
                        .into(),
                ),
            );
        }
    }
    for cte in crate::fdw::pushdown::list_items::<pg_sys::CommonTableExpr>((*query).cteList) {
        let inner = (*cte).ctequery;
        if !inner.is_null() && (*inner).type_ == pg_sys::NodeTag::T_Query {
            refuse_do_update(inner as *mut pg_sys::Query);
        }
    }
}
