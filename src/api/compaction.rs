//! Compaction from SQL: `hudi.schedule_compaction`, `hudi.run_compaction` and `hudi.compact`.
//! A compaction commits on its own, whatever becomes of the calling transaction: like VACUUM it
//! changes how the table is stored, not what it holds. A running compaction shows its progress
//! in `pg_stat_activity` and `hudi.table_services` ([`crate::activity`]).

use engine::services::compaction::{self, CompactionOutcome};
use pgrx::prelude::*;

use crate::api::args::{hudi_table, RegClass};
use crate::activity::ServiceActivity;
use crate::error::OrReport;
use crate::guc::{heartbeat_expiry, lock_options};
use crate::runtime::block_on;
use crate::services::ServiceTable;
use crate::writer::writer_id;

/// `(instant, completion_time, file_groups, rows_written)`: what a compaction did. pgrx's
/// macros need the named tuple spelled out in each signature.
fn row(outcome: CompactionOutcome) -> (String, String, i32, i64) {
    (outcome.instant, outcome.completion, outcome.file_groups as i32, outcome.rows as i64)
}

/// `hudi.schedule_compaction(table)`: plans a compaction of every file slice with log files
/// (writers go on meanwhile) and returns the plan's instant, or NULL when no slice has logs.
#[pg_extern(volatile)]
fn schedule_compaction(table: Option<RegClass>) -> Option<String> {
    let table = hudi_table(table);
    let storage = ServiceTable::open(&table, "compact it").storage;
    block_on(compaction::schedule_compaction(&storage, &writer_id(), &lock_options())).or_report()
}

/// `hudi.run_compaction(table, instant)`: executes the compaction planned at `instant` (one
/// file slice in memory at a time) and completes it.
#[pg_extern(volatile)]
fn run_compaction(table: Option<RegClass>, instant: Option<&str>) -> TableIterator<
    'static,
    (name!(instant, String), name!(completion_time, String), name!(file_groups, i32), name!(rows_written, i64)),
> {
    let table = hudi_table(table);
    let instant = crate::api::args::name(instant, "instant");
    let storage = ServiceTable::open(&table, "compact it").storage;
    let _shown = ServiceActivity::begin("compaction", table.oid());
    let outcome = block_on(compaction::run_compaction(
        &storage,
        instant,
        &writer_id(),
        &lock_options(),
        heartbeat_expiry(),
    ))
    .or_report();
    TableIterator::once(row(outcome))
}

/// `hudi.compact(table)`: runs the table's pending compactions (waiting for one another
/// writer executes, the worker's for one), then schedules and runs a compaction of what is
/// left; a row per compaction it completed, none when there was nothing to compact.
#[pg_extern(volatile)]
fn compact(table: Option<RegClass>) -> TableIterator<
    'static,
    (name!(instant, String), name!(completion_time, String), name!(file_groups, i32), name!(rows_written, i64)),
> {
    let table = hudi_table(table);
    let storage = ServiceTable::open(&table, "compact it").storage;
    let _shown = ServiceActivity::begin("compaction", table.oid());
    let outcomes = block_on(compaction::compact(&storage, &writer_id(), &lock_options(), heartbeat_expiry())).or_report();
    TableIterator::new(outcomes.into_iter().map(row))
}
