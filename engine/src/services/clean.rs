//! Cleaning: file slices that no read needs any more are deleted, as Hudi's KEEP_LATEST_COMMITS
//! policy does (hudi-services-format.md §1). A plan (`<t>.clean.requested`, Avro
//! `HoodieCleanerPlan` version 2) is written before any file is deleted, then an empty
//! `<t>.clean.inflight`; the completed `<t>_<c>.clean` (Avro `HoodieCleanMetadata` version 2)
//! records what went and the earliest commit to retain, which readers check before they read
//! changes or time travel. A clean that stopped halfway is finished from its plan by the next.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::services::progress;
use crate::services::compaction::CompactionPlan;
use crate::storage::Storage;
use crate::table::TableConfig;
use crate::timeline::instant::completion_in;
use crate::timeline::metadata::ReplacedGroups;
use crate::timeline::{metadata, Instant, ReadBound, Timeline};
use crate::view::FileSystemView;
use crate::write::time::{LockOptions, TableLock};
use crate::write::transaction::WriterId;

const PLAN_SCHEMA: &str = include_str!("HoodieCleanerPlan.avsc");
const METADATA_SCHEMA: &str = include_str!("HoodieCleanMetadata.avsc");
const POLICY: &str = "KEEP_LATEST_COMMITS";

/// What a clean keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanOptions {
    /// The completed commits (writes and compactions) whose file slices every read keeps.
    pub retain_commits: usize,
    /// A completion time (or `""`, the start) that a consumer will read changes after: the
    /// slices it needs stay.
    pub keep_changes_after: Option<String>,
    /// An instant time: reads as of any time after it keep their slices (retention by time,
    /// Hudi's KEEP_LATEST_BY_HOURS, on top of `retain_commits`).
    pub keep_reads_after: Option<String>,
}

impl Default for CleanOptions {
    fn default() -> Self {
        // Hudi's hoodie.clean.commits.retained.
        CleanOptions { retain_commits: 10, keep_changes_after: None, keep_reads_after: None }
    }
}

/// What one clean did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleaned {
    pub instant: String,
    pub completion: String,
    /// The requested time of the oldest commit whose slices were all kept.
    pub earliest_commit_to_retain: String,
    pub files_deleted: usize,
    pub bytes_freed: u64,
}

/// A file to delete: its partition, path relative to the table, and size.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Doomed {
    partition: String,
    path: String,
    size: u64,
}

/// The plan of one clean.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CleanPlan {
    /// `(requested time, action)` of the earliest commit to retain.
    earliest: (String, String),
    last_completed: String,
    files: Vec<Doomed>,
}

fn internal(what: &'static str) -> impl FnOnce(apache_avro::Error) -> Error {
    move |e| Error::new(ErrorKind::Internal, what).with_source(e)
}

impl CleanPlan {
    /// What the clean deletes, as the metadata table records it.
    fn files_change(&self) -> crate::mdt::writer::FilesChange {
        let mut change = crate::mdt::writer::FilesChange::default();
        for file in &self.files {
            let name = file.path.rsplit('/').next().unwrap_or(&file.path);
            change.deleted.entry(file.partition.clone()).or_default().insert(name.to_owned());
        }
        change
    }

    fn to_avro(&self, base_uri: &str) -> Result<Vec<u8>> {
        use apache_avro::types::Value as Avro;
        let schema = crate::avro::parse_schema(PLAN_SCHEMA).map_err(internal("cannot parse the cleaner plan schema"))?;
        let mut by_partition: HashMap<String, Vec<Avro>> = HashMap::new();
        for file in &self.files {
            by_partition.entry(file.partition.clone()).or_default().push(Avro::Record(vec![
                ("filePath".into(), Avro::Union(1, Box::new(Avro::String(format!("{base_uri}/{}", file.path))))),
                ("isBootstrapBaseFile".into(), Avro::Union(1, Box::new(Avro::Boolean(false)))),
            ]));
        }
        let files = by_partition.into_iter().map(|(p, f)| (p, Avro::Array(f))).collect();
        let earliest = Avro::Record(vec![
            ("timestamp".into(), Avro::String(self.earliest.0.clone())),
            ("action".into(), Avro::String(self.earliest.1.clone())),
            ("state".into(), Avro::String("COMPLETED".into())),
        ]);
        let record = Avro::Record(vec![
            ("earliestInstantToRetain".into(), Avro::Union(1, Box::new(earliest))),
            ("lastCompletedCommitTimestamp".into(), Avro::String(self.last_completed.clone())),
            ("policy".into(), Avro::String(POLICY.into())),
            ("filesToBeDeletedPerPartition".into(), Avro::Union(1, Box::new(Avro::Map(HashMap::new())))),
            ("version".into(), Avro::Union(0, Box::new(Avro::Int(2)))),
            ("filePathsToBeDeletedPerPartition".into(), Avro::Union(1, Box::new(Avro::Map(files)))),
            ("partitionsToBeDeleted".into(), Avro::Union(1, Box::new(Avro::Array(vec![])))),
            ("extraMetadata".into(), Avro::Union(0, Box::new(Avro::Null))),
        ]);
        let mut writer = apache_avro::Writer::new(&schema, Vec::new());
        writer.append(record).map_err(internal("cannot encode a cleaner plan"))?;
        writer.into_inner().map_err(internal("cannot encode a cleaner plan"))
    }

    /// The plan of a clean as written by [`Self::to_avro`] (or by Java): file paths made
    /// relative to the table again.
    fn from_json(value: &serde_json::Value, base_uri: &str) -> Result<CleanPlan> {
        let corrupt = |what: &str| Error::new(ErrorKind::Corrupt, format!("invalid cleaner plan: {what}"));
        let earliest = &value["earliestInstantToRetain"];
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let mut files = Vec::new();
        if let Some(partitions) = value["filePathsToBeDeletedPerPartition"].as_object() {
            for (partition, paths) in partitions {
                for info in paths.as_array().ok_or_else(|| corrupt("file list"))? {
                    let path = info["filePath"].as_str().ok_or_else(|| corrupt("file path"))?;
                    let relative = path.strip_prefix(base_uri).map(|p| p.trim_start_matches('/')).ok_or_else(|| {
                        corrupt(&format!("{path} is not below {base_uri}"))
                    })?;
                    files.push(Doomed { partition: partition.clone(), path: relative.to_owned(), size: 0 });
                }
            }
        }
        Ok(CleanPlan {
            earliest: (text(&earliest["timestamp"]), text(&earliest["action"])),
            last_completed: text(&value["lastCompletedCommitTimestamp"]),
            files,
        })
    }
}

fn clean_metadata(instant: &str, plan: &CleanPlan, took_ms: i64) -> Result<Vec<u8>> {
    use apache_avro::types::Value as Avro;
    let schema = crate::avro::parse_schema(METADATA_SCHEMA).map_err(internal("cannot parse the clean metadata schema"))?;
    let mut by_partition: BTreeMap<&str, Vec<Avro>> = BTreeMap::new();
    for file in &plan.files {
        let name = file.path.rsplit('/').next().unwrap_or(&file.path);
        by_partition.entry(&file.partition).or_default().push(Avro::String(name.to_owned()));
    }
    let partitions = by_partition
        .into_iter()
        .map(|(partition, names)| {
            let record = Avro::Record(vec![
                ("partitionPath".into(), Avro::String(partition.to_owned())),
                ("policy".into(), Avro::String(POLICY.into())),
                ("deletePathPatterns".into(), Avro::Array(names.clone())),
                ("successDeleteFiles".into(), Avro::Array(names)),
                ("failedDeleteFiles".into(), Avro::Array(vec![])),
                ("isPartitionDeleted".into(), Avro::Union(1, Box::new(Avro::Boolean(false)))),
            ]);
            (partition.to_owned(), record)
        })
        .collect();
    let record = Avro::Record(vec![
        ("startCleanTime".into(), Avro::String(instant.to_owned())),
        ("timeTakenInMillis".into(), Avro::Long(took_ms)),
        ("totalFilesDeleted".into(), Avro::Int(plan.files.len() as i32)),
        ("earliestCommitToRetain".into(), Avro::String(plan.earliest.0.clone())),
        ("lastCompletedCommitTimestamp".into(), Avro::String(plan.last_completed.clone())),
        ("partitionMetadata".into(), Avro::Map(partitions)),
        ("version".into(), Avro::Union(0, Box::new(Avro::Int(2)))),
        ("bootstrapPartitionMetadata".into(), Avro::Union(1, Box::new(Avro::Map(HashMap::new())))),
        ("extraMetadata".into(), Avro::Union(0, Box::new(Avro::Null))),
    ]);
    let mut writer = apache_avro::Writer::new(&schema, Vec::new());
    writer.append(record).map_err(internal("cannot encode clean metadata"))?;
    writer.into_inner().map_err(internal("cannot encode clean metadata"))
}

/// The instants that order file slices: writes and compactions (pending compactions too).
fn is_commit(instant: &Instant) -> bool {
    matches!(instant.requested_action.as_str(), "commit" | "deltacommit" | "replacecommit" | "compaction")
}

/// The earliest commit to retain (hudi-services-format.md §1.5), capped so that a consumer
/// reading changes after `keep_changes_after` still can: `None` when nothing may go.
fn earliest_to_retain(timeline: &Timeline, options: &CleanOptions) -> Option<(String, String)> {
    let commits: Vec<&Instant> = timeline.instants().iter().filter(|i| is_commit(i)).collect();
    let completed: Vec<&Instant> = commits.iter().copied().filter(|i| i.is_completed()).collect();
    let retain = options.retain_commits.max(1);
    if completed.len() <= retain {
        return None;
    }
    let mut earliest = completed[completed.len() - retain];
    // Not past the first commit after the retention time: a read as of any time since then
    // needs the slices that were the latest then, which are kept when they began before it.
    if let Some(after) = &options.keep_reads_after {
        let first_since = completed.iter().find(|i| i.timestamp.as_str() > after.as_str());
        match first_since {
            Some(first) if first.timestamp < earliest.timestamp => earliest = *first,
            _ => {}
        }
    }
    // Not past the earliest pending commit: its files are not in any slice yet.
    if let Some(pending) = commits.iter().find(|i| !i.is_completed()) {
        if earliest.timestamp > pending.timestamp {
            earliest = *completed.iter().rev().find(|i| i.timestamp < pending.timestamp)?;
        }
    }
    // Not past the earliest savepoint: a restore to it needs its slices. (Hudi keeps just the
    // savepointed files and cleans around them; keeping everything from there on is the
    // conservative form of that.)
    if let Some(savepoint) = timeline.instants().iter().filter(|i| i.action == "savepoint").map(|i| &i.timestamp).min() {
        if earliest.timestamp > *savepoint {
            earliest = *completed.iter().rev().find(|i| i.timestamp <= *savepoint)?;
        }
    }
    // A consumer reads what completed after its position, from the slices those commits were
    // requested in: not past the earliest of their requested times, nor past the position
    // itself (readers refuse a start older than the earliest commit to retain).
    if let Some(after) = &options.keep_changes_after {
        let requested_after = commits.iter().filter(|i| i.completion.as_deref().is_some_and(|c| c > after.as_str()));
        let bound = requested_after.map(|i| i.timestamp.as_str()).min().map_or(after.as_str(), |r| r.min(after.as_str()));
        if earliest.timestamp.as_str() > bound {
            earliest = *completed.iter().rev().find(|i| i.timestamp.as_str() <= bound)?;
        }
    }
    Some((earliest.timestamp.clone(), earliest.action.clone()))
}

/// The files of slices that no read from `earliest` on needs: in every file group, the slices
/// older than the newest one that began before `earliest` — never the latest slice, and never
/// one a pending compaction reads or is based on; and every slice of a file group that a
/// replacecommit before `earliest` replaced (insert overwrite, clustering: Hudi's
/// `getReplacedFilesEligibleToClean`), which no read from there on sees.
fn doomed_files(
    view: &FileSystemView,
    timeline: &Timeline,
    earliest: &str,
    compacting: &HashMap<(String, String), String>,
    replaced: &ReplacedGroups,
) -> Vec<Doomed> {
    let mut doomed = Vec::new();
    for (partition, file_id) in view.file_groups() {
        let group = (partition.to_owned(), file_id.to_owned());
        let slices = view.group_slices(partition, file_id, timeline, &ReadBound::Latest);
        let gone = replaced.get(&group).is_some_and(|by| by.as_str() < earliest) && !compacting.contains_key(&group);
        let doomed_slices = match slices.iter().rposition(|s| s.base_instant.as_str() < earliest) {
            _ if gone => slices.len(),
            Some(kept_before) => kept_before.min(slices.len().saturating_sub(1)),
            None => continue,
        };
        let protected_from = compacting.get(&group);
        for slice in &slices[..doomed_slices] {
            if protected_from.is_some_and(|base| slice.base_instant >= *base) {
                continue;
            }
            let files = slice.base_path().into_iter().zip(slice.base_file.as_ref().map(|b| b.size));
            let logs = slice.log_files.iter().map(|l| (slice.log_path(l), l.size));
            for (path, size) in files.chain(logs) {
                doomed.push(Doomed { partition: partition.to_owned(), path, size });
            }
        }
    }
    doomed
}

/// Why consumers hold cleaning back, when they do: the point retention alone would clean up to,
/// and the point the consumers allow (`None`: nothing at all).
pub fn held_back(timeline: &Timeline, options: &CleanOptions) -> Option<(String, Option<String>)> {
    options.keep_changes_after.as_ref()?;
    let alone = earliest_to_retain(timeline, &CleanOptions { keep_changes_after: None, ..options.clone() })?;
    let allowed = earliest_to_retain(timeline, options).map(|e| e.0);
    (allowed.as_deref() != Some(alone.0.as_str())).then_some((alone.0, allowed))
}

/// [`held_back`] of the table at `storage` as it is now.
pub async fn held_back_now(storage: &Storage, options: &CleanOptions) -> Result<Option<(String, Option<String>)>> {
    let config = crate::table::load_config(storage).await?;
    Ok(held_back(&Timeline::load(storage, &config).await?, options))
}

async fn plan(storage: &Storage, config: &TableConfig, timeline: &Timeline, options: &CleanOptions) -> Result<Option<CleanPlan>> {
    let Some(mut earliest) = earliest_to_retain(timeline, options) else { return Ok(None) };
    let mut compacting = HashMap::new();
    for compaction in timeline.pending_compactions() {
        for op in CompactionPlan::load(storage, config, &compaction.timestamp).await?.operations {
            let base = compacting.entry((op.partition, op.file_id)).or_insert_with(|| op.base_instant.clone());
            if op.base_instant < *base {
                *base = op.base_instant;
            }
        }
    }
    let view = FileSystemView::load(storage).await?;
    let replaced = metadata::replaced_file_groups(storage, timeline, &ReadBound::Latest).await?;
    let files = doomed_files(&view, timeline, &earliest.0, &compacting, &replaced);
    let recorded = metadata::retained_by_clean(storage, timeline).await?;
    // With nothing to delete, a clean is still written when it moves the recorded earliest
    // commit to retain forward: archival never passes that point, and would otherwise stop at
    // the last clean that deleted something.
    let moves_forward = recorded.as_ref().is_some_and(|(_, before)| *before < earliest.0);
    if files.is_empty() && !moves_forward {
        return Ok(None);
    }
    // What an earlier clean let go stays gone: the recorded point never moves back, also when
    // a consumer held this clean further back.
    if let Some((_, before)) = recorded.filter(|(_, b)| *b > earliest.0) {
        let action = timeline.get(&before).map_or("commit", |i| i.action.as_str()).to_owned();
        earliest = (before, action);
    }
    let last_completed = timeline.completed_writes().next_back().map(|i| i.timestamp.clone()).unwrap_or_default();
    Ok(Some(CleanPlan { earliest, last_completed, files }))
}

/// Deletes the plan's files (a missing one was deleted before) and completes the clean under
/// the table lock, once: a clean another cleaner completed meanwhile is left as it is.
async fn execute(storage: &Storage, config: &TableConfig, owner: &str, lock_options: &LockOptions, instant: &str, plan: &CleanPlan) -> Result<String> {
    let started = std::time::Instant::now();
    progress::phase(format!("cleaning {instant}"), plan.files.len(), "files deleted");
    for file in &plan.files {
        storage.delete(&file.path).await?;
        progress::advance(0);
    }
    let dir = &config.timeline_dir;
    let metadata = Bytes::from(clean_metadata(instant, plan, started.elapsed().as_millis() as i64)?);
    if !lock_options.pause_before_completing.is_zero() {
        // Crash tests: the files are gone, the clean is not completed.
        tokio::time::sleep(lock_options.pause_before_completing).await;
    }
    TableLock::hold(storage, owner, lock_options, async |lock| {
        let names = storage.list_dir(dir).await?;
        if let Some(done) = completion_in(names.iter().map(|(n, _)| n.as_str()), instant, "clean") {
            return Ok(done);
        }
        crate::mdt::writer::record(storage, config, instant, &plan.files_change(), lock, lock_options).await?;
        let completion = lock.next_time(lock_options).await?;
        lock.check().await?;
        storage.put_if_absent(&format!("{dir}/{instant}_{completion}.clean"), metadata).await?;
        Ok(completion)
    })
    .await
}

/// Finishes cleans that stopped halfway, then cleans what `options` let go: `None` when
/// nothing may be deleted (no clean instant is written then, as in Hudi).
pub async fn clean(storage: &Storage, writer: &WriterId, lock_options: &LockOptions, options: &CleanOptions) -> Result<Option<Cleaned>> {
    let config = crate::table::load_config(storage).await?;
    if config.timeline_layout < 2 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("cleaning is implemented for table version 8 and later; {} is version {}", storage.uri(), config.version),
        ));
    }
    let base_uri = storage.uri().to_string();
    let owner = writer.owner();
    let timeline = Timeline::load(storage, &config).await?;
    for pending in timeline.instants().iter().filter(|i| i.action == "clean" && !i.is_completed()) {
        let requested = format!("{}/{}.clean.requested", config.timeline_dir, pending.timestamp);
        let plan = CleanPlan::from_json(&metadata::decode(&storage.get(&requested).await?)?, &base_uri)?;
        execute(storage, &config, &owner, lock_options, &pending.timestamp, &plan).await?;
    }
    // The instant first, then the listing: every commit completed before it is in sight.
    let instant = TableLock::hold(storage, &owner, lock_options, async |lock| lock.next_time(lock_options).await).await?;
    let timeline = Timeline::load(storage, &config).await?;
    let Some(plan) = plan(storage, &config, &timeline, options).await? else { return Ok(None) };
    let dir = &config.timeline_dir;
    storage.put_if_absent(&format!("{dir}/{instant}.clean.requested"), Bytes::from(plan.to_avro(&base_uri)?)).await?;
    storage.put_if_absent(&format!("{dir}/{instant}.clean.inflight"), Bytes::new()).await?;
    let completion = execute(storage, &config, &owner, lock_options, &instant, &plan).await?;
    Ok(Some(Cleaned {
        instant,
        completion,
        earliest_commit_to_retain: plan.earliest.0.clone(),
        files_deleted: plan.files.len(),
        bytes_freed: plan.files.iter().map(|f| f.size).sum(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::instant::InstantFile;

    fn timeline(names: &[&str]) -> Timeline {
        Timeline::from_files(2, ".hoodie/timeline", names.iter().filter_map(|n| InstantFile::parse(n)))
    }

    fn options(retain: usize, after: Option<&str>) -> CleanOptions {
        CleanOptions { retain_commits: retain, keep_changes_after: after.map(str::to_owned), keep_reads_after: None }
    }

    #[test]
    fn the_earliest_commit_to_retain_stops_at_pending_commits_and_consumers() {
        let names = [
            "20260101000000001_20260101000000002.deltacommit",
            "20260101000000003_20260101000000004.deltacommit",
            "20260101000000005_20260101000000006.commit",
            "20260101000000007_20260101000000008.deltacommit",
            "20260101000000009_20260101000000010.deltacommit",
        ];
        let t = timeline(&names);
        assert_eq!(earliest_to_retain(&t, &options(5, None)), None, "no more commits than retained");
        assert_eq!(earliest_to_retain(&t, &options(2, None)).unwrap().0, "20260101000000007");
        // A write pending since before: its files belong to no slice yet.
        let mut with_pending = names.to_vec();
        with_pending.push("20260101000000004.deltacommit.inflight");
        assert_eq!(earliest_to_retain(&timeline(&with_pending), &options(2, None)).unwrap().0, "20260101000000003");
        // A savepoint of ...05 keeps the slices a restore to it reads.
        let mut with_savepoint = names.to_vec();
        with_savepoint.push("20260101000000005_20260101000000011.savepoint");
        assert_eq!(earliest_to_retain(&timeline(&with_savepoint), &options(2, None)).unwrap().0, "20260101000000005");
        // A consumer that read up to completion time ...06 still reads from there on.
        assert_eq!(earliest_to_retain(&t, &options(1, Some("20260101000000006"))).unwrap().0, "20260101000000005");
        // One that read nothing yet holds everything.
        assert_eq!(earliest_to_retain(&t, &options(1, Some(""))), None);
        // What completed after the position is read from where it was requested: a compaction
        // requested at ...10 and completed at ...30 holds the point at ...10 for a consumer at ...25.
        let late = timeline(&[
            "20260101000000001_20260101000000002.deltacommit",
            "20260101000000010_20260101000000030.commit",
            "20260101000000020_20260101000000021.deltacommit",
            "20260101000000040_20260101000000041.deltacommit",
        ]);
        assert_eq!(earliest_to_retain(&late, &options(1, Some("20260101000000025"))).unwrap().0, "20260101000000010");
        // Retention by time: reads as of any time after ...04 keep their slices, so the first
        // commit requested after it (...05) is the earliest kept, whatever the count says.
        let by_time = |after: &str| CleanOptions { keep_reads_after: Some(after.into()), ..options(1, None) };
        assert_eq!(earliest_to_retain(&t, &by_time("20260101000000004")).unwrap().0, "20260101000000005");
        // Nothing since: the count alone decides.
        assert_eq!(earliest_to_retain(&t, &by_time("20260101000000099")).unwrap().0, "20260101000000009");
        // More commits than the count since: all of them stay.
        assert_eq!(earliest_to_retain(&t, &CleanOptions { keep_reads_after: Some("20260101000000000".into()), ..options(1, None) }).unwrap().0, "20260101000000001");
    }

    #[test]
    fn a_plan_round_trips_through_avro() {
        let plan = CleanPlan {
            earliest: ("20260101000000007".into(), "deltacommit".into()),
            last_completed: "20260101000000009".into(),
            files: vec![Doomed { partition: "p=1".into(), path: "p=1/a_1-0-0_20260101000000001.parquet".into(), size: 0 }],
        };
        let bytes = plan.to_avro("s3://lake/t").unwrap();
        let back = CleanPlan::from_json(&metadata::decode(&bytes).unwrap(), "s3://lake/t").unwrap();
        assert_eq!(back, plan);
        let meta = metadata::decode(&clean_metadata("20260101000000011", &plan, 5).unwrap()).unwrap();
        assert_eq!(meta["earliestCommitToRetain"], "20260101000000007");
        assert_eq!(meta["partitionMetadata"]["p=1"]["successDeleteFiles"][0], "a_1-0-0_20260101000000001.parquet");
        assert_eq!(meta["version"], 2);
    }
}
