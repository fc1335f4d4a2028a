//! Planning and executing scans of Hudi foreign tables. Columns are bound to the table's
//! fields by name at plan time (errors name both sides); the executor reads one file slice at
//! a time, so a backend holds at most one merged slice in memory.

use std::ffi::{c_void, CStr};

use arrow::array::{Array, AsArray, UInt64Array};
use arrow::datatypes::Schema;
use arrow::record_batch::RecordBatch;
use engine::read::condition::Condition;
use engine::read::filter::ScanFilter;
use engine::read::schema::is_reader_column;
use engine::read::prefetch::SliceScan;
use engine::read::{ChangeRange, ScanOptions, ScanStats, SliceQuery, TableReader, OPERATION_COLUMN, ROW_POSITION_COLUMN};
use engine::timeline::ReadBound;
use engine::view::FileSlice;
use engine::write::BaseFileRef;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::datum::{self, ColumnReader, ColumnType};
use crate::error::{raise, OrReport};
use crate::fdw::lookup::{self, CacheShape, LookupPlan};
use crate::fdw::conditions::{self, RuntimeValues};
use crate::fdw::positions;
use crate::fdw::pushdown::{self, list_items, FieldNames};
use crate::fdw::table::ForeignHudiTable;
use crate::guc;
use crate::runtime::block_on;

/// Where a declared column's values come from.
#[derive(Debug, Clone, Copy)]
struct ColumnBinding {
    /// Index of the Arrow column, or `None` for a meta column the table does not populate.
    source: Option<usize>,
    column_type: ColumnType,
}

unsafe fn type_name(oid: pg_sys::Oid) -> String {
    CStr::from_ptr(pg_sys::format_type_be(oid)).to_string_lossy().into_owned()
}

/// Binds every live attribute of `tupdesc` to a field of `schema`: exact name first, then a
/// unique case-insensitive match. Missing columns and types that cannot hold the field's values
/// are errors naming both.
unsafe fn bind_columns(
    tupdesc: pg_sys::TupleDesc,
    schema: &Schema,
    relation: &str,
    location: &str,
) -> Vec<Option<ColumnBinding>> {
    let attributes = (*tupdesc).attrs.as_slice((*tupdesc).natts as usize);
    attributes
        .iter()
        .map(|attr| {
            if attr.attisdropped {
                return None;
            }
            let name = CStr::from_ptr(attr.attname.data.as_ptr()).to_string_lossy().into_owned();
            let column_type = ColumnType::from_type_oid(attr.atttypid).unwrap_or_else(|| {
                raise(
                    PgSqlErrorCode::ERRCODE_FDW_INVALID_DATA_TYPE,
                    format!(
                        "column \"{name}\" of foreign table \"{relation}\" has type {}, which hudi_fdw does not read",
                        type_name(attr.atttypid)
                    ),
                    Some("Use boolean, smallint, integer, bigint, real, double precision, numeric, text, varchar, bytea, date, timestamp, timestamptz, jsonb, or an array of a scalar type.".into()),
                )
            });
            let exact = schema.index_of(&name).ok();
            let source = exact.or_else(|| {
                let mut matches = schema.fields().iter().enumerate().filter(|(_, f)| f.name().eq_ignore_ascii_case(&name));
                match (matches.next(), matches.next()) {
                    (Some((i, _)), None) => Some(i),
                    _ => None,
                }
            });
            match source {
                Some(index) => {
                    let field = schema.field(index);
                    if !column_type.accepts(field.data_type()) {
                        raise(
                            PgSqlErrorCode::ERRCODE_FDW_INVALID_DATA_TYPE,
                            format!(
                                "column \"{name}\" of foreign table \"{relation}\" has type {}, which cannot hold Hudi field \"{}\" of type {}",
                                type_name(attr.atttypid),
                                field.name(),
                                field.data_type()
                            ),
                            Some(match datum::declared_type(field.data_type()).as_str() {
                                "text" => "Declare it as text.".to_owned(),
                                declared => format!("Declare it as {declared} (or text)."),
                            }),
                        );
                    }
                    Some(ColumnBinding { source: Some(index), column_type })
                }
                // A table without meta fields still answers for them, with NULLs; so does
                // _hoodie_operation outside incremental reads.
                None if is_reader_column(&name) => {
                    Some(ColumnBinding { source: None, column_type })
                }
                None => {
                    let fields: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                    raise(
                        PgSqlErrorCode::ERRCODE_FDW_COLUMN_NAME_NOT_FOUND,
                        format!(
                            "column \"{name}\" of foreign table \"{relation}\" does not exist in the Hudi table at {location}"
                        ),
                        Some(format!("The table's fields are: {}.", fields.join(", "))),
                    )
                }
            }
        })
        .collect()
}

/// What planning decided, carried to execution and EXPLAIN in the plan's `fdw_private`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct PlanInfo {
    pub(crate) options: ScanOptions,
    /// Partitions and file slices kept of the total, at plan time.
    stats: (usize, usize, usize, usize),
    /// Bytes of the slices kept.
    #[serde(default)]
    bytes: u64,
    /// Rows the scan decodes, about (those of the slices kept, or of their pages where the
    /// read fixes its record keys): by a serial scan, and by a parallel one, which does not
    /// prune by runtime operands (its row filter has none).
    #[serde(default)]
    read_rows: (f64, f64),
    /// The attributes' Hudi fields.
    pub(crate) fields: FieldNames,
    /// The table's lookup cache, when a latest-snapshot read may use it.
    cache: Option<CacheShape>,
    /// What a lookup scan probes (its values in the plan's `fdw_exprs`).
    pub(crate) lookup: Option<LookupPlan>,
    /// The restriction clauses the engine evaluates exactly (by index in `baserestrictinfo`):
    /// a lake scan's plan makes them its row filter ([`ScanOptions::row_filter`]), whose
    /// runtime operands are the plan's `fdw_exprs`.
    #[serde(default)]
    pushed: Vec<(usize, Condition)>,
    /// The fields made into datums: those of the target list and of the quals PostgreSQL
    /// evaluates (`None`: all). The row filter's other columns are decoded but not converted.
    #[serde(default)]
    pub(crate) converted: Option<Vec<String>>,
}

impl PlanInfo {
    unsafe fn to_list(&self) -> *mut pg_sys::List {
        crate::fdw::private_list(self)
    }

    unsafe fn from_list(list: *mut pg_sys::List) -> PlanInfo {
        crate::fdw::from_private_list(list).unwrap_or_default()
    }

    /// What planning found for the scan of a Hudi table's relation `baserel`.
    pub(crate) unsafe fn of_rel(baserel: *mut pg_sys::RelOptInfo) -> Option<PlanInfo> {
        crate::fdw::from_private_list((*baserel).fdw_private as *mut pg_sys::List)
    }

    /// What the plan of the scan `node` decided.
    pub(crate) unsafe fn of_plan(node: *mut pg_sys::ForeignScanState) -> PlanInfo {
        PlanInfo::from_list((*((*node).ss.ps.plan as *mut pg_sys::ForeignScan)).fdw_private)
    }
}

/// Attribute number → Hudi field name of the bound columns.
fn field_names(columns: &[Option<ColumnBinding>], schema: &Schema) -> FieldNames {
    columns
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some(((i + 1) as i16, schema.field(c.as_ref()?.source?).name().clone())))
        .collect()
}

/// What a scan reads: a snapshot (latest, as of an instant, or base files only) or the
/// changes of an incremental range.
#[derive(Debug, Clone)]
pub(crate) enum ReadSpec {
    Snapshot { bound: ReadBound, read_optimized: bool },
    Incremental { range: ChangeRange },
}

/// A session GUC if set, else the table option, as an instant ([`crate::fdw::options::instant_of`]).
fn instant_setting(
    setting: &pgrx::GucSetting<Option<std::ffi::CString>>,
    table: &ForeignHudiTable,
    option: &str,
) -> Option<String> {
    let session = guc::string_value(setting);
    let value = if session.trim().is_empty() { table.options.get(option).cloned() } else { Some(session) };
    value.map(|value| {
        crate::fdw::options::instant_of(value.trim()).unwrap_or_else(|| {
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("invalid instant \"{value}\" for {option} (hudi.{option} or the table option)"),
                Some(format!("{}.", crate::fdw::options::INSTANT_FORMS.replacen("expected", "Use", 1))),
            )
        })
    })
}

pub(crate) fn read_spec(table: &ForeignHudiTable) -> ReadSpec {
    let query_type = table.options.get("query_type").map_or("snapshot", String::as_str);
    if query_type == "incremental" {
        let start = instant_setting(&guc::START_INSTANT, table, "start_instant");
        let end = instant_setting(&guc::END_INSTANT, table, "end_instant");
        return ReadSpec::Incremental { range: ChangeRange { start, end } };
    }
    let as_of = instant_setting(&guc::AS_OF_INSTANT, table, "as_of_instant");
    ReadSpec::Snapshot { bound: TableReader::snapshot_bound(as_of.as_deref()), read_optimized: query_type == "read_optimized" }
}

impl ReadSpec {
    fn bound(&self, reader: &TableReader) -> ReadBound {
        match self {
            ReadSpec::Snapshot { bound, .. } => bound.clone(),
            ReadSpec::Incremental { range } => reader.change_bound(range),
        }
    }

    /// The columns a scan can produce.
    pub(crate) fn schema<'r>(&self, reader: &'r TableReader) -> &'r Schema {
        match self {
            ReadSpec::Snapshot { .. } => reader.schema(),
            ReadSpec::Incremental { .. } => reader.changes_schema(),
        }
    }
}

/// Opens the table for a read of `spec`. A snapshot of the latest state also sees the writes
/// that are decided but not completed in storage: this transaction's own (its buffered rows
/// written out first, so that every statement sees the transaction's earlier ones), and those
/// whose PostgreSQL transaction committed ([`crate::intents`]). Time travel and change ranges
/// are about completed instants only.
pub(crate) fn open_for(table: &ForeignHudiTable, spec: &ReadSpec) -> TableReader {
    if !matches!(spec, ReadSpec::Snapshot { bound: ReadBound::Latest, .. }) {
        return table.open_reader();
    }
    let location = table.uri.to_string();
    if crate::buffer::is_buffered(table) {
        return crate::buffer::reader_with_buffer(&location, || {
            crate::fdw::table_state::recheck(&location);
            latest_reader(table, &location)
        });
    }
    latest_reader(table, &location)
}

/// The latest state of `table` at `location`, with what this transaction wrote to it and the
/// writes its server committed and has not completed yet.
fn latest_reader(table: &ForeignHudiTable, location: &str) -> TableReader {
    let location = location.to_owned();
    // Both before the listing, so that it holds every file of what they name: the buffered
    // rows are written out now, and a committed intent was recorded after all its files were.
    let own = crate::xact::own_writes_to(&location);
    let committed = crate::intents::committed_instants(&location);
    // The transaction's own writes add files that no timeline listing shows: they are added
    // to what the table state holds.
    let mut reader = crate::fdw::table_state::reader(table, &committed);
    // A state kept from before this transaction began a write (earlier in the statement) does
    // not know the write's instant: it is loaded anew.
    if own.instants.iter().any(|i| reader.timeline().get(i).is_none()) {
        crate::fdw::table_state::forget_all();
        reader = crate::fdw::table_state::reader(table, &committed);
    }
    let mut reader = reader.with_files(own.files);
    if let Some(schema) = own.schema {
        reader = reader.with_avro_schema(schema).or_report();
    }
    let mut decided = own.instants;
    let pending: std::collections::HashSet<&str> = reader.timeline().pending_writes().map(|i| i.timestamp.as_str()).collect();
    decided.extend(committed);
    decided.retain(|i| pending.contains(i.as_str()));
    if decided.is_empty() {
        return reader;
    }
    reader.with_decided_writes(decided.iter().map(String::as_str))
}

pub(crate) fn slices_to_read(reader: &TableReader, spec: &ReadSpec, options: &ScanOptions) -> (Vec<FileSlice>, ScanStats) {
    let (mut slices, stats) = block_on(reader.pruned_slices(&spec.bound(reader), options)).or_report();
    if let Some(problem) = reader.take_column_stats_problem() {
        pgrx::warning!(
            "pg_hudi: the column statistics in the metadata table of Hudi table \"{}\" cannot be used ({problem}); filters read its files without skipping any by them",
            reader.config().name
        );
    }
    if let ReadSpec::Snapshot { read_optimized: true, .. } = spec {
        slices.retain_mut(|slice| {
            slice.log_files.clear();
            slice.base_file.is_some()
        });
    }
    (slices, stats)
}


/// Sets the table's rows (`tuples`) and the rows the scan returns (`rows`), the way
/// PostgreSQL estimates a heap table's: the rows per byte of the last ANALYZE (its
/// `reltuples` over `relpages`, pages of the files' bytes) times the files' bytes now, or
/// before any ANALYZE about one row per 50 bytes of compressed Parquet; then the selectivity
/// of the quals from the ANALYZE statistics (`clauselist_selectivity`).
unsafe fn estimate_size(root: *mut pg_sys::PlannerInfo, baserel: *mut pg_sys::RelOptInfo, stats: &ScanStats) {
    let pages = (stats.bytes_total as f64 / pg_sys::BLCKSZ as f64).max(1.0);
    // PostgreSQL loaded relpages and reltuples of pg_class into these (-1: never analyzed).
    let (analyzed_pages, analyzed_tuples) = ((*baserel).pages as f64, (*baserel).tuples);
    (*baserel).tuples = if analyzed_tuples > 0.0 && analyzed_pages > 0.0 {
        (analyzed_tuples / analyzed_pages * pages).round()
    } else {
        (stats.bytes_total as f64 / 50.0).round()
    }
    .max(1.0);
    (*baserel).pages = pages as pg_sys::BlockNumber;
    pg_sys::set_baserel_size_estimates(root, baserel);
}

/// Plan time: check the declared columns against the table and estimate its size.
#[pg_guard]
pub unsafe extern "C-unwind" fn get_foreign_rel_size(
    root: *mut pg_sys::PlannerInfo,
    baserel: *mut pg_sys::RelOptInfo,
    relid: pg_sys::Oid,
) {
    // The executor checks privileges at its start; planning reads the table's storage before
    // that, and a role that may not read the table must not learn its location or files from
    // the errors it might raise. The same check, as the executor makes it (with the view
    // owner's rights for a table below a view), comes first.
    let rte = *(*root).simple_rte_array.add((*baserel).relid as usize);
    pg_sys::ExecCheckRTPerms(pg_sys::lappend(std::ptr::null_mut(), rte.cast()), true);
    let table = ForeignHudiTable::of_relation(relid);
    let spec = read_spec(&table);
    let reader = open_for(&table, &spec);
    let relation = pg_sys::RelationIdGetRelation(relid);
    let schema = spec.schema(&reader);
    let columns = bind_columns((*relation).rd_att, schema, &crate::fdw::table::relation_name(relid), &table.uri.to_string());
    pg_sys::RelationClose(relation);
    let fields = field_names(&columns, schema);
    let options = ScanOptions {
        filter: pushdown::scan_filter(baserel, &fields),
        columns: pushdown::used_columns(baserel, &fields),
        row_positions: pushdown::wants_row_positions(baserel),
        ..Default::default()
    };
    let (pushed, params) = conditions::translate_quals(baserel, &fields, schema);
    let (_, stats) = slices_to_read(&reader, &spec, &options);
    let bytes = stats.bytes_kept;
    estimate_size(root, baserel, &stats);
    // A read of a few record keys decodes a data page of a slice per key: a generic plan of
    // `key = $1` (pruned when the parameter is bound) costs what a custom plan does, and
    // prepared statements keep it instead of planning each execution.
    let slice_rows = (*baserel).tuples * bytes as f64 / stats.bytes_total.max(1) as f64;
    let conditions: Vec<&Condition> = pushed.iter().map(|(_, c)| c).collect();
    let keyed = |conditions: &[&Condition]| reader.keyed_read_rows(&options, conditions, &stats).map_or(slice_rows, |rows| rows.min(slice_rows));
    let read_rows = (keyed(&conditions), keyed(&[]));
    let latest = matches!(spec, ReadSpec::Snapshot { bound: ReadBound::Latest, read_optimized: false });
    let cache = if latest { lookup::shape(relid, table.uri.as_str(), reader.schema()) } else { None };
    let info = PlanInfo {
        options,
        stats: (stats.partitions_kept, stats.partitions_total, stats.slices_kept, stats.slices_total),
        bytes,
        read_rows,
        fields,
        cache,
        lookup: None,
        pushed,
        converted: None,
    };
    // The row filter's runtime operands follow the planning data.
    let mut private = info.to_list();
    private = pg_sys::lappend(private, node_list(params).cast());
    (*baserel).fdw_private = private as *mut c_void;
}

#[pg_guard]
pub unsafe extern "C-unwind" fn get_foreign_paths(
    root: *mut pg_sys::PlannerInfo,
    baserel: *mut pg_sys::RelOptInfo,
    relid: pg_sys::Oid,
) {
    let rows = (*baserel).rows;
    let info = PlanInfo::from_list((*baserel).fdw_private as *mut pg_sys::List);
    let (startup, run) = scan_costs(&info, rows, false);
    lookup::add_foreign_path(root, baserel, rows, (startup, startup + run), std::ptr::null_mut(), std::ptr::null_mut());
    if !info.options.row_positions {
        crate::fdw::parallel::add_partial_path(root, baserel, rows, info.stats.2, info.bytes, scan_costs(&info, rows, true));
    }
    if let (Some(shape), Some(types)) = (&info.cache, lookup::cached_schema(relid)) {
        lookup::add_paths(root, baserel, shape, &info.fields, info.options.columns.as_deref(), &types);
    }
}

/// The startup cost of a scan returning `rows` (`parallel`: a parallel one), and the cost of
/// its run: per row decoded, decoding the columns it reads (a heap scan's page and tuple costs
/// are about 0.02 a row); per row returned, making its datums.
fn scan_costs(info: &PlanInfo, rows: f64, parallel: bool) -> (f64, f64) {
    let columns = info.options.columns.as_ref().map_or(info.fields.len(), Vec::len) as f64;
    // SAFETY: planner settings, read on the backend's thread.
    let (tuple, operator) = unsafe { (pg_sys::cpu_tuple_cost, pg_sys::cpu_operator_cost) };
    let read_rows = if parallel { info.read_rows.1 } else { info.read_rows.0 };
    (100.0, read_rows * (tuple + operator * (1.0 + columns)) + rows * tuple)
}

fn node_list(nodes: Vec<*mut pg_sys::Node>) -> *mut pg_sys::List {
    let mut list: *mut pg_sys::List = std::ptr::null_mut();
    for node in nodes {
        // SAFETY: planner nodes, in the planner's memory.
        list = unsafe { pg_sys::lappend(list, node.cast()) };
    }
    list
}

/// A lake scan's plan: the quals the engine evaluates exactly become its row filter (those
/// with runtime operands only where the scan is not parallel: a worker reads the leader's
/// bound filter), and PostgreSQL keeps the others. A lookup's scan leaves every qual with
/// PostgreSQL, which rechecks the rows it probes.
#[pg_guard]
pub unsafe extern "C-unwind" fn get_foreign_plan(
    root: *mut pg_sys::PlannerInfo,
    baserel: *mut pg_sys::RelOptInfo,
    relid: pg_sys::Oid,
    best_path: *mut pg_sys::ForeignPath,
    tlist: *mut pg_sys::List,
    scan_clauses: *mut pg_sys::List,
    outer_plan: *mut pg_sys::Plan,
) -> *mut pg_sys::ForeignScan {
    if (*baserel).reloptkind == pg_sys::RelOptKind::RELOPT_UPPER_REL {
        return crate::fdw::aggregate::plan(root, best_path, tlist);
    }
    let rel_private = (*baserel).fdw_private as *mut pg_sys::List;
    let mut info = PlanInfo::from_list(rel_private);
    let mut quals = pg_sys::extract_actual_clauses(scan_clauses, false);
    let mut exprs = std::ptr::null_mut();
    let mut recheck = std::ptr::null_mut();
    let looked_up = match lookup::path_index((*best_path).fdw_private) {
        Some(index) => match (&info.cache, lookup::cached_schema(relid)) {
            (Some(shape), Some(types)) => lookup::plan(root, baserel, index, shape, scan_clauses, &info.fields, &types),
            _ => None,
        },
        None => None,
    };
    if let Some((plan, values)) = looked_up {
        info.lookup = Some(plan);
        exprs = values;
    } else {
        let restrictions = list_items::<pg_sys::RestrictInfo>((*baserel).baserestrictinfo);
        let parallel = (*best_path).path.parallel_aware;
        let mut filter = Vec::new();
        quals = std::ptr::null_mut();
        for clause in list_items::<pg_sys::RestrictInfo>(scan_clauses) {
            if (*clause).pseudoconstant {
                continue; // PostgreSQL checks it once, above the scan
            }
            let index = restrictions.iter().position(|&r| r == clause);
            let condition = info.pushed.iter().find(|(i, _)| Some(*i) == index).map(|(_, c)| c);
            match condition.filter(|c| !(parallel && c.has_params())) {
                Some(condition) => {
                    filter.push(condition.clone());
                    // Checked again by PostgreSQL only in EvalPlanQual.
                    recheck = pg_sys::lappend(recheck, (*clause).clause.cast());
                }
                None => quals = pg_sys::lappend(quals, (*clause).clause.cast()),
            }
        }
        info.options.row_filter = Condition::all(filter);
        if info.options.row_filter.as_ref().is_some_and(Condition::has_params) {
            exprs = pushdown::list_items::<pg_sys::Node>(rel_private).get(1).copied().unwrap_or(std::ptr::null_mut()).cast();
        }
    }
    let local = list_items::<pg_sys::Node>(quals).into_iter();
    info.converted = if info.lookup.is_some() { info.options.columns.clone() } else { pushdown::columns_of(baserel, local, &info.fields) };
    info.pushed.clear();
    pg_sys::make_foreignscan(tlist, quals, (*baserel).relid, exprs, info.to_list(), std::ptr::null_mut(), recheck, outer_plan)
}

/// Where a scan's rows come from.
pub(crate) enum Source {
    /// The slices to read, fetched and merged ahead.
    Lake(SliceScan),
    /// The table's lookup cache, probed at each (re)scan.
    Lookup(lookup::Probe),
}

/// Executor state of one scan, owned by `ForeignScanState::fdw_state`.
pub(crate) struct ScanState {
    pub(crate) source: Source,
    batch: Option<RecordBatch>,
    next_row: usize,
    /// `(attribute index, binding)` of the columns the query uses; the others stay NULL.
    columns: Vec<(usize, ColumnBinding)>,
    /// Readers of those columns in `batch`.
    readers: Vec<(usize, ColumnReader)>,
    /// For the target of an UPDATE or DELETE: the table's URI, and the origin number and
    /// base-file positions of `batch`'s rows, which become their ctids.
    row_positions: Option<RowPositions>,
    /// What a parallel scan's leader shares with its workers, as JSON, and the scan's units
    /// ([`crate::fdw::parallel`]).
    pub(crate) shared: Option<(String, Vec<engine::read::prefetch::ScanUnit>)>,
    /// A row filter with runtime operands, to bind before the scan reads.
    row_filter_to_bind: Option<UnboundFilter>,
    /// In a parallel scan, the count of rows removed by every process's row filter.
    pub(crate) filtered_count: Option<crate::fdw::parallel::FilteredCount>,
}

/// A row filter with runtime operands: bound to their values at the first row asked for and
/// after each rescan, when the comparisons it implies prune the slices as constants do
/// (buckets, pages, record keys of a point read).
struct UnboundFilter {
    condition: Condition,
    values: RuntimeValues,
    /// Whether the scan's filter must be bound (again) before it reads.
    pending: bool,
    spec: ReadSpec,
    /// The plan's pruning filter, of its constants.
    planned: ScanFilter,
}

impl UnboundFilter {
    /// Binds the filter to the operands' values now, and prunes the scan's slices by them.
    unsafe fn bind(&mut self, node: *mut pg_sys::ForeignScanState, scan: &mut SliceScan) {
        let bound = self.condition.bind(&self.values.evaluate(node)).or_report();
        let implied = bound.implied_predicates();
        if !implied.is_empty() {
            let (reader, options, _) = scan.parts();
            let mut options = options.clone();
            options.filter = ScanFilter { predicates: self.planned.predicates.iter().cloned().chain(implied).collect() };
            let (slices, stats) = slices_to_read(reader, &self.spec, &options);
            scan.set_slices(options.filter, slices, stats);
        }
        scan.set_row_filter(Some(bound));
        self.pending = false;
    }
}

struct RowPositions {
    uri: String,
    origin: Option<u32>,
    positions: Option<UInt64Array>,
}

impl RowPositions {
    /// Where the rows of `batch`, the rows of `slice`, were read.
    fn of(&mut self, slice: Option<&FileSlice>, batch: Option<&RecordBatch>) {
        self.origin = slice.and_then(|slice| {
            let base = slice.base_file.as_ref()?;
            let base = BaseFileRef { partition: slice.partition.clone(), file_id: slice.file_id.clone(), instant: base.instant.clone() };
            positions::origin(&self.uri, base)
        });
        self.positions = batch
            .and_then(|b| b.column_by_name(ROW_POSITION_COLUMN))
            .and_then(|c| c.as_primitive_opt::<arrow::datatypes::UInt64Type>().cloned());
    }

    fn tid(&self, row: usize) -> pg_sys::ItemPointerData {
        let position = self.positions.as_ref().filter(|p| p.is_valid(row)).map(|p| p.value(row));
        positions::row_tid(self.origin, position)
    }
}

/// Frees the state (a `T`) when the query's memory goes away, also after an error (when
/// `EndForeignScan` is not called).
pub(crate) unsafe extern "C-unwind" fn release_state<T>(node: *mut c_void) {
    let node = node as *mut pg_sys::ForeignScanState;
    let state = (*node).fdw_state as *mut T;
    if !state.is_null() {
        (*node).fdw_state = std::ptr::null_mut();
        drop(Box::from_raw(state));
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn begin_foreign_scan(node: *mut pg_sys::ForeignScanState, eflags: i32) {
    if crate::fdw::aggregate::is_pushed(node) {
        return crate::fdw::aggregate::begin(node, eflags);
    }
    if eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as i32 != 0 {
        return;
    }
    let relation = (*node).ss.ss_currentRelation;
    let relid = (*relation).rd_id;
    let plan = (*node).ss.ps.plan as *mut pg_sys::ForeignScan;
    let info = PlanInfo::from_list((*plan).fdw_private);
    if let Some(lookup_plan) = &info.lookup {
        // A cache gone since planning leaves the lake to answer (every qual is rechecked).
        if let Some(probe) = lookup::begin(node, relid, lookup_plan, (*plan).fdw_exprs, info.options.columns.as_deref()) {
            let columns = cached_bindings((*relation).rd_att, probe.projection.schema());
            let state = ScanState {
                source: Source::Lookup(probe),
                batch: None,
                next_row: 0,
                columns,
                readers: Vec::new(),
                row_positions: None,
                shared: None,
                row_filter_to_bind: None,
                filtered_count: None,
            };
            install_state(node, state);
            return;
        }
    }
    if (*plan).scan.plan.parallel_aware && pg_sys::ParallelWorkerNumber >= 0 {
        // A parallel worker reads the leader's snapshot: see parallel::initialize_worker.
        return;
    }
    let table = ForeignHudiTable::of_relation(relid);
    let spec = read_spec(&table);
    let reader = crate::fdw::parallel::published_reader(&table).unwrap_or_else(|| open_for(&table, &spec));
    crate::fdw::parallel::publish_read_state(node, &table.uri.to_string(), &reader);
    let mut options = info.options;
    options.ignore_record_positions = !guc::USE_RECORD_POSITIONS.get();
    // A filter with runtime operands is bound at the first row asked for, when the values of
    // parameters are known, and again after each rescan.
    let unbound = options.row_filter.take_if(|c| c.has_params());
    let (slices, stats) = slices_to_read(&reader, &spec, &options);
    let planned = options.filter.clone();
    let mut state = lake_scan(node, &table, spec.clone(), reader, options, slices, stats, info.converted.as_deref());
    state.row_filter_to_bind = unbound.map(|condition| UnboundFilter {
        condition,
        values: RuntimeValues::init(node, (*plan).fdw_exprs),
        pending: true,
        spec,
        planned,
    });
    install_state(node, state);
}

/// The state of a scan of `slices` of the table (`stats`: what pruning kept).
pub(crate) unsafe fn lake_scan(
    node: *mut pg_sys::ForeignScanState,
    table: &ForeignHudiTable,
    spec: ReadSpec,
    reader: TableReader,
    options: ScanOptions,
    slices: Vec<FileSlice>,
    stats: ScanStats,
    converted: Option<&[String]>,
) -> ScanState {
    let relation = (*node).ss.ss_currentRelation;
    let relation_name = crate::fdw::table::relation_name((*relation).rd_id);
    let schema = spec.schema(&reader);
    let columns = bind_columns((*relation).rd_att, schema, &relation_name, &table.uri.to_string());
    // Deletes are reported only to scans that can show them.
    let with_deletes = schema
        .index_of(OPERATION_COLUMN)
        .is_ok_and(|i| columns.iter().any(|c| c.is_some_and(|c| c.source == Some(i))));
    let columns = used_bindings(columns, converted, schema);
    let row_positions =
        options.row_positions.then(|| RowPositions { uri: table.uri.to_string(), origin: None, positions: None });
    let query = match spec {
        ReadSpec::Snapshot { bound, .. } => SliceQuery::Snapshot(bound),
        ReadSpec::Incremental { range } => SliceQuery::Changes { range, with_deletes },
    };
    ScanState {
        source: Source::Lake(SliceScan::new(reader, query, options, slices, stats, guc::read_ahead_slices())),
        batch: None,
        next_row: 0,
        columns,
        readers: Vec::new(),
        row_positions,
        shared: None,
        row_filter_to_bind: None,
        filtered_count: None,
    }
}

/// Gives `node` its state, freed with the query's memory.
pub(crate) unsafe fn install_state<T>(node: *mut pg_sys::ForeignScanState, state: T) {
    (*node).fdw_state = Box::into_raw(Box::new(state)) as *mut c_void;
    let query_memory = (*(*node).ss.ps.state).es_query_cxt;
    let callback = pg_sys::MemoryContextAllocZero(query_memory, std::mem::size_of::<pg_sys::MemoryContextCallback>())
        as *mut pg_sys::MemoryContextCallback;
    (*callback).func = Some(release_state::<T>);
    (*callback).arg = node as *mut c_void;
    pg_sys::MemoryContextRegisterResetCallback(query_memory, callback);
}

#[pg_guard]
pub unsafe extern "C-unwind" fn iterate_foreign_scan(node: *mut pg_sys::ForeignScanState) -> *mut pg_sys::TupleTableSlot {
    if crate::fdw::aggregate::is_pushed(node) {
        return crate::fdw::aggregate::iterate(node);
    }
    let slot = (*node).ss.ss_ScanTupleSlot;
    let state = &mut *((*node).fdw_state as *mut ScanState);
    loop {
        if state.batch.as_ref().is_some_and(|b| state.next_row < b.num_rows()) {
            let row = state.next_row;
            state.next_row += 1;
            store_row(slot, &mut state.readers, row);
            if let Some(positions) = &state.row_positions {
                (*slot).tts_tid = positions.tid(row);
            }
            return slot;
        }
        // The slice is used up: its memory goes before the next one arrives.
        state.readers.clear();
        state.batch = None;
        if let (Some(unbound @ UnboundFilter { pending: true, .. }), Source::Lake(scan)) = (&mut state.row_filter_to_bind, &mut state.source) {
            unbound.bind(node, scan);
        }
        let next = match &mut state.source {
            // Slices are fetched on this thread's runtime and decoded ahead on helper threads.
            Source::Lake(scan) => {
                let next = block_on(scan.next()).map(OrReport::or_report);
                if let Some(count) = &mut state.filtered_count {
                    count.report(scan.rows_filtered());
                }
                next
            }
            Source::Lookup(probe) => probe.next(node),
        };
        let Some(rows) = next else {
            pg_sys::ExecClearTuple(slot);
            return slot;
        };
        state.batch = rows;
        state.next_row = 0;
        state.readers = state.batch.as_ref().map(|b| column_readers(&state.columns, b)).unwrap_or_default();
        if let (Some(positions), Source::Lake(scan)) = (&mut state.row_positions, &state.source) {
            positions.of(scan.current_slice(), state.batch.as_ref());
        }
    }
}

/// Stores row `row` of the `readers`' batch in `slot` as a virtual tuple. The slot is refilled in place
/// instead of going through ExecClearTuple and ExecStoreVirtualTuple, two calls across the FFI
/// boundary per row: what they do is set below, except freeing a tuple that a consumer
/// materialized in the slot, which happens through ExecClearTuple as before.
unsafe fn store_row(slot: *mut pg_sys::TupleTableSlot, readers: &mut [(usize, ColumnReader)], row: usize) {
    if (*slot).tts_flags & pg_sys::TTS_FLAG_SHOULDFREE as u16 != 0 {
        pg_sys::ExecClearTuple(slot);
    }
    let natts = (*(*slot).tts_tupleDescriptor).natts;
    let values = std::slice::from_raw_parts_mut((*slot).tts_values, natts as usize);
    let nulls = std::slice::from_raw_parts_mut((*slot).tts_isnull, natts as usize);
    fill_row(readers, row, values, nulls);
    (*slot).tts_flags &= !(pg_sys::TTS_FLAG_EMPTY as u16);
    (*slot).tts_nvalid = natts as i16;
}

/// `(attribute index, binding)` of the bound attributes among `used` Hudi fields (all when
/// `None`).
fn used_bindings(columns: Vec<Option<ColumnBinding>>, used: Option<&[String]>, schema: &Schema) -> Vec<(usize, ColumnBinding)> {
    columns
        .into_iter()
        .enumerate()
        .filter_map(|(attribute, binding)| {
            let binding = binding?;
            let is_used = match (used, binding.source) {
                (Some(used), Some(source)) => used.iter().any(|name| name == schema.field(source).name()),
                _ => true,
            };
            is_used.then_some((attribute, binding))
        })
        .collect()
}

/// `(attribute index, reader)` of the `columns` that have values in `batch`.
fn column_readers(columns: &[(usize, ColumnBinding)], batch: &RecordBatch) -> Vec<(usize, ColumnReader)> {
    columns
        .iter()
        .filter_map(|(i, binding)| Some((*i, ColumnReader::new(binding.column_type, batch.column(binding.source?)))))
        .collect()
}

/// Converts row `row` of the `readers`' batch into the `values`/`nulls` of a tuple: the used
/// columns, NULL elsewhere.
fn fill_row(readers: &mut [(usize, ColumnReader)], row: usize, values: &mut [pg_sys::Datum], nulls: &mut [bool]) {
    nulls.fill(true);
    for (i, reader) in readers.iter_mut() {
        let i = *i;
        let datum = reader.datum(row).unwrap_or_else(|why| {
            raise(PgSqlErrorCode::ERRCODE_FDW_INVALID_DATA_TYPE, format!("cannot read column {}: {why}", i + 1), None)
        });
        if let (Some(value), Some(slot)) = (datum, values.get_mut(i)) {
            *slot = value;
            nulls[i] = false;
        }
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn rescan_foreign_scan(node: *mut pg_sys::ForeignScanState) {
    if crate::fdw::aggregate::is_pushed(node) {
        return crate::fdw::aggregate::rescan(node);
    }
    let state = &mut *((*node).fdw_state as *mut ScanState);
    match &mut state.source {
        Source::Lake(scan) => scan.restart(),
        Source::Lookup(probe) => probe.restart(),
    }
    if let Some(unbound) = &mut state.row_filter_to_bind {
        unbound.pending = true;
    }
    state.readers.clear();
    state.batch = None;
    state.next_row = 0;
}

#[pg_guard]
pub unsafe extern "C-unwind" fn end_foreign_scan(node: *mut pg_sys::ForeignScanState) {
    if crate::fdw::aggregate::is_pushed(node) {
        return crate::fdw::aggregate::end(node);
    }
    release_state::<ScanState>(node as *mut c_void);
}

pub(crate) unsafe fn explain_text(label: &str, value: &str, es: *mut pg_sys::ExplainState) {
    let label = std::ffi::CString::new(label).unwrap_or_default();
    let value = std::ffi::CString::new(value).unwrap_or_default();
    pg_sys::ExplainPropertyText(label.as_ptr(), value.as_ptr(), es);
}

/// EXPLAIN VERBOSE: the query, pushed filters, and how much of the table the scan keeps.
#[pg_guard]
pub unsafe extern "C-unwind" fn explain_foreign_scan(node: *mut pg_sys::ForeignScanState, es: *mut pg_sys::ExplainState) {
    if crate::fdw::aggregate::is_pushed(node) {
        return crate::fdw::aggregate::explain(node, es);
    }
    let relation = (*node).ss.ss_currentRelation;
    let relid = (*relation).rd_id;
    let plan = (*node).ss.ps.plan as *mut pg_sys::ForeignScan;
    let info = PlanInfo::from_list((*plan).fdw_private);
    let state = ((*node).fdw_state as *const ScanState).as_ref();
    if let Some(lookup_plan) = &info.lookup {
        explain_lookup(relid, lookup_plan, state, es);
    }
    if let Some(condition) = &info.options.row_filter {
        explain_text("Hudi Row Filter", &condition.to_string(), es);
        if let (true, Some(Source::Lake(scan))) = ((*es).analyze, state.map(|s| &s.source)) {
            // Per loop, as PostgreSQL counts the rows its filter removed.
            let instrument = (*node).ss.ps.instrument;
            let loops = if instrument.is_null() { 1.0 } else { (*instrument).nloops.max(1.0) };
            // A parallel scan's leader counts every process's rows.
            let rows = state.and_then(|s| s.filtered_count.as_ref()?.total).unwrap_or_else(|| scan.rows_filtered());
            let removed = std::ffi::CString::new("Rows Removed by Hudi Row Filter").unwrap_or_default();
            pg_sys::ExplainPropertyFloat(removed.as_ptr(), std::ptr::null(), (rows as f64 / loops).round(), 0, es);
        }
    }
    if !(*es).verbose {
        return;
    }
    explain_read(relid, es);
    let scan = match state.map(|s| &s.source) {
        Some(Source::Lookup(_)) => return,
        Some(Source::Lake(scan)) => Some(scan),
        None if info.lookup.is_some() => return,
        None => None,
    };
    let columns = info.options.columns.as_ref().map_or_else(|| "all".to_owned(), |columns| columns.join(", "));
    explain_text("Hudi Columns Read", &columns, es);
    if !info.options.filter.is_empty() {
        let filters: Vec<String> = info.options.filter.predicates.iter().map(|p| p.to_string()).collect();
        explain_text("Hudi Filters", &filters.join(" AND "), es);
    }
    let (partitions_kept, partitions_total, slices_kept, slices_total) = match scan {
        Some(scan) => {
            let stats = scan.stats();
            (stats.partitions_kept, stats.partitions_total, stats.slices_kept, stats.slices_total)
        }
        None => info.stats,
    };
    explain_text("Hudi Partitions", &format!("{partitions_kept} of {partitions_total}"), es);
    explain_text("Hudi File Slices", &format!("{slices_kept} of {slices_total}"), es);
    if let Some((_, units)) = state.and_then(|s| s.shared.as_ref()) {
        // A parallel scan's units (EXPLAIN ANALYZE: they are made when the workers start).
        let split = units.iter().filter(|unit| unit.part.index == 1).count();
        explain_text("Hudi Parallel Units", &format!("{} ({split} slices in parts)", units.len()), es);
    }
    if let Some(scan) = scan {
        let stats = scan.stats();
        explain_text("Hudi Row Groups", &format!("{} of {} read", stats.row_groups_kept, stats.row_groups_total), es);
        if stats.base_rows_read < stats.base_rows_total {
            // Data pages that the page index ruled out.
            explain_text("Hudi Base File Rows", &format!("{} of {} read", stats.base_rows_read, stats.base_rows_total), es);
        }
        if stats.log_blocks_read < stats.log_blocks_total {
            // Blocks without versions of the keys a point query reads.
            explain_text("Hudi Log Blocks", &format!("{} of {} read", stats.log_blocks_read, stats.log_blocks_total), es);
        }
        if stats.merges_reused > 0 {
            // Slices with logs assembled by a kept merge outcome (hudi.merge_cache_size).
            explain_text("Hudi Merges Reused", &stats.merges_reused.to_string(), es);
        }
    }
}

/// EXPLAIN VERBOSE of what a scan of `relid` reads: the query and the table.
pub(crate) unsafe fn explain_read(relid: pg_sys::Oid, es: *mut pg_sys::ExplainState) {
    let table = ForeignHudiTable::of_relation(relid);
    let query = match read_spec(&table) {
        ReadSpec::Snapshot { bound, read_optimized } => {
            let kind = if read_optimized { "read optimized" } else { "snapshot" };
            match bound {
                ReadBound::RequestedBy(t) => format!("{kind} as of {t}"),
                _ => format!("{kind} (latest)"),
            }
        }
        ReadSpec::Incremental { range } => format!(
            "incremental ({}, {}]",
            range.start.as_deref().unwrap_or("start"),
            range.end.as_deref().unwrap_or("latest")
        ),
    };
    explain_text("Hudi Query", &query, es);
    explain_text("Hudi Table", table.uri.as_str(), es);
    // Where the table's data files were listed: its metadata table, or storage.
    explain_text("Hudi Files Listed From", &table.open_reader().listed_from().to_string(), es);
}

/// EXPLAIN of a lookup scan: `Lookup: table (keys) = values`; with VERBOSE the cached instant
/// and how far it is behind the table; with ANALYZE the probes made.
unsafe fn explain_lookup(relid: pg_sys::Oid, plan: &LookupPlan, state: Option<&ScanState>, es: *mut pg_sys::ExplainState) {
    let values = match plan.shown.as_slice() {
        [one] => one.clone(),
        many => format!("({})", many.join(", ")),
    };
    let kind = match plan.index {
        engine::lookup::Index::RecordKey => "unique",
        engine::lookup::Index::Secondary(_) => "secondary",
    };
    let name = crate::fdw::table::relation_name(relid);
    explain_text("Lookup", &format!("{name} ({}) = {values} [{kind}]", plan.columns.join(", ")), es);
    match state.map(|s| &s.source) {
        Some(Source::Lake(_)) => explain_text("Lookup Fallback", "the table's files (its cache is gone)", es),
        Some(Source::Lookup(probe)) if (*es).analyze => {
            explain_text("Lookup Probes", &format!("{} keys, {} rows", probe.probes, probe.found), es)
        }
        _ => {}
    }
    if (*es).verbose {
        if let Some(position) = lookup::cached_position(relid) {
            let reader = ForeignHudiTable::of_relation(relid).open_reader();
            let lag = engine::lookup::Lag::of(&reader, &position);
            let at = if position.is_empty() { "the table's start" } else { position.as_str() };
            let seconds = lag.behind_ms as f64 / 1000.0;
            explain_text("Lookup Cache", &format!("at {at}, {} commits ({seconds:.3} s) behind", lag.commits), es);
        }
    }
}

/// The bindings of the attributes of `tupdesc` to the columns `schema` a probe returns, the
/// ones the query reads (by name, as [`bind_columns`] binds them to the table's; the types
/// were checked at plan time).
unsafe fn cached_bindings(tupdesc: pg_sys::TupleDesc, schema: &Schema) -> Vec<(usize, ColumnBinding)> {
    let attributes = (*tupdesc).attrs.as_slice((*tupdesc).natts as usize);
    attributes
        .iter()
        .enumerate()
        .filter(|(_, attr)| !attr.attisdropped)
        .filter_map(|(i, attr)| {
            let name = CStr::from_ptr(attr.attname.data.as_ptr()).to_string_lossy();
            let source = schema.index_of(&name).ok().or_else(|| {
                let mut matches = schema.fields().iter().enumerate().filter(|(_, f)| f.name().eq_ignore_ascii_case(&name));
                match (matches.next(), matches.next()) {
                    (Some((i, _)), None) => Some(i),
                    _ => None,
                }
            })?;
            Some((i, ColumnBinding { source: Some(source), column_type: ColumnType::from_type_oid(attr.atttypid)? }))
        })
        .collect()
}

/// ANALYZE: the table's size from its files, and a sample of its latest snapshot.
#[pg_guard]
pub unsafe extern "C-unwind" fn analyze_foreign_table(
    relation: pg_sys::Relation,
    func: *mut pg_sys::AcquireSampleRowsFunc,
    total_pages: *mut pg_sys::BlockNumber,
) -> bool {
    let table = ForeignHudiTable::of_relation((*relation).rd_id);
    let reader = open_for(&table, &ReadSpec::Snapshot { bound: ReadBound::Latest, read_optimized: false });
    let slices = block_on(reader.slices(&ReadBound::Latest)).or_report();
    let bytes: u64 = slices
        .iter()
        .map(FileSlice::size)
        .sum();
    *total_pages = (bytes / pg_sys::BLCKSZ as u64).max(1) as pg_sys::BlockNumber;
    *func = Some(acquire_sample_rows);
    true
}

/// Reservoir-samples `target` rows of the latest snapshot, slice by slice (read ahead as scans are).
#[pg_guard]
unsafe extern "C-unwind" fn acquire_sample_rows(
    relation: pg_sys::Relation,
    _elevel: i32,
    rows: *mut pg_sys::HeapTuple,
    target: i32,
    total_rows: *mut f64,
    total_dead_rows: *mut f64,
) -> i32 {
    let relid = (*relation).rd_id;
    let table = ForeignHudiTable::of_relation(relid);
    let reader = open_for(&table, &ReadSpec::Snapshot { bound: ReadBound::Latest, read_optimized: false });
    let tupdesc = (*relation).rd_att;
    let columns = used_bindings(bind_columns(tupdesc, reader.schema(), &crate::fdw::table::relation_name(relid), &table.uri.to_string()), None, reader.schema());
    let slices = block_on(reader.slices(&ReadBound::Latest)).or_report();
    let query = SliceQuery::Snapshot(ReadBound::Latest);
    let mut scan = SliceScan::new(reader, query, ScanOptions::default(), slices, ScanStats::default(), guc::read_ahead_slices());
    let natts = (*tupdesc).natts as usize;
    let (mut values, mut nulls) = (vec![pg_sys::Datum::from(0); natts], vec![true; natts]);
    let target = target.max(0) as usize;
    let mut sampled = 0usize;
    let mut seen = 0u64;
    // A fixed-seed generator: samples are reproducible, which is all ANALYZE needs.
    let mut random = 0x9E37_79B9_7F4A_7C15u64;
    let mut next_random = move || {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random
    };
    let mut scratch = pgrx::PgMemoryContexts::new("pg_hudi analyze row");
    while let Some(batch) = block_on(scan.next()) {
        let Some(batch) = batch.or_report() else { continue };
        let mut readers = column_readers(&columns, &batch);
        for row in 0..batch.num_rows() {
            seen += 1;
            let slot = if sampled < target {
                sampled += 1;
                Some(sampled - 1)
            } else {
                let pick = (next_random() % seen) as usize;
                (pick < target).then_some(pick)
            };
            let Some(slot) = slot else { continue };
            let tuple = scratch.switch_to(|_| {
                fill_row(&mut readers, row, &mut values, &mut nulls);
                // heap_form_tuple copies into the caller's context below.
                (values.clone(), nulls.clone())
            });
            if seen as usize > target {
                // Replacing a sampled row.
                pg_sys::heap_freetuple(*rows.add(slot));
            }
            let (mut v, mut n) = tuple;
            *rows.add(slot) = pg_sys::heap_form_tuple(tupdesc, v.as_mut_ptr(), n.as_mut_ptr());
            scratch.reset();
        }
    }
    *total_rows = seen as f64;
    *total_dead_rows = 0.0;
    sampled as i32
}
