//! Compaction: merges the log files of file slices into new base files, as planned at an
//! instant (writers go on meanwhile). It commits on its own, whatever becomes of the calling
//! transaction: like VACUUM it changes how the table is stored, not what it holds.

use engine::services::compaction;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;

use crate::fdw::table::ForeignHudiTable;
use crate::guc::{heartbeat_expiry, lock_options};
use crate::runtime::block_on;
use crate::services::ServiceTable;
use crate::writer::writer_id;

/// Finishes compactions whose executor stopped, or else compacts the file groups of `table`
/// that are due: what it did, `None` when nothing was due.
pub(crate) fn compact_due(table: &ServiceTable) -> Option<String> {
    let trigger = compaction_trigger(&table.foreign);
    let (storage, writer) = (&table.storage, writer_id());
    // A compaction whose executor crashed is finished first: until then readers
    // merge its logs and archival cannot pass it.
    let resumed = block_on(compaction::run_abandoned_compactions(storage, &writer, &lock_options(), heartbeat_expiry()));
    let resumed: Vec<String> = resumed
        .unwrap_or_else(|e| crate::error::report(e))
        .into_iter()
        .map(|o| format!("compaction {} (resumed): {} file groups", o.instant, o.file_groups))
        .collect();
    if !resumed.is_empty() {
        return Some(resumed.join("; "));
    }
    let scheduled = block_on(compaction::schedule_due_compaction(storage, &writer, &lock_options(), &trigger));
    let instant = scheduled.unwrap_or_else(|e| crate::error::report(e))?;
    let outcome = block_on(compaction::run_compaction(storage, &instant, &writer, &lock_options(), heartbeat_expiry()));
    let outcome = outcome.unwrap_or_else(|e| crate::error::report(e));
    Some(format!("compaction {instant}: {} file groups", outcome.file_groups))
}

/// Hudi's `hoodie.compact.inline.max.delta.seconds`: a log is compacted within about this long,
/// also in a file group that gathers no more (archival never passes a log of a latest slice).
const DEFAULT_COMPACTION_MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(3600);

/// When the file slices of `table` are due for compaction: its options `compaction_delta_commits`
/// (log files), `compaction_log_bytes` (a size such as '64MB') and `compaction_max_delay` (an
/// interval, default an hour), whichever comes first.
fn compaction_trigger(table: &ForeignHudiTable) -> compaction::CompactionTrigger {
    let sql = |query: &str, option: &str| -> Option<i64> {
        let value = table.options.get(option)?;
        let args: Vec<DatumWithOid> = vec![value.as_str().into()];
        crate::role::pinned_search_path(|| Spi::get_one_with_args::<i64>(query, &args))
            .unwrap_or_else(|e| crate::error::spi_failed("compaction options", e))
    };
    compaction::CompactionTrigger {
        log_files: table.count_option("compaction_delta_commits", compaction::DEFAULT_DELTA_COMMITS),
        log_bytes: sql("SELECT pg_catalog.pg_size_bytes($1)", "compaction_log_bytes").map(|b| b.max(1) as u64),
        max_delay: Some(
            sql("SELECT (pg_catalog.date_part('epoch', $1::pg_catalog.interval) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8", "compaction_max_delay")
                .map_or(DEFAULT_COMPACTION_MAX_DELAY, |ms| std::time::Duration::from_millis(ms.max(1) as u64)),
        ),
    }
}
