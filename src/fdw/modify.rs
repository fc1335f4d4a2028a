//! INSERT, COPY, UPDATE and DELETE on Hudi foreign tables: rows become upserts (or deletes) by
//! record key, buffered per table and written as log files of the bucket file groups (xact.rs
//! commits them). UPDATE and DELETE find their rows through a whole-row identity column, so an
//! UPDATE writes the complete new row, and DELETE … RETURNING returns the old one.
//! `INSERT … ON CONFLICT DO NOTHING` skips rows whose key the table already holds (checked in
//! batches when nothing needs the rows one by one).

use std::cell::{Cell, RefCell};
use std::cmp::Ordering;
use std::collections::HashSet;
use std::ffi::CStr;

use engine::read::live_keys::RowKey;
use engine::read::schema::is_reader_column;
use engine::read::TableReader;
use engine::table::MergeMode;
use engine::write::{BaseRow, Transaction};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::datum::{self, PgKind, RowBuffer};
use crate::error::{raise, OrReport};
use crate::fdw::scan::ReadSpec;
use crate::fdw::table::ForeignHudiTable;
use crate::writer::writer_id;
use crate::runtime::block_on;
use crate::xact::{self, OpenWrite};

#[pg_guard]
pub unsafe extern "C-unwind" fn is_foreign_rel_updatable(_relation: pg_sys::Relation) -> i32 {
    (1 << pg_sys::CmdType::CMD_INSERT) | (1 << pg_sys::CmdType::CMD_UPDATE) | (1 << pg_sys::CmdType::CMD_DELETE)
}

const WHOLE_ROW: &std::ffi::CStr = c"hudi_wholerow";
const CTID: &std::ffi::CStr = c"ctid";

/// UPDATE and DELETE carry the whole old row: its key identifies the record, and its values
/// complete the new row of an UPDATE. They also carry `ctid`: where the scan read the row
/// (see [`crate::fdw::positions`]).
#[pg_guard]
pub unsafe extern "C-unwind" fn add_foreign_update_targets(
    root: *mut pg_sys::PlannerInfo,
    rtindex: pg_sys::Index,
    target_rte: *mut pg_sys::RangeTblEntry,
    _target_relation: pg_sys::Relation,
) {
    let var = pg_sys::makeWholeRowVar(target_rte, rtindex as i32, 0, false);
    pg_sys::add_row_identity_var(root, var, rtindex, WHOLE_ROW.as_ptr());
    let ctid = pg_sys::makeVar(rtindex as _, pg_sys::SelfItemPointerAttributeNumber as i16, pg_sys::TIDOID, -1, pg_sys::InvalidOid, 0);
    pg_sys::add_row_identity_var(root, ctid, rtindex, CTID.as_ptr());
}

/// Where each attribute's values go: the index of the table's data column, with the kind of
/// the attribute's values (`None` for dropped and meta columns, which writes fill themselves);
/// and for UPDATE/DELETE the position of the whole-row column in the plan's rows.
struct Targets {
    columns: Vec<Option<(usize, PgKind)>>,
    whole_row: Option<pg_sys::AttrNumber>,
    /// For UPDATE/DELETE: the position of `ctid` in the plan's rows, and the table's URI.
    ctid: Option<(pg_sys::AttrNumber, String)>,
    /// Attribute indexes of the key and partition columns, which UPDATE must not change.
    identity: Vec<usize>,
    /// Attribute indexes of the ordering fields, when the table merges by them (event time,
    /// partial updates) and declares them all: an UPDATE whose new values order below the old
    /// ones does not show.
    ordering: Vec<usize>,
    /// The table merges partial updates: a NULL written does not replace a value.
    partial_update: bool,
    /// Rows of an UPDATE that will not show (see `ordering`), and rows whose NULLs keep the old
    /// values (`partial_update`): told once at the end of the statement.
    losing: Cell<u64>,
    nulls_kept: Cell<u64>,
    /// For `INSERT … ON CONFLICT DO NOTHING`.
    skip_existing: Option<RefCell<SkipExisting>>,
    /// The table has `write_mode 'buffered'`: rows go to the write buffer ([`crate::buffer`]).
    buffered: bool,
    /// How many data columns the table has.
    data_columns: usize,
    /// The foreign table's name, for messages.
    name: String,
    /// Reset after every row: what PostgreSQL allocates for one row (detoasted old rows,
    /// output texts) does not pile up over a statement of millions of rows.
    row_memory: pg_sys::MemoryContext,
}

/// What `INSERT … ON CONFLICT DO NOTHING` knows while its statement runs: the snapshot it
/// checks rows against (opened at its first row, with the transaction's earlier writes), and
/// the keys the statement inserted itself.
#[derive(Default)]
struct SkipExisting {
    reader: Option<TableReader>,
    inserted: HashSet<RowKey>,
}

/// The modify state of a result relation: a [`Targets`] that lives in a memory context of its
/// own, below the query's, and is dropped when that context goes, at the end of the statement
/// or when an ERROR unwinds it, so nothing outlives a failed statement.
unsafe fn install_targets(rinfo: *mut pg_sys::ResultRelInfo, mut targets: Targets) {
    let state = pg_sys::AllocSetContextCreateExtended(
        pg_sys::CurrentMemoryContext,
        c"hudi modify".as_ptr(),
        pg_sys::ALLOCSET_SMALL_MINSIZE as usize,
        pg_sys::ALLOCSET_SMALL_INITSIZE as usize,
        pg_sys::ALLOCSET_SMALL_MAXSIZE as usize,
    );
    targets.row_memory = pg_sys::AllocSetContextCreateExtended(
        state,
        c"hudi modify row".as_ptr(),
        pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
        pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
        pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
    );
    let boxed = Box::into_raw(Box::new(targets));
    let callback = pg_sys::MemoryContextAlloc(state, std::mem::size_of::<pg_sys::MemoryContextCallback>()) as *mut pg_sys::MemoryContextCallback;
    (*callback).func = Some(drop_targets);
    (*callback).arg = boxed as *mut std::ffi::c_void;
    pg_sys::MemoryContextRegisterResetCallback(state, callback);
    (*rinfo).ri_FdwState = boxed as *mut std::ffi::c_void;
}

unsafe extern "C-unwind" fn drop_targets(arg: *mut std::ffi::c_void) {
    drop(Box::from_raw(arg as *mut Targets));
}

/// Runs one row's work in the per-row memory context, and resets it afterwards.
unsafe fn per_row<R>(rinfo: *mut pg_sys::ResultRelInfo, work: impl FnOnce(&Targets) -> R) -> R {
    let targets = &*((*rinfo).ri_FdwState as *const Targets);
    let previous = pg_sys::MemoryContextSwitchTo(targets.row_memory);
    let result = work(targets);
    pg_sys::MemoryContextSwitchTo(previous);
    pg_sys::MemoryContextReset(targets.row_memory);
    result
}

unsafe fn targets(relation: pg_sys::Relation, data_schema: &arrow::datatypes::Schema, name: &str, config: &engine::table::TableConfig) -> Targets {
    let tupdesc = (*relation).rd_att;
    let attributes = (*tupdesc).attrs.as_slice((*tupdesc).natts as usize);
    let columns: Vec<Option<(usize, PgKind)>> =
        attributes
            .iter()
            .map(|attr| {
                let column = CStr::from_ptr(attr.attname.data.as_ptr()).to_string_lossy().into_owned();
                if attr.attisdropped || is_reader_column(&column) {
                    return None;
                }
                let index = data_schema
                    .index_of(&column)
                    .ok()
                    .or_else(|| data_schema.fields().iter().position(|f| f.name().eq_ignore_ascii_case(&column)))
                    .unwrap_or_else(|| {
                        raise(
                            PgSqlErrorCode::ERRCODE_FDW_COLUMN_NAME_NOT_FOUND,
                            format!("column \"{column}\" of foreign table \"{name}\" does not exist in the Hudi table"),
                            None,
                        )
                    });
                let field = data_schema.field(index);
                let kind = PgKind::from_type_oid(attr.atttypid).filter(|k| datum::writable(*k, field.data_type()));
                let Some(kind) = kind else {
                    raise(
                        PgSqlErrorCode::ERRCODE_FDW_INVALID_DATA_TYPE,
                        format!(
                            "column \"{column}\" of foreign table \"{name}\" cannot be written to Hudi field \"{}\" of type {}",
                            field.name(),
                            field.data_type()
                        ),
                        None,
                    )
                };
                Some((index, kind))
            })
            .collect();
    let attribute_of = |field: &str| columns.iter().position(|c| c.as_ref().is_some_and(|(index, _)| data_schema.field(*index).name() == field));
    let identity = columns
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let field = data_schema.field(c.as_ref()?.0).name();
            config.record_key_fields.iter().chain(&config.partition_fields).any(|k| k == field).then_some(i)
        })
        .collect();
    let by_ordering = matches!(config.merge_mode, MergeMode::EventTimeOrdering | MergeMode::PartialUpdate);
    let ordering = config.ordering_fields.iter().map(|f| attribute_of(f)).collect::<Option<Vec<usize>>>().filter(|_| by_ordering).unwrap_or_default();
    Targets {
        columns,
        whole_row: None,
        ctid: None,
        identity,
        ordering,
        partial_update: config.merge_mode == MergeMode::PartialUpdate,
        losing: Cell::new(0),
        nulls_kept: Cell::new(0),
        skip_existing: None,
        buffered: false,
        data_columns: data_schema.fields().len(),
        name: name.to_owned(),
        row_memory: std::ptr::null_mut(),
    }
}

/// Writes inside subtransactions are refused: a rollback to a savepoint could not take back
/// what the write put in storage.
pub(crate) fn refuse_in_subtransaction() {
    // SAFETY: a plain read of the backend's transaction state.
    if unsafe { pg_sys::GetCurrentTransactionNestLevel() } > 1 {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "writes to Hudi tables inside subtransactions (SAVEPOINT, exception blocks) are not supported",
            Some("Write outside the savepoint or exception block.".into()),
        );
    }
}

/// A new write of the foreign table `relid` of `table`: a truncate's when `truncate`. It writes
/// in the table's latest schema (what its latest commit records: the schema changes of ALTER
/// FOREIGN TABLE on any server), which its commit records in turn.
pub(crate) fn new_write(table: &ForeignHudiTable, relid: pg_sys::Oid, truncate: bool) -> OpenWrite {
    let location = table.uri.to_string();
    let storage = table.storage();
    let (config, schema) = table.config_and_schema(&storage);
    let (writer, lock_options) = (writer_id(), crate::guc::lock_options());
    let transaction = match truncate {
        true => block_on(Transaction::begin_truncate(storage, config, writer, lock_options, Some(schema))),
        false => block_on(Transaction::begin_in_schema(storage, config, writer, lock_options, schema)),
    };
    let wakes_worker = table.options.get("services").is_some_and(|s| s == "auto");
    OpenWrite::new(transaction.or_report(), location, relid, wakes_worker)
}

/// `updates`: the statement is an UPDATE (its rows were read before they are written).
unsafe fn begin(rinfo: *mut pg_sys::ResultRelInfo, plan_targets: *mut pg_sys::List, skip_existing: bool, updates: bool) {
    let relation = (*rinfo).ri_RelationDesc;
    let relid = (*relation).rd_id;
    let table = ForeignHudiTable::of_relation(relid);
    let name = CStr::from_ptr(pg_sys::get_rel_name(relid)).to_string_lossy().into_owned();
    let buffered = crate::buffer::is_buffered(&table);
    let mut targets = match buffered {
        true => {
            let (schema, config) = crate::buffer::begin(relation, &table);
            targets(relation, &schema, &name, &config)
        }
        false => xact::with_open_write(
            relid,
            || {
                refuse_in_subtransaction();
                new_write(&table, relid, false)
            },
            |write| {
                refuse_in_subtransaction();
                write.updates_rows |= updates;
                targets(relation, write.transaction.data_schema(), &name, write.transaction.config())
            },
        ),
    };
    targets.buffered = buffered;
    if !plan_targets.is_null() {
        let attno = pg_sys::ExecFindJunkAttributeInTlist(plan_targets, WHOLE_ROW.as_ptr());
        targets.whole_row = (attno > 0).then_some(attno);
        let attno = pg_sys::ExecFindJunkAttributeInTlist(plan_targets, CTID.as_ptr());
        targets.ctid = (attno > 0).then(|| (attno, table.uri.to_string()));
    }
    targets.skip_existing = skip_existing.then(Default::default);
    install_targets(rinfo, targets);
}

#[pg_guard]
pub unsafe extern "C-unwind" fn begin_foreign_modify(
    mtstate: *mut pg_sys::ModifyTableState,
    rinfo: *mut pg_sys::ResultRelInfo,
    _fdw_private: *mut pg_sys::List,
    _subplan_index: i32,
    eflags: i32,
) {
    if eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as i32 == 0 {
        let subplan = (*mtstate).ps.lefttree;
        let plan_targets = if subplan.is_null() { std::ptr::null_mut() } else { (*(*subplan).plan).targetlist };
        let updates = (*(*mtstate).ps.plan.cast::<pg_sys::ModifyTable>()).operation == pg_sys::CmdType::CMD_UPDATE;
        begin(rinfo, plan_targets, does_nothing_on_conflict(mtstate), updates);
    }
}

/// Whether the statement of `mtstate` is an `INSERT … ON CONFLICT DO NOTHING` (`DO UPDATE`
/// is refused at parse analysis, see [`crate::fdw::on_conflict`]).
unsafe fn does_nothing_on_conflict(mtstate: *mut pg_sys::ModifyTableState) -> bool {
    if mtstate.is_null() || (*mtstate).ps.plan.is_null() {
        return false;
    }
    let plan = (*mtstate).ps.plan as *mut pg_sys::ModifyTable;
    (*plan).operation == pg_sys::CmdType::CMD_INSERT && (*plan).onConflictAction == pg_sys::OnConflictAction::ONCONFLICT_NOTHING
}

/// COPY, and INSERT into a partitioned table routed to this foreign table (`mtstate` then).
/// TRUNCATE (PostgreSQL checked the privilege and holds an ACCESS EXCLUSIVE lock on each
/// foreign table): each Hudi table is truncated by one replacecommit that starts every file
/// slice anew ([`Transaction::begin_truncate`]), completed with the transaction like any write.
/// What the transaction wrote to the table before is taken back; what it writes after stays.
#[pg_guard]
pub unsafe extern "C-unwind" fn exec_foreign_truncate(rels: *mut pg_sys::List, _behavior: pg_sys::DropBehavior::Type, _restart_seqs: bool) {
    refuse_in_subtransaction();
    let rels = pgrx::PgList::<pg_sys::RelationData>::from_pg(rels);
    for relation in rels.iter_ptr() {
        truncate((*relation).rd_id);
    }
}

/// Truncates the foreign table `relid` in the current transaction: its buffered rows are
/// deleted and its Hudi table gets a truncate write, completed with the transaction. The caller
/// holds an ACCESS EXCLUSIVE lock on it and checked the privilege; inside a subtransaction only
/// for the worker, which takes the write back if the subtransaction fails
/// ([`xact::discard_write`]).
pub(crate) fn truncate(relid: pg_sys::Oid) {
    let table = ForeignHudiTable::of_relation(relid);
    if let Some((option, value)) = table.read_only_option() {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("foreign table \"{}\" cannot be truncated: it reads its Hudi table with {option} \"{value}\"", crate::fdw::table::relation_name(relid)),
            Some("Truncate a foreign table of the same Hudi table declared without query_type and as_of_instant.".into()),
        );
    }
    if crate::buffer::is_buffered(&table) {
        // The rows its buffer holds go first: a flush that took them fails to delete them
        // and starts over, and a flush already committed completes before the truncate
        // begins (it waits for writes that are committing).
        crate::buffer::truncate(&table.uri.to_string());
    }
    xact::truncate(relid, &table.uri.to_string(), || new_write(&table, relid, true));
}

#[pg_guard]
pub unsafe extern "C-unwind" fn begin_foreign_insert(mtstate: *mut pg_sys::ModifyTableState, rinfo: *mut pg_sys::ResultRelInfo) {
    begin(rinfo, std::ptr::null_mut(), does_nothing_on_conflict(mtstate), false);
}

/// One row of a slot as the table's data columns.
unsafe fn table_row(targets: &Targets, columns: usize, values: &[pg_sys::Datum], nulls: &[bool]) -> Vec<Option<(pg_sys::Datum, PgKind)>> {
    let mut row = vec![None; columns];
    for (i, target) in targets.columns.iter().enumerate() {
        if let Some((index, kind)) = target {
            if !nulls[i] {
                row[*index] = Some((values[i], *kind));
            }
        }
    }
    row
}

unsafe fn slot_values<'a>(slot: *mut pg_sys::TupleTableSlot) -> (&'a [pg_sys::Datum], &'a [bool]) {
    pg_sys::slot_getallattrs(slot);
    let natts = (*(*slot).tts_tupleDescriptor).natts as usize;
    (std::slice::from_raw_parts((*slot).tts_values, natts), std::slice::from_raw_parts((*slot).tts_isnull, natts))
}

/// The old row of an UPDATE or DELETE, from its whole-row column (detoasted in the row's
/// memory).
unsafe fn old_tuple(targets: &Targets, plan_slot: *mut pg_sys::TupleTableSlot) -> pg_sys::HeapTupleData {
    let attno = targets.whole_row.unwrap_or_else(|| {
        raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "the whole-row identity column is missing", None)
    });
    let (values, nulls) = slot_values(plan_slot);
    let index = attno as usize - 1;
    if nulls[index] {
        raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "the old row of an UPDATE or DELETE is NULL", None);
    }
    let header = pg_sys::pg_detoast_datum(values[index].cast_mut_ptr()) as pg_sys::HeapTupleHeader;
    let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
    tuple.t_len = pgrx::varsize_any(header as *const pg_sys::varlena) as u32;
    tuple.t_data = header;
    tuple
}

/// [`old_tuple`] as values and nulls.
unsafe fn old_row(rinfo: *mut pg_sys::ResultRelInfo, mut tuple: pg_sys::HeapTupleData) -> (Vec<pg_sys::Datum>, Vec<bool>) {
    let tupdesc = (*(*rinfo).ri_RelationDesc).rd_att;
    let natts = (*tupdesc).natts as usize;
    let (mut old_values, mut old_nulls) = (vec![pg_sys::Datum::from(0); natts], vec![true; natts]);
    pg_sys::heap_deform_tuple(&mut tuple, tupdesc, old_values.as_mut_ptr(), old_nulls.as_mut_ptr());
    (old_values, old_nulls)
}

/// Where the scan read the row of an UPDATE or DELETE, from its `ctid` column.
unsafe fn read_at(targets: &Targets, plan_slot: *mut pg_sys::TupleTableSlot) -> Option<BaseRow> {
    let (attno, uri) = targets.ctid.as_ref()?;
    let (values, nulls) = slot_values(plan_slot);
    let index = *attno as usize - 1;
    if nulls[index] {
        return None;
    }
    let tid = values[index].cast_mut_ptr::<pg_sys::ItemPointerData>();
    crate::fdw::positions::base_row(uri, &*tid)
}

enum Change {
    Upsert,
    Delete,
}

unsafe fn buffer_row(rinfo: *mut pg_sys::ResultRelInfo, targets: &Targets, values: &[pg_sys::Datum], nulls: &[bool], change: Change, read_at: Option<BaseRow>) {
    let relid = (*(*rinfo).ri_RelationDesc).rd_id;
    if targets.buffered {
        let row = table_row(targets, targets.data_columns, values, nulls);
        let change = match change {
            Change::Upsert => engine::write::Change::Upsert,
            Change::Delete => engine::write::Change::Delete,
        };
        crate::buffer::push(relid, change, &row).unwrap_or_else(|why| raise(PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE, why, None));
        return;
    }
    xact::with_open_write(
        relid,
        || unreachable!("begun in BeginForeignModify"),
        |write| {
            let row = table_row(targets, write.transaction.data_schema().fields().len(), values, nulls);
            // Keep statement order: write the other kind of pending rows first.
            let pending_other = match change {
                Change::Upsert => write.deletes.len(),
                Change::Delete => write.upserts.len(),
            };
            if pending_other > 0 {
                write.flush().or_report();
            }
            let buffer = match change {
                Change::Upsert => &mut write.upserts,
                Change::Delete => &mut write.deletes,
            };
            buffer.push(&row, read_at).unwrap_or_else(|why| raise(PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE, why, None));
            if buffer.len() >= crate::guc::WRITE_BATCH_ROWS.get().max(1) as usize {
                write.flush().or_report();
            }
        },
    );
}

/// Which of `slots`' rows insert a new key: not live in the snapshot of the statement's first
/// check (which holds the transaction's earlier writes), nor inserted by an earlier row of the
/// statement. The first of two rows of one key in the statement is the one inserted.
unsafe fn new_keys(rinfo: *mut pg_sys::ResultRelInfo, targets: &Targets, skip: &RefCell<SkipExisting>, slots: &[*mut pg_sys::TupleTableSlot]) -> Vec<bool> {
    let relid = (*(*rinfo).ri_RelationDesc).rd_id;
    let rows_of = |schema: &arrow::datatypes::SchemaRef| {
        let mut rows = RowBuffer::new(schema.clone());
        for &slot in slots {
            let (values, nulls) = slot_values(slot);
            let row = table_row(targets, schema.fields().len(), values, nulls);
            rows.push(&row).unwrap_or_else(|why| raise(PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE, why, None));
        }
        rows.take()
    };
    let keys = match targets.buffered {
        true => {
            let schema = crate::buffer::data_schema(relid);
            crate::buffer::keys_of(relid, &rows_of(&schema))
        }
        false => xact::with_open_write(
            relid,
            || unreachable!("begun in BeginForeignModify"),
            |write| write.transaction.keys_of(&rows_of(write.transaction.data_schema())).or_report(),
        ),
    };
    let mut skip = skip.borrow_mut();
    if skip.reader.is_none() {
        // Outside the open write: opening the snapshot writes out the transaction's buffered rows.
        let table = ForeignHudiTable::of_relation(relid);
        let latest = ReadSpec::Snapshot { bound: engine::timeline::ReadBound::Latest, read_optimized: false };
        skip.reader = Some(crate::fdw::scan::open_for(&table, &latest));
    }
    let reader = skip.reader.as_ref().expect("opened above");
    let live = block_on(reader.live_keys(&keys)).or_report();
    keys.into_iter().map(|key| !live.contains(&key) && skip.inserted.insert(key)).collect()
}

#[pg_guard]
pub unsafe extern "C-unwind" fn exec_foreign_insert(
    _estate: *mut pg_sys::EState,
    rinfo: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    _plan_slot: *mut pg_sys::TupleTableSlot,
) -> *mut pg_sys::TupleTableSlot {
    let inserted = per_row(rinfo, |targets| {
        if let Some(skip) = &targets.skip_existing {
            if !new_keys(rinfo, targets, skip, &[slot])[0] {
                return false;
            }
        }
        let (values, nulls) = slot_values(slot);
        buffer_row(rinfo, targets, values, nulls, Change::Upsert, None);
        true
    });
    // NULL: the row was not inserted (not counted, no RETURNING, no AFTER trigger).
    if inserted { slot } else { std::ptr::null_mut() }
}

/// Rows per [`exec_foreign_batch_insert`] call: `ON CONFLICT DO NOTHING` checks a batch's keys
/// in one read. Other inserts, and those whose rows are needed one by one (RETURNING, WITH
/// CHECK OPTION, row triggers), take rows one at a time; they are buffered all the same.
const SKIP_EXISTING_BATCH: i32 = 1000;

#[pg_guard]
pub unsafe extern "C-unwind" fn get_foreign_modify_batch_size(rinfo: *mut pg_sys::ResultRelInfo) -> i32 {
    let targets = (*rinfo).ri_FdwState as *const Targets;
    let triggers = (*rinfo).ri_TrigDesc;
    let row_triggers = !triggers.is_null() && ((*triggers).trig_insert_before_row || (*triggers).trig_insert_after_row || (*triggers).trig_insert_instead_row);
    let one_by_one = !(*rinfo).ri_projectReturning.is_null() || !(*rinfo).ri_WithCheckOptions.is_null() || row_triggers;
    if targets.is_null() || (*targets).skip_existing.is_none() || one_by_one { 1 } else { SKIP_EXISTING_BATCH }
}

/// A batch of `ON CONFLICT DO NOTHING` rows: those with new keys are buffered, and come first
/// in `slots` (swapped there, so that the array keeps every slot for the executor to clear);
/// `num_slots` becomes their count.
#[pg_guard]
pub unsafe extern "C-unwind" fn exec_foreign_batch_insert(
    _estate: *mut pg_sys::EState,
    rinfo: *mut pg_sys::ResultRelInfo,
    slots: *mut *mut pg_sys::TupleTableSlot,
    _plan_slots: *mut *mut pg_sys::TupleTableSlot,
    num_slots: *mut i32,
) -> *mut *mut pg_sys::TupleTableSlot {
    let slots_of_batch = std::slice::from_raw_parts_mut(slots, (*num_slots).max(0) as usize);
    let keep = per_row(rinfo, |targets| {
        let keep = match &targets.skip_existing {
            Some(skip) => new_keys(rinfo, targets, skip, slots_of_batch),
            None => vec![true; slots_of_batch.len()],
        };
        for (&slot, _) in slots_of_batch.iter().zip(&keep).filter(|(_, keep)| **keep) {
            let (values, nulls) = slot_values(slot);
            buffer_row(rinfo, targets, values, nulls, Change::Upsert, None);
        }
        keep
    });
    let mut kept = 0;
    for (i, keep) in keep.into_iter().enumerate() {
        if keep {
            slots_of_batch.swap(kept, i);
            kept += 1;
        }
    }
    *num_slots = kept as i32;
    slots
}

/// A value's text form: what key and partition paths are made of.
unsafe fn output_text(type_oid: pg_sys::Oid, value: pg_sys::Datum) -> String {
    let (mut output, mut is_varlena) = (pg_sys::InvalidOid, false);
    pg_sys::getTypeOutputInfo(type_oid, &mut output, &mut is_varlena);
    CStr::from_ptr(pg_sys::OidOutputFunctionCall(output, value)).to_string_lossy().into_owned()
}

/// UPDATE writes the complete new row; its key and partition must stay the same.
#[pg_guard]
pub unsafe extern "C-unwind" fn exec_foreign_update(
    _estate: *mut pg_sys::EState,
    rinfo: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    plan_slot: *mut pg_sys::TupleTableSlot,
) -> *mut pg_sys::TupleTableSlot {
    per_row(rinfo, |targets| {
        let (old_values, old_nulls) = old_row(rinfo, old_tuple(targets, plan_slot));
        let (values, nulls) = slot_values(slot);
        let tupdesc = (*(*rinfo).ri_RelationDesc).rd_att;
        let attributes = (*tupdesc).attrs.as_slice((*tupdesc).natts as usize);
        for &i in &targets.identity {
            let attr = &attributes[i];
            let same = old_nulls[i] == nulls[i] && (nulls[i] || output_text(attr.atttypid, old_values[i]) == output_text(attr.atttypid, values[i]));
            if !same {
                let column = CStr::from_ptr(attr.attname.data.as_ptr()).to_string_lossy();
                raise(
                    PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    format!("UPDATE cannot change key or partition column \"{column}\" of a Hudi table"),
                    Some("DELETE the row and INSERT it with the new value.".into()),
                );
            }
        }
        count_hidden_changes(targets, attributes, (&old_values, &old_nulls), (values, nulls));
        buffer_row(rinfo, targets, values, nulls, Change::Upsert, read_at(targets, plan_slot));
    });
    slot
}

/// Counts an updated row that the merge rules will not show as written: its ordering values
/// order below the old row's (a NULL below any value), or, in a partial-update table, it sets
/// a column to NULL, which keeps the old value.
unsafe fn count_hidden_changes(targets: &Targets, attributes: &[pg_sys::FormData_pg_attribute], old: (&[pg_sys::Datum], &[bool]), new: (&[pg_sys::Datum], &[bool])) {
    let order = targets.ordering.iter().map(|&i| match (old.1[i], new.1[i]) {
        (true, true) => Some(Ordering::Equal),
        (false, true) => Some(Ordering::Less),
        (true, false) => Some(Ordering::Greater),
        (false, false) => compare(attributes[i].atttypid, new.0[i], old.0[i]),
    });
    // The first difference decides; a pair that cannot be compared says nothing.
    if let Some(Some(Ordering::Less)) = order.into_iter().find(|o| *o != Some(Ordering::Equal)) {
        targets.losing.set(targets.losing.get() + 1);
    }
    if targets.partial_update {
        let written = targets.columns.iter().enumerate().filter(|(i, c)| c.is_some() && !targets.ordering.contains(i));
        if written.into_iter().any(|(i, _)| new.1[i] && !old.1[i]) {
            targets.nulls_kept.set(targets.nulls_kept.get() + 1);
        }
    }
}

/// `a` against `b` by their type's btree order (text in the C collation: the byte order in
/// which the engine compares strings); `None` for types without one.
unsafe fn compare(type_oid: pg_sys::Oid, a: pg_sys::Datum, b: pg_sys::Datum) -> Option<Ordering> {
    let cache = pg_sys::lookup_type_cache(type_oid, pg_sys::TYPECACHE_CMP_PROC_FINFO as i32);
    if cache.is_null() || (*cache).cmp_proc_finfo.fn_oid == pg_sys::InvalidOid {
        return None;
    }
    let result = pg_sys::FunctionCall2Coll(&mut (*cache).cmp_proc_finfo, pg_sys::C_COLLATION_OID, a, b);
    Some((result.value() as i32).cmp(&0))
}

/// DELETE removes the old row's key, whatever its ordering value.
#[pg_guard]
pub unsafe extern "C-unwind" fn exec_foreign_delete(
    _estate: *mut pg_sys::EState,
    rinfo: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    plan_slot: *mut pg_sys::TupleTableSlot,
) -> *mut pg_sys::TupleTableSlot {
    per_row(rinfo, |targets| {
        let mut tuple = old_tuple(targets, plan_slot);
        if !(*rinfo).ri_projectReturning.is_null() {
            // RETURNING shows the deleted row: a copy the slot owns (the row's memory is reset
            // before RETURNING is computed).
            let previous = pg_sys::MemoryContextSwitchTo((*slot).tts_mcxt);
            let copy = pg_sys::heap_copytuple(&mut tuple);
            pg_sys::MemoryContextSwitchTo(previous);
            pg_sys::ExecForceStoreHeapTuple(copy, slot, true);
        }
        let (old_values, old_nulls) = old_row(rinfo, tuple);
        buffer_row(rinfo, targets, &old_values, &old_nulls, Change::Delete, read_at(targets, plan_slot));
    });
    slot
}

#[pg_guard]
pub unsafe extern "C-unwind" fn end_foreign_modify(_estate: *mut pg_sys::EState, rinfo: *mut pg_sys::ResultRelInfo) {
    let targets = (*rinfo).ri_FdwState as *mut Targets;
    if !targets.is_null() {
        xact::finish_flush((*(*rinfo).ri_RelationDesc).rd_id);
        tell_hidden_changes(&*targets);
        // Deleting the state's context drops the targets (`drop_targets`).
        pg_sys::MemoryContextDelete((*(*targets).row_memory).parent);
        (*rinfo).ri_FdwState = std::ptr::null_mut();
    }
}

/// One NOTICE per statement for the rows [`count_hidden_changes`] counted.
fn tell_hidden_changes(targets: &Targets) {
    use pgrx::pg_sys::panic::ErrorReport;
    let name = &targets.name;
    let (losing, nulls_kept) = (targets.losing.get(), targets.nulls_kept.get());
    if losing > 0 {
        ErrorReport::new(
            PgSqlErrorCode::ERRCODE_WARNING,
            format!("{losing} updated rows of \"{name}\" will not show: their new ordering value is lower than the old one, or NULL"),
            "pg_hudi",
        )
        .set_detail("In a Hudi table merged by event time, the version of a key with the greatest ordering value wins.")
        .set_hint("Write an ordering value at least the row's; see \"Merge rules\" in the README.")
        .report(PgLogLevel::NOTICE);
    }
    if nulls_kept > 0 {
        ErrorReport::new(
            PgSqlErrorCode::ERRCODE_WARNING,
            format!("{nulls_kept} updated rows of \"{name}\" keep their old values where the UPDATE set NULL"),
            "pg_hudi",
        )
        .set_detail("A partial_update table keeps the non-NULL value of each column: NULL means \"not written\".")
        .set_hint("See \"Merge rules\" in the README.")
        .report(PgLogLevel::NOTICE);
    }
}
