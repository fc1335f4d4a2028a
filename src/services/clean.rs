//! Cleaning: deletes the file slices that no read needs any more (Hudi's KEEP_LATEST_COMMITS),
//! keeping those any consumer of the table still reads changes from.

use engine::services::clean::{self, CleanOptions, Cleaned};
use engine::services::consumers::ConsumerPosition;
use engine::storage::StorageUri;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;

use crate::error::OrReport;
use crate::fdw::table::{foreign_table_location, ForeignHudiTable};
use crate::guc::lock_options;
use crate::runtime::block_on;
use crate::services::ServiceTable;
use crate::writer::writer_id;

/// Hudi's `hoodie.clean.commits.retained`.
pub const DEFAULT_RETAIN_COMMITS: usize = 10;
/// How long reads as of a time in the past find their files (`clean_retain`): with one commit
/// per autocommit statement, ten commits can be a few seconds.
pub const DEFAULT_RETAIN: &str = "1 hour";
/// How long a consumer that stopped consuming holds cleaning back.
pub const DEFAULT_MAX_RETAIN: &str = "7 days";

/// One clean of `table` (after publishing this server's consumer positions), and why its
/// consumers hold it back, for people, when they do.
pub(crate) fn clean_table(table: &ServiceTable) -> (Option<Cleaned>, Option<String>) {
    let (foreign, storage) = (&table.foreign, &table.storage);
    let local = local_positions(&foreign.uri);
    publish_positions(foreign, &local);
    let options = clean_options(foreign, local);
    let cleaned = block_on(clean::clean(storage, &writer_id(), &lock_options(), &options)).or_report();
    let held_back = block_on(clean::held_back_now(storage, &options)).or_report().map(|(alone, allowed)| {
        let position = options.keep_changes_after.as_deref().filter(|p| !p.is_empty()).unwrap_or("the start (not consumed yet)");
        format!(
            "held back by a consumer at {position}: retention alone keeps the commits from {alone} on, the consumers {}",
            allowed.map_or("everything".to_owned(), |a| format!("those from {a} on"))
        )
    });
    (cleaned, held_back)
}

/// What the options of `table` and its consumers (`local` on this server, and those other
/// servers published) let a clean delete.
fn clean_options(table: &ForeignHudiTable, local: Vec<ConsumerPosition>) -> CleanOptions {
    let retain_commits = table.count_option("clean_retain_commits", DEFAULT_RETAIN_COMMITS);
    let max_retain = table.options.get("clean_max_retain").map_or(DEFAULT_MAX_RETAIN, String::as_str);
    let retain_for = table.options.get("clean_retain").map_or(DEFAULT_RETAIN, String::as_str);
    CleanOptions {
        retain_commits,
        keep_changes_after: consumers_floor(table, local, max_retain),
        keep_reads_after: Some(engine::write::time::format_instant(ms_before_now(retain_for))),
    }
}

/// Milliseconds since the epoch of `now() - interval` (the interval as the option validator
/// accepted it; the distant past if it cannot be read any more).
fn ms_before_now(interval: &str) -> i64 {
    let args: Vec<DatumWithOid> = vec![interval.into()];
    crate::role::pinned_search_path(|| {
        Spi::get_one_with_args::<i64>(
            "SELECT (pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) $1::pg_catalog.interval) \
                     OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8",
            &args,
        )
    })
    .ok()
    .flatten()
    .unwrap_or(0)
}

/// The consumers of the table at `location` on this server (through any foreign table on it,
/// of any role): their positions and when they last consumed. Consumers at one position count
/// once, with the latest of their times (all a cleaner needs of them, however many there are).
fn local_positions(location: &StorageUri) -> Vec<ConsumerPosition> {
    // Row-level security shows each role its own positions only; the cleaner needs them all.
    // A lookup cache reads changes from its cached instant on, as a consumer does. No time
    // is taken as later than now.
    // A subscription applies changes from its position on, too (not in a database whose
    // extension is older than the library).
    let subscriptions = crate::spi::read_one::<bool>("SELECT pg_catalog.to_regclass('hudi.subscription_targets') IS NOT NULL", &[])
        .ok()
        .flatten()
        .unwrap_or(false)
        .then_some(
            " UNION ALL \
             SELECT source, position, pg_catalog.format('subscription of %s', target), 1, \
                    (pg_catalog.date_part('epoch', LEAST(applied_at, pg_catalog.now())) * 1000)::bigint \
             FROM hudi.subscription_targets",
        )
        .unwrap_or_default();
    let rows: Vec<(pg_sys::Oid, String, String, i64, i64)> = crate::role::as_pg_hudi(|| {
        Spi::connect(|client| {
            let query = format!(
                "SELECT relation::pg_catalog.oid, position, pg_catalog.min(pg_catalog.format('%s/%s', role, consumer)), \
                        pg_catalog.count(*), \
                        (pg_catalog.date_part('epoch', LEAST(pg_catalog.max(updated_at), pg_catalog.now())) * 1000)::bigint \
                 FROM hudi.consumer_positions GROUP BY 1, 2 \
                 UNION ALL \
                 SELECT relation, position, pg_catalog.format('lookup cache of %s', relation::pg_catalog.regclass), 1, \
                        (pg_catalog.date_part('epoch', LEAST(refreshed_at, pg_catalog.now())) * 1000)::bigint \
                 FROM hudi.lookup_cache_state WHERE position IS NOT NULL AND refreshed_at IS NOT NULL{subscriptions}"
            );
            let rows = client
                .select(query.as_str(), None, &[])
                .unwrap_or_else(|e| crate::error::spi_failed("consumer positions", e));
            rows.filter_map(|row| Some((row.get(1).ok()??, row.get(2).ok()??, row.get(3).ok()??, row.get(4).ok()??, row.get(5).ok()??)))
                .collect()
        })
    });
    let mut locations: std::collections::HashMap<pg_sys::Oid, bool> = std::collections::HashMap::new();
    rows.into_iter()
        .filter(|(relation, ..)| *locations.entry(*relation).or_insert_with(|| foreign_table_location(*relation).as_ref() == Some(location)))
        .map(|(_, position, consumer, count, consumed_at_ms)| ConsumerPosition {
            consumer: if count > 1 { format!("{consumer} and {} more", count - 1) } else { consumer },
            position,
            consumed_at_ms,
        })
        .collect()
}

/// The name this server and database publish their consumers' positions under.
fn publisher() -> String {
    // SAFETY: a plain read of a backend global.
    format!("{}-{}", writer_id().node, unsafe { pg_sys::MyDatabaseId }.to_u32())
}

/// Publishes `local`, the positions of this server's consumers of `table`, in the table's
/// storage (when they changed), for the cleaners of other servers.
fn publish_positions(table: &ForeignHudiTable, local: &[ConsumerPosition]) {
    use engine::services::consumers;
    let mut positions = local.to_vec();
    positions.sort_by(|a, b| a.consumer.cmp(&b.consumer));
    let storage = table.storage();
    let name = publisher();
    if block_on(consumers::published_by(&storage, &name)).or_report() != positions {
        block_on(consumers::publish(&storage, &name, positions)).or_report();
    }
}

/// The earliest position of the consumers of the table that consumed within `max_retain`, on
/// this server (`local`) and as the others published them: `""` for one that has not consumed
/// yet; `None` without consumers.
fn consumers_floor(table: &ForeignHudiTable, local: Vec<ConsumerPosition>, max_retain: &str) -> Option<String> {
    let since_ms = ms_before_now(max_retain);
    let others = block_on(engine::services::consumers::published(&table.storage(), &publisher())).or_report();
    local.into_iter().chain(others).filter(|p| p.consumed_at_ms > since_ms).map(|p| p.position).min()
}
