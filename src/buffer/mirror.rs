//! Heap tables mirrored into Hudi tables (`hudi.mirror(heap, target)`): the Hudi table gets the
//! heap table's rows once, then every committed INSERT, UPDATE and DELETE of it, through the
//! write buffer of the target (which must have `write_mode 'buffered'`). Captured from the WAL
//! by the worker ([`super::capture`]), or by row triggers (`hudi_mirror`) that put a change
//! into the buffer in the transaction that makes it: either way what PostgreSQL commits is
//! mirrored exactly once, and nothing it rolls back (or a savepoint took back) is; a TRUNCATE
//! of the heap table truncates the Hudi table. Which capture when: README "Mirroring heap
//! tables".

use std::collections::HashMap;

use arrow::datatypes::SchemaRef;
use engine::write::Change;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::{PgRelation, PgSqlErrorCode};

use crate::api::args::{hudi_table, RegClass};
use crate::datum::{self, PgKind};
use crate::error::raise;
use crate::fdw::table::ForeignHudiTable;
use crate::role::{as_pg_hudi, as_role};

/// Where each data column of the target's rows comes from in the heap table's rows: the
/// attribute index and the kind of its values (`None`: no such column, written NULL).
pub(super) struct Mapping {
    heap_columns: Vec<(String, pg_sys::Oid)>,
    columns: Vec<Option<(usize, PgKind)>>,
}

thread_local! {
    /// (heap table, target) pairs found in `hudi.mirror_targets`.
    static VERIFIED: std::cell::RefCell<std::collections::HashSet<(u32, u32)>> = Default::default();
    static MAPPINGS: std::cell::RefCell<HashMap<(u32, u32), std::rc::Rc<Mapping>>> = Default::default();
}

fn attributes(relation: &PgRelation) -> Vec<(String, pg_sys::Oid, bool)> {
    let tupdesc = relation.tuple_desc();
    tupdesc.iter().map(|a| (a.name().to_owned(), a.type_oid().value(), a.is_dropped())).collect()
}

/// The columns of `relation` as a mapping is made for (a cached one is made again when they
/// change).
pub(super) fn columns_of(relation: &PgRelation) -> Vec<(String, pg_sys::Oid)> {
    attributes(relation).into_iter().map(|(name, type_oid, _)| (name, type_oid)).collect()
}

/// Whether the relation with `tupdesc` has the columns `columns` (names and types, as
/// [`columns_of`] lists them).
///
/// # Safety
/// `tupdesc` must be a valid tuple descriptor.
pub(super) unsafe fn same_columns(columns: &[(String, pg_sys::Oid)], tupdesc: pg_sys::TupleDesc) -> bool {
    let attributes = (*tupdesc).attrs.as_slice((*tupdesc).natts as usize);
    attributes.len() == columns.len()
        && attributes.iter().zip(columns).all(|(a, (name, type_oid))| a.atttypid == *type_oid && pgrx::name_data_to_str(&a.attname) == name)
}

/// The values and NULL flags of `tuple`, a row of a relation with `tupdesc`.
///
/// # Safety
/// `tuple` must be a valid tuple of `tupdesc`.
pub(super) unsafe fn deform(tuple: *mut pg_sys::HeapTupleData, tupdesc: pg_sys::TupleDesc) -> (Vec<pg_sys::Datum>, Vec<bool>) {
    let natts = (*tupdesc).natts as usize;
    let (mut values, mut nulls) = (vec![pg_sys::Datum::from(0); natts], vec![true; natts]);
    pg_sys::heap_deform_tuple(tuple, tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
    (values, nulls)
}

/// The target's data columns of a heap row's `values`.
pub(super) fn select(mapping: &Mapping, values: &[pg_sys::Datum], nulls: &[bool]) -> Vec<Option<(pg_sys::Datum, PgKind)>> {
    mapping.columns.iter().map(|c| c.and_then(|(i, kind)| (!nulls[i]).then_some((values[i], kind)))).collect()
}

/// Whether an UPDATE from `old` to `new` (rows of the target's data columns `schema`) changes
/// the record key or partition (`keys` tells a batch's): the old key is deleted then.
pub(super) fn key_changed(
    keys: impl Fn(&arrow::record_batch::RecordBatch) -> Vec<(String, String)>,
    schema: &SchemaRef,
    old: &[Option<(pg_sys::Datum, PgKind)>],
    new: &[Option<(pg_sys::Datum, PgKind)>],
) -> bool {
    let mut pair = crate::datum::RowBuffer::new(schema.clone());
    for row in [old, new] {
        pair.push(row).unwrap_or_else(|why| raise(PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE, why, None));
    }
    let keys = keys(&pair.take());
    keys[0] != keys[1]
}

/// The mapping of the heap table's columns to the data columns `schema` of the target; an
/// error for a column whose values cannot be written to its Hudi field, or a key, partition
/// or ordering field (`required`) the heap table lacks.
pub(super) fn mapping(heap: &PgRelation, schema: &SchemaRef, required: &[String], target_name: &str) -> Mapping {
    let attributes = attributes(heap);
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            let found = attributes.iter().position(|(name, _, dropped)| !dropped && name == field.name()).or_else(|| {
                attributes.iter().position(|(name, _, dropped)| !dropped && name.eq_ignore_ascii_case(field.name()))
            });
            let Some(index) = found else {
                if required.contains(field.name()) {
                    raise(
                        PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN,
                        format!("table \"{}\" has no column \"{}\", a key, partition or ordering field of \"{target_name}\"", heap.name(), field.name()),
                        None,
                    );
                }
                return None;
            };
            let type_oid = attributes[index].1;
            match PgKind::from_type_oid(type_oid).filter(|k| datum::writable(*k, field.data_type())) {
                Some(kind) => Some((index, kind)),
                None => raise(
                    PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                    format!("column \"{}\" of table \"{}\" cannot be written to Hudi field \"{}\" of type {}", attributes[index].0, heap.name(), field.name(), field.data_type()),
                    None,
                ),
            }
        })
        .collect();
    Mapping { heap_columns: attributes.iter().map(|(n, t, _)| (n.clone(), *t)).collect(), columns }
}

/// The fields a mirrored row must have: key, partition and ordering fields.
fn required_fields(config: &engine::table::TableConfig) -> Vec<String> {
    config.record_key_fields.iter().chain(&config.partition_fields).chain(&config.ordering_fields).cloned().collect()
}

/// How a mirror captures the heap table's changes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Capture {
    /// From the WAL, by the worker (logical decoding): nothing for the heap table's writers.
    Wal,
    /// By row triggers, in the transactions that make the changes.
    Trigger,
}

impl Capture {
    fn name(self) -> &'static str {
        match self {
            Capture::Wal => "wal",
            Capture::Trigger => "trigger",
        }
    }

    /// `capture` as given to `hudi.mirror`: NULL chooses the WAL where the server can decode
    /// it for pg_hudi, else triggers (and says why).
    fn of_argument(capture: Option<&str>) -> Capture {
        let unavailable = super::capture::why_no_wal_capture();
        match (capture, unavailable) {
            (None, None) | (Some("wal"), None) => Capture::Wal,
            (None, Some((why, hint))) => {
                pgrx::notice!("hudi.mirror captures by triggers: {why}. {hint}");
                Capture::Trigger
            }
            (Some("trigger"), _) => Capture::Trigger,
            (Some("wal"), Some((why, hint))) => raise(PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, why, Some(hint)),
            (Some(other), _) => raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("capture must be 'wal' or 'trigger', not \"{other}\""),
                None,
            ),
        }
    }
}

/// Mirrors the heap table `heap` into the Hudi foreign table `target` (with `write_mode
/// 'buffered'`): copies its rows now, and captures every later change — from the WAL
/// (`capture => 'wal'`, the default with `wal_level = logical`) or by triggers (`'trigger'`).
/// For the owner of both. Returns how many rows it copied.
#[pg_extern(volatile)]
fn mirror(heap: Option<RegClass>, target: Option<RegClass>, capture: default!(Option<&str>, "NULL")) -> i64 {
    let heap_oid = crate::api::args::required(heap, "heap").0;
    let target = hudi_table(target);
    crate::services::require_owner(&target, "mirror a table into it");
    // Ownership first: the lock below would hold up the table's writers.
    // SAFETY: catalog lookups.
    if !unsafe { pg_sys::pg_class_ownercheck(heap_oid, pg_sys::GetUserId()) } {
        raise(PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE, format!("must be owner of table {} to mirror it", regclass_text(heap_oid)), None);
    }
    if unsafe { pg_sys::get_rel_relkind(heap_oid) } != pg_sys::RELKIND_RELATION as std::ffi::c_char {
        raise(PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE, format!("{} is not a table", regclass_text(heap_oid)), None);
    }
    let capture = Capture::of_argument(capture);
    let args: Vec<DatumWithOid> = vec![heap_oid.into()];
    // Read-only (crate::spi): a slot is made only before the transaction has an xid.
    if as_pg_hudi(|| crate::spi::exists("SELECT EXISTS (SELECT 1 FROM hudi.mirror_targets WHERE heap = $1)", &args)) {
        raise(PgSqlErrorCode::ERRCODE_DUPLICATE_OBJECT, format!("table {} is mirrored already", regclass_text(heap_oid)), Some("hudi.unmirror it first.".into()));
    }
    // A subscribed table's changes come from a Hudi table: mirrored, they could come round.
    if as_pg_hudi(|| crate::spi::exists("SELECT EXISTS (SELECT 1 FROM hudi.subscription_targets WHERE target = $1)", &args)) {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("table {} follows a Hudi table (hudi.subscribe), so it cannot be mirrored", regclass_text(heap_oid)),
            Some("A table either feeds a Hudi table or follows one: hudi.unsubscribe it first.".into()),
        );
    }
    // The slot first: PostgreSQL makes one only before the transaction writes (or locks the
    // heap table against the writers the slot's consistent point waits for).
    let slot = (capture == Capture::Wal).then(|| {
        let name = super::capture::new_slot_name(heap_oid);
        super::capture::create_slot(&name);
        name
    });
    // SAFETY: a table the caller owns, opened with the lock CREATE TRIGGER takes anyway: its
    // writers wait until this transaction ends.
    let heap = unsafe { PgRelation::with_lock(heap_oid, pg_sys::ShareRowExclusiveLock as pg_sys::LOCKMODE) };
    let foreign = ForeignHudiTable::for_function(target.oid());
    if !super::is_buffered(&foreign) {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("foreign table \"{}\" does not have write_mode 'buffered'", target.name()),
            Some(format!("ALTER FOREIGN TABLE {} OPTIONS (ADD write_mode 'buffered')", target.name())),
        );
    }
    let copy = copy_statement(&heap, &foreign, target.oid(), target.name());
    let heap_name = regclass_text(heap_oid);
    fn spi_failed<T>(e: pgrx::spi::SpiError) -> T {
        crate::error::spi_failed("mirroring", e)
    }
    let (mut position, mut identity_was) = (None, None);
    // SAFETY: the relation's catalog row, open above.
    let identity = unsafe { (*heap.rd_rel).relreplident } as u8;
    let identity_clause = replica_identity_clause(&heap, identity);
    // Closed (its lock kept): ALTER TABLE refuses a table this session has open.
    drop(heap);
    match capture {
        Capture::Trigger => {
            let oid = target.oid().to_u32();
            Spi::run(&format!(
                "CREATE TRIGGER hudi_mirror AFTER INSERT OR UPDATE OR DELETE ON {heap_name} FOR EACH ROW EXECUTE FUNCTION hudi_internal.mirror_row('{oid}')"
            ))
            .unwrap_or_else(spi_failed);
            Spi::run(&format!(
                "CREATE TRIGGER hudi_mirror_truncate AFTER TRUNCATE ON {heap_name} FOR EACH STATEMENT EXECUTE FUNCTION hudi_internal.mirror_truncate('{oid}')"
            ))
            .unwrap_or_else(spi_failed);
        }
        Capture::Wal => {
            if identity != pg_sys::REPLICA_IDENTITY_FULL {
                identity_was = Some(identity_clause);
                Spi::run(&format!("ALTER TABLE {heap_name} REPLICA IDENTITY FULL")).unwrap_or_else(spi_failed);
                pgrx::notice!("table {heap_name} has REPLICA IDENTITY FULL while it is mirrored (hudi.unmirror sets it back)");
            }
            // Every transaction that wrote the heap table ended before: its writers wait for
            // the lock taken above.
            position = Some(super::capture::current_position());
            // SAFETY: a read of the backend's database.
            crate::worker::wake::set_capturing(unsafe { pg_sys::MyDatabaseId }, true);
        }
    }
    let args: Vec<DatumWithOid> = vec![
        heap_oid.into(),
        target.oid().into(),
        capture.name().into(),
        slot.into(),
        position.into(),
        identity_was.into(),
    ];
    as_pg_hudi(|| {
        Spi::run_with_args(
            "INSERT INTO hudi.mirror_targets (heap, target, capture, slot, captured_lsn, identity_was) VALUES ($1, $2, $3, $4, $5::pg_lsn, $6)",
            &args,
        )
    })
    .unwrap_or_else(spi_failed);
    Spi::connect_mut(|client| client.update(&copy, None, &[]).map(|t| t.len() as i64)).unwrap_or_else(spi_failed)
}

/// The statement that copies the rows of the heap table `heap` into the Hudi foreign table
/// `target` (`foreign`, named `name`): the columns both have, by name.
pub(super) fn copy_statement(heap: &PgRelation, foreign: &ForeignHudiTable, target: pg_sys::Oid, name: &str) -> String {
    let storage = foreign.storage();
    let (config, avro) = foreign.config_and_schema(&storage);
    let rows = engine::write::rows::TableRows::new(&config, &avro).unwrap_or_else(|e| crate::error::report(e));
    let mapping = mapping(heap, rows.data_schema(), &required_fields(&config), name);
    let shared: Vec<String> = mapping.columns.iter().flatten().map(|(index, _)| quote(&mapping.heap_columns[*index].0)).collect();
    let target_columns: Vec<String> =
        rows.data_schema().fields().iter().zip(&mapping.columns).filter(|(_, c)| c.is_some()).map(|(f, _)| quote(f.name())).collect();
    format!(
        "INSERT INTO {} ({}) SELECT {} FROM {}",
        regclass_text(target),
        target_columns.join(", "),
        shared.join(", "),
        regclass_text(heap.oid())
    )
}

/// The `REPLICA IDENTITY` clause that gives `heap` its identity `identity` again.
fn replica_identity_clause(heap: &PgRelation, identity: u8) -> String {
    match identity {
        pg_sys::REPLICA_IDENTITY_NOTHING => "NOTHING".into(),
        pg_sys::REPLICA_IDENTITY_INDEX => {
            // SAFETY: the relation is open; the index list is a copy.
            let index = unsafe { pg_sys::RelationGetReplicaIndex(heap.as_ptr()) };
            // SAFETY: a catalog lookup of an existing index.
            let name = unsafe { pg_sys::get_rel_name(index) };
            if name.is_null() {
                "DEFAULT".into()
            } else {
                // SAFETY: a palloc'd C string from the catalog.
                format!("USING INDEX {}", quote(&unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy()))
            }
        }
        _ => "DEFAULT".into(),
    }
}

/// Stops mirroring `heap`: its triggers go (or its replica identity is set back, and the worker
/// drops its replication slot); what was captured stays in the Hudi table.
#[pg_extern(volatile)]
fn unmirror(heap: Option<RegClass>) {
    let heap_oid = crate::api::args::required(heap, "heap").0;
    // SAFETY: a catalog lookup.
    if !unsafe { pg_sys::pg_class_ownercheck(heap_oid, pg_sys::GetUserId()) } {
        raise(PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE, format!("must be owner of table {} to stop mirroring it", regclass_text(heap_oid)), None);
    }
    let args: Vec<DatumWithOid> = vec![heap_oid.into()];
    let removed = as_pg_hudi(|| {
        Spi::connect_mut(|c| {
            c.update("DELETE FROM hudi.mirror_targets WHERE heap = $1 RETURNING capture, identity_was", None, &args)
                .map(|t| t.into_iter().map(|row| (row.get::<String>(1).ok().flatten(), row.get::<String>(2).ok().flatten())).collect::<Vec<_>>())
        })
    })
    .unwrap_or_else(|e| crate::error::spi_failed("mirroring", e));
    let Some((capture, identity_was)) = removed.into_iter().next() else {
        raise(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT, format!("table {} is not mirrored", regclass_text(heap_oid)), None);
    };
    let name = regclass_text(heap_oid);
    if capture.as_deref() == Some("wal") {
        if let Some(clause) = identity_was {
            Spi::run(&format!("ALTER TABLE {name} REPLICA IDENTITY {clause}")).unwrap_or_else(|e| crate::error::spi_failed("mirroring", e));
        }
        return;
    }
    for trigger in ["hudi_mirror", "hudi_mirror_truncate"] {
        Spi::run(&format!("DROP TRIGGER IF EXISTS {trigger} ON {name}")).unwrap_or_else(|e| crate::error::spi_failed("mirroring", e));
    }
}

/// The name of relation `oid`, qualified where the search path would not find it.
pub(crate) fn regclass_text(oid: pg_sys::Oid) -> String {
    let args: Vec<DatumWithOid> = vec![oid.into()];
    crate::role::pinned_search_path(|| Spi::get_one_with_args::<String>("SELECT $1::pg_catalog.regclass::pg_catalog.text", &args))
        .ok()
        .flatten()
        .unwrap_or_else(|| raise(PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE, format!("relation {oid:?} does not exist"), None))
}

fn quote(name: &str) -> String {
    // SAFETY: quote_identifier on the main thread.
    unsafe { crate::fdw::import::quote_ident(name) }
}

/// The target of the trigger that fired: its argument, a foreign table's oid — only when
/// `hudi.mirror` made the trigger's table a mirror of that target (checked once per backend).
/// Anyone may create a trigger with these functions on a table of their own; naming another
/// role's Hudi table in it must not write (or truncate) that table.
fn target_of(trigger: &PgTrigger<'_>) -> pg_sys::Oid {
    let args = trigger.extra_args().unwrap_or_default();
    let Some(target) = args.first().and_then(|a| a.parse::<u32>().ok()).map(pg_sys::Oid::from) else {
        raise(PgSqlErrorCode::ERRCODE_TRIGGERED_ACTION_EXCEPTION, "hudi_mirror triggers take the target's oid", None)
    };
    let heap = trigger.relid().unwrap_or(pg_sys::InvalidOid);
    let pair = (heap.to_u32(), target.to_u32());
    if !VERIFIED.with(|v| v.borrow().contains(&pair)) {
        let args: Vec<DatumWithOid> = vec![heap.into(), target.into()];
        let mirrored = as_pg_hudi(|| {
            Spi::get_one_with_args::<bool>("SELECT EXISTS (SELECT 1 FROM hudi.mirror_targets WHERE heap = $1 AND target = $2)", &args)
        });
        if !mirrored.ok().flatten().unwrap_or(false) {
            raise(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("table {} is not mirrored into {} (hudi.mirror makes its triggers)", regclass_text(heap), regclass_text(target)),
                None,
            );
        }
        VERIFIED.with(|v| v.borrow_mut().insert(pair));
    }
    target
}

/// `hudi_internal.mirror_row`, the row trigger of a mirrored table: the change goes to the
/// target's write buffer in this transaction (an UPDATE that changes the key deletes the old
/// key).
pub(crate) fn row_trigger(trigger: &PgTrigger<'_>) {
    let target_oid = target_of(trigger);
    let data = trigger.trigger_data();
    // SAFETY: the trigger's relation and tuples, valid while it runs.
    unsafe {
        let heap = PgRelation::from_pg(data.tg_relation);
        let event = data.tg_event;
        let (old, new) = match event & pg_sys::TRIGGER_EVENT_OPMASK {
            pg_sys::TRIGGER_EVENT_INSERT => (None, Some(data.tg_trigtuple)),
            pg_sys::TRIGGER_EVENT_UPDATE => (Some(data.tg_trigtuple), Some(data.tg_newtuple)),
            _ => (Some(data.tg_trigtuple), None),
        };
        let target = PgRelation::with_lock(target_oid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
        let schema = match super::data_schema_if_begun(target_oid) {
            Some(schema) => schema,
            None => {
                // The target's owner's credentials open its storage, whoever changes the heap.
                let owner = (*target.rd_rel).relowner;
                as_role(owner, || super::begin(target.as_ptr(), &ForeignHudiTable::of_relation(target_oid)).0)
            }
        };
        let key = (heap.oid().to_u32(), target_oid.to_u32());
        let tupdesc = heap.tuple_desc().as_ptr();
        // Compared in place: this runs for every row.
        let cached = MAPPINGS.with(|m| m.borrow().get(&key).filter(|m| same_columns(&m.heap_columns, tupdesc)).cloned());
        let mapping = cached.unwrap_or_else(|| {
            let made = std::rc::Rc::new(mapping(&heap, &schema, &[], &target.name().to_owned()));
            MAPPINGS.with(|m| m.borrow_mut().insert(key, made.clone()));
            made
        });
        let row_of = |tuple: *mut pg_sys::HeapTupleData| {
            let (values, nulls) = deform(tuple, tupdesc);
            select(&mapping, &values, &nulls)
        };
        let push = |change: Change, row: &[Option<(pg_sys::Datum, PgKind)>]| {
            super::push(target_oid, change, row).unwrap_or_else(|why| raise(PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE, why, None))
        };
        match (old, new) {
            (None, Some(new)) => push(Change::Upsert, &row_of(new)),
            (Some(old), None) => push(Change::Delete, &row_of(old)),
            (Some(old), Some(new)) => {
                let (old, new) = (row_of(old), row_of(new));
                if key_changed(|batch| super::keys_of(target_oid, batch), &schema, &old, &new) {
                    push(Change::Delete, &old);
                }
                push(Change::Upsert, &new);
            }
            (None, None) => {}
        }
    }
}

/// `hudi_internal.mirror_truncate`, the statement trigger of a mirrored table's TRUNCATE:
/// truncates the target, as its owner.
pub(crate) fn truncate_trigger(trigger: &PgTrigger<'_>) {
    let target = target_of(trigger);
    // SAFETY: a catalog lookup of an existing relation.
    let owner = unsafe { (*PgRelation::open(target).rd_rel).relowner };
    let name = regclass_text(target);
    as_role(owner, || Spi::run(&format!("TRUNCATE {name}"))).unwrap_or_else(|e| crate::error::spi_failed("mirroring", e));
}
