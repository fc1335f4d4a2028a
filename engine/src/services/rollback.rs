//! Rolling back failed writes: pending deltacommits (and a truncate's replacecommits) whose writer's heartbeat expired lose their
//! files and timeline entries. A plan (Avro `HoodieRollbackPlan`) says what goes before anything
//! goes, and a completed rollback instant (Avro `HoodieRollbackMetadata`) records what went, as
//! Java does for table version 8, which can also finish a rollback of ours from its plan.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;
use crate::table::files::DataFile;
use crate::table::TableConfig;
use crate::timeline::instant::completion_in;
use crate::timeline::Timeline;
use crate::write::heartbeat;
use crate::write::prepared::{self, PreparedMark};
use crate::write::time::{LockOptions, TableLock};

const ROLLBACK_METADATA_SCHEMA: &str = include_str!("../write/HoodieRollbackMetadata.avsc");
const ROLLBACK_PLAN_SCHEMA: &str = include_str!("HoodieRollbackPlan.avsc");

/// One rolled-back write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    pub instant: String,
    pub rollback_instant: String,
    pub files_deleted: usize,
}

fn rollback_metadata(started: &str, instant: &str, action: &str, deleted: &BTreeMap<String, Vec<String>>) -> Result<Vec<u8>> {
    use apache_avro::types::Value as Avro;
    let internal = |e: apache_avro::Error| Error::new(ErrorKind::Internal, "cannot encode rollback metadata").with_source(e);
    let schema = crate::avro::parse_schema(ROLLBACK_METADATA_SCHEMA).map_err(internal)?;
    let strings = |items: &[String]| Avro::Array(items.iter().map(|s| Avro::String(s.clone())).collect());
    let partitions: std::collections::HashMap<String, Avro> = deleted
        .iter()
        .map(|(partition, files)| {
            (
                partition.clone(),
                Avro::Record(vec![
                    ("partitionPath".into(), Avro::String(partition.clone())),
                    ("successDeleteFiles".into(), strings(files)),
                    ("failedDeleteFiles".into(), Avro::Array(vec![])),
                    // Table version 8 appends no rollback blocks: empty maps, as Hudi 1.x writes.
                    ("rollbackLogFiles".into(), Avro::Union(1, Box::new(Avro::Map(Default::default())))),
                    ("logFilesFromFailedCommit".into(), Avro::Union(1, Box::new(Avro::Map(Default::default())))),
                ]),
            )
        })
        .collect();
    let total: usize = deleted.values().map(Vec::len).sum();
    let record = Avro::Record(vec![
        ("startRollbackTime".into(), Avro::String(started.to_owned())),
        ("timeTakenInMillis".into(), Avro::Long(0)),
        ("totalFilesDeleted".into(), Avro::Int(total as i32)),
        ("commitsRollback".into(), strings(&[instant.to_owned()])),
        ("partitionMetadata".into(), Avro::Map(partitions)),
        ("version".into(), Avro::Union(0, Box::new(Avro::Int(1)))),
        (
            "instantsRollback".into(),
            Avro::Array(vec![Avro::Record(vec![
                ("commitTime".into(), Avro::String(instant.to_owned())),
                ("action".into(), Avro::String(action.to_owned())),
            ])]),
        ),
    ]);
    let record = record.resolve(&schema).map_err(internal)?;
    let mut writer = apache_avro::Writer::new(&schema, Vec::new());
    writer.append(record).map_err(internal)?;
    writer.into_inner().map_err(internal)
}

/// A pending write whose writer's heartbeat expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedWrite {
    pub instant: String,
    /// Its action: `deltacommit`, or a truncate's (or insert overwrite's) `replacecommit`.
    pub action: String,
    /// Set when the write's completion is decided by a transaction of the marked server: only
    /// that server knows whether to complete or roll it back.
    pub prepared: Option<PreparedMark>,
}

/// The pending writes whose heartbeat is older than `expiry`.
pub async fn failed_writes(storage: &Storage, config: &TableConfig, expiry: Duration) -> Result<Vec<FailedWrite>> {
    let timeline = Timeline::load(storage, config).await?;
    let mut failed = Vec::new();
    for instant in timeline.pending_writes() {
        if heartbeat::expired(storage, &instant.timestamp, expiry).await? {
            let prepared = prepared::read(storage, &instant.timestamp).await?;
            failed.push(FailedWrite { instant: instant.timestamp.clone(), action: instant.requested_action.clone(), prepared });
        }
    }
    Ok(failed)
}

/// Rolls back every pending deltacommit whose heartbeat is older than `expiry`, except prepared
/// ones (see [`FailedWrite::prepared`]), which are left to their deciding server.
pub async fn rollback_failed_writes(
    storage: &Storage,
    config: &TableConfig,
    expiry: Duration,
    owner: &str,
    lock_options: &LockOptions,
) -> Result<Vec<RolledBack>> {
    let failed: Vec<FailedWrite> = failed_writes(storage, config, expiry).await?.into_iter().filter(|f| f.prepared.is_none()).collect();
    rollback_writes(storage, config, &failed, expiry, owner, lock_options).await
}

/// The plan of one rollback (`<r>.rollback.requested`, Avro `HoodieRollbackPlan` version 1):
/// the failed write and its data files, by partition, relative to the table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RollbackPlan {
    instant: String,
    action: String,
    files: BTreeMap<String, Vec<String>>,
}

impl RollbackPlan {
    fn to_avro(&self, base_uri: &str) -> Result<Vec<u8>> {
        use apache_avro::types::Value as Avro;
        let internal = |e: apache_avro::Error| Error::new(ErrorKind::Internal, "cannot encode a rollback plan").with_source(e);
        let schema = crate::avro::parse_schema(ROLLBACK_PLAN_SCHEMA).map_err(internal)?;
        let requests = self
            .files
            .iter()
            .map(|(partition, paths)| {
                Avro::Record(vec![
                    ("partitionPath".into(), Avro::String(partition.clone())),
                    ("fileId".into(), Avro::Union(1, Box::new(Avro::String(String::new())))),
                    ("latestBaseInstant".into(), Avro::Union(1, Box::new(Avro::String(String::new())))),
                    ("filesToBeDeleted".into(), Avro::Array(paths.iter().map(|p| Avro::String(format!("{base_uri}/{p}"))).collect())),
                    // Table version 8 deletes files; Java rejects log blocks to delete.
                    ("logBlocksToBeDeleted".into(), Avro::Union(1, Box::new(Avro::Map(Default::default())))),
                ])
            })
            .collect();
        let record = Avro::Record(vec![
            (
                "instantToRollback".into(),
                Avro::Union(
                    1,
                    Box::new(Avro::Record(vec![
                        ("commitTime".into(), Avro::String(self.instant.clone())),
                        ("action".into(), Avro::String(self.action.clone())),
                    ])),
                ),
            ),
            ("RollbackRequests".into(), Avro::Union(1, Box::new(Avro::Array(requests)))),
            ("version".into(), Avro::Union(0, Box::new(Avro::Int(1)))),
        ]);
        let mut writer = apache_avro::Writer::new(&schema, Vec::new());
        writer.append(record).map_err(internal)?;
        writer.into_inner().map_err(internal)
    }

    /// A plan as [`Self::to_avro`] (or Java) wrote it; paths relative to the table again.
    fn from_json(value: &serde_json::Value, base_uri: &str) -> Result<RollbackPlan> {
        let corrupt = |what: String| Error::new(ErrorKind::Corrupt, format!("invalid rollback plan: {what}"));
        let instant = value["instantToRollback"]["commitTime"].as_str().ok_or_else(|| corrupt("no instant to roll back".into()))?;
        let action = value["instantToRollback"]["action"].as_str().unwrap_or("deltacommit");
        if !crate::write::commit::WRITE_ACTIONS.contains(&action) {
            return Err(corrupt(format!("it rolls back a {action}, which is no write")));
        }
        let mut files: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for request in value["RollbackRequests"].as_array().into_iter().flatten() {
            let partition = request["partitionPath"].as_str().unwrap_or_default().to_owned();
            for path in request["filesToBeDeleted"].as_array().into_iter().flatten() {
                let path = path.as_str().ok_or_else(|| corrupt("a file path".into()))?;
                let relative = path.strip_prefix(base_uri).map(|p| p.trim_start_matches('/')).ok_or_else(|| corrupt(format!("{path} is not below {base_uri}")))?;
                files.entry(partition.clone()).or_default().push(relative.to_owned());
            }
        }
        Ok(RollbackPlan { instant: instant.to_owned(), action: action.to_owned(), files })
    }
}

/// The pending rollbacks of `timeline` with their plans, by rollback instant.
async fn pending_rollbacks(storage: &Storage, config: &TableConfig, timeline: &Timeline) -> Result<Vec<(String, RollbackPlan)>> {
    let base_uri = storage.uri().to_string();
    let mut out = Vec::new();
    for pending in timeline.instants().iter().filter(|i| i.action == "rollback" && !i.is_completed()) {
        let path = format!("{}/{}.rollback.requested", config.timeline_dir, pending.timestamp);
        let bytes = storage.get(&path).await?;
        // A rollback requested with no plan (by an earlier version of this engine, which
        // deleted the files first) has nothing left to do but completing: its target is gone.
        if bytes.is_empty() {
            continue;
        }
        out.push((pending.timestamp.clone(), RollbackPlan::from_json(&crate::timeline::metadata::decode(&bytes)?, &base_uri)?));
    }
    Ok(out)
}

/// Deletes the plan's files (a missing one was deleted before), then under the table lock the
/// failed write's timeline files, and completes the rollback — once: one another process
/// completed meanwhile is left as it is.
async fn execute(storage: &Storage, config: &TableConfig, rollback: &str, plan: &RollbackPlan, owner: &str, lock_options: &LockOptions) -> Result<()> {
    let base_uri = storage.uri().to_string();
    for path in plan.files.values().flatten() {
        storage.delete(path).await?;
    }
    let dir = &config.timeline_dir;
    let absolute: BTreeMap<String, Vec<String>> =
        plan.files.iter().map(|(p, files)| (p.clone(), files.iter().map(|f| format!("{base_uri}/{f}")).collect())).collect();
    let metadata = Bytes::from(rollback_metadata(rollback, &plan.instant, &plan.action, &absolute)?);
    TableLock::hold(storage, owner, lock_options, async |lock| {
        let names = storage.list_dir(dir).await?;
        if completion_in(names.iter().map(|(n, _)| n.as_str()), rollback, "rollback").is_some() {
            return Ok(());
        }
        // The metadata table's deltacommit of the write, if it got one (its writer stopped
        // between the two completions), goes first: then no reader lists its files.
        crate::mdt::writer::roll_back(storage, config, &plan.instant).await?;
        storage.delete(&format!("{dir}/{}.{}.inflight", plan.instant, plan.action)).await?;
        storage.delete(&format!("{dir}/{}.{}.requested", plan.instant, plan.action)).await?;
        let completion = lock.next_time(lock_options).await?;
        lock.check().await?;
        storage.put_if_absent(&format!("{dir}/{rollback}_{completion}.rollback"), metadata).await?;
        Ok(())
    })
    .await?;
    heartbeat::stop(storage, &plan.instant).await?;
    prepared::clear(storage, &plan.instant).await
}

/// Rolls back the pending deltacommits `writes` (which their caller decided have failed: their
/// writers gone), as Hudi 1.x does (hudi-services-format.md §3.5): under the table lock, a plan
/// listing the write's data files (`<r>.rollback.requested`) and an empty
/// `<r>.rollback.inflight` are written, and the write's inflight file goes, so that no completer
/// can complete it any more; then the files are deleted and, under the lock again, the write's
/// requested file goes and the completed rollback is written. Rollbacks that stopped midway
/// are finished from their plans first, and their writes are not planned again.
///
/// Under the lock, a write is left alone when it completed, when its heartbeat is no longer
/// older than `expiry`, or when its prepared mark is not the one its caller decided by — also
/// when the mark appears just as its inflight file goes: a writer marks its write prepared and
/// then checks that the file is there before its transaction commits, so either the writer
/// finds it gone and does not commit, or this finds the mark and puts the file back.
pub async fn rollback_writes(
    storage: &Storage,
    config: &TableConfig,
    writes: &[FailedWrite],
    expiry: Duration,
    owner: &str,
    lock_options: &LockOptions,
) -> Result<Vec<RolledBack>> {
    let timeline = Timeline::load(storage, config).await?;
    let mut out = Vec::new();
    let mut done = std::collections::HashSet::new();
    for (rollback, plan) in pending_rollbacks(storage, config, &timeline).await? {
        execute(storage, config, &rollback, &plan, owner, lock_options).await?;
        done.insert(plan.instant.clone());
        out.push(RolledBack { instant: plan.instant.clone(), rollback_instant: rollback, files_deleted: plan.files.values().map(Vec::len).sum() });
    }
    let writes: Vec<&FailedWrite> = writes.iter().filter(|w| !done.contains(&w.instant)).collect();
    if writes.is_empty() {
        return Ok(out);
    }
    let dir = &config.timeline_dir;
    let base_uri = storage.uri().to_string();
    let listing = storage.list_recursive("").await?;
    for write in writes {
        let instant = &write.instant;
        let mut files: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (path, size) in &listing {
            if path.starts_with(".hoodie/") {
                continue;
            }
            let (partition, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            let written_by_instant = match DataFile::parse(name, *size) {
                Some(DataFile::Log(log)) => log.instant == *instant,
                Some(DataFile::Base(base)) => base.instant == *instant,
                None => false,
            };
            if written_by_instant {
                files.entry(partition.to_owned()).or_default().push(path.clone());
            }
        }
        let plan = RollbackPlan { instant: instant.clone(), action: write.action.clone(), files };
        let requested = Bytes::from(plan.to_avro(&base_uri)?);
        let rollback = TableLock::hold(storage, owner, lock_options, async |lock| {
            let names = storage.list_dir(dir).await?;
            if completion_in(names.iter().map(|(n, _)| n.as_str()), instant, &write.action).is_some() {
                return Ok::<_, Error>(None);
            }
            // Decided on what was seen before the lock: it must still hold.
            if prepared::read(storage, instant).await? != write.prepared || !heartbeat::expired(storage, instant, expiry).await? {
                return Ok(None);
            }
            let rollback = lock.next_time(lock_options).await?;
            let (plan_file, rollback_inflight) = (format!("{dir}/{rollback}.rollback.requested"), format!("{dir}/{rollback}.rollback.inflight"));
            let write_inflight = format!("{dir}/{instant}.{}.inflight", write.action);
            let inflight_content = storage.get(&write_inflight).await?;
            storage.put_if_absent(&plan_file, requested).await?;
            storage.put_if_absent(&rollback_inflight, Bytes::new()).await?;
            storage.delete(&write_inflight).await?;
            // A writer marks its write prepared, then checks that its inflight file is there
            // before its transaction commits (`PreparedCommit::confirm_pending`, no lock). If
            // the mark appeared, that check may have passed before the delete: put the file
            // back and leave the write to its deciding transaction.
            if prepared::read(storage, instant).await? != write.prepared {
                storage.put(&write_inflight, inflight_content).await?;
                storage.delete(&rollback_inflight).await?;
                storage.delete(&plan_file).await?;
                return Ok(None);
            }
            Ok(Some(rollback))
        })
        .await?;
        let Some(rollback) = rollback else { continue };
        execute(storage, config, &rollback, &plan, owner, lock_options).await?;
        out.push(RolledBack { instant: instant.clone(), rollback_instant: rollback, files_deleted: plan.files.values().map(Vec::len).sum() });
    }
    Ok(out)
}
