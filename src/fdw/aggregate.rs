//! Aggregates pushed into the engine (`GetForeignUpperPaths`, as postgres_fdw pushes them to
//! a remote server): a query over one Hudi table whose aggregates, `GROUP BY` columns and
//! `WHERE` quals the engine computes exactly as PostgreSQL does becomes one foreign scan that
//! returns the groups (`scanrelid` 0, its output described by `fdw_scan_tlist`). `HAVING` and
//! expressions over the aggregates stay with PostgreSQL, on the groups. Anything else plans as
//! a scan under PostgreSQL's own aggregation.

use std::ffi::CStr;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Decimal256Type, Int64Type};
use arrow::record_batch::RecordBatch;
use engine::read::aggregate::{Aggregate, AggregateQuery, AggregateStats, Combine, Condition, Input, ParameterAnswers, Reading};
use engine::read::{ScanOptions, SliceQuery};
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use crate::datum::{ColumnReader, ColumnType};
use crate::error::{raise, OrReport};
use crate::fdw::conditions::{bytewise, RuntimeValues, Translator};
use crate::fdw::pushdown::list_items;
use crate::fdw::scan::{self, ReadSpec};
use crate::fdw::table::ForeignHudiTable;
use crate::runtime::block_on;

/// What planning pushed, in the plan's `fdw_private`; the operands of its parameters are the
/// plan's `fdw_exprs`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct AggregatePlan {
    relid: u32,
    query: AggregateQuery,
    /// The base relation's pruning filter.
    options: ScanOptions,
    /// The planner's estimate of the groups per input row (0 without `GROUP BY`): where the
    /// rows are aggregated ([`Combine::for_estimate`]).
    groups_per_row: f64,
}

impl Translator<'_> {
    /// A built-in aggregate of a column, computed as PostgreSQL computes it.
    unsafe fn aggregate(&mut self, aggref: *mut pg_sys::Aggref) -> Option<Aggregate> {
        let a = &*aggref;
        let plain = a.aggkind == b'n' as std::ffi::c_char
            && a.agglevelsup == 0
            && a.aggorder.is_null()
            && a.aggfilter.is_null()
            && !a.aggvariadic
            && a.aggsplit == pg_sys::AggSplit::AGGSPLIT_SIMPLE;
        if !plain || a.aggfnoid.to_u32() >= pg_sys::FirstGenbkiObjectId || pg_sys::get_func_namespace(a.aggfnoid) != pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE) {
            return None;
        }
        let name = CStr::from_ptr(pg_sys::get_func_name(a.aggfnoid)).to_str().ok()?;
        // count(DISTINCT column) only: its values compared by the type's equality (the
        // engine's, for text only where the collation's equality is the bytes').
        let distinct = !a.aggdistinct.is_null();
        if distinct {
            let [argument] = list_items::<pg_sys::TargetEntry>(a.args)[..] else { return None };
            let column = self.column((*argument).expr as *mut pg_sys::Node)?;
            let comparable = column.reading != Reading::Text || bytewise(a.inputcollid);
            return (name == "count" && comparable && a.aggtype == pg_sys::INT8OID).then_some(Aggregate::CountDistinct(Input::Column(column)));
        }
        if a.aggstar {
            return (name == "count").then_some(Aggregate::CountRows);
        }
        let [argument] = list_items::<pg_sys::TargetEntry>(a.args)[..] else { return None };
        let argument = (*argument).expr as *mut pg_sys::Node;
        // A column, or for sum and avg a numeric, integer or double expression of columns, for
        // min and max one of those types too (the engine returns a numeric one as the decimal
        // it computes and refuses those whose values have a display scale each).
        let extreme_of = matches!(pg_sys::exprType(argument), pg_sys::NUMERICOID | pg_sys::INT2OID | pg_sys::INT4OID | pg_sys::INT8OID | pg_sys::FLOAT8OID);
        let input = match self.column(argument) {
            Some(column) => Input::Column(column),
            None if matches!(name, "sum" | "avg") || matches!(name, "min" | "max") && extreme_of => {
                Input::Expression(self.expression(argument)?)
            }
            None => return None,
        };
        let (reading, result) = (input.reading(), a.aggtype);
        use Reading as R;
        let aggregate = match name {
            "count" => Aggregate::Count(input),
            "sum" | "avg" if !matches!(reading, R::Int | R::Float4 | R::Float8 | R::Decimal) => return None,
            "sum" => Aggregate::Sum(input),
            "avg" => Aggregate::Avg(input),
            "min" | "max" if reading == R::Bool || reading == R::Text && !bytewise(a.inputcollid) => return None,
            "min" => Aggregate::Min(input),
            "max" => Aggregate::Max(input),
            "bool_and" | "every" if reading == R::Bool => Aggregate::BoolAnd(input),
            "bool_or" if reading == R::Bool => Aggregate::BoolOr(input),
            _ => return None,
        };
        // The result types this module converts to (see `Output`).
        let expected = match &aggregate {
            Aggregate::CountRows | Aggregate::Count(_) | Aggregate::CountDistinct(_) => result == pg_sys::INT8OID,
            Aggregate::Sum(_) if matches!(reading, R::Int | R::Decimal) => matches!(result, pg_sys::INT8OID | pg_sys::NUMERICOID),
            Aggregate::Sum(_) => result == if reading == R::Float4 { pg_sys::FLOAT4OID } else { pg_sys::FLOAT8OID },
            Aggregate::Avg(_) if aggregate.is_exact_average() => result == pg_sys::NUMERICOID,
            Aggregate::Avg(_) => result == pg_sys::FLOAT8OID,
            Aggregate::BoolAnd(_) | Aggregate::BoolOr(_) => result == pg_sys::BOOLOID,
            Aggregate::Min(_) | Aggregate::Max(_) => ColumnType::from_type_oid(result).is_some(),
        };
        expected.then_some(aggregate)
    }
}

/// `GetForeignUpperPaths`: adds a pushed-aggregate path for `GROUP BY`/aggregate queries
/// over one Hudi table when every part of them can be pushed.
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn get_foreign_upper_paths(
    root: *mut pg_sys::PlannerInfo,
    stage: pg_sys::UpperRelationKind::Type,
    input_rel: *mut pg_sys::RelOptInfo,
    output_rel: *mut pg_sys::RelOptInfo,
    extra: *mut std::ffi::c_void,
) {
    if stage != pg_sys::UpperRelationKind::UPPERREL_GROUP_AGG
        || !crate::guc::AGGREGATE_PUSHDOWN.get()
        || (*input_rel).reloptkind != pg_sys::RelOptKind::RELOPT_BASEREL
        || !(*output_rel).fdw_private.is_null()
        || extra.is_null()
    {
        return;
    }
    let extra = &*(extra as *mut pg_sys::GroupPathExtraData);
    let parse = (*root).parse;
    if extra.patype != pg_sys::PartitionwiseAggregateType::PARTITIONWISE_AGGREGATE_NONE || !(*parse).groupingSets.is_null() {
        return;
    }
    let Some(info) = scan::PlanInfo::of_rel(input_rel) else { return };
    if info.lookup.is_some() || info.options.row_positions {
        return;
    }
    let rte = *(*root).simple_rte_array.add((*input_rel).relid as usize);
    let relid = (*rte).relid;
    let table = ForeignHudiTable::of_relation(relid);
    let spec = scan::read_spec(&table);
    let reader = scan::open_for(&table, &spec);
    let schema = spec.schema(&reader).clone();
    let mut translator = Translator { relid: (*input_rel).relid, fields: &info.fields, schema: &schema, params: Vec::new() };
    // Every qual: the engine decides which rows it aggregates.
    let mut conditions = Vec::new();
    for restriction in list_items::<pg_sys::RestrictInfo>((*input_rel).baserestrictinfo) {
        let Some(condition) = translator.condition((*restriction).clause as *mut pg_sys::Node) else { return };
        conditions.push(condition);
    }
    let condition = Condition::all(conditions);
    // The grouping target: group columns, and expressions of aggregates.
    let target = (*output_rel).reltarget;
    let mut keys: Vec<*mut pg_sys::Node> = Vec::new();
    let mut group_by = Vec::new();
    let mut aggrefs: Vec<*mut pg_sys::Node> = Vec::new();
    let mut aggregates = Vec::new();
    let exprs = list_items::<pg_sys::Node>((*target).exprs);
    for (i, &expr) in exprs.iter().enumerate() {
        let sortgroupref = if (*target).sortgrouprefs.is_null() { 0 } else { *(*target).sortgrouprefs.add(i) };
        if sortgroupref != 0 && !pg_sys::get_sortgroupref_clause_noerr(sortgroupref, (*parse).groupClause).is_null() {
            let Some(column) = translator.column(expr) else { return };
            if !keys.iter().any(|&k| pg_sys::equal(k.cast(), expr.cast())) {
                keys.push(expr);
                group_by.push(column);
            }
        }
    }
    let mut add_aggregates = |expr: *mut pg_sys::Node, keys: &[*mut pg_sys::Node]| -> bool {
        for item in list_items::<pg_sys::Node>(pg_sys::pull_var_clause(expr, (pg_sys::PVC_INCLUDE_AGGREGATES | pg_sys::PVC_INCLUDE_WINDOWFUNCS | pg_sys::PVC_INCLUDE_PLACEHOLDERS) as i32)) {
            if (*item).type_ != pg_sys::NodeTag::T_Aggref {
                // A column outside aggregates must be a group column (anything else found
                // here, a placeholder or window function, is not pushed).
                if !keys.iter().any(|&k| pg_sys::equal(k.cast(), item.cast())) {
                    return false;
                }
                continue;
            }
            if aggrefs.iter().any(|&a| pg_sys::equal(a.cast(), item.cast())) {
                continue;
            }
            let Some(aggregate) = translator.aggregate(item as *mut pg_sys::Aggref) else { return false };
            aggrefs.push(item);
            aggregates.push(aggregate);
        }
        true
    };
    for &expr in &exprs {
        if keys.iter().any(|&k| pg_sys::equal(k.cast(), expr.cast())) {
            continue;
        }
        if !add_aggregates(expr, &keys) {
            return;
        }
    }
    if !extra.havingQual.is_null() && !add_aggregates(extra.havingQual, &keys) {
        return;
    }
    let params = std::mem::take(&mut translator.params);
    let query = AggregateQuery { group_by, aggregates, condition };
    if query.check(&schema).is_err() {
        return;
    }
    // The scan's output: group columns, then aggregates, as the engine returns them.
    let mut scan_tlist: *mut pg_sys::List = std::ptr::null_mut();
    for (i, &expr) in keys.iter().chain(&aggrefs).enumerate() {
        let entry = pg_sys::makeTargetEntry(expr.cast(), (i + 1) as i16, std::ptr::null_mut(), false);
        scan_tlist = pg_sys::lappend(scan_tlist, entry.cast());
    }
    let mut param_list: *mut pg_sys::List = std::ptr::null_mut();
    for param in params {
        param_list = pg_sys::lappend(param_list, param.cast());
    }
    let input_rows = (*input_rel).rows;
    let rows = if keys.is_empty() {
        1.0
    } else {
        let mut group_exprs: *mut pg_sys::List = std::ptr::null_mut();
        for &key in &keys {
            group_exprs = pg_sys::lappend(group_exprs, key.cast());
        }
        pg_sys::estimate_num_groups(root, group_exprs, input_rows, std::ptr::null_mut(), std::ptr::null_mut())
    };
    // Cheaper than the scan of the lake under PostgreSQL's aggregation: no row crosses the
    // executor. Not than a lookup's: the pushed aggregate reads the lake, and PostgreSQL
    // aggregating the few rows a probe of the cache finds is cheaper.
    let scan_cost = lake_scan_cost(input_rel);
    let cost = 100.0 + (scan_cost - 100.0).max(0.0) * 0.2 + rows * pg_sys::cpu_tuple_cost;
    let groups_per_row = if keys.is_empty() || input_rows <= 0.0 { 0.0 } else { rows / input_rows };
    let plan = AggregatePlan { relid: relid.to_u32(), query, options: info.options.clone(), groups_per_row };
    let mut private = crate::fdw::private_list(&plan);
    private = pg_sys::lappend(private, scan_tlist.cast());
    private = pg_sys::lappend(private, param_list.cast());
    let path = pg_sys::create_foreign_upper_path(root, output_rel, target, rows, cost, cost, std::ptr::null_mut(), std::ptr::null_mut(), private);
    pg_sys::add_path(output_rel, path as *mut pg_sys::Path);
    // Marks the relation as handled, for a second call.
    (*output_rel).fdw_private = private.cast();
}

/// The total cost of the cheapest unparameterized path of `rel` that reads the lake (its
/// scan, or a Gather of its parallel scan), not its lookup cache.
unsafe fn lake_scan_cost(rel: *mut pg_sys::RelOptInfo) -> f64 {
    let reads_lake = |path: *mut pg_sys::Path| {
        (*path).type_ != pg_sys::NodeTag::T_ForeignPath || crate::fdw::lookup::path_index((*(path as *mut pg_sys::ForeignPath)).fdw_private).is_none()
    };
    list_items::<pg_sys::Path>((*rel).pathlist)
        .into_iter()
        .filter(|&path| (*path).param_info.is_null() && reads_lake(path))
        .map(|path| (*path).total_cost)
        .reduce(f64::min)
        .unwrap_or((*(*rel).cheapest_total_path).total_cost)
}

/// `GetForeignPlan` of a pushed-aggregate path: the scan's output is the group columns and
/// aggregates; `HAVING` is checked by the scan on the groups.
pub unsafe fn plan(root: *mut pg_sys::PlannerInfo, best_path: *mut pg_sys::ForeignPath, tlist: *mut pg_sys::List) -> *mut pg_sys::ForeignScan {
    let private = (*best_path).fdw_private;
    let items = list_items::<pg_sys::List>(private);
    let (scan_tlist, params) = (items[1], items[2]);
    let mut quals: *mut pg_sys::List = std::ptr::null_mut();
    let having = (*root).parse.as_ref().map_or(std::ptr::null_mut(), |p| p.havingQual);
    if !having.is_null() {
        // Preprocessed into an implicit AND list.
        quals = if (*having).type_ == pg_sys::NodeTag::T_List { having as *mut pg_sys::List } else { pg_sys::lappend(quals, having.cast()) };
    }
    let own = pg_sys::lappend(std::ptr::null_mut(), (*private).elements.read().ptr_value);
    pg_sys::make_foreignscan(tlist, quals, 0, params, own, scan_tlist, std::ptr::null_mut(), std::ptr::null_mut())
}

/// Whether the scan of `node` is a pushed aggregate.
pub unsafe fn is_pushed(node: *mut pg_sys::ForeignScanState) -> bool {
    (*((*node).ss.ps.plan as *mut pg_sys::ForeignScan)).scan.scanrelid == 0
}

/// Executor state of a pushed aggregate.
struct AggregateScan {
    plan: AggregatePlan,
    params: RuntimeValues,
    /// The groups, once computed (at the first row asked for).
    result: Option<RecordBatch>,
    /// Readers of `result`'s columns, one per output column.
    outputs: Vec<Output>,
    next_row: usize,
    stats: Option<AggregateStats>,
    /// Runs so far (each rescan runs the query again).
    runs: u32,
    /// The answers for every value of the condition's parameter, made at the second run of a
    /// query grouped by it ([`AggregateQuery::grouped_by_parameter`]).
    answers: Option<(usize, ParameterAnswers)>,
}

unsafe fn plan_of(node: *mut pg_sys::ForeignScanState) -> Option<AggregatePlan> {
    crate::fdw::from_private_list((*((*node).ss.ps.plan as *mut pg_sys::ForeignScan)).fdw_private)
}

pub unsafe fn begin(node: *mut pg_sys::ForeignScanState, eflags: i32) {
    if eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as i32 != 0 {
        return;
    }
    let Some(plan) = plan_of(node) else {
        raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "a pushed aggregate without its plan", None)
    };
    let params = RuntimeValues::init(node, (*((*node).ss.ps.plan as *mut pg_sys::ForeignScan)).fdw_exprs);
    let state = AggregateScan { plan, params, result: None, outputs: Vec::new(), next_row: 0, stats: None, runs: 0, answers: None };
    scan::install_state(node, state);
}

impl AggregateScan {
    unsafe fn run(&mut self, node: *mut pg_sys::ForeignScanState) {
        let values = self.params.evaluate(node);
        self.runs += 1;
        if self.runs == 2 {
            // Run again with another value of its parameter, as a correlated subquery is for
            // each outer row: one read of the table answers every value from now on. Not for
            // a record key, whose value the read of one run prunes to one key's rows.
            let grouped = self.plan.query.grouped_by_parameter().filter(|(_, grouped)| !self.is_record_key(&grouped.group_by[0].field));
            if let Some((param, grouped)) = grouped {
                let (result, report) = self.aggregate(&grouped.bind(&values).or_report(), true, 0.0);
                let (empty, _) = self.aggregate(&self.plan.query.bind(&vec![None; values.len()]).or_report(), false, 0.0);
                self.answers = Some((param, ParameterAnswers::new(result, empty).or_report()));
                self.stats = Some(report);
            }
        }
        if let Some((param, answers)) = &self.answers {
            let result = answers.answer(values.get(*param).and_then(Option::as_ref)).or_report();
            self.outputs = outputs(&self.plan.query, &result, (*(*node).ss.ss_ScanTupleSlot).tts_tupleDescriptor);
            self.result = Some(result);
            self.next_row = 0;
            return;
        }
        let query = self.plan.query.bind(&values).or_report();
        let (result, report) = self.aggregate(&query, true, self.plan.groups_per_row);
        self.outputs = outputs(&self.plan.query, &result, (*(*node).ss.ss_ScanTupleSlot).tts_tupleDescriptor);
        self.result = Some(result);
        self.stats = Some(report);
        self.next_row = 0;
    }

    /// Whether `field` is the table's record key (of one field).
    unsafe fn is_record_key(&self, field: &str) -> bool {
        let table = ForeignHudiTable::of_relation(pg_sys::Oid::from(self.plan.relid));
        let reader = scan::open_for(&table, &scan::read_spec(&table));
        reader.config().record_key_fields == [field]
    }

    /// `query` (bound) over the table's slices (or over none, without `read`), expected to
    /// have `groups_per_row` groups per row read; the values of its parameters prune slices,
    /// pages and record keys as constants do.
    unsafe fn aggregate(&self, query: &AggregateQuery, read: bool, groups_per_row: f64) -> (RecordBatch, AggregateStats) {
        let table = ForeignHudiTable::of_relation(pg_sys::Oid::from(self.plan.relid));
        let spec = scan::read_spec(&table);
        let reader = scan::open_for(&table, &spec);
        let mut options = ScanOptions { ignore_record_positions: !crate::guc::USE_RECORD_POSITIONS.get(), ..self.plan.options.clone() };
        if let Some(condition) = &query.condition {
            options.filter.predicates.extend(condition.implied_predicates());
        }
        let (mut slices, stats) = scan::slices_to_read(&reader, &spec, &options);
        if !read {
            slices.clear();
        }
        let slice_query = match spec {
            ReadSpec::Snapshot { bound, .. } => SliceQuery::Snapshot(bound),
            ReadSpec::Incremental { range } => {
                let with_deletes = query.fields().iter().any(|f| f == engine::read::OPERATION_COLUMN);
                SliceQuery::Changes { range, with_deletes }
            }
        };
        let depth = crate::guc::read_ahead_slices();
        let combine = Combine::for_estimate(groups_per_row, slices.len());
        block_on(reader.aggregate(query, slice_query, options, slices, stats, depth, combine)).or_report()
    }
}

/// One output column of the scan, read from the engine's result.
enum Output {
    /// A group column, or an aggregate PostgreSQL's type holds as the engine computed it.
    Value(ColumnReader),
    /// `sum` of integers as `bigint` (an exact sum that may not fit).
    BigintSum(arrow::array::PrimitiveArray<Decimal256Type>),
    /// `avg` of integers or decimals: exact sum and count, divided as `numeric_avg` divides.
    ExactAverage(Box<Output>, arrow::array::PrimitiveArray<Int64Type>),
    /// A `numeric` sum of values of different display scales, as text at its own scale.
    NumericText(arrow::array::StringArray),
}

unsafe fn outputs(query: &AggregateQuery, result: &RecordBatch, tupdesc: pg_sys::TupleDesc) -> Vec<Output> {
    let types: Vec<pg_sys::Oid> = (*tupdesc).attrs.as_slice((*tupdesc).natts as usize).iter().map(|a| a.atttypid).collect();
    let column_type = |oid: pg_sys::Oid| {
        ColumnType::from_type_oid(oid).unwrap_or_else(|| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "a pushed aggregate of an unknown type", None))
    };
    let mut outputs = Vec::new();
    let mut at = 0;
    for &oid in &types[..query.group_by.len()] {
        outputs.push(Output::Value(ColumnReader::new(column_type(oid), result.column(at))));
        at += 1;
    }
    let numeric = |column: &arrow::array::ArrayRef| match column.as_string_opt::<i32>() {
        Some(texts) => Output::NumericText(texts.clone()),
        None => Output::Value(ColumnReader::new(column_type(pg_sys::NUMERICOID), column)),
    };
    for (aggregate, &oid) in query.aggregates.iter().zip(&types[query.group_by.len()..]) {
        let column = result.column(at);
        outputs.push(if aggregate.is_exact_average() {
            at += 1;
            Output::ExactAverage(Box::new(numeric(column)), result.column(at).as_primitive::<Int64Type>().clone())
        } else if oid == pg_sys::NUMERICOID {
            numeric(column)
        } else if matches!(aggregate, Aggregate::Sum(_)) && oid == pg_sys::INT8OID {
            Output::BigintSum(column.as_primitive::<Decimal256Type>().clone())
        } else {
            Output::Value(ColumnReader::new(column_type(oid), column))
        });
        at += 1;
    }
    outputs
}

unsafe fn datum_of(output: &mut Output, row: usize) -> Option<pg_sys::Datum> {
    use pgrx::IntoDatum;
    let unreadable = |why: String| raise(PgSqlErrorCode::ERRCODE_FDW_INVALID_DATA_TYPE, format!("cannot return an aggregate: {why}"), None);
    match output {
        Output::Value(reader) => reader.datum(row).unwrap_or_else(unreadable),
        Output::BigintSum(sums) => {
            if sums.is_null(row) {
                return None;
            }
            let sum = sums.value(row).to_i128().and_then(|s| i64::try_from(s).ok());
            let sum = sum.unwrap_or_else(|| raise(PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE, "bigint out of range", None));
            sum.into_datum()
        }
        Output::ExactAverage(sum, counts) => {
            let count = counts.value(row);
            if count == 0 {
                return None;
            }
            let sum = datum_of(sum, row)?;
            let count = pg_sys::Datum::from(pg_sys::int64_to_numeric(count));
            pgrx::direct_function_call_as_datum(pg_sys::numeric_div, &[Some(sum), Some(count)])
        }
        Output::NumericText(texts) => {
            let text = texts.is_valid(row).then(|| texts.value(row))?;
            match <pgrx::AnyNumeric as std::str::FromStr>::from_str(text) {
                Ok(numeric) => numeric.into_datum(),
                Err(e) => unreadable(format!("invalid numeric {text}: {e}")),
            }
        }
    }
}

pub unsafe fn iterate(node: *mut pg_sys::ForeignScanState) -> *mut pg_sys::TupleTableSlot {
    let slot = (*node).ss.ss_ScanTupleSlot;
    let state = &mut *((*node).fdw_state as *mut AggregateScan);
    if state.result.is_none() {
        state.run(node);
    }
    pg_sys::ExecClearTuple(slot);
    let Some(result) = &state.result else { return slot };
    if state.next_row >= result.num_rows() {
        return slot;
    }
    let row = state.next_row;
    state.next_row += 1;
    let natts = (*(*slot).tts_tupleDescriptor).natts as usize;
    let values = std::slice::from_raw_parts_mut((*slot).tts_values, natts);
    let nulls = std::slice::from_raw_parts_mut((*slot).tts_isnull, natts);
    for (i, output) in state.outputs.iter_mut().enumerate().take(natts) {
        match datum_of(output, row) {
            Some(datum) => (values[i], nulls[i]) = (datum, false),
            None => nulls[i] = true,
        }
    }
    pg_sys::ExecStoreVirtualTuple(slot)
}

pub unsafe fn rescan(node: *mut pg_sys::ForeignScanState) {
    let state = &mut *((*node).fdw_state as *mut AggregateScan);
    // Parameters may have changed: computed again at the next row asked for.
    state.result = None;
}

pub unsafe fn end(node: *mut pg_sys::ForeignScanState) {
    scan::release_state::<AggregateScan>(node.cast());
}

/// EXPLAIN: what was pushed; with VERBOSE, the condition, the table and how many slices
/// statistics answer (planned, or with ANALYZE as it happened).
pub unsafe fn explain(node: *mut pg_sys::ForeignScanState, es: *mut pg_sys::ExplainState) {
    let Some(plan) = plan_of(node) else { return };
    let state = ((*node).fdw_state as *const AggregateScan).as_ref();
    let mut pushed = plan.query.to_string();
    if (*es).verbose {
        let table = ForeignHudiTable::of_relation(pg_sys::Oid::from(plan.relid));
        let spec = scan::read_spec(&table);
        let (from_statistics, slices) = match state.and_then(|s| s.stats) {
            Some(stats) => (stats.from_statistics, stats.scan.slices_kept),
            None => {
                let reader = scan::open_for(&table, &spec);
                let (slices, _) = scan::slices_to_read(&reader, &spec, &plan.options);
                let snapshot = matches!(spec, ReadSpec::Snapshot { .. });
                let answerable = slices.iter().filter(|s| snapshot && plan.query.may_use_statistics() && s.log_files.is_empty()).count();
                (answerable, slices.len())
            }
        };
        pushed.push_str(&format!("; answered from statistics: {from_statistics} of {slices} file slices"));
        if state.is_some_and(|s| s.answers.is_some()) {
            pushed.push_str("; every parameter value answered by one read");
        }
        if let Some(reused) = state.and_then(|s| s.stats).map(|s| s.scan.merges_reused).filter(|&n| n > 0) {
            pushed.push_str(&format!("; merges reused: {reused}"));
        }
    }
    scan::explain_text("Aggregate pushed", &pushed, es);
    if (*es).verbose {
        let fields = plan.query.fields().join(", ");
        scan::explain_text("Hudi Columns Read", if fields.is_empty() { "none" } else { &fields }, es);
        if let Some(condition) = &plan.query.condition {
            scan::explain_text("Hudi Condition", &condition.to_string(), es);
        }
        scan::explain_read(pg_sys::Oid::from(plan.relid), es);
    }
}
