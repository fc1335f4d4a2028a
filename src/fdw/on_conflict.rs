//! `INSERT … ON CONFLICT` on a Hudi table, at parse analysis: `DO UPDATE` is refused with a
//! message that says what to write instead, and a conflict target of `DO NOTHING` is checked
//! against the record key and dropped. (PostgreSQL itself would refuse both later, at planning,
//! with "there is no unique or exclusion constraint matching the ON CONFLICT specification": a
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
    check_on_conflict(query);
}

/// Checks the `ON CONFLICT` clauses of inserts into Hudi tables in `query` and its WITH queries
/// (where data-modifying statements may also be): `DO UPDATE` is refused; a conflict target of
/// `DO NOTHING` must name the table's record key fields (in any order), as a heap table's
/// target must match a unique index, and is then dropped, since the key is the arbiter whatever
/// it names (the planner would look for an index, which a foreign table has none of).
unsafe fn check_on_conflict(query: *mut pg_sys::Query) {
    if query.is_null() {
        return;
    }
    let conflict = (*query).onConflict;
    if !conflict.is_null() && (*query).resultRelation > 0 {
        let rtable = crate::fdw::pushdown::list_items::<pg_sys::RangeTblEntry>((*query).rtable);
        let relid = (*rtable[(*query).resultRelation as usize - 1]).relid;
        if crate::fdw::table::is_hudi_table(relid) {
            let name = crate::fdw::table::relation_name(relid);
            if (*conflict).action == pg_sys::OnConflictAction::ONCONFLICT_UPDATE {
                crate::error::raise(
                    PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    format!("INSERT … ON CONFLICT DO UPDATE is not supported on Hudi table \"{name}\""),
                    Some(
                        "A plain INSERT into a Hudi table is already an upsert by key: the row replaces the one with the same key (by the table's merge rules). ON CONFLICT DO NOTHING keeps existing rows instead."
                            .into(),
                    ),
                );
            }
            if !(*conflict).arbiterElems.is_null() {
                check_target(relid, &name, (*conflict).arbiterElems);
                (*conflict).arbiterElems = std::ptr::null_mut();
                (*conflict).arbiterWhere = std::ptr::null_mut();
            }
        }
    }
    for cte in crate::fdw::pushdown::list_items::<pg_sys::CommonTableExpr>((*query).cteList) {
        let inner = (*cte).ctequery;
        if !inner.is_null() && (*inner).type_ == pg_sys::NodeTag::T_Query {
            check_on_conflict(inner as *mut pg_sys::Query);
        }
    }
}

/// Refuses a conflict target `elements` of Hudi table `relid` that is not its record key
/// fields, with PostgreSQL's error for a target no unique index matches (42P10).
unsafe fn check_target(relid: pg_sys::Oid, name: &str, elements: *mut pg_sys::List) {
    let columns: Option<std::collections::BTreeSet<String>> = crate::fdw::pushdown::list_items::<pg_sys::InferenceElem>(elements)
        .into_iter()
        .map(|element| {
            let var = (*element).expr as *mut pg_sys::Var;
            if var.is_null() || (*var).xpr.type_ != pg_sys::NodeTag::T_Var || (*var).varattno <= 0 {
                return None;
            }
            let attname = pg_sys::get_attname(relid, (*var).varattno, false);
            Some(std::ffi::CStr::from_ptr(attname).to_string_lossy().into_owned())
        })
        .collect();
    // A role that may not insert learns nothing of the table here: the executor refuses it.
    if pg_sys::pg_class_aclcheck(relid, pg_sys::GetUserId(), pg_sys::ACL_INSERT as pg_sys::AclMode) != pg_sys::AclResult::ACLCHECK_OK {
        return;
    }
    // The key as the table is written with it (hoodie.properties), read as the inserting role.
    let key = crate::fdw::table::ForeignHudiTable::of_relation(relid).open_reader().config().record_key_fields.clone();
    if columns != Some(key.iter().cloned().collect()) {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_INVALID_COLUMN_REFERENCE,
            format!("the ON CONFLICT target of Hudi table \"{name}\" is not its primary key"),
            Some(format!(
                "A Hudi table's only unique key is its record key: name ({}) or no target.",
                key.join(", ")
            )),
        );
    }
}
