//! Buffered writes (`write_mode 'buffered'`, README "Buffered writes"): a transaction's rows go
//! to `hudi.write_buffer`, a WAL-logged heap table, instead of a Hudi deltacommit of their own,
//! so its COMMIT costs what a heap insert costs. The background worker flushes committed rows
//! into one deltacommit per flush ([`flush`]); readers on this server merge the rows not yet
//! flushed ([`reader_with_buffer`]).
//!
//! A transaction's rows wait in memory and are written as chunks (Avro records of upserts or
//! deletes each, [`chunks`]) when they reach `hudi.write_batch_rows`, and at PRE_COMMIT, whose
//! last chunk is marked `commits`: rows are ordered by their transaction's commit, then as
//! written. Its reads of the table merge the rows in memory after the buffer's.

pub mod capture;
pub(crate) mod chunks;
pub mod flush;
pub mod limit;
pub mod mirror;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use engine::read::TableReader;
use engine::table::TableConfig;
use engine::write::rows::TableRows;
use engine::write::Change;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::datum::{ConversionError, PgKind, RowBuffer};
use crate::error::{raise, OrReport};
use crate::fdw::table::ForeignHudiTable;
use crate::role::as_pg_hudi;

/// The table option that turns buffering on.
pub const WRITE_MODE: &str = "write_mode";
pub const WRITE_MODES: &[&str] = &["direct", "buffered"];

/// Whether writes to `table` go through the buffer.
pub fn is_buffered(table: &ForeignHudiTable) -> bool {
    table.options.get(WRITE_MODE).is_some_and(|mode| mode == "buffered")
}

/// What rows of a foreign table are written as, kept per backend: loading it reads the
/// table's configuration and latest schema from storage, which a buffered write must not do
/// for every transaction. It is loaded again when the foreign table's columns change (an ALTER
/// on this server, which changes the Hudi schema too); a schema change made on another server
/// reaches the rows when they are flushed, aligned by column name.
struct Shape {
    columns: Vec<(String, pg_sys::Oid, bool)>,
    location: String,
    rows: Arc<TableRows>,
    config: Arc<TableConfig>,
}

/// One transaction's rows for one table, not yet written to the buffer.
struct BufferedWrite {
    location: String,
    relation: pg_sys::Oid,
    shape: Arc<Shape>,
    /// Rows not yet written, in order: batches closed when the kind of change or the
    /// subtransaction switched or a read needed them, each with the nesting level of the
    /// (sub)transaction that wrote it; then the rows being added, of one kind and level.
    held: Vec<(Change, RecordBatch, i32)>,
    change: Change,
    level: i32,
    rows: RowBuffer,
}

impl BufferedWrite {
    /// Closes the rows being added into a batch of [`Self::held`].
    fn hold(&mut self) {
        if self.rows.len() > 0 {
            self.held.push((self.change, self.rows.take(), self.level));
        }
    }

    /// Every row not yet written, closed into batches.
    fn take_all(&mut self) -> Vec<(Change, RecordBatch)> {
        self.hold();
        std::mem::take(&mut self.held).into_iter().map(|(change, rows, _)| (change, rows)).collect()
    }

    /// [`Self::take_all`] of a write that ends here.
    fn into_batches(self) -> Vec<(Change, RecordBatch)> {
        let mut held: Vec<(Change, RecordBatch)> = self.held.into_iter().map(|(change, rows, _)| (change, rows)).collect();
        if self.rows.len() > 0 {
            held.push((self.change, self.rows.finish()));
        }
        held
    }

    fn held_rows(&self) -> usize {
        self.held.iter().map(|(_, rows, _)| rows.num_rows()).sum::<usize>() + self.rows.len()
    }
}

/// The nesting level of the current (sub)transaction: 1 at the top.
fn nest_level() -> i32 {
    // SAFETY: a plain read of the backend's transaction state.
    unsafe { pg_sys::GetCurrentTransactionNestLevel() }
}

/// A subtransaction's end: the rows it wrote are dropped with its rollback, and belong to its
/// parent once it commits. (Rows are written to the buffer only at the top level, so a rollback
/// to a savepoint has nothing to take back there.)
#[pg_guard]
unsafe extern "C-unwind" fn on_subtransaction_event(
    event: pg_sys::SubXactEvent::Type,
    _sub: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    let level = nest_level();
    match event {
        pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB => WRITES.with(|w| {
            for write in w.borrow_mut().values_mut() {
                write.hold();
                write.held.retain(|(_, _, l)| *l < level);
            }
        }),
        pg_sys::SubXactEvent::SUBXACT_EVENT_COMMIT_SUB => WRITES.with(|w| {
            for write in w.borrow_mut().values_mut() {
                write.hold();
                write.held.iter_mut().filter(|(_, _, l)| *l >= level).for_each(|(_, _, l)| *l = level - 1);
            }
        }),
        _ => {}
    }
}

fn register_subtransaction_callback() {
    if SUBTRANSACTIONS.with(|r| r.replace(true)) {
        return;
    }
    // SAFETY: registering a callback for the rest of the backend's life.
    unsafe { pg_sys::RegisterSubXactCallback(Some(on_subtransaction_event), std::ptr::null_mut()) };
}

thread_local! {
    static SHAPES: RefCell<HashMap<u32, Arc<Shape>>> = RefCell::new(HashMap::new());
    static SUBTRANSACTIONS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static WRITES: RefCell<BTreeMap<u32, BufferedWrite>> = const { RefCell::new(BTreeMap::new()) };
    /// The readers with buffered rows the current statement opened, by location.
    static STATEMENT_READERS: RefCell<Vec<((crate::fdw::table_state::Statement, pg_sys::CommandId), String, TableReader)>> = const { RefCell::new(Vec::new()) };
}

/// The columns of `relation` as the shape cache compares them.
unsafe fn columns_of(relation: pg_sys::Relation) -> Vec<(String, pg_sys::Oid, bool)> {
    attributes_of(relation).iter().map(|a| (pgrx::name_data_to_str(&a.attname).to_owned(), a.atttypid, a.attisdropped)).collect()
}

unsafe fn attributes_of<'r>(relation: pg_sys::Relation) -> &'r [pg_sys::FormData_pg_attribute] {
    let tupdesc = (*relation).rd_att;
    (*tupdesc).attrs.as_slice((*tupdesc).natts as usize)
}

/// Whether `relation` has the columns `columns` (compared in place: this runs for every
/// statement of a buffered write).
unsafe fn has_columns(relation: pg_sys::Relation, columns: &[(String, pg_sys::Oid, bool)]) -> bool {
    let attributes = attributes_of(relation);
    attributes.len() == columns.len()
        && attributes.iter().zip(columns).all(|(a, (name, type_oid, dropped))| {
            a.atttypid == *type_oid && a.attisdropped == *dropped && pgrx::name_data_to_str(&a.attname) == name
        })
}

/// The shape of the foreign table `relation` (of `table`), from the cache or loaded.
unsafe fn shape_of(relation: pg_sys::Relation, table: &ForeignHudiTable) -> Arc<Shape> {
    let relid = (*relation).rd_id.to_u32();
    let location = table.uri.to_string();
    let cached = SHAPES.with(|s| s.borrow().get(&relid).filter(|s| s.location == location && has_columns(relation, &s.columns)).cloned());
    if let Some(shape) = cached {
        return shape;
    }
    let columns = columns_of(relation);
    let storage = table.storage();
    let (config, avro) = table.config_and_schema(&storage);
    // Rows written after an ALTER of this transaction are in its schema.
    let avro = crate::xact::changed_schema_of(&location).unwrap_or(avro);
    let rows = TableRows::new(&config, &avro).or_report();
    let shape = Arc::new(Shape { columns, location, rows: Arc::new(rows), config: Arc::new(config) });
    SHAPES.with(|s| s.borrow_mut().insert(relid, shape.clone()));
    shape
}

/// Begins (or continues) this transaction's buffered write of the foreign table `relation`:
/// the data columns rows are given in, and the table's configuration.
///
/// # Safety
/// `relation` must be an open foreign table of `table`.
pub unsafe fn begin(relation: pg_sys::Relation, table: &ForeignHudiTable) -> (SchemaRef, Arc<TableConfig>) {
    crate::xact::register_callbacks();
    register_subtransaction_callback();
    let relid = (*relation).rd_id;
    let existing = WRITES.with(|w| w.borrow().get(&relid.to_u32()).map(|w| w.shape.clone()));
    let shape = match existing {
        Some(shape) if has_columns(relation, &shape.columns) => shape,
        _ => {
            let shape = shape_of(relation, table);
            // Rows held in the columns before an ALTER of this transaction go first, as they
            // are (rows are written and read by column name).
            let earlier = WRITES.with(|w| {
                let mut writes = w.borrow_mut();
                let write = writes.get_mut(&relid.to_u32())?;
                write.hold();
                Some(std::mem::take(&mut write.held))
            });
            let write = BufferedWrite {
                location: shape.location.clone(),
                relation: relid,
                shape: shape.clone(),
                held: earlier.unwrap_or_default(),
                change: Change::Upsert,
                level: nest_level(),
                rows: RowBuffer::new(shape.rows.data_schema().clone()),
            };
            WRITES.with(|w| w.borrow_mut().insert(relid.to_u32(), write));
            shape
        }
    };
    (shape.rows.data_schema().clone(), shape.config.clone())
}

/// Adds one row of `change` to the buffered write of `relid` (begun by [`begin`]).
pub fn push(relid: pg_sys::Oid, change: Change, row: &[Option<(pg_sys::Datum, PgKind)>]) -> Result<(), ConversionError> {
    let full = WRITES.with(|w| {
        let mut writes = w.borrow_mut();
        let write = writes.get_mut(&relid.to_u32()).expect("begun in BeginForeignModify");
        let level = nest_level();
        if write.change != change || write.level != level {
            write.hold();
            write.change = change;
            write.level = level;
        }
        write.rows.push(row)?;
        Ok::<_, ConversionError>(write.held_rows() >= crate::guc::WRITE_BATCH_ROWS.get().max(1) as usize)
    })?;
    if full {
        write_held(relid);
    }
    Ok(())
}

/// Adds the rows `rows` of `change` to the buffered write of `relid` (begun by [`begin`]).
pub fn push_batch(relid: pg_sys::Oid, change: Change, rows: RecordBatch) {
    let full = WRITES.with(|w| {
        let mut writes = w.borrow_mut();
        let write = writes.get_mut(&relid.to_u32()).expect("begun by the capture");
        write.hold();
        write.held.push((change, rows, nest_level()));
        write.held_rows() >= crate::guc::WRITE_BATCH_ROWS.get().max(1) as usize
    });
    if full {
        write_held(relid);
    }
}

/// What rows of the foreign table `relation` (of `table`) are written as.
///
/// # Safety
/// `relation` must be an open foreign table of `table`.
pub unsafe fn table_rows(relation: pg_sys::Relation, table: &ForeignHudiTable) -> Arc<TableRows> {
    shape_of(relation, table).rows.clone()
}

/// The data columns of the buffered write of `relid`, when this transaction began one.
pub fn data_schema_if_begun(relid: pg_sys::Oid) -> Option<SchemaRef> {
    WRITES.with(|w| w.borrow().get(&relid.to_u32()).map(|w| w.shape.rows.data_schema().clone()))
}

/// The data columns of the buffered write of `relid` (begun by [`begin`]).
pub fn data_schema(relid: pg_sys::Oid) -> SchemaRef {
    data_schema_if_begun(relid).expect("begun in BeginForeignModify")
}

/// The partition path and record key of each of `rows` (data columns) of the table `relid`.
pub fn keys_of(relid: pg_sys::Oid, rows: &RecordBatch) -> Vec<(String, String)> {
    let shape = WRITES.with(|w| w.borrow().get(&relid.to_u32()).map(|w| w.shape.clone())).expect("begun in BeginForeignModify");
    shape.rows.keys_of(rows).or_report()
}

/// A chunk's `change` in `hudi.write_buffer`.
fn change_code(change: Change) -> i8 {
    match change {
        Change::Upsert => b'u' as i8,
        Change::Delete => b'd' as i8,
    }
}

/// The rows of chunks of `hudi.write_buffer` read in order (change, row count, bytes): each
/// run of one change and schema one batch.
fn decode_chunks(chunks: &[(i8, i32, Vec<u8>)]) -> Vec<(Change, RecordBatch)> {
    let chunks: Vec<engine::write::rows::Chunk> = chunks
        .iter()
        .map(|(change, rows, bytes)| {
            let change = if *change == change_code(Change::Delete) { Change::Delete } else { Change::Upsert };
            (change, (*rows).max(0) as usize, bytes.as_slice())
        })
        .collect();
    chunks::decode(&chunks)
}

/// Writes one chunk of rows to the buffer (with `commits`: the transaction's last).
fn write_chunk(location: &str, relation: pg_sys::Oid, change: Change, rows: &RecordBatch, commits: bool) {
    limit::check(rows.num_rows());
    let bytes = chunks::encode(rows);
    // SAFETY: inside the transaction, on the main thread.
    unsafe { insert_chunk(location, relation, change_code(change), rows.num_rows() as i32, &bytes, commits) };
}

unsafe extern "C-unwind" {
    /// `nextval()` of sequence `relid` (commands/sequence.h; pgrx binds only the SQL function).
    #[link_name = "nextval_internal"]
    fn postgres_nextval_internal(relid: pg_sys::Oid, check_permissions: bool) -> i64;
}

/// The next value of sequence `relid`, without a permission check.
///
/// # Safety
/// Inside a transaction, on the main thread.
unsafe fn nextval_internal(relid: pg_sys::Oid) -> i64 {
    // An ERROR inside comes back as a Rust panic, as from pgrx's own bindings.
    pg_sys::submodules::ffi::pg_guard_ffi_boundary(|| postgres_nextval_internal(relid, false))
}

thread_local! {
    /// `hudi.write_buffer` and its position sequence, looked up once and again after any
    /// relation was renamed, created or dropped (a syscache invalidation of relation names).
    static BUFFER_RELATIONS: std::cell::Cell<Option<(pg_sys::Oid, pg_sys::Oid)>> = const { std::cell::Cell::new(None) };
    static BUFFER_RELATIONS_CALLBACK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_buffer_relations(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    BUFFER_RELATIONS.with(|r| r.set(None));
}

/// The oids of `hudi.write_buffer` and `hudi.write_buffer_position`.
///
/// # Safety
/// Inside a transaction, on the main thread.
unsafe fn buffer_relations() -> (pg_sys::Oid, pg_sys::Oid) {
    if !BUFFER_RELATIONS_CALLBACK.with(|r| r.replace(true)) {
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::RELNAMENSP as i32,
            Some(forget_buffer_relations),
            pg_sys::Datum::from(0usize),
        );
    }
    if let Some(kept) = BUFFER_RELATIONS.with(|r| r.get()) {
        return kept;
    }
    let schema = pg_sys::get_namespace_oid(c"hudi".as_ptr(), false);
    let table = pg_sys::get_relname_relid(c"write_buffer".as_ptr(), schema);
    let sequence = pg_sys::get_relname_relid(c"write_buffer_position".as_ptr(), schema);
    if table == pg_sys::InvalidOid || sequence == pg_sys::InvalidOid {
        raise(PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE, "pg_hudi's write buffer does not exist", Some("ALTER EXTENSION pg_hudi UPDATE".into()));
    }
    BUFFER_RELATIONS.with(|r| r.set(Some((table, sequence))));
    (table, sequence)
}

/// Inserts a row into `hudi.write_buffer` as PostgreSQL inserts a catalog row: the heap tuple
/// (TOASTed as need be) and its index entries, with the columns' defaults computed here — no
/// SQL statement, no executor, and no switch to pg_hudi's role (whose table it is). A one-row
/// transaction's COMMIT is this insert: through SPI it was a third of what the buffered write
/// added to the transaction. Columns are found by name; one this does not know gets NULL (a
/// version that adds a column must set it here). The CHECK of `change` is this code's.
///
/// # Safety
/// Inside a transaction, on the main thread.
unsafe fn insert_chunk(location: &str, relation: pg_sys::Oid, change: i8, row_count: i32, bytes: &[u8], commits: bool) {
    let (table, sequence) = buffer_relations();
    let rel = pg_sys::table_open(table, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
    let tupdesc = (*rel).rd_att;
    let natts = (*tupdesc).natts as usize;
    let mut values = vec![pg_sys::Datum::from(0usize); natts];
    let mut nulls = vec![true; natts];
    for (i, attribute) in (*tupdesc).attrs.as_slice(natts).iter().enumerate() {
        if attribute.attisdropped {
            continue;
        }
        let value = match pgrx::name_data_to_str(&attribute.attname) {
            "location" => location.into_datum(),
            "relation" => Some(pg_sys::Datum::from(relation)),
            "transaction" => Some(pg_sys::Datum::from(pg_sys::GetTopFullTransactionId().value)),
            "position" => Some(pg_sys::Datum::from(nextval_internal(sequence))),
            "change" => Some(pg_sys::Datum::from(change)),
            "row_count" => Some(pg_sys::Datum::from(row_count)),
            "rows" => bytes.into_datum(),
            "commits" => Some(pg_sys::Datum::from(commits)),
            "written_at" => Some(pg_sys::Datum::from(pg_sys::GetCurrentTimestamp())),
            _ => None,
        };
        if let Some(value) = value {
            values[i] = value;
            nulls[i] = false;
        }
    }
    let tuple = pg_sys::heap_form_tuple(tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
    pg_sys::CatalogTupleInsert(rel, tuple);
    pg_sys::heap_freetuple(tuple);
    // The lock is kept to the end of the transaction, as a statement's is.
    pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
    // Seen by the transaction's later reads of the buffer, as after an INSERT statement.
    pg_sys::CommandCounterIncrement();
}

/// Writes the rows this transaction holds in memory for the foreign table `relid` to the
/// buffer — not in a subtransaction, whose rollback would take its parent's rows with it (the
/// rows stay in memory then).
fn write_held(relid: pg_sys::Oid) {
    if nest_level() > 1 {
        return;
    }
    let held = WRITES.with(|w| {
        let mut writes = w.borrow_mut();
        let write = writes.get_mut(&relid.to_u32())?;
        Some((write.location.clone(), write.relation, write.take_all()))
    });
    if let Some((location, relation, batches)) = held {
        for (change, rows) in batches {
            write_chunk(&location, relation, change, &rows, false);
        }
    }
}

/// The rows this transaction holds in memory for the table at `location`, in order: a read of
/// the table merges them after the buffer's.
fn held_rows(location: &str) -> Vec<(Change, RecordBatch)> {
    WRITES.with(|w| {
        let mut writes = w.borrow_mut();
        let mut out = Vec::new();
        for write in writes.values_mut().filter(|w| w.location == location) {
            write.hold();
            out.extend(write.held.iter().map(|(change, rows, _)| (*change, rows.clone())));
        }
        out
    })
}

/// TRUNCATE of the table at `location`: deletes the rows of its buffer that committed, and
/// those this transaction wrote.
pub fn truncate(location: &str) {
    WRITES.with(|w| {
        for write in w.borrow_mut().values_mut().filter(|w| w.location == location) {
            drop(write.take_all());
        }
    });
    let args: Vec<DatumWithOid> = vec![location.into()];
    as_pg_hudi(|| {
        Spi::connect_mut(|client| {
            client
                .update("DELETE FROM hudi.write_buffer WHERE location = $1", None, &args)
                .unwrap_or_else(|e| crate::error::spi_failed("the write buffer", e));
        })
    });
}

/// PRE_COMMIT: writes what each buffered write holds, the last chunk of each table marked as
/// the transaction's commit (written empty if need be). Returns whether there was any (the
/// flusher is woken once the transaction committed).
pub(crate) fn prepare_commit() -> bool {
    let writes = WRITES.with(|w| std::mem::take(&mut *w.borrow_mut()));
    let mut by_location: BTreeMap<String, Vec<BufferedWrite>> = BTreeMap::new();
    for write in writes.into_values() {
        by_location.entry(write.location.clone()).or_default().push(write);
    }
    for (location, writes) in &mut by_location {
        // Two foreign tables of one location share its commit mark.
        let (first_relation, first_schema) = (writes[0].relation, writes[0].shape.rows.data_schema().clone());
        let mut chunks: Vec<(pg_sys::Oid, Change, RecordBatch)> = Vec::new();
        for write in std::mem::take(writes) {
            let relation = write.relation;
            chunks.extend(write.into_batches().into_iter().map(|(change, rows)| (relation, change, rows)));
        }
        let last = chunks.pop().unwrap_or_else(|| (first_relation, Change::Upsert, RecordBatch::new_empty(first_schema)));
        for (relation, change, rows) in chunks {
            write_chunk(location, relation, change, &rows, false);
        }
        write_chunk(location, last.0, last.1, &last.2, true);
    }
    !by_location.is_empty()
}

/// Whether this transaction wrote to the write buffer.
pub(crate) fn writes() -> bool {
    WRITES.with(|w| !w.borrow().is_empty())
}

/// ABORT: the rows in memory are dropped (those written to the buffer go with the transaction).
pub(crate) fn forget() {
    WRITES.with(|w| w.borrow_mut().clear());
    chunks::forget();
}

/// How many flushes of `location` committed, and the buffered rows of it this transaction sees
/// (committed ones by commit, then its own), read in one snapshot.
fn buffered_rows(location: &str) -> (i64, Vec<(Change, RecordBatch)>) {
    let args: Vec<DatumWithOid> = vec![location.into()];
    let (flushes, chunks) = as_pg_hudi(|| {
        Spi::connect(|client| {
            let flushes = flush_count(client, &args);
            let rows = client
                .select(
                    "SELECT change, row_count, rows FROM hudi.write_buffer WHERE location = $1 \
                     ORDER BY pg_catalog.max(position) FILTER (WHERE commits) OVER (PARTITION BY transaction) NULLS LAST, position",
                    None,
                    &args,
                )
                .unwrap_or_else(|e| crate::error::spi_failed("the write buffer", e));
            let chunks: Vec<(i8, i32, Vec<u8>)> =
                rows.filter_map(|row| Some((row.get::<i8>(1).ok()??, row.get::<i32>(2).ok()??, row.get::<Vec<u8>>(3).ok()??))).collect();
            (flushes, chunks)
        })
    });
    (flushes, decode_chunks(&chunks))
}

fn flush_count(client: &pgrx::spi::SpiClient<'_>, args: &[DatumWithOid]) -> i64 {
    client
        .select("SELECT flushes FROM hudi.buffer_flushes WHERE location = $1", None, args)
        .unwrap_or_else(|e| crate::error::spi_failed("the write buffer", e))
        .first()
        .get_one::<i64>()
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// Runs `f` with the latest snapshot as the active one: what committed by now, and what this
/// transaction wrote before, whatever its isolation level (the lake is read as of now too).
fn in_latest_snapshot<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the snapshot stack, on the main thread inside a transaction; an ERROR in `f`
    // leaves the stack to the transaction's abort.
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot()) };
    let out = f();
    // SAFETY: pops what was pushed above.
    unsafe { pg_sys::PopActiveSnapshot() };
    out
}

/// The table at `location`, as `open` reads it (listing it after reading the commit intents),
/// with the rows of its buffer merged: consistent, because the flushes counted before the
/// listing are those counted with the buffer's rows — a flush that committed in between (its
/// rows gone from the buffer, its commit perhaps not in the listing) makes it read again.
///
/// A statement sees the table as its first read did (its planning and its scans read the same
/// state); the rows its transaction holds in memory are those of that read.
pub fn reader_with_buffer(location: &str, mut open: impl FnMut() -> TableReader) -> TableReader {
    // SAFETY: a read of the transaction's command counter.
    let statement = (crate::fdw::table_state::current_statement(), unsafe { pg_sys::GetCurrentCommandId(false) });
    let kept = STATEMENT_READERS.with(|r| {
        let mut readers = r.borrow_mut();
        readers.retain(|(s, _, _)| *s == statement);
        readers.iter().find(|(_, l, _)| l == location).map(|(_, _, reader)| reader.clone())
    });
    if let Some(reader) = kept {
        return reader;
    }
    let args: Vec<DatumWithOid> = vec![location.into()];
    for _ in 0..20 {
        let before = in_latest_snapshot(|| as_pg_hudi(|| Spi::connect(|client| flush_count(client, &args))));
        // Checked with a LIST of its timeline: a state kept from earlier in the statement (its
        // planning) may be older than the flushes counted.
        let reader = open();
        let (after, mut chunks) = in_latest_snapshot(|| buffered_rows(location));
        if after == before {
            chunks.extend(held_rows(location));
            let reader = reader.with_buffered(chunks).or_report();
            STATEMENT_READERS.with(|r| r.borrow_mut().push((statement, location.to_owned(), reader.clone())));
            return reader;
        }
    }
    raise(
        PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        format!("could not read a consistent state of the buffered table {location}: it was flushed during every read"),
        Some("Retry the statement.".into()),
    )
}
