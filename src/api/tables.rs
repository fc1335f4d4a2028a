//! Introspection of Hudi foreign tables: their timeline and file slices.

use pgrx::prelude::*;

use crate::api::args::{hudi_table, RegClass};
use crate::error::OrReport;
use crate::fdw::table::ForeignHudiTable;
use crate::runtime::block_on;
use crate::services::ServiceTable;

/// `hudi.timeline(table)`: every instant of the table's timeline, by requested time.
#[pg_extern(volatile, parallel_safe)]
fn timeline(
    table: Option<RegClass>,
) -> TableIterator<
    'static,
    (
        name!(instant, String),
        name!(action, String),
        name!(state, String),
        name!(completion_time, Option<String>),
        name!(file_name, String),
    ),
> {
    let table = hudi_table(table);
    let reader = ForeignHudiTable::for_function(table.oid()).open_reader();
    let rows: Vec<_> = reader
        .timeline()
        .instants()
        .iter()
        .map(|i| {
            let state = match i.state {
                engine::timeline::State::Requested => "requested",
                engine::timeline::State::Inflight => "inflight",
                engine::timeline::State::Completed => "completed",
            };
            let completion = i.is_completed().then(|| reader.timeline().completion_time(&i.timestamp).map(str::to_owned)).flatten();
            (i.timestamp.clone(), i.action.clone(), state.to_owned(), completion, i.file_name.clone())
        })
        .collect();
    TableIterator::new(rows)
}

/// `hudi.file_slices(table)`: the file slices the latest snapshot reads (one per file group).
#[pg_extern(volatile, parallel_safe)]
fn file_slices(
    table: Option<RegClass>,
) -> TableIterator<
    'static,
    (
        name!(partition_path, String),
        name!(file_id, String),
        name!(base_instant, String),
        name!(base_file, Option<String>),
        name!(base_file_size, Option<i64>),
        name!(log_files, Vec<String>),
        name!(log_files_size, i64),
    ),
> {
    let table = hudi_table(table);
    let reader = ForeignHudiTable::for_function(table.oid()).open_reader();
    let slices = block_on(reader.slices(&engine::timeline::ReadBound::Latest)).or_report();
    let rows: Vec<_> = slices
        .into_iter()
        .map(|s| {
            let logs: Vec<String> = s.log_files.iter().map(|l| l.name.clone()).collect();
            let log_size = s.log_files.iter().map(|l| l.size as i64).sum();
            let base_size = s.base_file.as_ref().map(|b| b.size as i64);
            (s.partition, s.file_id, s.base_instant, s.base_file.map(|b| b.name), base_size, logs, log_size)
        })
        .collect();
    TableIterator::new(rows)
}

/// `hudi.latest_commit(table)`: the table's latest completed write as `(instant,
/// completion_time)` — its requested instant time, and the time it completed (table version
/// 8+; on version 6, which records none, the instant time again) — or no row for a table
/// without writes. The completion time is the end bound that makes an incremental read catch up
/// completely, and what consumer positions hold.
#[pg_extern(volatile, parallel_safe)]
fn latest_commit(
    table: Option<RegClass>,
) -> TableIterator<'static, (name!(instant, String), name!(completion_time, String))> {
    TableIterator::new(latest_write(hudi_table(table).oid()))
}

/// The latest completed write of the Hudi table `relid`: `(instant, completion time)`.
pub(crate) fn latest_write(relid: pgrx::pg_sys::Oid) -> Option<(String, String)> {
    let reader = ForeignHudiTable::for_function(relid).open_reader();
    let timeline = reader.timeline();
    timeline
        .completed_writes()
        .filter_map(|i| timeline.completion_time(&i.timestamp).map(|done| (i.timestamp.clone(), done.to_owned())))
        .max_by(|a, b| a.1.cmp(&b.1))
}

/// `hudi.rollback_failed_writes(table)`: rolls back the table's pending writes whose writer's
/// heartbeat is older than `hudi.heartbeat_expiry` (a crashed or killed backend): deletes their
/// files and records a rollback instant. Returns what it rolled back. See
/// [`crate::services::rollback`] for how writes of PostgreSQL transactions are decided.
#[pg_extern(volatile)]
fn rollback_failed_writes(
    table: Option<RegClass>,
) -> TableIterator<'static, (name!(instant, String), name!(rollback_instant, String), name!(files_deleted, i32))> {
    let table = hudi_table(table);
    let rolled = crate::services::rollback::rollback_failed_writes(&ServiceTable::open(&table, "roll back its writes"));
    TableIterator::new(rolled.into_iter().map(|r| (r.instant, r.rollback_instant, r.files_deleted as i32)))
}

/// `hudi.finish_pending_commits()`: completes the writes whose PostgreSQL transaction committed
/// but whose completed instant was not written (see `hudi.pending_commits`), of the foreign
/// tables the caller owns (a superuser: all). Returns each with what happened: `completed`
/// (with its completion time), `lost` (another server or Hudi writer rolled it back meanwhile)
/// or `failed` (kept, tried again later; the error).
#[pg_extern(volatile)]
fn finish_pending_commits() -> TableIterator<
    'static,
    (name!(relation, RegClass), name!(instant, String), name!(outcome, String), name!(detail, Option<String>)),
> {
    use crate::intents::Finished;
    crate::fdw::table_state::forget_all();
    let rows = crate::intents::finish_committed(None, true).into_iter().map(|(intent, outcome)| {
        let (outcome, detail) = match outcome {
            Finished::Completed { completion } => ("completed", Some(completion)),
            Finished::Lost(e) => ("lost", Some(e)),
            Finished::Failed(e) => ("failed", Some(e)),
        };
        (RegClass(intent.relation), intent.commit.instant, outcome.to_owned(), detail)
    });
    TableIterator::new(rows.collect::<Vec<_>>())
}
