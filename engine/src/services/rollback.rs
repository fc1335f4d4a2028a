//! Rolling back failed writes: pending deltacommits whose writer's heartbeat expired lose their
//! files and timeline entries, and a completed rollback instant (Avro `HoodieRollbackMetadata`)
//! records what was removed, as Java does for table version 8.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;
use crate::table::files::DataFile;
use crate::table::TableConfig;
use crate::timeline::instant::completion_in;
use crate::timeline::{State, Timeline};
use crate::write::heartbeat;
use crate::write::prepared::{self, PreparedMark};
use crate::write::time::{LockOptions, TableLock};

const ROLLBACK_METADATA_SCHEMA: &str = include_str!("../write/HoodieRollbackMetadata.avsc");

/// One rolled-back write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    pub instant: String,
    pub rollback_instant: String,
    pub files_deleted: usize,
}

fn rollback_metadata(started: &str, instant: &str, deleted: &BTreeMap<String, Vec<String>>) -> Result<Vec<u8>> {
    use apache_avro::types::Value as Avro;
    let internal = |e: apache_avro::Error| Error::new(ErrorKind::Internal, "cannot encode rollback metadata").with_source(e);
    let schema = apache_avro::Schema::parse_str(ROLLBACK_METADATA_SCHEMA).map_err(internal)?;
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
                    ("rollbackLogFiles".into(), Avro::Union(0, Box::new(Avro::Null))),
                    ("logFilesFromFailedCommit".into(), Avro::Union(0, Box::new(Avro::Null))),
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
                ("action".into(), Avro::String("deltacommit".into())),
            ])]),
        ),
    ]);
    let record = record.resolve(&schema).map_err(internal)?;
    let mut writer = apache_avro::Writer::new(&schema, Vec::new());
    writer.append(record).map_err(internal)?;
    writer.into_inner().map_err(internal)
}

/// A pending deltacommit whose writer's heartbeat expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedWrite {
    pub instant: String,
    /// Set when the write's completion is decided by a transaction of the marked server: only
    /// that server knows whether to complete or roll it back.
    pub prepared: Option<PreparedMark>,
}

/// The pending deltacommits whose heartbeat is older than `expiry`.
pub async fn failed_writes(storage: &Storage, config: &TableConfig, expiry: Duration) -> Result<Vec<FailedWrite>> {
    let timeline = Timeline::load(storage, config).await?;
    let mut failed = Vec::new();
    for instant in timeline.instants() {
        if instant.state != State::Completed
            && instant.requested_action == "deltacommit"
            && heartbeat::expired(storage, &instant.timestamp, expiry).await?
        {
            let prepared = prepared::read(storage, &instant.timestamp).await?;
            failed.push(FailedWrite { instant: instant.timestamp.clone(), prepared });
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
    let failed: Vec<String> =
        failed_writes(storage, config, expiry).await?.into_iter().filter(|f| f.prepared.is_none()).map(|f| f.instant).collect();
    rollback_writes(storage, config, &failed, owner, lock_options).await
}

/// Rolls back the pending deltacommits `instants` (which must have failed: their writers gone):
/// first, under the table lock, the inflight file goes, so that no completer can complete the
/// write any more (a completed one is left alone); then its data files, then, under the lock
/// again, a completed rollback instant replaces its requested file. A rollback interrupted
/// midway leaves the write requested, and the next rollback of failed writes finishes it.
pub async fn rollback_writes(
    storage: &Storage,
    config: &TableConfig,
    instants: &[String],
    owner: &str,
    lock_options: &LockOptions,
) -> Result<Vec<RolledBack>> {
    if instants.is_empty() {
        return Ok(Vec::new());
    }
    let dir = &config.timeline_dir;
    let listing = storage.list_recursive("").await?;
    let mut out = Vec::new();
    for instant in instants {
        let still_pending = TableLock::hold(storage, owner, lock_options, async |_| {
            let files = storage.list_dir(dir).await?;
            if completion_in(files.iter().map(|(n, _)| n.as_str()), instant, "deltacommit").is_some() {
                return Ok::<_, Error>(false);
            }
            storage.delete(&format!("{dir}/{instant}.deltacommit.inflight")).await?;
            Ok(true)
        })
        .await?;
        if !still_pending {
            continue;
        }
        let mut deleted: BTreeMap<String, Vec<String>> = BTreeMap::new();
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
                storage.delete(path).await?;
                deleted.entry(partition.to_owned()).or_default().push(name.to_owned());
            }
        }
        let rollback_instant = TableLock::hold(storage, owner, lock_options, async |lock| {
            let rollback = lock.next_time(lock_options).await?;
            storage.put_if_absent(&format!("{dir}/{rollback}.rollback.requested"), Bytes::new()).await?;
            storage.put_if_absent(&format!("{dir}/{rollback}.rollback.inflight"), Bytes::new()).await?;
            let metadata = rollback_metadata(&rollback, instant, &deleted)?;
            let completion = lock.next_time(lock_options).await?;
            storage.put_if_absent(&format!("{dir}/{rollback}_{completion}.rollback"), Bytes::from(metadata)).await?;
            storage.delete(&format!("{dir}/{instant}.deltacommit.requested")).await?;
            Ok::<_, Error>(rollback)
        })
        .await?;
        heartbeat::stop(storage, instant).await?;
        prepared::clear(storage, instant).await?;
        out.push(RolledBack { instant: instant.clone(), rollback_instant, files_deleted: deleted.values().map(Vec::len).sum() });
    }
    Ok(out)
}
