//! Heap tables kept equal to Hudi tables, as a logical replication subscription keeps a table
//! equal to its publisher's (`hudi.subscribe(hudi_table, heap_table)`): the heap table gets a
//! copy of the Hudi table's snapshot when it is subscribed, then the database's flush round
//! applies every later commit to it — the commit's changes (`I`/`U` rows upserted, `D` rows
//! deleted, by the primary key, which must be the Hudi record key) in one transaction with the
//! subscription's position, so each commit is applied exactly once. Changes cleaned away before
//! they were applied, and a truncate of the Hudi table (whose removed rows no change lists),
//! make the round copy the table anew. The heap table stays the user's: its indexes,
//! constraints and triggers work as for any writer, and the round writes as its owner.
//!
//! A commit on this server wakes the round at once ([`crate::stream`]); others' are found by a
//! listing of the timeline every `hudi.stream_check_interval`.

use std::collections::HashMap;
use std::time::Instant;

use engine::read::ChangeRange;
use pgrx::bgworkers::BackgroundWorker;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::{PgOid, PgSqlErrorCode};

use crate::api::args::{hudi_table as open_hudi_table, required, RegClass};
use crate::buffer::mirror::regclass_text;
use crate::datum::{ColumnReader, ColumnType};
use crate::error::raise;
use crate::fdw::table::ForeignHudiTable;
use crate::role::{as_pg_hudi, as_role, in_subtransaction};

fn spi_error(e: pgrx::spi::SpiError) -> ! {
    crate::error::spi_failed("subscriptions", e)
}

fn quote(name: &str) -> String {
    // SAFETY: quote_identifier on the main thread.
    unsafe { crate::fdw::import::quote_ident(name) }
}

/// The columns of heap table `relid` a subscription writes (not dropped, not generated):
/// names and types.
fn target_columns(relid: pg_sys::Oid) -> Vec<(String, pg_sys::Oid)> {
    let args: Vec<DatumWithOid> = vec![relid.into()];
    crate::role::pinned_search_path(|| {
        Spi::connect(|client| {
            client
                .select(
                    "SELECT attname::text, atttypid FROM pg_catalog.pg_attribute \
                      WHERE attrelid OPERATOR(pg_catalog.=) $1 AND attnum OPERATOR(pg_catalog.>) 0 \
                        AND NOT attisdropped AND attgenerated OPERATOR(pg_catalog.=) '' ORDER BY attnum",
                    None,
                    &args,
                )
                .unwrap_or_else(|e| spi_error(e))
                .filter_map(|row| Some((row.get::<String>(1).ok()??, row.get::<pg_sys::Oid>(2).ok()??)))
                .collect()
        })
    })
}

/// The columns of heap table `relid`'s primary key.
fn primary_key(relid: pg_sys::Oid) -> Vec<String> {
    let args: Vec<DatumWithOid> = vec![relid.into()];
    crate::role::pinned_search_path(|| {
        Spi::connect(|client| {
            client
                .select(
                    "SELECT a.attname::text FROM pg_catalog.pg_index i \
                       JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid \
                        AND a.attnum OPERATOR(pg_catalog.=) ANY (i.indkey::pg_catalog.int2[]) \
                      WHERE i.indrelid OPERATOR(pg_catalog.=) $1 AND i.indisprimary ORDER BY a.attnum",
                    None,
                    &args,
                )
                .unwrap_or_else(|e| spi_error(e))
                .filter_map(|row| row.get::<String>(1).ok().flatten())
                .collect()
        })
    })
}

/// `hudi.subscribe(hudi_table, heap_table)`: keeps the heap table equal to the Hudi table of
/// the foreign table `hudi_table` — copies the table's snapshot into it now (its rows are
/// replaced), then the worker applies every later commit. The caller must own the heap table
/// and may read the foreign table; the heap table's primary key must be the Hudi record key
/// (by column names), and its columns must be columns of the foreign table. Returns the rows
/// copied.
#[pg_extern(volatile)]
fn subscribe(hudi_table: Option<RegClass>, heap_table: Option<RegClass>) -> i64 {
    let source = open_hudi_table(hudi_table);
    let target = required(heap_table, "heap_table").0;
    let table = ForeignHudiTable::for_function(source.oid());
    if let Some((option, value)) = table.read_only_option() {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("foreign table \"{}\" reads its Hudi table with {option} \"{value}\"", source.name()),
            Some("Subscribe to a foreign table of the Hudi table declared without query_type and as_of_instant.".into()),
        );
    }
    let target_name = regclass_text(target);
    // SAFETY: catalog lookups.
    unsafe {
        if !pg_sys::pg_class_ownercheck(target, pg_sys::GetUserId()) {
            raise(PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE, format!("must be owner of table {target_name} to subscribe it"), None);
        }
        if pg_sys::get_rel_relkind(target) != pg_sys::RELKIND_RELATION as std::ffi::c_char {
            raise(PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE, format!("{target_name} is not a table"), None);
        }
    }
    let args: Vec<DatumWithOid> = vec![target.into()];
    if as_pg_hudi(|| crate::spi::exists("SELECT EXISTS (SELECT 1 FROM hudi.subscription_targets WHERE target = $1)", &args)) {
        raise(
            PgSqlErrorCode::ERRCODE_DUPLICATE_OBJECT,
            format!("table {target_name} is subscribed already"),
            Some("hudi.unsubscribe it first.".into()),
        );
    }
    // Its applied changes would be mirrored into a Hudi table, and could come round again.
    if as_pg_hudi(|| crate::spi::exists("SELECT EXISTS (SELECT 1 FROM hudi.mirror_targets WHERE heap = $1)", &args)) {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("table {target_name} is mirrored into a Hudi table (hudi.mirror), so it cannot be subscribed"),
            Some("A table either feeds a Hudi table or follows one: hudi.unmirror it first.".into()),
        );
    }
    let reader = table.load_reader();
    let key = &reader.config().record_key_fields;
    let mut pk = primary_key(target);
    pk.sort();
    let mut record_key = key.clone();
    record_key.sort();
    if pk != record_key {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_TABLE_DEFINITION,
            format!("the primary key of {target_name} ({}) is not the record key of {} ({})", pk.join(", "), source.name(), key.join(", ")),
            Some(format!("ALTER TABLE {target_name} ADD PRIMARY KEY ({})", key.join(", "))),
        );
    }
    let declared: Vec<String> = source.tuple_desc().iter().filter(|a| !a.is_dropped()).map(|a| a.name().to_owned()).collect();
    let columns = target_columns(target);
    if let Some((missing, _)) = columns.iter().find(|(name, _)| !declared.contains(name)) {
        raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN,
            format!("column \"{missing}\" of {target_name} is not a column of foreign table \"{}\"", source.name()),
            Some("A subscribed table's columns are columns of the Hudi table, by name.".into()),
        );
    }
    // Changes from before the copy may be applied again after it (upserts and deletes by key:
    // the same outcome); none after the copy's listing is missed.
    let position = reader.timeline().latest_completion().unwrap_or_default().to_owned();
    let args: Vec<DatumWithOid> = vec![target.into(), source.oid().into(), position.as_str().into()];
    as_pg_hudi(|| Spi::run_with_args("INSERT INTO hudi.subscription_targets (target, source, position) VALUES ($1, $2, $3)", &args))
        .unwrap_or_else(|e| spi_error(e));
    let copied = copy(target, &regclass_text(source.oid()), &columns);
    // SAFETY: a read of the backend's database.
    crate::worker::wake::set_capturing(unsafe { pg_sys::MyDatabaseId }, true);
    copied
}

/// Replaces the rows of heap table `target` by those of the foreign table `source`: how many.
fn copy(target: pg_sys::Oid, source: &str, columns: &[(String, pg_sys::Oid)]) -> i64 {
    let names: Vec<String> = columns.iter().map(|(name, _)| quote(name)).collect();
    let target = regclass_text(target);
    Spi::connect_mut(|client| {
        client.update(&format!("TRUNCATE {target}"), None, &[]).unwrap_or_else(|e| spi_error(e));
        let list = names.join(", ");
        client.update(&format!("INSERT INTO {target} ({list}) SELECT {list} FROM {source}"), None, &[]).unwrap_or_else(|e| spi_error(e)).len() as i64
    })
}

/// `hudi.unsubscribe(heap_table)`: the worker stops applying the Hudi table's commits to the
/// heap table, which keeps its rows. For the heap table's owner.
#[pg_extern(volatile)]
fn unsubscribe(heap_table: Option<RegClass>) {
    let target = required(heap_table, "heap_table").0;
    let target_name = regclass_text(target);
    // SAFETY: a catalog lookup.
    if !unsafe { pg_sys::pg_class_ownercheck(target, pg_sys::GetUserId()) } {
        raise(PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE, format!("must be owner of table {target_name} to unsubscribe it"), None);
    }
    let args: Vec<DatumWithOid> = vec![target.into()];
    let removed = as_pg_hudi(|| {
        Spi::connect_mut(|client| client.update("DELETE FROM hudi.subscription_targets WHERE target = $1", None, &args).map(|t| t.len()))
    })
    .unwrap_or_else(|e| spi_error(e));
    if removed == 0 {
        raise(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT, format!("table {target_name} is not subscribed"), None);
    }
}

/// A subscription, as the worker applies it.
struct Subscription {
    target: pg_sys::Oid,
    source: pg_sys::Oid,
    owner: pg_sys::Oid,
    position: String,
}

/// Whether this database has subscriptions (its flush round then runs all the time).
pub fn exist() -> bool {
    let exists = crate::spi::read_one::<bool>("SELECT pg_catalog.to_regclass('hudi.subscription_targets') IS NOT NULL", &[])
        .ok()
        .flatten()
        .unwrap_or(false);
    exists
        && as_pg_hudi(|| crate::spi::read_one::<bool>("SELECT EXISTS (SELECT FROM hudi.subscription_targets)", &[]))
            .ok()
            .flatten()
            .unwrap_or(false)
}

fn subscriptions() -> Vec<Subscription> {
    if !exist() {
        return Vec::new();
    }
    as_pg_hudi(|| {
        Spi::connect(|client| {
            client
                .select(
                    // Those whose tables both still exist.
                    "SELECT s.target::pg_catalog.oid, s.source::pg_catalog.oid, c.relowner, s.position \
                       FROM hudi.subscription_targets s \
                       JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) s.target::pg_catalog.oid \
                       JOIN pg_catalog.pg_class f ON f.oid OPERATOR(pg_catalog.=) s.source::pg_catalog.oid \
                      ORDER BY 1",
                    None,
                    &[],
                )
                .unwrap_or_else(|e| spi_error(e))
                .filter_map(|row| {
                    Some(Subscription {
                        target: row.get::<pg_sys::Oid>(1).ok()??,
                        source: row.get::<pg_sys::Oid>(2).ok()??,
                        owner: row.get::<pg_sys::Oid>(3).ok()??,
                        position: row.get::<String>(4).ok()??,
                    })
                })
                .collect()
        })
    })
}

thread_local! {
    /// Per subscription (target): when the round last looked at its Hudi table, and the
    /// count of this server's commits to it then ([`crate::stream::follow`]).
    static LOOKED: std::cell::RefCell<HashMap<u32, (Instant, u64)>> = Default::default();
}

/// Applies what committed to the Hudi tables of this database's subscriptions since their
/// positions — each subscription in a transaction of its own, when a commit on this server
/// touched its Hudi table or a check interval passed. Returns whether there are subscriptions.
pub fn apply_all() -> bool {
    let subscriptions = BackgroundWorker::transaction(subscriptions);
    if subscriptions.is_empty() {
        return false;
    }
    let interval = crate::guc::stream_check_interval();
    for subscription in subscriptions {
        if crate::runtime::stopping() {
            break;
        }
        let location = BackgroundWorker::transaction(|| {
            in_subtransaction(|| as_role(subscription.owner, || ForeignHudiTable::of_relation(subscription.source).uri.to_string())).ok()
        });
        // Commits on this server wake the round ([`crate::stream::follow`]).
        let commits = location.as_deref().map(crate::stream::follow).unwrap_or_default();
        let due = LOOKED.with(|l| {
            l.borrow().get(&subscription.target.to_u32()).is_none_or(|(at, seen)| at.elapsed() >= interval || *seen != commits)
        });
        if !due {
            continue;
        }
        LOOKED.with(|l| l.borrow_mut().insert(subscription.target.to_u32(), (Instant::now(), commits)));
        BackgroundWorker::transaction(std::panic::AssertUnwindSafe(|| {
            let applied = in_subtransaction(|| as_role(subscription.owner, || apply(&subscription)));
            let args: Vec<DatumWithOid> = vec![subscription.target.into(), applied.as_ref().err().map(String::as_str).into()];
            as_pg_hudi(|| {
                Spi::run_with_args(
                    "UPDATE hudi.subscription_targets SET last_error = $2 WHERE target = $1 AND last_error IS DISTINCT FROM $2",
                    &args,
                )
            })
            .unwrap_or_else(|e| spi_error(e));
            if let Err(why) = applied {
                // Named in the transaction (a catalog lookup outside one crashes).
                log!(
                    "{}: applying the commits of {} to {} failed, tried again later: {why}",
                    crate::worker::WORKER_NAME,
                    crate::fdw::table::relation_name(subscription.source),
                    crate::fdw::table::relation_name(subscription.target)
                );
            }
        }));
    }
    true
}

/// Applies to `subscription`'s heap table what committed to its Hudi table after its position
/// (as the heap table's owner, in the current transaction): the changes, or a new copy when
/// they are gone (cleaned) or incomplete (a truncate), and the new position.
fn apply(subscription: &Subscription) {
    let table = ForeignHudiTable::for_function(subscription.source);
    let reader = table.load_reader();
    let Some(latest) = reader.timeline().latest_completion().map(str::to_owned) else { return };
    if latest.as_str() <= subscription.position.as_str() {
        return;
    }
    let start = (!subscription.position.is_empty()).then(|| subscription.position.clone());
    let in_range = || reader.timeline().completed_writes_between(start.as_deref(), &latest);
    // A truncate (a replacecommit) removed rows that no change lists.
    let truncated = in_range().any(|i| i.action == "replacecommit");
    let commits = in_range().count() as i64;
    let range = ChangeRange { start: start.clone(), end: Some(latest.clone()) };
    let columns = target_columns(subscription.target);
    let recopy = if truncated {
        Some("the Hudi table was truncated".to_owned())
    } else {
        match crate::runtime::block_on(reader.read_changes(&range, true)) {
            Ok(changes) => {
                apply_changes(subscription.target, &columns, &changes);
                None
            }
            Err(e) if e.kind() == engine::ErrorKind::NotFound => Some(format!("the changes after {} were cleaned", subscription.position)),
            Err(e) => crate::error::report(e),
        }
    };
    if let Some(reason) = &recopy {
        // The position first, then the copy: a commit completing meanwhile is applied again
        // next time (by key: the same outcome).
        copy(subscription.target, &regclass_text(subscription.source), &columns);
        pgrx::log!("{}: copied {} anew: {reason}", crate::worker::WORKER_NAME, regclass_text(subscription.target));
    }
    let args: Vec<DatumWithOid> = vec![subscription.target.into(), latest.as_str().into(), commits.into(), recopy.into()];
    as_pg_hudi(|| {
        Spi::run_with_args(
            "UPDATE hudi.subscription_targets SET position = $2, applied_at = pg_catalog.now(), \
                    applied_commits = applied_commits OPERATOR(pg_catalog.+) $3, \
                    copies = copies OPERATOR(pg_catalog.+) CASE WHEN $4::pg_catalog.text IS NULL THEN 0 ELSE 1 END, \
                    last_copy_reason = COALESCE($4, last_copy_reason) \
              WHERE target = $1",
            &args,
        )
    })
    .unwrap_or_else(|e| spi_error(e));
}

/// Upserts the `I` and `U` rows of `changes` into heap table `target` (its `columns`) and
/// deletes the keys of its `D` rows, by primary key.
fn apply_changes(target: pg_sys::Oid, columns: &[(String, pg_sys::Oid)], changes: &[arrow::record_batch::RecordBatch]) {
    let name = regclass_text(target);
    let pk = primary_key(target);
    let list: Vec<String> = columns.iter().map(|(c, _)| quote(c)).collect();
    let values: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
    let updates: Vec<String> = columns.iter().filter(|(c, _)| !pk.contains(c)).map(|(c, _)| format!("{0} = EXCLUDED.{0}", quote(c))).collect();
    let conflict = if updates.is_empty() { "DO NOTHING".to_owned() } else { format!("DO UPDATE SET {}", updates.join(", ")) };
    let keys: Vec<String> = pk.iter().map(|c| quote(c)).collect();
    let upsert = format!("INSERT INTO {name} ({}) VALUES ({}) ON CONFLICT ({}) {conflict}", list.join(", "), values.join(", "), keys.join(", "));
    let key_columns: Vec<(usize, &(String, pg_sys::Oid))> = columns.iter().enumerate().filter(|(_, (c, _))| pk.contains(c)).collect();
    let conditions: Vec<String> =
        key_columns.iter().enumerate().map(|(i, (_, (c, _)))| format!("{} OPERATOR(pg_catalog.=) ${}", quote(c), i + 1)).collect();
    let delete = format!("DELETE FROM {name} WHERE {}", conditions.join(" AND "));
    let types: Vec<PgOid> = columns.iter().map(|(_, t)| PgOid::from(*t)).collect();
    let key_types: Vec<PgOid> = key_columns.iter().map(|(_, (_, t))| PgOid::from(*t)).collect();
    Spi::connect_mut(|client| {
        let upsert = client.prepare_mut(upsert.as_str(), &types).unwrap_or_else(|e| spi_error(e));
        let delete = client.prepare_mut(delete.as_str(), &key_types).unwrap_or_else(|e| spi_error(e));
        // SAFETY: a memory context of the SPI procedure's, for one row's values at a time.
        let row_memory = unsafe {
            pg_sys::AllocSetContextCreateExtended(
                pg_sys::CurrentMemoryContext,
                c"pg_hudi subscription row".as_ptr(),
                pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
                pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
                pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
            )
        };
        for rows in changes {
            let schema = rows.schema();
            let operations = rows
                .column_by_name(engine::read::OPERATION_COLUMN)
                .and_then(|c| c.as_any().downcast_ref::<arrow::array::StringArray>())
                .unwrap_or_else(|| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "changes without their operation column", None));
            let mut readers: Vec<ColumnReader> = columns
                .iter()
                .map(|(column, type_oid)| {
                    let index = schema
                        .index_of(column)
                        .ok()
                        .or_else(|| schema.fields().iter().position(|f| f.name().eq_ignore_ascii_case(column)))
                        .unwrap_or_else(|| {
                            raise(PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN, format!("column \"{column}\" of {name} is not in the Hudi table"), None)
                        });
                    let column_type = ColumnType::from_type_oid(*type_oid).filter(|t| t.accepts(schema.field(index).data_type()));
                    let column_type = column_type.unwrap_or_else(|| {
                        raise(
                            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                            format!("column \"{column}\" of {name} cannot hold the Hudi table's {}", schema.field(index).data_type()),
                            None,
                        )
                    });
                    ColumnReader::new(column_type, rows.column(index))
                })
                .collect();
            for row in 0..rows.num_rows() {
                // SAFETY: the row's values live in the row context, emptied after it (a child
                // of the SPI procedure's, so an ERROR frees it with that).
                let previous = unsafe { pg_sys::MemoryContextSwitchTo(row_memory) };
                let deleted = operations.value(row) == "D";
                let mut datums = Vec::with_capacity(columns.len());
                for (i, (reader, (column, type_oid))) in readers.iter_mut().zip(columns).enumerate() {
                    // A D row holds the key only.
                    if deleted && !key_columns.iter().any(|(k, _)| *k == i) {
                        continue;
                    }
                    let datum = reader.datum(row).unwrap_or_else(|e| {
                        raise(PgSqlErrorCode::ERRCODE_DATA_EXCEPTION, format!("column \"{column}\" of {name}: {e}"), None)
                    });
                    if deleted && datum.is_none() {
                        raise(
                            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
                            format!("a key deleted from the Hudi table has no value for column \"{column}\" of {name}"),
                            Some("Its key generator does not let the key columns be read back from record keys.".into()),
                        );
                    }
                    // SAFETY: a datum of the column's type, made for it.
                    datums.push(datum.map_or(DatumWithOid::null_oid(*type_oid), |d| unsafe { DatumWithOid::new(d, *type_oid) }));
                }
                let statement = if deleted { &delete } else { &upsert };
                client.update(statement, None, &datums).unwrap_or_else(|e| spi_error(e));
                drop(datums);
                // SAFETY: as above.
                unsafe {
                    pg_sys::MemoryContextSwitchTo(previous);
                    pg_sys::MemoryContextReset(row_memory);
                }
            }
        }
    });
}
