//! Compaction of merge-on-read file slices into new base files (hudi-format.md §2.4, §2.7).
//!
//! Scheduling takes an instant `C` under the table lock and plans every file slice that has
//! log files completed before `C`; because completion times are issued under the same lock,
//! every log completed before `C` is already visible and every later one completes after `C`,
//! so writers never stop. The plan is `C.compaction.requested` (Avro `HoodieCompactionPlan`).
//! Executing it merges each planned slice with the one merge routine (one slice in memory at a
//! time) into a base file `<fileId>_<token>_C.parquet`, and completes `C_<completion>.commit`.
//! Logs that complete after `C` belong to the new slice by completion-time slicing (§7.2), so
//! nothing written meanwhile is lost.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, StringArray};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::file::metadata::KeyValue;
use serde_json::Value;

use crate::services::progress;
use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::read::schema::{FILE_NAME_COLUMN, RECORD_KEY_COLUMN};
use crate::read::{ScanOptions, ScanStats, TableReader};
use crate::mdt::writer::FilesChange;
use crate::storage::Storage;
use crate::table::files::{path_in_partition, BaseFile, DataFile, LogFile};
use crate::table::TableConfig;
use crate::timeline::ReadBound;
use crate::view::FileSlice;
use crate::write::commit::{CommitMetadata, WriteStat};
use crate::write::time::{LockOptions, TableLock};
use crate::write::transaction::next_transaction_number;
use crate::write::{heartbeat, parquet_bytes, ParquetFile, WriterId};

const COMPACTION_PLAN_SCHEMA: &str = include_str!("HoodieCompactionPlan.avsc");

/// One planned file slice (`HoodieCompactionOperation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionOperation {
    pub partition: String,
    pub file_id: String,
    /// The base instant of the slice being compacted.
    pub base_instant: String,
    /// Name of the slice's base file, if it has one.
    pub base_file: Option<String>,
    /// Names of the slice's log files, in the order they apply.
    pub log_files: Vec<String>,
    /// Bytes of those log files.
    pub log_bytes: u64,
}

/// A compaction plan: the slices one compaction instant rewrites.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionPlan {
    pub operations: Vec<CompactionOperation>,
}

fn plan_path(config: &TableConfig, instant: &str) -> String {
    format!("{}/{instant}.compaction.requested", config.timeline_dir)
}

impl CompactionPlan {
    /// The plan as Java writes it: an Avro object container file of `HoodieCompactionPlan`.
    pub fn to_avro(&self) -> Result<Vec<u8>> {
        use apache_avro::types::Value as Avro;
        let internal = |e: apache_avro::Error| Error::new(ErrorKind::Internal, "cannot encode a compaction plan").with_source(e);
        let schema = crate::avro::parse_schema(COMPACTION_PLAN_SCHEMA).map_err(internal)?;
        let some = |v: Avro| Avro::Union(1, Box::new(v));
        let string = |s: &str| some(Avro::String(s.to_owned()));
        let operations = self
            .operations
            .iter()
            .map(|op| {
                let metrics = [
                    ("TOTAL_LOG_FILES", op.log_files.len() as f64),
                    ("TOTAL_LOG_FILES_SIZE", op.log_bytes as f64),
                    ("TOTAL_IO_READ_MB", op.log_bytes as f64 / (1 << 20) as f64),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), Avro::Double(v)))
                .collect();
                Avro::Record(vec![
                    ("baseInstantTime".into(), string(&op.base_instant)),
                    (
                        "deltaFilePaths".into(),
                        some(Avro::Array(op.log_files.iter().map(|l| Avro::String(l.clone())).collect())),
                    ),
                    ("dataFilePath".into(), op.base_file.as_deref().map_or(Avro::Union(0, Box::new(Avro::Null)), string)),
                    ("fileId".into(), string(&op.file_id)),
                    ("partitionPath".into(), string(&op.partition)),
                    ("metrics".into(), some(Avro::Map(metrics))),
                    ("bootstrapFilePath".into(), Avro::Union(0, Box::new(Avro::Null))),
                ])
            })
            .collect();
        let record = Avro::Record(vec![
            ("operations".into(), some(Avro::Array(operations))),
            ("extraMetadata".into(), Avro::Union(0, Box::new(Avro::Null))),
            ("version".into(), Avro::Union(0, Box::new(Avro::Int(2)))),
            ("strategy".into(), Avro::Union(0, Box::new(Avro::Null))),
            ("preserveHoodieMetadata".into(), Avro::Union(0, Box::new(Avro::Boolean(false)))),
            ("missingSchedulePartitions".into(), some(Avro::Array(Vec::new()))),
        ]);
        let record = record.resolve(&schema).map_err(internal)?;
        let mut writer = apache_avro::Writer::new(&schema, Vec::new());
        writer.append(record).map_err(internal)?;
        writer.into_inner().map_err(internal)
    }

    /// Reads a plan decoded from its timeline file (Java's or ours).
    pub fn from_json(value: &Value) -> Result<CompactionPlan> {
        let corrupt = |what: &str| Error::new(ErrorKind::Corrupt, format!("compaction plan without {what}"));
        let mut operations = Vec::new();
        for op in value.get("operations").and_then(Value::as_array).into_iter().flatten() {
            let text = |name: &str| op.get(name).and_then(Value::as_str).map(str::to_owned);
            operations.push(CompactionOperation {
                partition: text("partitionPath").unwrap_or_default(),
                file_id: text("fileId").ok_or_else(|| corrupt("fileId"))?,
                base_instant: text("baseInstantTime").ok_or_else(|| corrupt("baseInstantTime"))?,
                base_file: text("dataFilePath").filter(|p| !p.is_empty()),
                log_files: op
                    .get("deltaFilePaths")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|p| p.rsplit('/').next().unwrap_or(p).to_owned())
                    .collect(),
                log_bytes: op.pointer("/metrics/TOTAL_LOG_FILES_SIZE").and_then(Value::as_f64).unwrap_or(0.0) as u64,
            });
        }
        Ok(CompactionPlan { operations })
    }

    /// Reads the plan of the compaction requested at `instant`.
    pub async fn load(storage: &Storage, config: &TableConfig, instant: &str) -> Result<CompactionPlan> {
        let bytes = storage.get(&plan_path(config, instant)).await?;
        let json = crate::timeline::metadata::decode(&bytes).context(|| format!("reading compaction plan {instant}"))?;
        CompactionPlan::from_json(&json)
    }
}

/// Plans a compaction of every file slice with log files that no pending compaction already
/// covers. Returns the plan's instant, or `None` when there is nothing to compact (then no
/// timeline file is written).
pub async fn schedule_compaction(storage: &Storage, writer: &WriterId, lock_options: &LockOptions) -> Result<Option<String>> {
    schedule_due_compaction(storage, writer, lock_options, &CompactionTrigger::default()).await
}

/// Hudi's `hoodie.compact.inline.max.delta.commits`: the log files a file slice gathers before
/// it is due for compaction.
pub const DEFAULT_DELTA_COMMITS: usize = 5;

/// When a file slice with logs is due for compaction (Hudi's `NUM_OR_TIME` trigger, per file
/// group, with a size bound): any one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionTrigger {
    /// At least this many log files (`hoodie.compact.inline.max.delta.commits`).
    pub log_files: usize,
    /// At least this many bytes of logs: every merged read reads them all.
    pub log_bytes: Option<u64>,
    /// A log written longer ago than this (`hoodie.compact.inline.max.delta.seconds`).
    pub max_delay: Option<Duration>,
}

impl Default for CompactionTrigger {
    /// Every slice with a log.
    fn default() -> Self {
        CompactionTrigger { log_files: 1, log_bytes: None, max_delay: None }
    }
}

impl CompactionTrigger {
    /// Whether `slice` is due at `now_ms` (ms since the epoch).
    pub fn is_due(&self, slice: &crate::view::FileSlice, now_ms: i64) -> bool {
        if slice.log_files.is_empty() {
            return false;
        }
        let bytes: u64 = slice.log_files.iter().map(|l| l.size).sum();
        let oldest = slice.log_files.iter().filter_map(|l| crate::write::time::parse_instant(&l.instant)).min();
        slice.log_files.len() >= self.log_files.max(1)
            || self.log_bytes.is_some_and(|b| bytes >= b)
            || self.max_delay.zip(oldest).is_some_and(|(delay, oldest)| now_ms - oldest >= delay.as_millis() as i64)
    }
}

/// [`schedule_compaction`] of the file slices that `trigger` finds due: `None` when none is.
/// The table is listed and the plan written under the lock that issued its instant: a second
/// scheduler then sees this plan pending and leaves its file groups alone (listed outside the
/// lock, two schedulers a few milliseconds apart each planned the same slices).
pub async fn schedule_due_compaction(storage: &Storage, writer: &WriterId, lock_options: &LockOptions, trigger: &CompactionTrigger) -> Result<Option<String>> {
    TableLock::hold(storage, &writer.owner(), lock_options, async |lock| {
        let instant = lock.next_time(lock_options).await?;
        let now_ms = crate::write::time::parse_instant(&instant).unwrap_or_default();
        // Listed after taking the instant: every write that completed before it is visible now.
        let reader = TableReader::open(storage.clone()).await?;
        let config = reader.config();
        // A truncate in flight starts new slices at an earlier instant than this one: a base
        // written here would be newer and hold the rows it removes. It is planned after.
        if reader.timeline().pending_writes().any(|i| i.requested_action == "replacecommit") {
            return Ok(None);
        }
        let mut pending: HashSet<(String, String)> = HashSet::new();
        for compaction in reader.timeline().pending_compactions() {
            let plan = CompactionPlan::load(storage, config, &compaction.timestamp).await?;
            pending.extend(plan.operations.into_iter().map(|op| (op.partition, op.file_id)));
        }
        let operations: Vec<CompactionOperation> = reader
            .slices(&ReadBound::CompletedBy(instant.clone()))
            .await?
            .into_iter()
            .filter(|s| trigger.is_due(s, now_ms) && !pending.contains(&(s.partition.clone(), s.file_id.clone())))
            .map(|s| CompactionOperation {
                log_bytes: s.log_files.iter().map(|l| l.size).sum(),
                log_files: s.log_files.iter().map(|l| l.name.clone()).collect(),
                base_file: s.base_file.map(|b| b.name),
                base_instant: s.base_instant,
                file_id: s.file_id,
                partition: s.partition,
            })
            .collect();
        if operations.is_empty() {
            return Ok(None);
        }
        let plan = CompactionPlan { operations };
        lock.check().await?;
        storage.put_if_absent(&plan_path(config, &instant), Bytes::from(plan.to_avro()?)).await?;
        Ok(Some(instant))
    })
    .await
}

/// What executing a compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionOutcome {
    pub instant: String,
    pub completion: String,
    pub file_groups: usize,
    pub rows: u64,
}

/// Executes the compaction planned at `instant` and completes it. A previous attempt that
/// failed halfway is cleaned up first (its base files are rewritten); an attempt running
/// elsewhere (its heartbeat younger than `heartbeat_expiry`) makes this an error.
pub async fn run_compaction(
    storage: &Storage,
    instant: &str,
    writer: &WriterId,
    lock_options: &LockOptions,
    heartbeat_expiry: Duration,
) -> Result<CompactionOutcome> {
    let reader = TableReader::open(storage.clone()).await?;
    match reader.timeline().get(instant) {
        Some(i) if i.requested_action == "compaction" && i.is_completed() => {
            return Err(Error::new(ErrorKind::InvalidArgument, format!("compaction {instant} is already completed")));
        }
        Some(i) if i.requested_action == "compaction" => {}
        _ => return Err(Error::new(ErrorKind::NotFound, format!("no pending compaction at instant {instant}"))),
    }
    let plan = CompactionPlan::load(storage, reader.config(), instant).await?;
    let claim = claim(storage, reader.config(), writer, instant, lock_options, heartbeat_expiry).await?;
    let result = execute(storage, &reader, instant, &plan, writer, &claim, lock_options).await;
    match &result {
        Ok(_) => storage.delete(&executor_path(instant)).await?,
        // The heartbeat is another executor's now.
        Err(e) if e.kind() == ErrorKind::InUse => return result,
        Err(_) => {}
    }
    heartbeat::stop(storage, instant).await?;
    result
}

/// An `InUse` error when the compaction at `instant` has a completed file in `timeline_dir`.
async fn refuse_if_completed(storage: &Storage, timeline_dir: &str, instant: &str) -> Result<()> {
    let files = storage.list_dir(timeline_dir).await?;
    match crate::timeline::instant::completion_in(files.iter().map(|(n, _)| n.as_str()), instant, "commit") {
        Some(_) => Err(Error::new(ErrorKind::InUse, format!("compaction {instant} was completed by another writer"))),
        None => Ok(()),
    }
}

/// Where the executor that claimed a compaction last is named (`.hoodie/.aux/` is ours).
const EXECUTORS_DIR: &str = ".hoodie/.aux/pg_hudi/executors";

fn executor_path(instant: &str) -> String {
    format!("{EXECUTORS_DIR}/{instant}")
}

/// Marks `instant` as being executed by this writer, unless it is completed or another
/// writer's heartbeat for it is still fresh, and names this execution in the executor file.
/// Checked and written under the table lock so two executors cannot both win; the executor
/// file fences an executor that was taken for dead (a stalled one whose heartbeat expired):
/// its completion finds another name there and fails, since the new executor deletes the files
/// of earlier attempts. Returns this execution's name.
async fn claim(
    storage: &Storage,
    config: &crate::table::TableConfig,
    writer: &WriterId,
    instant: &str,
    lock_options: &LockOptions,
    expiry: Duration,
) -> Result<String> {
    let execution = format!("{} {}", writer.token(next_transaction_number()), crate::write::time::now_ms());
    TableLock::hold(storage, &writer.owner(), lock_options, async |lock| {
        refuse_if_completed(storage, &config.timeline_dir, instant).await?;
        let running = match storage.get_if_exists(&format!("{}/{instant}", heartbeat::HEARTBEAT_DIR)).await? {
            Some(_) => !heartbeat::expired(storage, instant, expiry).await?,
            None => false,
        };
        if running {
            return Err(Error::new(
                ErrorKind::InUse,
                format!("compaction {instant} is being executed by another writer (its heartbeat is fresh)"),
            ));
        }
        lock.check().await?;
        heartbeat::beat(storage, instant).await?;
        storage.put(&executor_path(instant), Bytes::from(execution.clone())).await?;
        Ok(execution.clone())
    })
    .await
}

/// Writes the plan's base files with `reader` (opened after the plan's logs completed) and
/// completes the compaction.
async fn execute(
    storage: &Storage,
    reader: &TableReader,
    instant: &str,
    plan: &CompactionPlan,
    writer: &WriterId,
    execution: &str,
    lock_options: &LockOptions,
) -> Result<CompactionOutcome> {
    let dir = &reader.config().timeline_dir;
    storage.put_if_absent(&format!("{dir}/{instant}.compaction.inflight"), Bytes::new()).await?;
    let bound = ReadBound::CompletedBy(instant.to_owned());
    let token = writer.token(next_transaction_number());
    let mut metadata = CommitMetadata { operation_type: "COMPACT".into(), compacted: true, ..Default::default() };
    metadata.extra_metadata.insert("schema".into(), reader.avro_schema().to_owned());
    let mut rows_written = 0;
    let mut partitions_cleaned = HashSet::new();
    progress::phase(format!("compacting {instant}"), plan.operations.len(), "file groups");
    for op in &plan.operations {
        let in_partition = |name: &str| path_in_partition(&op.partition, name);
        // Base files of this instant left by an earlier, failed attempt.
        if partitions_cleaned.insert(op.partition.clone()) {
            for (path, size) in storage.list_dir(&op.partition).await? {
                let name = path.rsplit('/').next().unwrap_or(&path);
                if matches!(DataFile::parse(name, size), Some(DataFile::Base(b)) if b.instant == instant) {
                    storage.delete(&in_partition(name)).await?;
                }
            }
        }
        let slice = planned_slice(op)?;
        let merged = reader.read_slice(&slice, &bound, &ScanOptions::default(), &mut ScanStats::default()).await?;
        let name = format!("{}_{token}_{instant}.parquet", op.file_id);
        let rows = merged.unwrap_or_else(|| RecordBatch::new_empty(reader.schema().clone()));
        let rows = with_file_name(&sorted_by_record_key(&rows)?, &name)?;
        let bytes = parquet_bytes(&rows, ParquetFile::BaseFile(key_range(&rows)))?;
        let size = bytes.len() as i64;
        storage.put(&in_partition(&name), Bytes::from(bytes)).await?;
        heartbeat::beat(storage, instant).await?;
        let count = rows.num_rows() as i64;
        rows_written += count as u64;
        progress::advance(count as u64);
        metadata.partition_to_write_stats.entry(op.partition.clone()).or_default().push(WriteStat {
            file_id: Some(op.file_id.clone()),
            path: Some(in_partition(&name)),
            prev_commit: Some(op.base_instant.clone()),
            num_writes: Some(count),
            num_deletes: Some(0),
            num_update_writes: Some(0),
            num_inserts: Some(0),
            total_write_bytes: Some(size),
            total_write_errors: Some(0),
            partition_path: Some(op.partition.clone()),
            file_size_in_bytes: Some(size),
            base_file: Some(name.clone()),
            prev_base_file: op.base_file.clone(),
            total_log_files: Some(op.log_files.len() as i64),
            total_log_files_compacted: Some(op.log_files.len() as i64),
            total_log_size_compacted: Some(op.log_bytes as i64),
            ..Default::default()
        });
    }
    let bytes = Bytes::from(metadata.to_avro()?);
    let completion = TableLock::hold(storage, &writer.owner(), lock_options, async |lock| {
        refuse_if_completed(storage, dir, instant).await?;
        if storage.get_if_exists(&executor_path(instant)).await?.as_deref() != Some(execution.as_bytes()) {
            return Err(Error::new(
                ErrorKind::InUse,
                format!("compaction {instant} was taken over by another executor (this one's heartbeat had expired)"),
            ));
        }
        crate::mdt::writer::record(storage, reader.config(), instant, &FilesChange::of_commit(&bytes)?, lock, lock_options).await?;
        let completion = lock.next_time(lock_options).await?;
        if !lock_options.pause_before_completing.is_zero() {
            tokio::time::sleep(lock_options.pause_before_completing).await;
        }
        // Still ours: no later completion time can be visible before this one.
        lock.check().await?;
        storage.put_if_absent(&format!("{dir}/{instant}_{completion}.commit"), bytes).await?;
        Ok(completion)
    })
    .await?;
    Ok(CompactionOutcome { instant: instant.to_owned(), completion, file_groups: plan.operations.len(), rows: rows_written })
}

/// The file slice a plan operation names (sizes are not needed to read it).
fn planned_slice(op: &CompactionOperation) -> Result<FileSlice> {
    let corrupt = |name: &str| Error::new(ErrorKind::Corrupt, format!("compaction plan names {name}, which is not a data file name"));
    let base_file: Option<BaseFile> = match &op.base_file {
        Some(name) => match DataFile::parse(name, 0) {
            Some(DataFile::Base(base)) => Some(base),
            _ => return Err(corrupt(name)),
        },
        None => None,
    };
    let mut log_files: Vec<LogFile> = op
        .log_files
        .iter()
        .map(|name| match DataFile::parse(name, 0) {
            Some(DataFile::Log(log)) => Ok(log),
            _ => Err(corrupt(name)),
        })
        .collect::<Result<_>>()?;
    // Plans written by other engines need not list them in merge order.
    log_files.sort_by(|a, b| a.merge_order().cmp(&b.merge_order()));
    Ok(FileSlice {
        partition: op.partition.clone(),
        file_id: op.file_id.clone(),
        base_instant: op.base_instant.clone(),
        base_file,
        log_files,
    })
}

/// `rows` with `_hoodie_file_name` set to the base file's name (§5: base files hold their own
/// name; log records hold the file id). Other meta fields are kept: a record's commit time
/// stays the time of the write that produced it, which incremental reads rely on.
fn with_file_name(rows: &RecordBatch, name: &str) -> Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
    if rows.schema().fields().get(FILE_NAME_COLUMN).is_none_or(|f| f.name() != "_hoodie_file_name") {
        return Err(Error::new(ErrorKind::Unsupported, "compaction needs a table that populates meta fields"));
    }
    columns[FILE_NAME_COLUMN] = Arc::new(StringArray::from(vec![name; rows.num_rows()]));
    RecordBatch::try_new(rows.schema(), columns)
        .map_err(|e| Error::new(ErrorKind::Internal, "cannot set _hoodie_file_name").with_source(e))
}

/// `rows` in record key order: readers then match log keys against the base file by a walk
/// instead of a lookup per row, and row-group statistics on the key become selective.
fn sorted_by_record_key(rows: &RecordBatch) -> Result<RecordBatch> {
    let internal = |e| Error::new(ErrorKind::Internal, "cannot sort by record key").with_source(e);
    let order = arrow::compute::sort_to_indices(rows.column(RECORD_KEY_COLUMN), None, None).map_err(internal)?;
    arrow::compute::take_record_batch(rows, &order).map_err(internal)
}

/// The footer metadata Java's base files carry: the smallest and largest record key.
fn key_range(rows: &RecordBatch) -> Vec<KeyValue> {
    let keys = rows.column(RECORD_KEY_COLUMN).as_any().downcast_ref::<StringArray>();
    let (Some(min), Some(max)) = (keys.and_then(arrow::compute::min_string), keys.and_then(arrow::compute::max_string)) else {
        return Vec::new();
    };
    vec![
        KeyValue::new("hoodie_min_record_key".into(), min.to_owned()),
        KeyValue::new("hoodie_max_record_key".into(), max.to_owned()),
    ]
}

/// Executes the pending compactions that nobody executes: those requested but never started,
/// or whose executor's heartbeat is older than `heartbeat_expiry` (it stopped or crashed). One
/// running elsewhere is left to it. Their outcomes, oldest first.
pub async fn run_abandoned_compactions(
    storage: &Storage,
    writer: &WriterId,
    lock_options: &LockOptions,
    heartbeat_expiry: Duration,
) -> Result<Vec<CompactionOutcome>> {
    let config = crate::table::load_config(storage).await?;
    let timeline = crate::timeline::Timeline::load(storage, &config).await?;
    let mut out = Vec::new();
    for pending in timeline.pending_compactions() {
        match run_compaction(storage, &pending.timestamp, writer, lock_options, heartbeat_expiry).await {
            Ok(outcome) => out.push(outcome),
            Err(e) if e.kind() == ErrorKind::InUse => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Compacts the table: runs its pending compactions (waiting for those another writer is
/// executing, a worker's round for one, to end), then schedules and runs a compaction of every
/// file slice with logs that is left. Returns the compactions this call completed, in order.
pub async fn compact(
    storage: &Storage,
    writer: &WriterId,
    lock_options: &LockOptions,
    heartbeat_expiry: Duration,
) -> Result<Vec<CompactionOutcome>> {
    let reader = TableReader::open(storage.clone()).await?;
    let pending: Vec<String> = reader.timeline().pending_compactions().map(|i| i.timestamp.clone()).collect();
    let mut done = Vec::new();
    for instant in &pending {
        done.extend(run_or_wait(storage, instant, writer, lock_options, heartbeat_expiry).await?);
    }
    if let Some(instant) = schedule_compaction(storage, writer, lock_options).await? {
        done.extend(run_or_wait(storage, &instant, writer, lock_options, heartbeat_expiry).await?);
    }
    Ok(done)
}

/// Runs the pending compaction at `instant`; while another writer executes it (its heartbeat
/// fresh), waits for it to end, taking it over if its heartbeat expires first. `None` when
/// another writer completed it or it is gone (rolled back).
async fn run_or_wait(
    storage: &Storage,
    instant: &str,
    writer: &WriterId,
    lock_options: &LockOptions,
    heartbeat_expiry: Duration,
) -> Result<Option<CompactionOutcome>> {
    // Another server's execution is seen only in storage: looked at again after a pause that
    // grows to a second (a caller's cancel ends the wait).
    let mut pause = Duration::from_millis(50);
    loop {
        match run_compaction(storage, instant, writer, lock_options, heartbeat_expiry).await {
            Ok(outcome) => return Ok(Some(outcome)),
            // Completed (by another writer, since this call looked), or rolled back; a missing
            // file of a compaction still pending is an error.
            Err(e) if matches!(e.kind(), ErrorKind::InvalidArgument | ErrorKind::NotFound) => {
                let reader = TableReader::open(storage.clone()).await?;
                return match reader.timeline().get(instant) {
                    Some(pending) if !pending.is_completed() => Err(e),
                    _ => Ok(None),
                };
            }
            Err(e) if e.kind() == ErrorKind::InUse => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_round_trips_through_avro() {
        let plan = CompactionPlan {
            operations: vec![
                CompactionOperation {
                    partition: "country=nl".into(),
                    file_id: "00000001-0000-0000-0000-000000000000-0".into(),
                    base_instant: "20260101000000001".into(),
                    base_file: None,
                    log_files: vec![".00000001-0000-0000-0000-000000000000-0_20260101000000001.log.1_1-2-3".into()],
                    log_bytes: 1234,
                },
                CompactionOperation {
                    partition: String::new(),
                    file_id: "00000002-0000-0000-0000-000000000000-0".into(),
                    base_instant: "20260101000000002".into(),
                    base_file: Some("00000002-0000-0000-0000-000000000000-0_1-2-3_20260101000000002.parquet".into()),
                    log_files: vec![],
                    log_bytes: 0,
                },
            ],
        };
        let json = crate::timeline::metadata::decode(&plan.to_avro().unwrap()).unwrap();
        assert_eq!(json["version"], 2);
        assert_eq!(json["operations"][0]["metrics"]["TOTAL_LOG_FILES"], 1.0);
        assert_eq!(CompactionPlan::from_json(&json).unwrap(), plan);
    }
}

#[cfg(test)]
mod takeover_tests {
    use super::*;
    use crate::write::table::{names, TestTable};

    /// An executor taken for dead (its heartbeat expired while it stalled) and the one that
    /// took over: the new one deletes the files of the earlier attempt, so the stalled one must
    /// not complete after it wakes — its completion finds the other executor named — and the
    /// new one's completion stands.
    #[tokio::test]
    async fn a_stalled_executor_cannot_complete_after_another_took_over() {
        let table = TestTable::new(1).await;
        let (storage, config) = (&table.storage, &table.config);
        let writer = |process| WriterId { node: 3, process };
        table.upsert(vec![1, 2], "a").await;
        table.upsert(vec![1, 2], "b").await;
        let expected = names(&storage).await;
        let instant = schedule_compaction(&storage, &writer(1), &LockOptions::default()).await.unwrap().unwrap();
        let plan = CompactionPlan::load(&storage, &config, &instant).await.unwrap();
        let reader = TableReader::open(storage.clone()).await.unwrap();
        let options = LockOptions::default();

        let stalled = claim(&storage, &config, &writer(5), &instant, &options, Duration::from_secs(60)).await.unwrap();
        let refused = claim(&storage, &config, &writer(6), &instant, &options, Duration::from_secs(60)).await.unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::InUse, "a fresh heartbeat keeps others out");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let took_over = claim(&storage, &config, &writer(6), &instant, &options, Duration::from_millis(1)).await.unwrap();
        let err = execute(&storage, &reader, &instant, &plan, &writer(5), &stalled, &options).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InUse);
        assert!(err.to_string().contains("taken over"), "{err}");
        assert_eq!(names(&storage).await, expected, "nothing of the stalled executor is visible");
        execute(&storage, &reader, &instant, &plan, &writer(6), &took_over, &options).await.unwrap();
        assert_eq!(names(&storage).await, expected);
        let again = claim(&storage, &config, &writer(7), &instant, &options, Duration::from_millis(1)).await.unwrap_err();
        assert!(again.to_string().contains("completed by another writer"), "{again}");
    }

    /// Two schedulers at once (the worker's and `hudi.compact`'s): one plans the slices, the
    /// other finds them pending and plans nothing.
    #[tokio::test]
    async fn two_schedulers_at_once_plan_a_slice_once() {
        let table = TestTable::new(4).await;
        let storage = &table.storage;
        let writer = |process| WriterId { node: 3, process };
        table.upsert((0..40).collect(), "a").await;
        for round in 0..10 {
            let options = LockOptions::default();
            // Each on a thread and runtime of its own, as two backends are.
            let start = Arc::new(std::sync::Barrier::new(2));
            let schedulers: Vec<_> = [10, 20]
                .map(|process| {
                    let (storage, start) = (storage.clone(), start.clone());
                    std::thread::spawn(move || {
                        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                        start.wait();
                        runtime.block_on(schedule_compaction(&storage, &writer(process + round), &LockOptions::default()))
                    })
                })
                .into();
            let planned: Vec<String> = schedulers.into_iter().filter_map(|s| s.join().unwrap().unwrap()).collect();
            assert!(planned.len() <= 1, "round {round}: both schedulers planned: {planned:?}");
            for instant in planned {
                run_compaction(&storage, &instant, &writer(1), &options, Duration::from_secs(60)).await.unwrap();
            }
            table.upsert((0..40).collect(), "a").await;
        }
    }
}
