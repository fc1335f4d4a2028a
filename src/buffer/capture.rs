//! Capturing a mirrored heap table's changes from the WAL (`hudi.mirror(…, capture => 'wal')`,
//! README "Mirroring heap tables"): the heap table's writers pay nothing but the WAL they write
//! anyway; the flush round of the database decodes each mirror's logical replication slot and
//! puts the committed changes into the target's write buffer, from where they are flushed as
//! buffered writes are.
//!
//! The decoding is pg_hudi's own output plugin (`_PG_output_plugin_init`, plugin name
//! `pg_hudi`): its callbacks turn the heap tuples straight into Arrow rows, with no text
//! protocol in between, and write one output row per decoded commit (which bounds one
//! decoding by transactions). Exactly once: the slot is only peeked; the end of the last
//! captured transaction is stored with the buffered rows, in one transaction, and the slot is
//! advanced to it after that commits; a transaction ending at or before the stored position is
//! skipped (captured before a crash that came before the advance). A decoding that found no
//! change of the heap table only advances the slot. Each mirror has a slot of its own, so the
//! worker decodes the WAL once per mirror. The heap table has
//! `REPLICA IDENTITY FULL` while it is mirrored this way: a delete needs the old row's
//! partition and ordering fields, and an update's unchanged TOASTed values come from the old
//! row.

use std::cell::RefCell;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use engine::write::Change;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::{PgRelation, PgSqlErrorCode};

use super::mirror::Mapping;
use crate::datum::RowBuffer;
use crate::error::raise;
use crate::role::{as_pg_hudi, as_role, in_subtransaction};
use crate::spi::read_one;

/// The output plugin's name (the library's: PostgreSQL loads it by that name).
pub const PLUGIN: &str = "pg_hudi";
/// The prefix of the slots this server's mirrors decode: `pg_hudi_mirror_<database>_…`.
const SLOT_PREFIX: &str = "pg_hudi_mirror_";
/// The most transactions one decoding of a slot takes (their rows are in memory at once).
const MAX_TRANSACTIONS: i64 = 20_000;
/// How often a flush round decodes the slots of its mirrors.
pub const POLL: Duration = Duration::from_millis(100);
/// How often an idle mirror records that it is caught up (what `hudi.mirrors` shows as lag).
const HEARTBEAT: Duration = Duration::from_secs(1);

/// What one decoding of a mirror's slot collects, filled by the plugin's callbacks.
struct Decoding {
    heap: pg_sys::Oid,
    /// The target's rows (their keys tell an UPDATE of the key).
    table_rows: std::sync::Arc<engine::write::rows::TableRows>,
    target_name: String,
    schema: SchemaRef,
    /// Transactions ending at or before this position were captured before.
    captured: u64,
    /// The mapping of the heap table's columns as the decoded tuples have them.
    mapping: Option<(Vec<(String, pg_sys::Oid)>, std::rc::Rc<Mapping>)>,
    /// Whether the transaction being decoded is skipped.
    skip: bool,
    /// What committed, in order (transactions are decoded whole, in commit order): closed
    /// batches, then the rows being added, of one kind of change. After a truncate of the
    /// target when `truncate`.
    batches: Vec<(Change, RecordBatch)>,
    change: Change,
    rows: RowBuffer,
    truncate: bool,
    /// The end of the last transaction decoded.
    last_end: Option<u64>,
}

impl Decoding {
    fn close(&mut self) {
        if self.rows.len() > 0 {
            self.batches.push((self.change, self.rows.take()));
        }
    }

    fn push(&mut self, change: Change, row: &[Option<(pg_sys::Datum, crate::datum::PgKind)>]) {
        if change != self.change || self.rows.len() >= crate::guc::WRITE_BATCH_ROWS.get().max(1) as usize {
            self.close();
            self.change = change;
        }
        self.rows.push(row).unwrap_or_else(|why| raise(PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE, why, None));
    }
}

thread_local! {
    /// The decoding under way in this process (only the worker's capture sets one).
    static DECODING: RefCell<Option<Decoding>> = const { RefCell::new(None) };
}

fn with_decoding<R>(f: impl FnOnce(&mut Decoding) -> R) -> Option<R> {
    DECODING.with(|d| d.borrow_mut().as_mut().map(f))
}

/// The output plugin's entry point, which PostgreSQL looks up in the library named by a
/// slot's plugin.
///
/// # Safety
/// Called by PostgreSQL with its callbacks struct.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn _PG_output_plugin_init(callbacks: *mut pg_sys::OutputPluginCallbacks) {
    (*callbacks).startup_cb = Some(on_startup);
    (*callbacks).begin_cb = Some(on_begin);
    (*callbacks).change_cb = Some(on_change);
    (*callbacks).truncate_cb = Some(on_truncate);
    (*callbacks).commit_cb = Some(on_commit);
}

/// The plugin's start: text output (one row per commit); refuses a decoding that is not the
/// worker's capture.
///
/// # Safety
/// Called by PostgreSQL's logical decoding with valid pointers (as all the callbacks below).
#[pg_guard]
unsafe extern "C-unwind" fn on_startup(_ctx: *mut pg_sys::LogicalDecodingContext, options: *mut pg_sys::OutputPluginOptions, is_init: bool) {
    (*options).output_type = pg_sys::OutputPluginOutputType::OUTPUT_PLUGIN_TEXTUAL_OUTPUT;
    // Creating a slot (hudi.mirror does) decodes nothing; a decoding outside the worker's
    // capture would have nowhere to put the rows.
    if !is_init && DECODING.with(|d| d.borrow().is_none()) {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "the output plugin pg_hudi decodes only for the mirrors of pg_hudi's background worker",
            Some("Use another output plugin (pgoutput, test_decoding) for your own slots.".into()),
        );
    }
}

/// A decoded transaction begins: it is skipped when it ended at or before the captured position.
///
/// # Safety
/// See [`on_startup`].
#[pg_guard]
unsafe extern "C-unwind" fn on_begin(_ctx: *mut pg_sys::LogicalDecodingContext, txn: *mut pg_sys::ReorderBufferTXN) {
    let end = (*txn).end_lsn;
    with_decoding(|d| d.skip = end <= d.captured);
}

/// Whether the varlena `datum` is a pointer to a TOASTed value on disk (an UPDATE's unchanged
/// value, whose chunks the WAL does not carry).
///
/// # Safety
/// `datum` must point to a non-NULL varlena value.
unsafe fn is_on_disk_toast(datum: pg_sys::Datum) -> bool {
    let bytes = datum.cast_mut_ptr::<u8>();
    // VARATT_IS_EXTERNAL_ONDISK: a 1-byte header of 0x01 (little-endian), tag VARTAG_ONDISK.
    *bytes == 0x01 && *bytes.add(1) == pg_sys::vartag_external::VARTAG_ONDISK as u8
}

/// A change of a committed transaction: one of the heap table's becomes rows of the target (an
/// UPDATE of the key also a delete of the old key).
///
/// # Safety
/// See [`on_startup`].
#[pg_guard]
unsafe extern "C-unwind" fn on_change(
    _ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    relation: pg_sys::Relation,
    change: *mut pg_sys::ReorderBufferChange,
) {
    let wanted = with_decoding(|d| !d.skip && d.heap == (*relation).rd_id).unwrap_or(false);
    if !wanted {
        return;
    }
    let heap = PgRelation::from_pg(relation);
    let tupdesc = heap.tuple_desc().as_ptr();
    let tuples = (*change).data.tp;
    let tuple_of = |buffer: *mut pg_sys::ReorderBufferTupleBuf| (!buffer.is_null()).then(|| &raw mut (*buffer).tuple);
    let (old, new) = (tuple_of(tuples.oldtuple), tuple_of(tuples.newtuple));
    let mapping = DECODING.with(|d| {
        let mut d = d.borrow_mut();
        let d = d.as_mut().expect("checked above");
        match &d.mapping {
            // Compared in place: this runs for every decoded row.
            Some((cached, mapping)) if super::mirror::same_columns(cached, tupdesc) => mapping.clone(),
            _ => {
                let made = std::rc::Rc::new(super::mirror::mapping(&heap, &d.schema, &[], &d.target_name));
                d.mapping = Some((super::mirror::columns_of(&heap), made.clone()));
                made
            }
        }
    });
    let old_values = old.map(|t| super::mirror::deform(t, tupdesc));
    let new_values = new.map(|t| {
        let (mut values, nulls) = super::mirror::deform(t, tupdesc);
        for (i, value) in values.iter_mut().enumerate() {
            let attribute = (*tupdesc).attrs.as_slice((*tupdesc).natts as usize)[i];
            if nulls[i] || attribute.attlen != -1 || !is_on_disk_toast(*value) {
                continue;
            }
            // An unchanged TOASTed value: the old row (REPLICA IDENTITY FULL) has it.
            match &old_values {
                Some((old, old_nulls)) if !old_nulls[i] && !is_on_disk_toast(old[i]) => *value = old[i],
                _ => raise(
                    PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!("an UPDATE of table \"{}\" left a TOASTed value unchanged that the WAL does not carry", heap.name()),
                    Some("The table needs REPLICA IDENTITY FULL while hudi.mirror captures it from the WAL.".into()),
                ),
            }
        }
        (values, nulls)
    });
    let row = |values: &(Vec<pg_sys::Datum>, Vec<bool>)| super::mirror::select(&mapping, &values.0, &values.1);
    let action = (*change).action;
    use pg_sys::ReorderBufferChangeType::*;
    let changes: Vec<(Change, Vec<_>)> = match (action, &old_values, &new_values) {
        (REORDER_BUFFER_CHANGE_INSERT, _, Some(new)) => vec![(Change::Upsert, row(new))],
        (REORDER_BUFFER_CHANGE_UPDATE, Some(old), Some(new)) => {
            let (old, new) = (row(old), row(new));
            let (schema, rows) = DECODING.with(|d| d.borrow().as_ref().map(|d| (d.schema.clone(), d.table_rows.clone()))).expect("decoding");
            if super::mirror::key_changed(|batch| rows.keys_of(batch).unwrap_or_else(|e| crate::error::report(e)), &schema, &old, &new) {
                vec![(Change::Delete, old), (Change::Upsert, new)]
            } else {
                vec![(Change::Upsert, new)]
            }
        }
        (REORDER_BUFFER_CHANGE_DELETE, Some(old), _) => vec![(Change::Delete, row(old))],
        (REORDER_BUFFER_CHANGE_INSERT | REORDER_BUFFER_CHANGE_UPDATE | REORDER_BUFFER_CHANGE_DELETE, _, _) => raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("the WAL of a change of table \"{}\" lacks its old row", heap.name()),
            Some("The table needs REPLICA IDENTITY FULL while hudi.mirror captures it from the WAL.".into()),
        ),
        _ => Vec::new(),
    };
    with_decoding(|d| {
        for (change, row) in &changes {
            d.push(*change, row);
        }
    });
}

/// A TRUNCATE: of the heap table, the target is truncated before the rows that follow.
///
/// # Safety
/// See [`on_startup`]; `relations` holds `count` relations.
#[pg_guard]
unsafe extern "C-unwind" fn on_truncate(
    _ctx: *mut pg_sys::LogicalDecodingContext,
    _txn: *mut pg_sys::ReorderBufferTXN,
    count: std::ffi::c_int,
    relations: *mut pg_sys::Relation,
    _change: *mut pg_sys::ReorderBufferChange,
) {
    let relations = std::slice::from_raw_parts(relations, count.max(0) as usize);
    let ids: Vec<pg_sys::Oid> = relations.iter().map(|r| (**r).rd_id).collect();
    with_decoding(|d| {
        if !d.skip && ids.contains(&d.heap) {
            // What came before is gone, in the heap table and in its mirror.
            d.rows.take();
            d.batches.clear();
            d.truncate = true;
        }
    });
}

/// A transaction's commit: its position is the capture's, and one output row is written.
///
/// # Safety
/// See [`on_startup`].
#[pg_guard]
unsafe extern "C-unwind" fn on_commit(ctx: *mut pg_sys::LogicalDecodingContext, txn: *mut pg_sys::ReorderBufferTXN, _commit: pg_sys::XLogRecPtr) {
    let end = (*txn).end_lsn;
    with_decoding(|d| {
        if !d.skip {
            d.last_end = Some(end);
        }
    });
    // One output row per commit: the decoding stops after MAX_TRANSACTIONS of them.
    pg_sys::OutputPluginPrepareWrite(ctx, true);
    pg_sys::appendStringInfoChar((*ctx).out, b'c' as std::ffi::c_char);
    pg_sys::OutputPluginWrite(ctx, true);
}

/// Runs `f` (a decoding or a slot's advance) without the LOG lines PostgreSQL writes at the
/// start of every decoding: several per mirror every [`POLL`] would fill the server log. Its
/// errors still reach the caller, which logs them. (The worker is a superuser.)
fn quietly<R>(f: impl FnOnce() -> R) -> R {
    crate::role::with_setting(c"log_min_messages", c"fatal", pg_sys::GucContext::PGC_SUSET, f)
}

/// An LSN as PostgreSQL writes it.
fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    Some(u64::from_str_radix(high, 16).ok()? << 32 | u64::from_str_radix(low, 16).ok()?)
}

/// The name of a new slot for mirroring `heap` in this database.
pub fn new_slot_name(heap: pg_sys::Oid) -> String {
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros();
    // SAFETY: a read of the backend's database.
    format!("{SLOT_PREFIX}{}_{}_{micros}", unsafe { pg_sys::MyDatabaseId }.to_u32(), heap.to_u32())
}

/// The advisory lock that orders making slots (hudi.mirror, shared) and removing the slots no
/// mirror uses (the worker, exclusive): a slot made by a transaction still running is not
/// taken for a leftover.
const SLOTS_LOCK: &str = "pg_catalog.hashtext('pg_hudi mirror slots')";

/// Makes the slot `name` (its consistent point: where decoding starts), before the current
/// transaction writes anything (PostgreSQL makes slots only then). A slot left by a
/// transaction that then failed is dropped by the worker.
pub fn create_slot(name: &str) {
    // SAFETY: a read of the transaction state.
    if unsafe { pg_sys::GetTopTransactionIdIfAny() } != pg_sys::InvalidTransactionId {
        raise(
            PgSqlErrorCode::ERRCODE_ACTIVE_SQL_TRANSACTION,
            "hudi.mirror with capture 'wal' must come before the transaction writes anything",
            Some("Call it in a transaction of its own, or first in the transaction.".into()),
        );
    }
    // Read-only SPI (crate::spi).
    Spi::connect(|client| {
        client.select(&format!("SELECT pg_catalog.pg_advisory_xact_lock_shared({SLOTS_LOCK})"), None, &[])?;
        let args: Vec<DatumWithOid> = vec![name.into(), PLUGIN.into()];
        // Slots are pg_hudi's: making one needs the REPLICATION attribute, which the tables'
        // owner need not have.
        as_pg_hudi(|| client.select("SELECT pg_catalog.pg_create_logical_replication_slot($1, $2)", None, &args).map(drop))
    })
    .unwrap_or_else(|e| crate::error::spi_failed("making the mirror's replication slot", e));
}

/// Why this server cannot capture changes from the WAL, with what to do about it; `None`
/// when it can: its `wal_level` is `logical`, and where PostgreSQL restricts output plugins
/// to `output_plugin_libraries` (15.20 and later minor releases), the list names pg_hudi.
pub fn why_no_wal_capture() -> Option<(String, String)> {
    // SAFETY: a read of a setting.
    if unsafe { pg_sys::wal_level } < pg_sys::WalLevel::WAL_LEVEL_LOGICAL as i32 {
        return Some(("capture 'wal' needs wal_level = logical".into(), "Set wal_level = logical (it takes a restart), or capture => 'trigger'.".into()));
    }
    // SAFETY: looks up a setting that may not exist in this release.
    let libraries = unsafe { pg_sys::GetConfigOption(c"output_plugin_libraries".as_ptr(), true, false) };
    if libraries.is_null() {
        return None;
    }
    // SAFETY: the setting's value, a C string.
    let libraries = unsafe { std::ffi::CStr::from_ptr(libraries) }.to_string_lossy().into_owned();
    if libraries.split(',').any(|library| library.trim().trim_matches('"') == PLUGIN) {
        return None;
    }
    Some((
        format!("capture 'wal' needs pg_hudi in output_plugin_libraries (now '{libraries}')"),
        format!("Add it (ALTER SYSTEM SET output_plugin_libraries = '{libraries}, {PLUGIN}'; SELECT pg_reload_conf()): its decoding serves only the mirrors of pg_hudi's worker. Or capture => 'trigger'."),
    ))
}

/// The position from which a new mirror's changes are captured: the WAL written so far. With
/// the heap table locked against writes, every transaction that wrote it ended before.
pub fn current_position() -> String {
    Spi::get_one::<String>("SELECT pg_catalog.pg_current_wal_insert_lsn()::text")
        .ok()
        .flatten()
        .unwrap_or_else(|| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "no WAL position", None))
}

/// A mirror captured from the WAL, as `hudi.mirror_targets` has it.
struct WalMirror {
    heap: pg_sys::Oid,
    target: pg_sys::Oid,
    owner: pg_sys::Oid,
    slot: String,
    /// Whether the slot exists in this database (not after a dump and restore).
    slot_here: bool,
    captured: u64,
    captured_at: Option<Duration>,
}

/// This database's WAL mirrors; first removes the mirrors of dropped heap tables and the slots
/// no mirror uses (dropping a slot is not transactional: `hudi.unmirror` leaves it to this).
fn wal_mirrors() -> Vec<WalMirror> {
    if !mirror_targets_exist() {
        return Vec::new();
    }
    // Writes only when there is something to remove (a transaction that writes is decoded).
    let dropped_heaps = "FROM hudi.mirror_targets m WHERE NOT EXISTS \
                         (SELECT FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) m.heap::pg_catalog.oid)";
    as_pg_hudi(|| {
        Spi::connect_mut(|client| {
            let fail = |e| crate::error::spi_failed("the mirrors", e);
            let any = client.select(&format!("SELECT EXISTS (SELECT {dropped_heaps})"), None, &[]).unwrap_or_else(fail).first().get_one::<bool>();
            if any.ok().flatten().unwrap_or(false) {
                client.update(&format!("DELETE {dropped_heaps}"), None, &[]).unwrap_or_else(fail);
            }
            let unused = client
                .select(&format!("SELECT pg_catalog.pg_try_advisory_xact_lock({SLOTS_LOCK})"), None, &[])
                .unwrap_or_else(fail)
                .first()
                .get_one::<bool>()
                .ok()
                .flatten()
                .unwrap_or(false);
            if unused {
                let prefix = format!("{SLOT_PREFIX}{}\\_%", unsafe { pg_sys::MyDatabaseId }.to_u32());
                let args: Vec<DatumWithOid> = vec![prefix.into()];
                // Read in a snapshot taken after the lock: a hudi.mirror that committed just
                // before it has its row seen.
                let slots: Vec<String> = super::in_latest_snapshot(|| {
                    client
                        .select(
                            "SELECT s.slot_name::text FROM pg_catalog.pg_replication_slots s \
                              WHERE s.slot_name OPERATOR(pg_catalog.~~) $1 AND NOT s.active \
                                AND NOT EXISTS (SELECT FROM hudi.mirror_targets m WHERE m.slot OPERATOR(pg_catalog.=) s.slot_name)",
                            None,
                            &args,
                        )
                        .unwrap_or_else(fail)
                        .filter_map(|row| row.get::<String>(1).ok().flatten())
                        .collect()
                });
                for slot in slots {
                    let args: Vec<DatumWithOid> = vec![slot.as_str().into()];
                    client.select("SELECT pg_catalog.pg_drop_replication_slot($1)", None, &args).unwrap_or_else(fail);
                }
            }
            client
                .select(
                    "SELECT m.heap::pg_catalog.oid, m.target::pg_catalog.oid, c.relowner, m.slot::text, m.captured_lsn::text, \
                            EXTRACT(epoch FROM pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) m.captured_at)::float8, \
                            EXISTS (SELECT FROM pg_catalog.pg_replication_slots s WHERE s.slot_name OPERATOR(pg_catalog.=) m.slot \
                                       AND s.database OPERATOR(pg_catalog.=) pg_catalog.current_database()) \
                       FROM hudi.mirror_targets m JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) m.target::pg_catalog.oid \
                      WHERE m.capture OPERATOR(pg_catalog.=) 'wal'",
                    None,
                    &[],
                )
                .unwrap_or_else(fail)
                .filter_map(|row| {
                    Some(WalMirror {
                        heap: row.get::<pg_sys::Oid>(1).ok()??,
                        target: row.get::<pg_sys::Oid>(2).ok()??,
                        owner: row.get::<pg_sys::Oid>(3).ok()??,
                        slot: row.get::<String>(4).ok()??,
                        captured: parse_lsn(&row.get::<String>(5).ok()??)?,
                        captured_at: row.get::<f64>(6).ok().flatten().map(|s| Duration::from_secs_f64(s.max(0.0))),
                        slot_here: row.get::<bool>(7).ok()??,
                    })
                })
                .collect()
        })
    })
}

/// Whether `hudi.mirror_targets` exists (a database whose extension is older than the library
/// has none).
fn mirror_targets_exist() -> bool {
    read_one::<bool>("SELECT pg_catalog.to_regclass('hudi.mirror_targets') IS NOT NULL", &[]).ok().flatten().unwrap_or(false)
}

/// Whether this database has mirrors captured from the WAL (its flush round keeps running).
pub fn has_wal_mirrors() -> bool {
    mirror_targets_exist()
        && as_pg_hudi(|| read_one::<bool>("SELECT EXISTS (SELECT FROM hudi.mirror_targets WHERE capture OPERATOR(pg_catalog.=) 'wal')", &[]))
            .ok()
            .flatten()
            .unwrap_or(false)
}

/// Decodes every WAL mirror's slot once, putting what committed into the targets' write
/// buffers, each mirror in a transaction of its own. Returns whether there are WAL mirrors.
pub fn capture_all() -> bool {
    let mirrors = BackgroundWorker::transaction(wal_mirrors);
    if mirrors.is_empty() {
        return false;
    }
    // A running-transactions record lets a slot's restart point (where every decoding begins
    // reading) move up to its position when it is advanced: else PostgreSQL logs one every
    // 15 s, and each decoding reads again up to that much WAL it had passed.
    // SAFETY: writes one WAL record; the worker is not in recovery.
    BackgroundWorker::transaction(|| unsafe { pg_sys::LogStandbySnapshot() });
    for mirror in mirrors {
        if crate::runtime::stopping() {
            break;
        }
        if !mirror.slot_here {
            // Not more often than every RESYNC_RETRY: each attempt makes a slot.
            let due = RESYNCS.with(|r| r.borrow().get(&mirror.heap.to_u32()).is_none_or(|at| at.elapsed() >= RESYNC_RETRY));
            if due {
                RESYNCS.with(|r| r.borrow_mut().insert(mirror.heap.to_u32(), std::time::Instant::now()));
                resync(&mirror);
            }
            continue;
        }
        // Decoded and applied in subtransactions: a failure (of a TRUNCATE of the target too)
        // is recorded, and tried again.
        let captured = BackgroundWorker::transaction(std::panic::AssertUnwindSafe(|| {
            let decoded = in_subtransaction(|| decode(&mirror));
            DECODING.with(|d| d.borrow_mut().take());
            let applied = match decoded {
                Ok(Some(decoded)) => in_subtransaction(|| apply(&mirror, decoded)).inspect_err(|_| {
                    crate::xact::discard_write(mirror.target);
                    super::forget();
                }),
                Ok(None) => Ok(None),
                Err(why) => Err(why),
            };
            match applied {
                Ok(position) => Ok(position),
                Err(why) => {
                    let args: Vec<DatumWithOid> = vec![mirror.heap.into(), why.as_str().into()];
                    let _ = as_pg_hudi(|| {
                        Spi::run_with_args("UPDATE hudi.mirror_targets SET last_error = $2 WHERE heap OPERATOR(pg_catalog.=) $1", &args)
                    });
                    // Named here, in the transaction: a catalog lookup outside one crashed the
                    // worker (and with it the server).
                    log!(
                        "{}: capturing the changes of {} failed, tried again later: {why}",
                        crate::worker::WORKER_NAME,
                        crate::fdw::table::relation_name(mirror.heap)
                    );
                    Err(why)
                }
            }
        }));
        match captured {
            Ok(Some(position)) => BackgroundWorker::transaction(|| {
                let args: Vec<DatumWithOid> = vec![mirror.slot.as_str().into(), lsn_text(position).into()];
                let advanced = as_pg_hudi(|| {
                    quietly(|| read_one::<bool>(
                        "SELECT pg_catalog.pg_replication_slot_advance(s.slot_name, $2::pg_catalog.pg_lsn) IS NOT NULL \
                           FROM pg_catalog.pg_replication_slots s \
                          WHERE s.slot_name OPERATOR(pg_catalog.=) $1 AND s.confirmed_flush_lsn OPERATOR(pg_catalog.<) $2::pg_catalog.pg_lsn",
                        &args,
                    ))
                });
                if let Err(e) = advanced {
                    log!("{}: advancing the replication slot {} failed: {e}", crate::worker::WORKER_NAME, mirror.slot);
                }
            }),
            Ok(None) | Err(_) => {}
        }
    }
    true
}

/// How long after a failed start from a new slot ([`resync`]) the next is tried.
const RESYNC_RETRY: Duration = Duration::from_secs(10);

thread_local! {
    /// When each mirror (heap table) was last started over from a new slot.
    static RESYNCS: RefCell<std::collections::HashMap<u32, std::time::Instant>> = Default::default();
}

/// Starts `mirror` over from a new slot, its old one gone (the database was dumped and
/// restored, or the slot dropped by hand): the Hudi table is truncated and gets the heap
/// table's rows, as `hudi.mirror` copies them, and changes are captured from the new slot's
/// position on. A failure is recorded in the mirror and tried again (the new slot, unused,
/// is dropped with the other leftovers).
fn resync(mirror: &WalMirror) {
    BackgroundWorker::transaction(std::panic::AssertUnwindSafe(|| {
        // The slot first: PostgreSQL makes one only before the transaction writes.
        let slot = new_slot_name(mirror.heap);
        let copied = in_subtransaction(|| {
            create_slot(&slot);
            as_role(mirror.owner, || {
                // SAFETY: a table of this database; the lock is hudi.mirror's: writers wait,
                // so every transaction that wrote the heap table ended before the position.
                let heap = unsafe { PgRelation::with_lock(mirror.heap, pg_sys::ShareRowExclusiveLock as pg_sys::LOCKMODE) };
                let position = current_position();
                truncate_target(mirror);
                let foreign = crate::fdw::table::ForeignHudiTable::of_relation(mirror.target);
                let copy = super::mirror::copy_statement(&heap, &foreign, mirror.target, &super::mirror::regclass_text(mirror.target));
                let copied = Spi::connect_mut(|client| client.update(&copy, None, &[]).map(|t| t.len()))
                    .unwrap_or_else(|e| crate::error::spi_failed("copying the mirrored table", e));
                let args: Vec<DatumWithOid> = vec![mirror.heap.into(), slot.as_str().into(), position.into()];
                as_pg_hudi(|| {
                    Spi::run_with_args(
                        "UPDATE hudi.mirror_targets SET slot = $2, captured_lsn = $3::pg_catalog.pg_lsn, captured_at = NULL, last_error = NULL \
                          WHERE heap OPERATOR(pg_catalog.=) $1",
                        &args,
                    )
                })
                .unwrap_or_else(|e| crate::error::spi_failed("the mirrors", e));
                copied
            })
        });
        let heap = crate::fdw::table::relation_name(mirror.heap);
        match copied {
            Ok(copied) => log!(
                "{}: the replication slot {} of the mirror of {heap} is gone (a restore?): copied its {copied} rows anew, capturing from slot {slot}",
                crate::worker::WORKER_NAME,
                mirror.slot
            ),
            Err(why) => {
                crate::xact::discard_write(mirror.target);
                super::forget();
                let args: Vec<DatumWithOid> = vec![mirror.heap.into(), why.as_str().into()];
                let _ = as_pg_hudi(|| {
                    Spi::run_with_args("UPDATE hudi.mirror_targets SET last_error = $2 WHERE heap OPERATOR(pg_catalog.=) $1", &args)
                });
                log!("{}: starting the mirror of {heap} over from a new slot failed, tried again later: {why}", crate::worker::WORKER_NAME);
            }
        }
    }));
}

/// TRUNCATE of `mirror`'s Hudi table as its owner (the current role), callable in a
/// subtransaction: the statement is refused in one (a user's savepoint could not take it
/// back); here a failure is taken back by `discard_write`.
fn truncate_target(mirror: &WalMirror) {
    // SAFETY: the target is a foreign table of this database; the lock is TRUNCATE's.
    unsafe {
        pg_sys::LockRelationOid(mirror.target, pg_sys::AccessExclusiveLock as pg_sys::LOCKMODE);
        let allowed = pg_sys::pg_class_aclcheck(mirror.target, pg_sys::GetUserId(), pg_sys::ACL_TRUNCATE as pg_sys::AclMode);
        if allowed != pg_sys::AclResult::ACLCHECK_OK {
            pg_sys::aclcheck_error(allowed, pg_sys::ObjectType::OBJECT_FOREIGN_TABLE, pg_sys::get_rel_name(mirror.target));
        }
    }
    crate::fdw::modify::truncate(mirror.target);
}

/// What one decoding of a mirror's slot found to apply.
struct Decoded {
    batches: Vec<(Change, RecordBatch)>,
    truncate: bool,
    /// The end of the last transaction decoded.
    position: u64,
    caught_up: bool,
    /// Whether to record the position (a write, which every slot then decodes: an idle mirror
    /// writes only once a heartbeat).
    record: bool,
}

/// Decodes `mirror`'s slot once; `None` when no transaction ended since its position.
fn decode(mirror: &WalMirror) -> Option<Decoded> {
    // SAFETY: the target is a foreign table of this database.
    let (rows, target_name) = unsafe {
        let target = PgRelation::with_lock(mirror.target, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
        let table = crate::fdw::table::ForeignHudiTable::of_relation(mirror.target);
        // The target's owner's credentials open its storage.
        (as_role(mirror.owner, || super::table_rows(target.as_ptr(), &table)), target.name().to_owned())
    };
    let schema = rows.data_schema().clone();
    DECODING.with(|d| {
        *d.borrow_mut() = Some(Decoding {
            heap: mirror.heap,
            table_rows: rows,
            target_name,
            rows: RowBuffer::new(schema.clone()),
            schema,
            captured: mirror.captured,
            mapping: None,
            skip: true,
            change: Change::Upsert,
            batches: Vec::new(),
            truncate: false,
            last_end: None,
        })
    });
    let args: Vec<DatumWithOid> = vec![mirror.slot.as_str().into(), (MAX_TRANSACTIONS as i32).into()];
    let commits = as_pg_hudi(|| quietly(|| read_one::<i64>("SELECT pg_catalog.count(*) FROM pg_catalog.pg_logical_slot_peek_changes($1, NULL, $2)", &args)))
    .unwrap_or_else(|e| crate::error::spi_failed("decoding the mirror's replication slot", e))
    .unwrap_or(0);
    let mut decoded = DECODING.with(|d| d.borrow_mut().take()).expect("set above");
    decoded.close();
    let caught_up = commits < MAX_TRANSACTIONS;
    let position = decoded.last_end?;
    // Recorded with rows; else the slot only moves on (nothing to capture was passed), and an
    // idle mirror says it is caught up once a heartbeat.
    let record = !decoded.batches.is_empty() || decoded.truncate || (caught_up && mirror.captured_at.is_none_or(|age| age >= HEARTBEAT));
    Some(Decoded { batches: decoded.batches, truncate: decoded.truncate, position, caught_up, record })
}

/// Puts what `decoded` found into the target's write buffer, with its position (in the
/// current transaction, at its top level): the position to advance the slot to once it
/// committed.
fn apply(mirror: &WalMirror, decoded: Decoded) -> Option<u64> {
    if !decoded.record {
        return Some(decoded.position);
    }
    if decoded.truncate {
        as_role(mirror.owner, || truncate_target(mirror));
    }
    if !decoded.batches.is_empty() {
        // SAFETY: the target is a foreign table of this database, opened to write its buffer.
        unsafe {
            let target = PgRelation::with_lock(mirror.target, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
            let table = crate::fdw::table::ForeignHudiTable::of_relation(mirror.target);
            as_role(mirror.owner, || super::begin(target.as_ptr(), &table));
        }
        for (change, rows) in decoded.batches {
            super::push_batch(mirror.target, change, rows);
        }
    }
    let args: Vec<DatumWithOid> = vec![mirror.heap.into(), lsn_text(decoded.position).into(), decoded.caught_up.into()];
    as_pg_hudi(|| {
        Spi::run_with_args(
            "UPDATE hudi.mirror_targets SET captured_lsn = $2::pg_catalog.pg_lsn, last_error = NULL, \
                    captured_at = CASE WHEN $3 THEN pg_catalog.clock_timestamp() ELSE captured_at END \
              WHERE heap OPERATOR(pg_catalog.=) $1",
            &args,
        )
    })
    .unwrap_or_else(|e| crate::error::spi_failed("the mirrors", e));
    Some(decoded.position)
}

/// Drops this database's mirror slots (the extension was dropped: no mirror uses them).
pub fn drop_database_slots() {
    // SAFETY: a read of the worker's database.
    let prefix = format!("{SLOT_PREFIX}{}\\_%", unsafe { pg_sys::MyDatabaseId }.to_u32());
    BackgroundWorker::transaction(|| {
        let args: Vec<DatumWithOid> = vec![prefix.as_str().into()];
        let dropped = Spi::run_with_args(
            "SELECT pg_catalog.pg_drop_replication_slot(slot_name) FROM pg_catalog.pg_replication_slots \
              WHERE slot_name OPERATOR(pg_catalog.~~) $1 AND NOT active",
            &args,
        );
        if let Err(e) = dropped {
            log!("{}: dropping the replication slots of dropped mirrors failed: {e}", crate::worker::WORKER_NAME);
        }
    });
}
