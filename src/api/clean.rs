//! Cleaning from SQL: `hudi.clean(table)` deletes the file slices that no read needs any more
//! (Hudi's KEEP_LATEST_COMMITS), keeping those any consumer of the table still reads changes
//! from. Like compaction it commits on its own, whatever becomes of the calling transaction.

use engine::services::clean::{self, CleanOptions, Cleaned};
use engine::services::consumers::ConsumerPosition;
use engine::storage::StorageUri;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::PgRelation;

use crate::activity::ServiceActivity;
use crate::api::service_target;
use crate::error::OrReport;
use crate::fdw::modify::writer_id;
use crate::fdw::table::{foreign_table_location, ForeignHudiTable};
use crate::guc::lock_options;
use crate::runtime::block_on;

/// Hudi's `hoodie.clean.commits.retained`.
pub const DEFAULT_RETAIN_COMMITS: usize = 10;
/// How long a consumer that stopped consuming holds cleaning back.
pub const DEFAULT_MAX_RETAIN: &str = "7 days";

/// `hudi.clean(table)`: one clean of the table (no row when nothing may go yet).
#[pg_extern(volatile)]
pub(crate) fn clean(table: PgRelation) -> TableIterator<
    'static,
    (
        name!(instant, String),
        name!(completion_time, String),
        name!(files_deleted, i32),
        name!(bytes_freed, i64),
        name!(earliest_commit_to_retain, String),
    ),
> {
    let _shown = ServiceActivity::begin("clean", table.oid());
    let (cleaned, _) = clean_table(&table);
    TableIterator::new(cleaned.into_iter().map(|c| {
        (c.instant, c.completion, c.files_deleted as i32, c.bytes_freed as i64, c.earliest_commit_to_retain)
    }))
}

/// One clean of `table` (after publishing this server's consumer positions), and why its
/// consumers hold it back, for people, when they do.
pub(crate) fn clean_table(table: &PgRelation) -> (Option<Cleaned>, Option<String>) {
    let storage = service_target(table, "clean it");
    let foreign = ForeignHudiTable::of_relation(table.oid());
    let local = local_positions(&foreign.uri);
    publish_positions(&foreign, &local);
    let options = clean_options(&foreign, local);
    let cleaned = block_on(clean::clean(&storage, &writer_id(), &lock_options(), &options)).or_report();
    let held_back = block_on(clean::held_back_now(&storage, &options)).or_report().map(|(alone, allowed)| {
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
    CleanOptions { retain_commits, keep_changes_after: consumers_floor(table, local, max_retain) }
}

/// The consumers of the table at `location` on this server (through any foreign table on it,
/// of any role): their positions and when they last consumed.
fn local_positions(location: &StorageUri) -> Vec<ConsumerPosition> {
    // Row-level security shows each role its own positions only; the cleaner needs them all.
    // A lookup cache reads changes from its cached instant on, as a consumer does.
    let rows: Vec<(pg_sys::Oid, String, String, i64)> = crate::intents::as_pg_hudi(|| {
        Spi::connect(|client| {
            let rows = client
                .select(
                    "SELECT relation::pg_catalog.oid, pg_catalog.format('%s/%s', role, consumer), position, \
                            (pg_catalog.date_part('epoch', updated_at) * 1000)::bigint FROM hudi.consumer_positions \
                     UNION ALL \
                     SELECT relation, pg_catalog.format('lookup cache of %s', relation::pg_catalog.regclass), position, \
                            (pg_catalog.date_part('epoch', refreshed_at) * 1000)::bigint \
                     FROM hudi.lookup_cache_state WHERE position IS NOT NULL AND refreshed_at IS NOT NULL",
                    None,
                    &[],
                )
                .unwrap_or_else(|e| crate::error::spi_failed("consumer positions", e));
            rows.filter_map(|row| Some((row.get(1).ok()??, row.get(2).ok()??, row.get(3).ok()??, row.get(4).ok()??))).collect()
        })
    });
    rows.into_iter()
        .filter(|(relation, ..)| foreign_table_location(*relation).as_ref() == Some(location))
        .map(|(_, consumer, position, consumed_at_ms)| ConsumerPosition { consumer, position, consumed_at_ms })
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
    let args: Vec<DatumWithOid> = vec![max_retain.into()];
    let since_ms = Spi::get_one_with_args::<i64>(
        "SELECT (pg_catalog.date_part('epoch', pg_catalog.now() - $1::pg_catalog.interval) * 1000)::bigint",
        &args,
    )
    .ok()
    .flatten()
    .unwrap_or(i64::MIN);
    let others = block_on(engine::services::consumers::published(&table.storage(), &publisher())).or_report();
    local.into_iter().chain(others).filter(|p| p.consumed_at_ms > since_ms).map(|p| p.position).min()
}
