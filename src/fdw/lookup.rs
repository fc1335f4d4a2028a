//! Lookup scans: a scan of a Hudi foreign table whose quals fix every column of one of its
//! lookup cache's indexes (`c.id = o.customer_id`, also through equivalence classes;
//! `id = 42`, `id = $1`, `id IN (...)`, `id = ANY($1)`) finds its rows in the cache
//! ([`engine::lookup`]) instead of the lake. For joins the planner gets a parameterized path
//! (postgres_fdw's way: `required_outer`, the outer values as `fdw_exprs`, evaluated again at
//! every rescan), so that it can choose a nested loop with point probes. PostgreSQL rechecks
//! every qual on the rows found, the probed ones too.
//!
//! A backend keeps each cache open as a RocksDB secondary instance and catches up with the
//! worker once per statement, at executor start, so that one statement sees one applied
//! commit across every index; a new generation is opened when the worker published one. A
//! plan whose cache is gone by execution reads the lake instead (the rechecked quals keep its
//! answer the same).
//!
//! Freshness: after this session committed to the table, its lookups wait (a bounded while)
//! for the cache to hold that commit — it reads its writes. A table with `lookup_max_lag`
//! whose cache misses a commit older than that waits for the cache too (`lookup_on_stale
//! 'wait'`, the default), fails (`'error'`), or reads the lake (`'scan'`). A wait that runs out
//! reads the lake.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::path::PathBuf;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};
use engine::lookup::{CacheGenerations, Index, LookupCache};
use pgrx::pg_sys;
use serde::{Deserialize, Serialize};

use crate::datum::{PgKind, RowBuffer};
use crate::error::OrReport;
use crate::fdw::pushdown::{self, FieldNames};

/// What planning needs to know of a table's cache.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CacheShape {
    /// The record key fields, when probes by their values work.
    record_key: Option<Vec<String>>,
    /// Each secondary index's columns, by number.
    secondary: Vec<Vec<String>>,
    /// The cached columns.
    columns: Vec<String>,
}

impl CacheShape {
    fn indexes(&self) -> Vec<(Index, &[String])> {
        let mut out: Vec<(Index, &[String])> = Vec::new();
        if let Some(fields) = &self.record_key {
            out.push((Index::RecordKey, fields));
        }
        out.extend(self.secondary.iter().enumerate().map(|(i, c)| (Index::Secondary(i), c.as_slice())));
        out
    }
}

/// What a lookup scan probes, carried in its plan: one value expression per index column in
/// `fdw_exprs`, in the index's column order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LookupPlan {
    pub index: Index,
    /// The index's columns.
    pub columns: Vec<String>,
    /// Per column: whether its expression gives an array of values (`IN`, `= ANY`).
    pub arrays: Vec<bool>,
    /// Per column: its expression as EXPLAIN shows it.
    pub shown: Vec<String>,
}

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
    /// The completion time of this session's latest commit to each table.
    static COMMITTED: RefCell<HashMap<u32, String>> = RefCell::new(HashMap::new());
}

/// How long a lookup waits for its cache to take in a commit before it reads the lake.
const FRESHNESS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Records that this session's commit to `relid` completed at `completion`: its later
/// lookups of the table see it.
pub fn committed(relid: pg_sys::Oid, completion: &str) {
    COMMITTED.with(|c| {
        let mut c = c.borrow_mut();
        let latest = c.entry(relid.to_u32()).or_default();
        if latest.as_str() < completion {
            *latest = completion.to_owned();
        }
    });
}

/// The commit (a completion time) that `relid`'s open cache at `position` must hold for this
/// lookup: this session's latest, and under `lookup_max_lag` the table's latest when the
/// cache misses one older than that. `Err(())`: read the lake instead.
unsafe fn freshness_target(relid: pg_sys::Oid, position: &str) -> Result<Option<String>, ()> {
    let own = COMMITTED.with(|c| c.borrow().get(&relid.to_u32()).cloned()).filter(|c| c.as_str() > position);
    let options = crate::fdw::table::options_of((*pg_sys::GetForeignTable(relid)).options);
    let Some(max_lag) = options.get("lookup_max_lag") else { return Ok(own) };
    let reader = crate::fdw::table::ForeignHudiTable::of_relation(relid).open_reader();
    let missing: Vec<String> = reader
        .timeline()
        .completed_writes()
        .filter_map(|i| i.completion.clone())
        .filter(|c| c.as_str() > position)
        .collect();
    let (Some(oldest), Some(latest)) = (missing.iter().min(), missing.iter().max()) else { return Ok(own) };
    let age_ms = engine::write::time::parse_instant(oldest).map_or(0, |t| now_ms() - t);
    if (age_ms as f64) <= interval_ms(max_lag) {
        return Ok(own);
    }
    match options.get("lookup_on_stale").map_or("wait", String::as_str) {
        "scan" => Err(()),
        "error" => crate::error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "the lookup cache of \"{}\" misses {} commits, the oldest from {:.1} s ago, more than lookup_max_lag ({max_lag})",
                crate::fdw::table::relation_name(relid),
                missing.len(),
                age_ms as f64 / 1000.0
            ),
            Some("Wait for the worker's refresh, call hudi.refresh_lookup_cache, or set lookup_on_stale to 'wait' or 'scan'.".into()),
        ),
        _ => Ok(Some(own.map_or(latest.clone(), |own| own.max(latest.clone())))),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// An interval option in milliseconds, as PostgreSQL reads it.
fn interval_ms(value: &str) -> f64 {
    let args: Vec<pgrx::datum::DatumWithOid> = vec![value.into()];
    pgrx::Spi::get_one_with_args::<f64>("SELECT pg_catalog.date_part('epoch', $1::pg_catalog.interval)::float8 * 1000", &args)
        .ok()
        .flatten()
        .unwrap_or(f64::INFINITY)
}

/// Waits, a bounded while, for `relid`'s open cache to hold the commit completed at
/// `target`: asks the worker for a refresh and catches up until then. Whether it got there.
fn wait_for(relid: pg_sys::Oid, target: &str, table_schema: &mut dyn FnMut() -> SchemaRef) -> bool {
    // SAFETY: plain reads of backend globals.
    crate::worker::wake::request_cache_refresh(unsafe { pg_sys::MyDatabaseId });
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
    let dir = crate::api::lookup::cache_root(relid).join("readers").join(pid.to_string());
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
fn refresh_open(relid: pg_sys::Oid, catch_up: bool, table_schema: &mut dyn FnMut() -> SchemaRef) -> bool {
    let generations = CacheGenerations::new(&crate::api::lookup::cache_root(relid));
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
fn with_open<R>(relid: pg_sys::Oid, f: impl FnOnce(&LookupCache) -> R) -> Option<R> {
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
    let (column, value, array) = match (*clause).type_ {
        pg_sys::NodeTag::T_OpExpr => {
            let expr = clause as *mut pg_sys::OpExpr;
            let args: Vec<*mut pg_sys::Node> = pushdown::list_items((*expr).args);
            let [left, right] = args.as_slice() else { return None };
            if pushdown::exact_comparison((*expr).opno, (*expr).inputcollid)? != engine::read::filter::Op::Eq {
                return None;
            }
            match (pushdown::column_of(*left, relid, fields), pushdown::column_of(*right, relid, fields)) {
                (Some(column), None) => (column, *right, false),
                (None, Some(column)) => (column, *left, false),
                _ => return None,
            }
        }
        pg_sys::NodeTag::T_ScalarArrayOpExpr => {
            let expr = clause as *mut pg_sys::ScalarArrayOpExpr;
            let args: Vec<*mut pg_sys::Node> = pushdown::list_items((*expr).args);
            let [left, right] = args.as_slice() else { return None };
            if !(*expr).useOr || pushdown::exact_comparison((*expr).opno, (*expr).inputcollid)? != engine::read::filter::Op::Eq {
                return None;
            }
            (pushdown::column_of(*left, relid, fields)?, *right, true)
        }
        _ => return None,
    };
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
/// Values assumed in an array parameter (`= ANY($1)`) whose length planning cannot see.
const ARRAY_VALUES: f64 = 10.0;

unsafe fn json_node(value: &impl Serialize) -> *mut pg_sys::List {
    let json = std::ffi::CString::new(serde_json::to_string(value).unwrap_or_default()).unwrap_or_default();
    let node = pg_sys::makeString(pg_sys::pstrdup(json.as_ptr()));
    pg_sys::lappend(std::ptr::null_mut(), node as *mut c_void)
}

/// The index a lookup path probes, from its `fdw_private` (`None`: a lake scan's path).
pub unsafe fn path_index(private: *mut pg_sys::List) -> Option<Index> {
    if private.is_null() || (*private).length < 1 {
        return None;
    }
    let node = (*(*private).elements).ptr_value as *mut pg_sys::String;
    serde_json::from_str(&CStr::from_ptr((*node).sval).to_string_lossy()).ok()
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
            let total = startup + probes * PROBE_COST + rows * pg_sys::cpu_tuple_cost;
            let path = pg_sys::create_foreignscan_path(
                root,
                baserel,
                std::ptr::null_mut(),
                rows,
                startup,
                total,
                std::ptr::null_mut(),
                required,
                std::ptr::null_mut(),
                json_node(&index),
            );
            pg_sys::add_path(baserel, path as *mut pg_sys::Path);
        }
    }
}

/// The number of elements of a constant array.
unsafe fn array_length(node: *mut pg_sys::Node) -> Option<f64> {
    let node = pushdown::strip(node);
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_Const || (*(node as *mut pg_sys::Const)).constisnull {
        return None;
    }
    Some((array_elements((*(node as *mut pg_sys::Const)).constvalue).len() as f64).max(1.0))
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

/// A lookup scan at execution: evaluates its values and probes the cache, once per (re)scan.
pub struct Probe {
    relid: pg_sys::Oid,
    plan: LookupPlan,
    /// The value expressions' states.
    values: Vec<*mut pg_sys::ExprState>,
    /// Per value: the PostgreSQL kind of its values.
    kinds: Vec<PgKind>,
    /// The index's columns, as cached.
    key_schema: SchemaRef,
    /// The cached columns the query reads (positions in the cache's columns).
    projection: Vec<usize>,
    /// Those columns: what each probe returns.
    pub schema: SchemaRef,
    done: bool,
    /// Probes and rows found, for EXPLAIN ANALYZE.
    pub probes: u64,
    pub found: u64,
}

/// Starts a lookup scan of `plan` for `node`: catches this backend's cache of `relid` up (once
/// per statement) and prepares the values; `None` when there is no cache to read any more.
pub unsafe fn begin(node: *mut pg_sys::ForeignScanState, relid: pg_sys::Oid, plan: &LookupPlan, exprs: *mut pg_sys::List, used: Option<&[String]>) -> Option<Probe> {
    let mut schema = || {
        let table = crate::fdw::table::ForeignHudiTable::of_relation(relid);
        table.open_reader().schema().clone()
    };
    if !refresh_open(relid, true, &mut schema) {
        return None;
    }
    let position = cached_position(relid).unwrap_or_default();
    match freshness_target(relid, &position) {
        Err(()) => return None,
        Ok(Some(target)) if !wait_for(relid, &target, &mut schema) => return None,
        Ok(_) => {}
    }
    let (key_schema, projection, schema) = with_open(relid, |cache| {
        let fields = plan.columns.iter().map(|c| cache.schema().field_with_name(c).cloned().ok()).collect::<Option<Vec<_>>>()?;
        let projection: Vec<usize> = match used {
            Some(used) => used.iter().map(|name| cache.schema().index_of(name).ok()).collect::<Option<Vec<_>>>()?,
            None => (0..cache.schema().fields().len()).collect(),
        };
        let schema = std::sync::Arc::new(cache.schema().project(&projection).ok()?);
        // A generation of other indexes than planned: the lake answers.
        let index_matches = match plan.index {
            Index::RecordKey => cache.record_key_fields() == Some(plan.columns.as_slice()),
            Index::Secondary(n) => cache.secondary_indexes().get(n) == Some(&plan.columns),
        };
        index_matches.then(|| (std::sync::Arc::new(Schema::new(fields)), projection, schema))
    })??;
    let states = pg_sys::ExecInitExprList(exprs, node as *mut pg_sys::PlanState);
    let values: Vec<*mut pg_sys::ExprState> = pushdown::list_items(states);
    let kinds = pushdown::list_items::<pg_sys::Node>(exprs)
        .into_iter()
        .zip(&plan.arrays)
        .map(|(expr, &array)| {
            let mut oid = pg_sys::exprType(expr);
            if array {
                oid = pg_sys::get_element_type(oid);
            }
            PgKind::from_type_oid(oid)
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Probe { relid, plan: plan.clone(), values, kinds, key_schema, projection, schema, done: false, probes: 0, found: 0 })
}

impl Probe {
    /// The rows of this (re)scan: all of them at the first call, then `None`.
    pub unsafe fn next(&mut self, node: *mut pg_sys::ForeignScanState) -> Option<Option<RecordBatch>> {
        if std::mem::replace(&mut self.done, true) {
            return None;
        }
        let context = (*node).ss.ps.ps_ExprContext;
        // Each column's values: one, or an array's elements (NULLs match nothing).
        let mut per_column: Vec<Vec<pg_sys::Datum>> = Vec::with_capacity(self.values.len());
        for (i, state) in self.values.iter().enumerate() {
            let mut is_null = false;
            let datum = pg_sys::ExecEvalExprSwitchContext(*state, context, &mut is_null);
            if is_null {
                return Some(None);
            }
            per_column.push(if self.plan.arrays[i] { array_elements(datum) } else { vec![datum] });
        }
        if let Some(key) = self.single_integer_key(&per_column) {
            return self.probe_keys(&[key]);
        }
        // Every combination of the columns' values, converted to the cached types; a value
        // the column cannot hold (out of its range) matches nothing.
        let mut keys: Vec<RecordBatch> = Vec::new();
        let mut combination = vec![0usize; per_column.len()];
        if per_column.iter().all(|values| !values.is_empty()) {
            loop {
                let row: Vec<Option<(pg_sys::Datum, PgKind)>> =
                    combination.iter().enumerate().map(|(c, &i)| Some((per_column[c][i], self.kinds[c]))).collect();
                let mut buffer = RowBuffer::new(self.key_schema.clone());
                if buffer.push(&row).is_ok() {
                    keys.push(buffer.take());
                }
                // The next combination, odometer-wise.
                let mut c = 0;
                while c < combination.len() {
                    combination[c] += 1;
                    if combination[c] < per_column[c].len() {
                        break;
                    }
                    combination[c] = 0;
                    c += 1;
                }
                if c == combination.len() {
                    break;
                }
            }
        }
        if keys.is_empty() {
            return Some(None);
        }
        let columns: Vec<ArrayRef> = if let [one] = keys.as_slice() {
            one.columns().to_vec()
        } else {
            (0..self.key_schema.fields().len())
            .map(|c| {
                let parts: Vec<&dyn Array> = keys.iter().map(|k| k.column(c).as_ref()).collect();
                arrow::compute::concat(&parts).unwrap_or_else(|e| {
                    crate::error::raise(pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("cannot gather lookup keys: {e}"), None)
                })
            })
            .collect()
        };
        self.probe_keys(&columns)
    }

    /// The common probe — one integer value for a `bigint` key — as its array, built without
    /// the general conversion.
    fn single_integer_key(&self, per_column: &[Vec<pg_sys::Datum>]) -> Option<ArrayRef> {
        let ([values], [kind]) = (per_column, self.kinds.as_slice()) else { return None };
        let [value] = values.as_slice() else { return None };
        if self.key_schema.field(0).data_type() != &arrow::datatypes::DataType::Int64 {
            return None;
        }
        // SAFETY: the datum is of the expression's type, `kind`.
        let value = unsafe {
            use pgrx::FromDatum;
            match kind {
                PgKind::Int2 => i64::from(i16::from_datum(*value, false)?),
                PgKind::Int4 => i64::from(i32::from_datum(*value, false)?),
                PgKind::Int8 => i64::from_datum(*value, false)?,
                _ => return None,
            }
        };
        Some(std::sync::Arc::new(arrow::array::Int64Array::from(vec![value])))
    }

    /// Probes the cache for the keys `columns` (the index's columns).
    fn probe_keys(&mut self, columns: &[ArrayRef]) -> Option<Option<RecordBatch>> {
        self.probes += columns.first().map_or(0, |c| c.len()) as u64;
        let rows = with_open(self.relid, |cache| cache.probe(self.plan.index, columns, &self.projection))?.or_report();
        self.found += rows.num_rows() as u64;
        Some((rows.num_rows() > 0).then_some(rows))
    }

    /// Probes again at the next call, with the values then.
    pub fn restart(&mut self) {
        self.done = false;
    }
}

/// The non-NULL elements of an array datum.
unsafe fn array_elements(datum: pg_sys::Datum) -> Vec<pg_sys::Datum> {
    let array = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) as *mut pg_sys::ArrayType;
    let element_type = (*array).elemtype;
    let (mut len, mut by_value, mut align) = (0i16, false, 0 as std::ffi::c_char);
    pg_sys::get_typlenbyvalalign(element_type, &mut len, &mut by_value, &mut align);
    let (mut items, mut nulls, mut count) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
    pg_sys::deconstruct_array(array, element_type, len.into(), by_value, align, &mut items, &mut nulls, &mut count);
    (0..count as usize).filter(|&i| !*nulls.add(i)).map(|i| *items.add(i)).collect()
}

/// How far `relid`'s open cache is behind the table `reader` shows: completed commits since
/// its instant, and the time between their completions.
pub fn lag(reader: &engine::read::TableReader, position: &str) -> (usize, f64) {
    let later: Vec<&str> = reader
        .timeline()
        .completed_writes()
        .filter_map(|i| i.completion.as_deref())
        .filter(|c| *c > position)
        .collect();
    let latest = later.iter().max().and_then(|c| engine::write::time::parse_instant(c));
    let cached = engine::write::time::parse_instant(position);
    let seconds = match (latest, cached) {
        (Some(latest), Some(cached)) => (latest - cached).max(0) as f64 / 1000.0,
        _ => 0.0,
    };
    (later.len(), seconds)
}
