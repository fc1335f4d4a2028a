//! Lookup caches from SQL: `hudi.create_lookup_cache(table, keys, columns)` declares an index
//! (the record key: the unique index; other columns: a secondary index) of the table's cache on
//! this server, which the background worker loads and keeps current;
//! `hudi.refresh_lookup_cache(table)` brings it up to date now; `hudi.drop_lookup_cache`
//! removes an index. The cache itself is [`engine::lookup`]; what is declared and how far each
//! cache got lives in `hudi.lookup_cache_keys` and `hudi.lookup_cache_state` (view
//! `hudi.lookup_caches`).

use engine::lookup::CacheGenerations;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::api::args::{column_names, hudi_table, required, RegClass};
use crate::services::lookup_cache::{cache_root, refresh};
use crate::services::require_owner;
use crate::error::raise;
use crate::fdw::table::ForeignHudiTable;
use crate::role::as_pg_hudi;

fn spi_error(e: pgrx::spi::SpiError) -> ! {
    crate::error::spi_failed("lookup caches", e)
}

/// `hudi.create_lookup_cache(table, keys, columns)`: declares an index of `table`'s lookup
/// cache on `keys` — the table's record key fields: the unique index; other columns: a
/// secondary index — caching `columns` (all when NULL; keys are always cached). Returns at
/// once: the worker loads the cache.
#[pg_extern(volatile)]
fn create_lookup_cache(
    table: Option<RegClass>,
    keys: Option<Vec<Option<String>>>,
    columns: default!(Option<Vec<Option<String>>>, "NULL"),
) {
    let table = hudi_table(table);
    let keys = column_names(keys, "keys");
    let columns = columns.map(|c| column_names(Some(c), "columns"));
    require_owner(&table, "create a lookup cache on it");
    let foreign = ForeignHudiTable::for_function(table.oid());
    let reader = foreign.open_reader();
    let schema = reader.schema();
    let known = |name: &String| schema.fields().iter().any(|f| f.name() == name && !name.starts_with("_hoodie_"));
    for name in keys.iter().chain(columns.iter().flatten()) {
        if !known(name) {
            raise(
                PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN,
                format!("column \"{name}\" of foreign table \"{}\" is not in its Hudi table", table.name()),
                None,
            );
        }
    }
    let record_key = &reader.config().record_key_fields;
    let unique = keys.len() == record_key.len() && record_key.iter().all(|k| keys.contains(k));
    let kind = if unique { "unique" } else { "secondary" };
    let inserted = catalog_rows(
        "INSERT INTO hudi.lookup_cache_keys (relation, keys, columns, kind) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        vec![table.oid().into(), keys.clone().into(), columns.into(), kind.into()],
    );
    if inserted != 1 {
        raise(
            PgSqlErrorCode::ERRCODE_DUPLICATE_OBJECT,
            format!("foreign table \"{}\" already has a lookup cache on {}", table.name(), keys.join(", ")),
            None,
        );
    }
    catalog_rows("INSERT INTO hudi.lookup_cache_state (relation) VALUES ($1) ON CONFLICT DO NOTHING", vec![table.oid().into()]);
    // SAFETY: a plain read of a backend global.
    crate::worker::wake::request_cache_refresh(unsafe { pg_sys::MyDatabaseId });
}

/// `hudi.drop_lookup_cache(table, keys)`: removes that index; the worker removes a cache with
/// no index left from disk.
#[pg_extern(volatile)]
fn drop_lookup_cache(table: Option<RegClass>, keys: Option<Vec<Option<String>>>) {
    let table = hudi_table(table);
    let keys = column_names(keys, "keys");
    require_owner(&table, "drop its lookup cache");
    let deleted = catalog_rows("DELETE FROM hudi.lookup_cache_keys WHERE relation = $1 AND keys = $2", vec![table.oid().into(), keys.clone().into()]);
    if deleted != 1 {
        raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            format!("foreign table \"{}\" has no lookup cache on {}", table.name(), keys.join(", ")),
            None,
        );
    }
    catalog_rows(
        "DELETE FROM hudi.lookup_cache_state s WHERE relation = $1 \
         AND NOT EXISTS (SELECT 1 FROM hudi.lookup_cache_keys k WHERE k.relation = s.relation)",
        vec![table.oid().into()],
    );
    // SAFETY: a plain read of a backend global.
    crate::worker::wake::request_cache_refresh(unsafe { pg_sys::MyDatabaseId });
}

/// `hudi.refresh_lookup_cache(table)`: brings the table's cache up to its latest commit now
/// (loading it first if needed); returns the completion time of the commit it reached.
#[pg_extern(volatile)]
fn refresh_lookup_cache(table: Option<RegClass>) -> Option<String> {
    let table = hudi_table(table);
    require_owner(&table, "refresh its lookup cache");
    if !has_cache(table.oid()) {
        raise(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT, format!("foreign table \"{}\" has no lookup cache", table.name()), None);
    }
    crate::locks::lock_cache_writer(table.oid());
    refresh(table.oid()).unwrap_or_else(|e| raise(PgSqlErrorCode::ERRCODE_EXTERNAL_ROUTINE_EXCEPTION, e, None))
}

/// Runs `statement` (an INSERT, UPDATE or DELETE of pg_hudi's catalog) as pg_hudi; returns
/// how many rows it changed.
fn catalog_rows(statement: &str, args: Vec<DatumWithOid>) -> u64 {
    as_pg_hudi(|| Spi::connect_mut(|client| client.update(statement, None, &args).map(|changed| changed.len() as u64)))
        .unwrap_or_else(|e| spi_error(e))
}

fn has_cache(relid: pg_sys::Oid) -> bool {
    let args: Vec<DatumWithOid> = vec![relid.into()];
    as_pg_hudi(|| {
        Spi::get_one_with_args::<bool>("SELECT EXISTS (SELECT 1 FROM hudi.lookup_cache_keys WHERE relation = $1)", &args)
            .unwrap_or_else(|e| spi_error(e))
            .unwrap_or(false)
    })
}

/// The relation a reporting function was given, when the current role may see it: NULL is
/// 22004; a relation that does not exist (dropped meanwhile) is `None`, as for
/// `pg_relation_size`; one the role neither owns nor may read is 42501.
fn reported(relation: Option<pg_sys::Oid>) -> Option<pg_sys::Oid> {
    let relid = required(relation, "relation");
    // SAFETY: catalog lookups on the main thread.
    unsafe {
        if !pg_sys::SearchSysCacheExists(pg_sys::SysCacheIdentifier::RELOID as i32, relid.into(), 0.into(), 0.into(), 0.into()) {
            return None;
        }
        let user = pg_sys::GetUserId();
        let may_see = pg_sys::pg_class_ownercheck(relid, user)
            || pg_sys::pg_class_aclcheck(relid, user, pg_sys::ACL_SELECT as pg_sys::AclMode) == pg_sys::AclResult::ACLCHECK_OK;
        if !may_see {
            raise(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("permission denied for foreign table {}", crate::fdw::table::relation_name(relid)),
                None,
            );
        }
    }
    Some(relid)
}

/// `hudi_internal.lookup_cache_progress(relation)`: how far the load of the table's next cache
/// generation got, while one runs (NULL otherwise): its file slices read and rows, or its last
/// step, the merge of what it read into the cache's files.
#[pg_extern(stable, schema = "hudi_internal")]
fn lookup_cache_progress(relation: Option<pg_sys::Oid>) -> Option<String> {
    let progress = CacheGenerations::new(&cache_root(reported(relation)?)).loading().ok()??;
    Some(if progress.merging {
        format!("merging {} rows into the cache's files", progress.rows)
    } else {
        format!("{} of {} file slices read, {} rows", progress.slices_read, progress.slices, progress.rows)
    })
}

/// `hudi_internal.lookup_cache_position(relation)`: the commit (a completion time) the table's
/// cache holds and its rows, as lookups read them now: also after a session brought it up to
/// its own commit, before the worker's round records that in `hudi.lookup_cache_state`. One
/// row, of NULLs before the first load.
#[pg_extern(stable, schema = "hudi_internal")]
fn lookup_cache_position(
    relation: Option<pg_sys::Oid>,
) -> TableIterator<'static, (name!(position, Option<String>), name!(rows, Option<i64>))> {
    let cached = reported(relation).and_then(|relid| CacheGenerations::new(&cache_root(relid)).cached().ok().flatten());
    TableIterator::once(match cached {
        Some((position, rows)) => (position, Some(rows as i64)),
        None => (None, None),
    })
}

/// `hudi_internal.lookup_cache_lag(relation, position)`: how far a cache at `position` (its cached
/// instant) is behind the table's latest completed commit: the commits it does not hold, and
/// the seconds between that commit's completion and the cached one's. One row, of NULLs
/// before the first load, and when the table cannot be read (its error is the cache's, in
/// `hudi.lookup_caches`): one damaged table does not make the view fail for everyone.
#[pg_extern(stable, schema = "hudi_internal")]
fn lookup_cache_lag(
    relation: Option<pg_sys::Oid>,
    position: Option<&str>,
) -> TableIterator<'static, (name!(commits, Option<i64>), name!(seconds, Option<f64>))> {
    let lag = reported(relation).zip(position).and_then(|(relid, position)| {
        crate::role::in_subtransaction(|| {
            let reader = ForeignHudiTable::of_relation(relid).open_reader();
            engine::lookup::Lag::of(&reader, position)
        })
        .ok()
    });
    TableIterator::once((lag.as_ref().map(|l| l.commits as i64), lag.map(|l| l.behind_ms as f64 / 1000.0)))
}

/// `hudi_internal.lookup_cache_bytes(relation)`: the bytes the table's caches take on disk (NULL: none).
#[pg_extern(stable, schema = "hudi_internal")]
fn lookup_cache_bytes(relation: Option<pg_sys::Oid>) -> Option<i64> {
    fn size(path: &std::path::Path) -> u64 {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => std::fs::read_dir(path).map_or(0, |entries| entries.flatten().map(|e| size(&e.path())).sum()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        }
    }
    let root = cache_root(reported(relation)?);
    root.exists().then(|| size(&root) as i64)
}
