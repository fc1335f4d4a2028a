//! Lookup caches from SQL: `hudi.create_lookup_cache(table, keys, columns)` declares an index
//! (the record key: the unique index; other columns: a secondary index) of the table's cache on
//! this server, which the background worker loads and keeps current;
//! `hudi.refresh_lookup_cache(table)` brings it up to date now; `hudi.drop_lookup_cache`
//! removes an index. The cache itself is [`engine::lookup`]; what is declared and how far each
//! cache got lives in `hudi.lookup_cache_keys` and `hudi.lookup_cache_state` (view
//! `hudi.lookup_caches`).

use std::path::PathBuf;

use engine::lookup::{CacheDefinition, CacheGenerations};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::{PgRelation, PgSqlErrorCode};

use crate::api::require_owner;
use crate::error::raise;
use crate::fdw::table::ForeignHudiTable;
use crate::intents::as_pg_hudi;
use crate::runtime::block_on;

/// Serialises the writers of one table's cache (the worker, a refresh from SQL): the first of
/// the two keys of `pg_advisory_xact_lock(int, int)`, "pghudi" folded into 31 bits.
const CACHE_LOCK_CLASS: i32 = 0x7068_7564;

/// Where the caches of `relid` in this database live: `$PGDATA/pg_hudi/lookup/<db>/<relid>`.
pub(crate) fn cache_root(relid: pg_sys::Oid) -> PathBuf {
    // SAFETY: a plain read of a backend global.
    let database = unsafe { pg_sys::MyDatabaseId };
    databases_root().join(database.to_u32().to_string()).join(relid.to_u32().to_string())
}

fn databases_root() -> PathBuf {
    // SAFETY: DataDir is set before any backend runs SQL.
    let data = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) }.to_string_lossy().into_owned();
    PathBuf::from(data).join("pg_hudi").join("lookup")
}

fn spi_error(e: pgrx::spi::SpiError) -> ! {
    crate::error::spi_failed("lookup caches", e)
}

/// `hudi.create_lookup_cache(table, keys, columns)`: declares an index of `table`'s lookup
/// cache on `keys` — the table's record key fields: the unique index; other columns: a
/// secondary index — caching `columns` (all when NULL; keys are always cached). Returns at
/// once: the worker loads the cache.
#[pg_extern(volatile)]
fn create_lookup_cache(table: PgRelation, keys: Vec<String>, columns: default!(Option<Vec<String>>, "NULL")) {
    require_owner(&table, "create a lookup cache on it");
    let foreign = ForeignHudiTable::for_function(table.oid());
    let reader = foreign.open_reader();
    let schema = reader.schema();
    let known = |name: &String| schema.fields().iter().any(|f| f.name() == name && !name.starts_with("_hoodie_"));
    if keys.is_empty() {
        raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, "a lookup cache needs at least one key column", None);
    }
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
fn drop_lookup_cache(table: PgRelation, keys: Vec<String>) {
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
fn refresh_lookup_cache(table: PgRelation) -> Option<String> {
    require_owner(&table, "refresh its lookup cache");
    if !has_cache(table.oid()) {
        raise(PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT, format!("foreign table \"{}\" has no lookup cache", table.name()), None);
    }
    let args: Vec<DatumWithOid> = vec![CACHE_LOCK_CLASS.into(), (table.oid().to_u32() as i32).into()];
    Spi::run_with_args("SELECT pg_catalog.pg_advisory_xact_lock($1, $2)", &args).unwrap_or_else(|e| spi_error(e));
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

/// The engine's definition of `relid`'s cache: every declared index, secondary ones in key
/// order (their numbers in the cache), and the union of their columns.
fn definition(relid: pg_sys::Oid) -> CacheDefinition {
    let args: Vec<DatumWithOid> = vec![relid.into()];
    let declared: Vec<(Vec<String>, Option<Vec<String>>, String)> = as_pg_hudi(|| {
        Spi::connect(|client| {
            client
                .select("SELECT keys, columns, kind FROM hudi.lookup_cache_keys WHERE relation = $1 ORDER BY keys", None, &args)
                .unwrap_or_else(|e| spi_error(e))
                .map(|row| {
                    (
                        row.get::<Vec<String>>(1).ok().flatten().unwrap_or_default(),
                        row.get::<Vec<String>>(2).ok().flatten(),
                        row.get::<String>(3).ok().flatten().unwrap_or_default(),
                    )
                })
                .collect()
        })
    });
    let all_columns = declared.iter().any(|(_, columns, _)| columns.is_none());
    let mut columns: Vec<String> = Vec::new();
    for (keys, chosen, _) in &declared {
        for name in keys.iter().chain(chosen.iter().flatten()) {
            if !columns.contains(name) {
                columns.push(name.clone());
            }
        }
    }
    CacheDefinition {
        columns: (!all_columns).then_some(columns),
        secondary: declared.into_iter().filter(|(_, _, kind)| kind == "secondary").map(|(keys, _, _)| keys).collect(),
    }
}

/// Refreshes `relid`'s cache (the caller holds its advisory lock) and records how far it got;
/// the position reached, or why it failed.
pub(crate) fn refresh(relid: pg_sys::Oid) -> Result<Option<String>, String> {
    let definition = definition(relid);
    let foreign = ForeignHudiTable::of_relation(relid);
    let reader = foreign.load_reader();
    let generations = CacheGenerations::new(&cache_root(relid));
    let outcome = block_on(generations.refresh(&definition, reader.schema(), &reader)).map_err(|e| e.to_string());
    let args: Vec<DatumWithOid> = match &outcome {
        Ok(applied) => vec![
            relid.into(),
            "ready".into(),
            None::<String>.into(),
            applied.to.clone().into(),
            applied.loaded_generation.map(|g| g as i64).into(),
            (applied.rows as i64).into(),
        ],
        Err(e) => vec![relid.into(), "failed".into(), Some(e.clone()).into(), None::<String>.into(), None::<i64>.into(), 0i64.into()],
    };
    as_pg_hudi(|| {
        Spi::run_with_args(
            "UPDATE hudi.lookup_cache_state SET state = $2, error = $3, \
               position = COALESCE($4, position), \
               generation = COALESCE($5, generation), \
               rows = CASE WHEN $2 = 'ready' THEN $6 ELSE rows END, \
               loaded_at = CASE WHEN $5 IS NOT NULL THEN pg_catalog.now() ELSE loaded_at END, \
               refreshed_at = CASE WHEN $2 = 'ready' THEN pg_catalog.now() ELSE refreshed_at END \
             WHERE relation = $1",
            &args,
        )
        .unwrap_or_else(|e| spi_error(e))
    });
    if let Ok(applied) = &outcome {
        if applied.loaded_generation.is_some() {
            // Backends that read an old generation keep its files open (a secondary instance
            // opens every file) until their next statement opens the new one; one that was
            // opening it just now fails and reads the lake for that statement.
            generations.remove_older().map_err(|e| e.to_string())?;
        }
    }
    outcome.map(|applied| applied.to)
}

/// The worker's round of the lookup caches of this database: refreshes each (skipping one a
/// refresh from SQL holds) as its table's owner, and removes the caches of tables with no
/// index declared any more (their last index dropped, or the table). Returns what it did, per
/// table, for the log.
pub(crate) fn refresh_all() -> Vec<(pg_sys::Oid, Result<Option<String>, String>)> {
    if crate::intents::own_table(c"lookup_cache_keys").is_none() {
        // SAFETY: a plain read of a backend global.
        crate::worker::wake::set_has_caches(unsafe { pg_sys::MyDatabaseId }, false);
        return Vec::new();
    }
    // Declarations of dropped tables go with them (their caches then leave the disk below).
    Spi::run(
        "DELETE FROM hudi.lookup_cache_keys k WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = k.relation); \
         DELETE FROM hudi.lookup_cache_state s WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = s.relation)",
    )
    .unwrap_or_else(|e| spi_error(e));
    let tables: Vec<(pg_sys::Oid, pg_sys::Oid)> = Spi::connect(|client| {
        client
            .select(
                "SELECT DISTINCT k.relation, c.relowner FROM hudi.lookup_cache_keys k \
                 JOIN pg_catalog.pg_class c ON c.oid = k.relation ORDER BY 1",
                None,
                &[],
            )
            .unwrap_or_else(|e| spi_error(e))
            .filter_map(|row| Some((row.get::<pg_sys::Oid>(1).ok()??, row.get::<pg_sys::Oid>(2).ok()??)))
            .collect()
    });
    remove_undeclared(&tables.iter().map(|(relid, _)| *relid).collect::<Vec<_>>());
    // SAFETY: a plain read of a backend global.
    crate::worker::wake::set_has_caches(unsafe { pg_sys::MyDatabaseId }, !tables.is_empty());
    let mut done = Vec::new();
    for (relid, owner) in tables {
        let args: Vec<DatumWithOid> = vec![CACHE_LOCK_CLASS.into(), (relid.to_u32() as i32).into()];
        let locked = Spi::get_one_with_args::<bool>("SELECT pg_catalog.pg_try_advisory_xact_lock($1, $2)", &args)
            .unwrap_or_else(|e| spi_error(e))
            .unwrap_or(false);
        if !locked {
            continue;
        }
        let outcome = crate::worker::services::in_subtransaction(|| crate::worker::services::as_role(owner, || refresh(relid)))
            .and_then(|refreshed| refreshed);
        if let Err(e) = &outcome {
            // The subtransaction's ERROR rolled the state back: record the failure now.
            let args: Vec<DatumWithOid> = vec![relid.into(), e.as_str().into()];
            Spi::run_with_args("UPDATE hudi.lookup_cache_state SET state = 'failed', error = $2 WHERE relation = $1", &args)
                .unwrap_or_else(|e| spi_error(e));
        }
        done.push((relid, outcome));
    }
    done
}

/// Removes the caches of this database (its extension was dropped).
pub(crate) fn remove_database_caches() {
    // SAFETY: a plain read of a backend global.
    let root = databases_root().join(unsafe { pg_sys::MyDatabaseId }.to_u32().to_string());
    if root.exists() {
        if let Err(e) = std::fs::remove_dir_all(&root) {
            pgrx::warning!("pg_hudi: cannot remove the lookup caches {}: {e}", root.display());
        }
    }
}

/// Removes the caches of databases that no longer exist (`existing`: the oids of those that
/// do), for the launcher, which outlives them.
pub(crate) fn remove_caches_of_dropped_databases(existing: &[pg_sys::Oid]) {
    let Ok(entries) = std::fs::read_dir(databases_root()) else { return };
    for entry in entries.flatten() {
        let oid = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok());
        if oid.is_some_and(|oid| !existing.iter().any(|e| e.to_u32() == oid)) {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                pgrx::warning!("pg_hudi: cannot remove the lookup caches {}: {e}", entry.path().display());
            }
        }
    }
}

/// Removes the cache directories of this database whose table has no declared index.
fn remove_undeclared(declared: &[pg_sys::Oid]) {
    // SAFETY: a plain read of a backend global.
    let root = databases_root().join(unsafe { pg_sys::MyDatabaseId }.to_u32().to_string());
    let Ok(entries) = std::fs::read_dir(&root) else { return };
    for entry in entries.flatten() {
        let relid = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok());
        if relid.is_some_and(|r| !declared.iter().any(|d| d.to_u32() == r)) {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                pgrx::warning!("pg_hudi: cannot remove the lookup cache {}: {e}", entry.path().display());
            }
        }
    }
}

/// `hudi.lookup_cache_progress(relation)`: how far the load of the table's next cache
/// generation got, while one runs (NULL otherwise): its file slices read and rows, or its last
/// step, the merge of what it read into the cache's files.
#[pg_extern(stable)]
fn lookup_cache_progress(relation: pg_sys::Oid) -> Option<String> {
    let progress = CacheGenerations::new(&cache_root(relation)).loading().ok()??;
    Some(if progress.merging {
        format!("merging {} rows into the cache's files", progress.rows)
    } else {
        format!("{} of {} file slices read, {} rows", progress.slices_read, progress.slices, progress.rows)
    })
}

/// `hudi.lookup_cache_lag(relation, position)`: how far a cache at `position` (its cached
/// instant) is behind the table's latest completed commit: the commits it does not hold, and
/// the seconds between that commit's completion and the cached one's. One row, of NULLs
/// before the first load.
#[pg_extern(stable)]
fn lookup_cache_lag(
    relation: pg_sys::Oid,
    position: Option<&str>,
) -> TableIterator<'static, (name!(commits, Option<i64>), name!(seconds, Option<f64>))> {
    let lag = position.map(|position| {
        let reader = ForeignHudiTable::of_relation(relation).open_reader();
        engine::lookup::Lag::of(&reader, position)
    });
    TableIterator::once((lag.as_ref().map(|l| l.commits as i64), lag.map(|l| l.behind_ms as f64 / 1000.0)))
}

/// `hudi.lookup_cache_bytes(relation)`: the bytes the table's caches take on disk (NULL: none).
#[pg_extern(stable)]
fn lookup_cache_bytes(relation: pg_sys::Oid) -> Option<i64> {
    fn size(path: &std::path::Path) -> u64 {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => std::fs::read_dir(path).map_or(0, |entries| entries.flatten().map(|e| size(&e.path())).sum()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        }
    }
    let root = cache_root(relation);
    root.exists().then(|| size(&root) as i64)
}
