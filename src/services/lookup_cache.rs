//! The lookup caches' refresh: each table's cache, on this server under
//! `$PGDATA/pg_hudi/lookup/<database>/<table>`, brought up to the table's latest commit by the
//! worker's lookup rounds or `hudi.refresh_lookup_cache`, and removed with its table, its last
//! index or its database. What is declared and how far each cache got lives in
//! `hudi.lookup_cache_keys` and `hudi.lookup_cache_state`.

use std::path::PathBuf;

use engine::lookup::{CacheDefinition, CacheGenerations};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;

use crate::fdw::table::ForeignHudiTable;
use crate::role::as_pg_hudi;
use crate::runtime::block_on;

/// Where the caches of `relid` in this database live: `$PGDATA/pg_hudi/lookup/<db>/<relid>`.
pub(crate) fn cache_root(relid: pg_sys::Oid) -> PathBuf {
    // SAFETY: a plain read of a backend global.
    let database = unsafe { pg_sys::MyDatabaseId };
    databases_root().join(database.to_u32().to_string()).join(relid.to_u32().to_string())
}

/// Whether this database has a lookup cache on this server (on disk, loaded or loading).
pub(crate) fn database_has_caches() -> bool {
    // SAFETY: a plain read of a backend global.
    let database = unsafe { pg_sys::MyDatabaseId };
    std::fs::read_dir(databases_root().join(database.to_u32().to_string())).is_ok_and(|mut entries| entries.next().is_some())
}

fn databases_root() -> PathBuf {
    // SAFETY: DataDir is set before any backend runs SQL.
    let data = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) }.to_string_lossy().into_owned();
    PathBuf::from(data).join("pg_hudi").join("lookup")
}

fn spi_error(e: pgrx::spi::SpiError) -> ! {
    crate::error::spi_failed("lookup caches", e)
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

/// Refreshes `relid`'s cache (the caller is its writer, [`crate::locks::try_lock_cache_writer`]) and records how far it got;
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
        ensure_state_row(relid);
        Spi::run_with_args(
            "UPDATE hudi.lookup_cache_state SET state = $2, error = $3, \
               failures = CASE WHEN $2 = 'ready' THEN 0 ELSE failures END, \
               next_attempt = CASE WHEN $2 = 'ready' THEN NULL ELSE next_attempt END, \
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
            // Plans of the table made without this generation's indexes (prepared statements
            // planned before the load) are made again at their next use, when this commits.
            // SAFETY: queues an invalidation of an existing relation, in a transaction.
            unsafe { pg_sys::CacheInvalidateRelcacheByRelid(relid) };
            // Backends that read an old generation keep its files open (a secondary instance
            // opens every file) until their next statement opens the new one; one that was
            // opening it just now fails and reads the lake for that statement.
            generations.remove_older().map_err(|e| e.to_string())?;
        }
    }
    outcome.map(|applied| applied.to)
}

/// Brings `relid`'s loaded cache up to the table's latest commit here and now, as the table's
/// owner `owner` (as the worker would), when no other writer holds it: a lookup that needs its
/// session's own commit gets it sooner than a worker's round would start. Only applies changes
/// (a load is the worker's) and records nothing in `hudi.lookup_cache_state` (the reading
/// transaction may be read-only): the worker's round, which the commit asked for, finds the
/// cache current and records it. Errors are the worker's to report. Whether it applied them.
pub(crate) fn catch_up_here(relid: pg_sys::Oid, owner: pg_sys::Oid) -> bool {
    // A standby takes no such lock, and a parallel query no subtransaction.
    // SAFETY: plain reads of backend state.
    if unsafe { pg_sys::RecoveryInProgress() || pg_sys::IsInParallelMode() } || !crate::locks::try_lock_cache_writer(relid) {
        return false;
    }
    let applied = crate::role::in_subtransaction(|| {
        crate::role::as_role(owner, || {
            let definition = definition(relid);
            let reader = ForeignHudiTable::of_relation(relid).load_reader();
            let generations = CacheGenerations::new(&cache_root(relid));
            block_on(generations.refresh_current(&definition, reader.schema(), &reader)).is_ok_and(|applied| applied.is_some())
        })
    });
    crate::locks::release_cache_writer(relid);
    applied == Ok(true)
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
         DELETE FROM hudi.lookup_cache_state s WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = s.relation); \
         DELETE FROM hudi.lookup_cache_state s WHERE NOT EXISTS (SELECT 1 FROM hudi.lookup_cache_keys k WHERE k.relation = s.relation); \
         INSERT INTO hudi.lookup_cache_state (relation) SELECT DISTINCT relation FROM hudi.lookup_cache_keys ON CONFLICT DO NOTHING",
    )
    .unwrap_or_else(|e| spi_error(e));
    let tables: Vec<(pg_sys::Oid, pg_sys::Oid, bool)> = Spi::connect(|client| {
        client
            .select(
                "SELECT DISTINCT k.relation::pg_catalog.oid, c.relowner, s.next_attempt IS NOT NULL \
                     AND s.next_attempt OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() \
                 FROM hudi.lookup_cache_keys k JOIN pg_catalog.pg_class c ON c.oid = k.relation \
                 LEFT JOIN hudi.lookup_cache_state s ON s.relation = k.relation ORDER BY 1",
                None,
                &[],
            )
            .unwrap_or_else(|e| spi_error(e))
            .filter_map(|row| Some((row.get::<pg_sys::Oid>(1).ok()??, row.get::<pg_sys::Oid>(2).ok()??, row.get::<bool>(3).ok()??)))
            .collect()
    });
    remove_undeclared(&tables.iter().map(|(relid, ..)| *relid).collect::<Vec<_>>());
    // SAFETY: a plain read of a backend global.
    crate::worker::wake::set_has_caches(unsafe { pg_sys::MyDatabaseId }, !tables.is_empty());
    let mut done = Vec::new();
    for (relid, owner, waiting) in tables {
        // A cache whose refresh failed waits before the next attempt, as services do.
        if waiting || !crate::locks::try_lock_cache_writer(relid) {
            continue;
        }
        let outcome = crate::role::in_subtransaction(|| crate::role::as_role(owner, || refresh(relid)))
            .and_then(|refreshed| refreshed);
        if let Err(e) = &outcome {
            // The subtransaction's ERROR rolled the state back: record the failure now.
            record_failure(relid, e);
        }
        done.push((relid, outcome));
    }
    done
}

/// The longest a failing cache waits between two refreshes of the worker.
const MAX_BACKOFF_SECONDS: f64 = 600.0;

/// Gives the cache of `relid` its row of state if it has none while it is declared: a
/// declaration that came without one (restored by pg_dump, which keeps declarations but not
/// this server's state). A cache whose last index was dropped meanwhile gets none back.
fn ensure_state_row(relid: pg_sys::Oid) {
    let args: Vec<DatumWithOid> = vec![relid.into()];
    Spi::run_with_args(
        "INSERT INTO hudi.lookup_cache_state (relation) SELECT $1 \
         WHERE EXISTS (SELECT FROM hudi.lookup_cache_keys k WHERE k.relation OPERATOR(pg_catalog.=) $1) ON CONFLICT DO NOTHING",
        &args,
    )
    .unwrap_or_else(|e| spi_error(e));
}

/// Records that a refresh of `relid`'s cache failed with `error`: the worker tries again after
/// a wait that doubles with every failure in a row (from `hudi.lookup_refresh_interval`).
fn record_failure(relid: pg_sys::Oid, error: &str) {
    let first_wait = crate::guc::lookup_refresh_interval().as_secs_f64();
    let args: Vec<DatumWithOid> = vec![relid.into(), error.into(), first_wait.into(), MAX_BACKOFF_SECONDS.into()];
    Spi::run_with_args(
        "UPDATE hudi.lookup_cache_state SET state = 'failed', error = $2, failures = failures + 1, \
             next_attempt = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => \
                 LEAST($4, $3 OPERATOR(pg_catalog.*) (2::float8 OPERATOR(pg_catalog.^) LEAST(failures OPERATOR(pg_catalog.+) 1, 16)))) \
         WHERE relation = $1",
        &args,
    )
    .unwrap_or_else(|e| spi_error(e));
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
