//! Planning: which quals a probe can answer, the lookup paths they make, and the plan of the
//! chosen one.

use std::ffi::{c_void, CStr};

use arrow::datatypes::Schema;
use engine::lookup::Index;
use pgrx::pg_sys;

use super::{CacheShape, LookupPlan};
use crate::datum::PgKind;
use crate::fdw::pushdown::{self, FieldNames};

/// `column = value` (or `column = ANY(values)`) of a qual that a probe can answer.
struct KeyClause {
    field: String,
    value: *mut pg_sys::Node,
    array: bool,
}

/// The key clause `clause` is, for a column of relation `relid` among `fields`: a built-in
/// equality (as pushdown accepts them) whose other side does not involve the relation, is
/// not volatile, and converts to the Hudi field's values exactly (`types`: the field types).
unsafe fn key_clause(root: *mut pg_sys::PlannerInfo, clause: *mut pg_sys::Node, relid: u32, fields: &FieldNames, types: &Schema) -> Option<KeyClause> {
    let comparison = pushdown::column_comparison(clause, relid, fields)?;
    if comparison.op != engine::read::filter::Op::Eq {
        return None;
    }
    let (column, value, array) = (comparison.column, comparison.other, comparison.any);
    let (field, column_type) = column;
    if pg_sys::bms_is_member(relid as i32, pg_sys::pull_varnos(root, value))
        || pg_sys::contain_volatile_functions(value)
        || pg_sys::expression_returns_set(value)
    {
        return None;
    }
    let mut value_type = pg_sys::exprType(value);
    if array {
        value_type = pg_sys::get_element_type(value_type);
    }
    let kind = PgKind::from_type_oid(value_type)?;
    let field_type = types.field_with_name(&field).ok()?.data_type();
    (pushdown::same_family(column_type, value_type) && crate::datum::writable(kind, field_type)).then_some(KeyClause { field, value, array })
}

/// Matches an equivalence member that is column `arg` (an attribute number) of `rel`.
unsafe extern "C-unwind" fn member_is_column(
    _root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    _ec: *mut pg_sys::EquivalenceClass,
    member: *mut pg_sys::EquivalenceMember,
    arg: *mut c_void,
) -> bool {
    let attno = *(arg as *const i16);
    let expr = pushdown::strip((*member).em_expr as *mut pg_sys::Node);
    if expr.is_null() || (*expr).type_ != pg_sys::NodeTag::T_Var {
        return false;
    }
    let var = expr as *mut pg_sys::Var;
    (*var).varno as u32 == (*rel).relid && (*var).varattno == attno && (*var).varlevelsup == 0
}

/// What one probe costs the planner: about a B-tree probe of a cached index.
const PROBE_COST: f64 = 0.2;
/// What each row a secondary index finds costs: a point read of the row and its decoding.
/// Measured in `bench/analytics` (1M fact rows): probes of 50 rows took 0.2 ms, ~4 us a row,
/// and joins through them lost to a scan of the whole table (charged ~0.0225 a row) from
/// about 25,000 rows found, so a row found costs about 40 rows scanned.
const SECONDARY_ROW_COST: f64 = 1.0;
/// Values assumed in an array parameter (`= ANY($1)`) whose length planning cannot see.
const ARRAY_VALUES: f64 = 10.0;

/// The index a lookup path probes, from its `fdw_private` (`None`: a lake scan's path).
pub unsafe fn path_index(private: *mut pg_sys::List) -> Option<Index> {
    crate::fdw::from_private_list(private)
}

/// Adds the lookup paths of `baserel` over its cache `shape`: for each index whose columns
/// the restriction quals fix, an unparameterized path; for each set of outer relations whose
/// join clauses (with the restriction quals) fix them, a path parameterized by those
/// relations. `used` are the fields the query reads (`None`: all).
pub unsafe fn add_paths(root: *mut pg_sys::PlannerInfo, baserel: *mut pg_sys::RelOptInfo, shape: &CacheShape, fields: &FieldNames, used: Option<&[String]>, types: &Schema) {
    let cached = |name: &String| shape.columns.contains(name);
    let covered = match used {
        Some(used) => used.iter().all(cached),
        None => fields.values().all(cached),
    };
    if !covered || pushdown::wants_row_positions(baserel) {
        return;
    }
    let relid = (*baserel).relid;
    let restriction: Vec<KeyClause> = pushdown::list_items::<pg_sys::RestrictInfo>((*baserel).baserestrictinfo)
        .into_iter()
        .filter_map(|info| key_clause(root, (*info).clause as *mut pg_sys::Node, relid, fields, types))
        .collect();
    // Join clauses with the relations they need: from equivalence classes (`o.x = c.id`),
    // and the others that may be evaluated at this scan.
    let mut joins: Vec<(KeyClause, *mut pg_sys::Bitmapset)> = Vec::new();
    let mut add_join = |info: *mut pg_sys::RestrictInfo| {
        if let Some(clause) = key_clause(root, (*info).clause as *mut pg_sys::Node, relid, fields, types) {
            let outer = pg_sys::bms_union((*info).clause_relids, (*baserel).lateral_relids);
            let outer = pg_sys::bms_del_member(outer, relid as i32);
            if !pg_sys::bms_is_empty(outer) {
                joins.push((clause, outer));
            }
        }
    };
    for (attno, field) in fields {
        if !shape.indexes().iter().any(|(_, columns)| columns.contains(field)) {
            continue;
        }
        let mut attno = *attno;
        let generated = pg_sys::generate_implied_equalities_for_column(
            root,
            baserel,
            Some(member_is_column),
            &mut attno as *mut i16 as *mut c_void,
            (*baserel).lateral_referencers,
        );
        for info in pushdown::list_items::<pg_sys::RestrictInfo>(generated) {
            add_join(info);
        }
    }
    for info in pushdown::list_items::<pg_sys::RestrictInfo>((*baserel).joininfo) {
        if pg_sys::join_clause_is_movable_to(info, baserel) {
            add_join(info);
        }
    }
    let mut outer_sets: Vec<*mut pg_sys::Bitmapset> = vec![std::ptr::null_mut()];
    for (_, outer) in &joins {
        if !outer_sets.iter().any(|s| pg_sys::bms_equal(*s, *outer)) {
            outer_sets.push(*outer);
        }
    }
    let tuples = (*baserel).tuples.max((*baserel).rows).max(1.0);
    for (index, columns) in shape.indexes() {
        for &available in &outer_sets {
            // Per column: a restriction qual (a constant or parameter), else a join clause
            // of relations in `available`.
            let mut required: *mut pg_sys::Bitmapset = std::ptr::null_mut();
            let mut probes = 1.0;
            let mut complete = true;
            for column in columns {
                let chosen = restriction.iter().find(|c| &c.field == column && !c.array).map(|c| (c, None)).or_else(|| {
                    joins
                        .iter()
                        .find(|(c, outer)| &c.field == column && !available.is_null() && pg_sys::bms_is_subset(*outer, available))
                        .map(|(c, outer)| (c, Some(*outer)))
                        .or_else(|| restriction.iter().find(|c| &c.field == column).map(|c| (c, None)))
                });
                let Some((clause, outer)) = chosen else {
                    complete = false;
                    break;
                };
                if let Some(outer) = outer {
                    required = pg_sys::bms_union(required, outer);
                }
                if clause.array {
                    probes *= array_length(clause.value).unwrap_or(ARRAY_VALUES);
                }
            }
            // A set of outer relations is worth a path only if its clauses are used.
            if !complete || (!available.is_null() && !pg_sys::bms_equal(required, available)) {
                continue;
            }
            let rows = match index {
                Index::RecordKey => probes,
                Index::Secondary(_) if required.is_null() => {
                    let restrictions = (*baserel).baserestrictinfo;
                    (tuples * pg_sys::clauselist_selectivity(root, restrictions, 0, pg_sys::JoinType::JOIN_INNER, std::ptr::null_mut())).max(1.0)
                }
                Index::Secondary(_) => {
                    let info = pg_sys::get_baserel_parampathinfo(root, baserel, required);
                    (*info).ppi_rows.max(1.0)
                }
            };
            let startup = 0.0;
            let per_row = match index {
                Index::RecordKey => pg_sys::cpu_tuple_cost,
                Index::Secondary(_) => SECONDARY_ROW_COST,
            };
            let total = startup + probes * PROBE_COST + rows * per_row;
            add_foreign_path(root, baserel, rows, (startup, total), required, crate::fdw::private_list(&index));
        }
    }
}

/// Adds a foreign scan path of `baserel` returning `rows` at `costs` (startup, total),
/// parameterized by the relations `required` (none: null), with `private` for planning.
pub unsafe fn add_foreign_path(
    root: *mut pg_sys::PlannerInfo,
    baserel: *mut pg_sys::RelOptInfo,
    rows: f64,
    costs: (f64, f64),
    required: *mut pg_sys::Bitmapset,
    private: *mut pg_sys::List,
) {
    let path = pg_sys::create_foreignscan_path(
        root,
        baserel,
        std::ptr::null_mut(),
        rows,
        costs.0,
        costs.1,
        std::ptr::null_mut(),
        required,
        std::ptr::null_mut(),
        private,
    );
    // A lookup never runs inside a parallel worker; a scan of the lake may, at the leader's
    // read state (see crate::fdw::parallel).
    (*path).path.parallel_safe = (*baserel).consider_parallel && private.is_null();
    pg_sys::add_path(baserel, path as *mut pg_sys::Path);
}

/// The number of elements of a constant array.
unsafe fn array_length(node: *mut pg_sys::Node) -> Option<f64> {
    let node = pushdown::strip(node);
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_Const || (*(node as *mut pg_sys::Const)).constisnull {
        return None;
    }
    Some((pushdown::array_elements((*(node as *mut pg_sys::Const)).constvalue).1.len() as f64).max(1.0))
}

/// The plan of a lookup path on `index` over `scan_clauses`: the value expressions (for
/// `fdw_exprs`) and what to probe; `None` if the clauses no longer fix the index's columns
/// (the lake answers then).
pub unsafe fn plan(
    root: *mut pg_sys::PlannerInfo,
    baserel: *mut pg_sys::RelOptInfo,
    index: Index,
    shape: &CacheShape,
    scan_clauses: *mut pg_sys::List,
    fields: &FieldNames,
    types: &Schema,
) -> Option<(LookupPlan, *mut pg_sys::List)> {
    let columns = shape.indexes().into_iter().find(|(i, _)| *i == index)?.1.to_vec();
    let relid = (*baserel).relid;
    let clauses: Vec<KeyClause> = pushdown::list_items::<pg_sys::RestrictInfo>(scan_clauses)
        .into_iter()
        .filter_map(|info| key_clause(root, (*info).clause as *mut pg_sys::Node, relid, fields, types))
        .collect();
    let mut exprs: *mut pg_sys::List = std::ptr::null_mut();
    let mut arrays = Vec::new();
    let mut shown = Vec::new();
    for column in &columns {
        // One value beats a list of them.
        let clause = clauses.iter().find(|c| &c.field == column && !c.array).or_else(|| clauses.iter().find(|c| &c.field == column))?;
        exprs = pg_sys::lappend(exprs, pg_sys::copyObjectImpl(clause.value as *const c_void));
        arrays.push(clause.array);
        let text = describe(root, clause.value);
        shown.push(if clause.array { format!("ANY ({text})") } else { text });
    }
    Some((LookupPlan { index, columns, arrays, shown }, exprs))
}

/// An expression as EXPLAIN shows a lookup's value: a column as `alias.column`, a parameter
/// as `$n`, a constant as its text.
unsafe fn describe(root: *mut pg_sys::PlannerInfo, node: *mut pg_sys::Node) -> String {
    let node = pushdown::strip(node);
    if node.is_null() {
        return "?".into();
    }
    match (*node).type_ {
        pg_sys::NodeTag::T_Var => {
            let var = node as *mut pg_sys::Var;
            let mut level = root;
            for _ in 0..(*var).varlevelsup {
                if (*level).parent_root.is_null() {
                    return "(outer column)".into();
                }
                level = (*level).parent_root;
            }
            if (*var).varno as i32 >= (*level).simple_rel_array_size {
                return "(column)".into();
            }
            let rte = *(*level).simple_rte_array.add((*var).varno as usize);
            let alias = CStr::from_ptr((*(*rte).eref).aliasname).to_string_lossy();
            let column = CStr::from_ptr(pg_sys::get_rte_attribute_name(rte, (*var).varattno)).to_string_lossy();
            format!("{alias}.{column}")
        }
        pg_sys::NodeTag::T_Param => {
            let param = node as *mut pg_sys::Param;
            if (*param).paramkind == pg_sys::ParamKind::PARAM_EXEC {
                // A correlated reference: the outer query's column it stands for.
                for item in pushdown::list_items::<pg_sys::PlannerParamItem>((*root).plan_params) {
                    if (*item).paramId == (*param).paramid && !(*root).parent_root.is_null() {
                        let item = (*item).item;
                        if (*item).type_ == pg_sys::NodeTag::T_Var {
                            return describe((*root).parent_root, item);
                        }
                    }
                }
            }
            format!("${}", (*param).paramid)
        }
        pg_sys::NodeTag::T_Const => {
            let constant = node as *mut pg_sys::Const;
            if (*constant).constisnull {
                return "NULL".into();
            }
            let (mut output, mut varlena) = (pg_sys::InvalidOid, false);
            pg_sys::getTypeOutputInfo((*constant).consttype, &mut output, &mut varlena);
            let text = CStr::from_ptr(pg_sys::OidOutputFunctionCall(output, (*constant).constvalue)).to_string_lossy().into_owned();
            format!("'{}'", text.replace('\'', "''"))
        }
        _ => "(expression)".into(),
    }
}
