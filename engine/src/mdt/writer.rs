//! Keeping a table's metadata table in step with its writes, as Hudi 1.x's writers do
//! (`HoodieBackedTableMetadataWriter`; facts in docs/metadata-table.md): the `files` partition
//! is created with the table (or for an existing one, listing the files of its completed
//! actions), and every action that completes on the data table — a
//! deltacommit, a replacecommit, a compaction, a clean — first completes a deltacommit of the
//! same instant on the metadata table, which lists the files the action wrote or deleted. So a
//! reader that lists through the metadata table sees exactly the completed actions' files: the
//! metadata table's blocks of a data instant that is still pending are skipped by every reader.
//! A rolled-back data instant takes its metadata deltacommit with it; every tenth deltacommit
//! the metadata table's log files are compacted into a new base file, after which its old
//! slices are cleaned and its timeline archived.
//!
//! Everything here runs under the data table's lock ([`TableLock`]), which orders the metadata
//! table's instants as it orders the data table's.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::files::{self, FileInfo, FilesRecord, ALL_PARTITIONS, FILE_LIST, METADATA_TABLE_PATH, NON_PARTITIONED, PARTITION_LIST};
use super::partition::INITIALISING;
use super::hfile_write::write_hfile;
use crate::error::{Error, ErrorKind, Result};
use crate::log::block::{encode_block, header, BlockType};
use crate::services::archive::{archive, ArchiveOptions};
use crate::services::clean::{clean, CleanOptions};
use crate::services::compaction::{CompactionOperation, CompactionPlan};
use crate::storage::Storage;
use crate::table::config::{keys, table_checksum};
use crate::table::{Properties, TableConfig, PROPERTIES_FILE};
use crate::table::files::DataFile;
use crate::timeline::Timeline;
use crate::view::FileSystemView;
use crate::write::commit::{CommitMetadata, WriteStat};
use crate::write::time::{format_instant, LockOptions, TableLock};
use crate::write::WriterId;

/// The `files` partition's one file group.
const FILE_GROUP: &str = "files-0000-0";
/// The instant that creates the `files` partition.
const INIT_INSTANT: &str = "00000000000000000";
/// The write token of every file this writer names (one writer task per action).
const WRITE_TOKEN: &str = "0-0-0";
/// Deltacommits after which the metadata table is compacted (Hudi's
/// `hoodie.metadata.compact.max.delta.commits`).
const DELTACOMMITS_PER_COMPACTION: usize = 10;
/// The metadata table's commits whose slices its cleans keep (Hudi: at least 20).
const RETAINED_COMMITS: usize = 20;
/// Its archival keeps between these many commits active (Hudi: the data table's defaults, + 1).
const ARCHIVE_MIN_COMMITS: usize = 21;
const ARCHIVE_MAX_COMMITS: usize = 31;

/// The record schema without its meta fields: what a metadata commit's `extraMetadata.schema`
/// holds.
fn schema_without_meta_fields() -> Result<String> {
    let mut schema: serde_json::Value = serde_json::from_str(files::RECORD_SCHEMA).map_err(|e| Error::new(ErrorKind::Internal, "the record schema").with_source(e))?;
    if let Some(fields) = schema["fields"].as_array_mut() {
        fields.retain(|f| !f["name"].as_str().is_some_and(|n| n.starts_with("_hoodie_")));
    }
    Ok(schema.to_string())
}

/// What one data-table action changes in the `files` partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilesChange {
    /// Files the action wrote, by partition path (`""` without partitions), with their sizes.
    pub written: BTreeMap<String, BTreeMap<String, u64>>,
    /// Files the action deleted (a clean), by partition path.
    pub deleted: BTreeMap<String, BTreeSet<String>>,
}

fn partition_key(partition: &str) -> String {
    if partition.is_empty() { NON_PARTITIONED.to_owned() } else { partition.to_owned() }
}

impl FilesChange {
    /// The files a commit's metadata (`HoodieCommitMetadata`, Avro) says it wrote.
    pub fn of_commit(metadata: &[u8]) -> Result<FilesChange> {
        let json = crate::timeline::metadata::decode(metadata)?;
        let mut change = FilesChange::default();
        let Some(partitions) = json["partitionToWriteStats"].as_object() else { return Ok(change) };
        for (partition, stats) in partitions {
            let written = change.written.entry(partition.clone()).or_default();
            for stat in stats.as_array().into_iter().flatten() {
                let (Some(path), Some(size)) = (stat["path"].as_str(), stat["fileSizeInBytes"].as_u64()) else { continue };
                let name = path.rsplit('/').next().unwrap_or(path);
                let entry = written.entry(name.to_owned()).or_default();
                *entry = (*entry).max(size);
            }
        }
        Ok(change)
    }

    /// The records of this change, by key: the partitions written (Hudi lists them every
    /// time) and each partition's written and deleted files.
    fn records(&self) -> BTreeMap<String, FilesRecord> {
        let mut records = BTreeMap::new();
        if !self.written.is_empty() {
            let partitions = self.written.keys().map(|p| (partition_key(p), FileInfo { size: 0, deleted: false })).collect();
            records.insert(ALL_PARTITIONS.to_owned(), FilesRecord { kind: PARTITION_LIST, entries: partitions });
        }
        for (partition, files) in &self.written {
            let record: &mut FilesRecord = records.entry(partition_key(partition)).or_insert_with(|| FilesRecord { kind: FILE_LIST, entries: BTreeMap::new() });
            record.entries.extend(files.iter().filter(|(_, &size)| size > 0).map(|(name, &size)| (name.clone(), FileInfo { size, deleted: false })));
        }
        for (partition, names) in &self.deleted {
            let record = records.entry(partition_key(partition)).or_insert_with(|| FilesRecord { kind: FILE_LIST, entries: BTreeMap::new() });
            record.entries.extend(names.iter().map(|name| (name.clone(), FileInfo { size: 0, deleted: true })));
        }
        records
    }
}

/// The HFile of `records`, sorted by key.
fn hfile_of(records: &BTreeMap<String, FilesRecord>) -> Result<Vec<u8>> {
    let cells = records.iter().map(|(key, record)| Ok((key.clone().into_bytes(), record.encode()?))).collect::<Result<Vec<_>>>()?;
    write_hfile(&cells, files::RECORD_SCHEMA)
}

/// The metadata table of the table at `storage`.
fn metadata_storage(storage: &Storage) -> Result<Storage> {
    storage.child(METADATA_TABLE_PATH)
}

/// A deltacommit's or compaction's metadata with one write stat of the `files` partition.
fn commit_metadata(stat: WriteStat, operation: &str, compacted: bool) -> Result<Bytes> {
    let mut metadata = CommitMetadata { operation_type: operation.to_owned(), compacted, ..Default::default() };
    metadata.partition_to_write_stats.insert("files".into(), vec![stat]);
    metadata.extra_metadata.insert("schema".into(), schema_without_meta_fields()?);
    Ok(Bytes::from(metadata.to_avro()?))
}

fn file_stat(path: String, size: u64, records: usize, prev_commit: &str) -> WriteStat {
    WriteStat {
        file_id: Some(FILE_GROUP.to_owned()),
        path: Some(path),
        prev_commit: Some(prev_commit.to_owned()),
        num_writes: Some(records as i64),
        num_deletes: Some(0),
        num_update_writes: Some(0),
        num_inserts: Some(records as i64),
        total_write_bytes: Some(size as i64),
        total_write_errors: Some(0),
        partition_path: Some("files".to_owned()),
        file_size_in_bytes: Some(size as i64),
        ..Default::default()
    }
}

/// Creates the metadata table of the table `data` at `storage`, whose completed actions wrote
/// `files`: its properties, and its `files` partition as of the instant that creates it — a
/// base file listing them. The caller then declares it in the data table's properties
/// ([`declare`]).
async fn create(storage: &Storage, data: &TableConfig, files: &FilesChange) -> Result<()> {
    let metadata = metadata_storage(storage)?;
    // What a failed creation left is not a metadata table yet (the data table does not
    // declare it): it is replaced, timeline and all.
    for (path, _) in metadata.list_recursive("").await? {
        metadata.delete(&path).await?;
    }
    let name = format!("{}_metadata", data.name);
    let mut properties = Properties::new();
    for (key, value) in [
        (keys::NAME, name.as_str()),
        (keys::TYPE, "MERGE_ON_READ"),
        (keys::VERSION, &data.version.to_string()),
        (keys::INITIAL_VERSION, &data.version.to_string()),
        (keys::BASE_FILE_FORMAT, "HFILE"),
        (keys::RECORD_KEY_FIELDS, "key"),
        (keys::POPULATE_META_FIELDS, "false"),
        (keys::KEYGEN_TYPE, "HOODIE_TABLE_METADATA"),
        ("hoodie.compaction.payload.class", "org.apache.hudi.metadata.HoodieMetadataPayload"),
        (keys::MERGE_MODE, "CUSTOM"),
        ("hoodie.record.merge.strategy.id", "00000000-0000-0000-0000-000000000000"),
        (keys::TIMELINE_LAYOUT, "2"),
        (keys::TIMELINE_PATH, "timeline"),
        (keys::TIMELINE_HISTORY_PATH, "history"),
        (keys::ARCHIVE_FOLDER, "history"),
        (keys::DROP_PARTITION_COLUMNS, "false"),
    ] {
        properties.set(key, value);
    }
    properties.set(keys::CHECKSUM, table_checksum(None, &name).to_string());
    metadata.put(PROPERTIES_FILE, Bytes::from(properties.to_text(&["Created by pg_hudi"]))).await?;
    let config = crate::table::load_config(&metadata).await?;
    let created = chrono::Utc::now().format("%a %b %d %H:%M:%S UTC %Y");
    let partition_metadata = format!("#partition metadata\n#{created}\ncommitTime={INIT_INSTANT}\npartitionDepth=1\n");
    metadata.put("files/.hoodie_partition_metadata", Bytes::from(partition_metadata)).await?;
    let mut records = files.records();
    records.entry(ALL_PARTITIONS.to_owned()).or_insert_with(|| FilesRecord { kind: PARTITION_LIST, entries: BTreeMap::new() });
    let base = Bytes::from(hfile_of(&records)?);
    let base_path = format!("files/{FILE_GROUP}_{WRITE_TOKEN}_{INIT_INSTANT}.hfile");
    let size = base.len() as u64;
    metadata.put(&base_path, base).await?;
    let dir = &config.timeline_dir;
    metadata.put(&format!("{dir}/{INIT_INSTANT}.deltacommit.requested"), Bytes::new()).await?;
    metadata.put(&format!("{dir}/{INIT_INSTANT}.deltacommit.inflight"), Bytes::new()).await?;
    let completed = commit_metadata(file_stat(base_path, size, records.len(), "null"), "BULK_INSERT_PREPPED", false)?;
    let completion = format_instant(chrono::Utc::now().timestamp_millis());
    metadata.put(&format!("{dir}/{INIT_INSTANT}_{completion}.deltacommit"), completed).await?;
    Ok(())
}

/// Gives the table at `storage` a metadata table, under the table lock (for `owner`):
/// one listing the files of its completed actions (those still pending record their files when
/// they complete, which is after the declaration), then declared. Nothing when it has one.
pub async fn create_for_existing(storage: &Storage, owner: &str, options: &LockOptions) -> Result<TableConfig> {
    TableLock::hold(storage, owner, options, async |_lock| {
        let config = crate::table::load_config(storage).await?;
        if config.lists_files_in_metadata_table() {
            return Ok(config);
        }
        if config.version < 8 {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("a metadata table needs table version 8 or later; {} is version {}", storage.uri(), config.version),
            ));
        }
        let timeline = Timeline::load(storage, &config).await?;
        let mut files = FilesChange::default();
        for (path, size) in FileSystemView::load(storage).await?.listing() {
            let (partition, name) = path.rsplit_once('/').unwrap_or(("", &path));
            let instant = match DataFile::parse(name, size) {
                Some(DataFile::Base(base)) => base.instant,
                Some(DataFile::Log(log)) => log.instant,
                None => continue,
            };
            if timeline.is_completed(&instant) || timeline.is_archived(&instant) {
                files.written.entry(partition.to_owned()).or_default().insert(name.to_owned(), size);
            }
        }
        create(storage, &config, &files).await?;
        declare_files_only(storage, &config).await?;
        crate::table::load_config(storage).await
    })
    .await
}

/// Declares `files` the only partition of the metadata table of the table at `storage`
/// (configured `config`): for a metadata table just created, that the table lists its files
/// there; for one with other partitions (column statistics, the record index, secondary
/// indexes, which this engine does not keep), that those are unavailable, as dropping an index
/// does — no reader then prunes files or looks keys up by an index that misses this engine's
/// writes, and a Hudi writer with the index enabled builds it again.
async fn declare_files_only(storage: &Storage, config: &TableConfig) -> Result<()> {
    let mut properties = config.properties.clone();
    properties.set("hoodie.table.metadata.partitions", "files");
    properties.set("hoodie.table.metadata.partitions.inflight", "");
    storage.put(PROPERTIES_FILE, Bytes::from(properties.to_text(&["Updated by pg_hudi"]))).await
}

/// Records in the metadata table of the table at `storage` (configured `config`) that the
/// data-table action `instant` made `change`: a deltacommit of the same instant, completed —
/// before the caller completes `instant` on the data table. Once: a retry finds it completed.
/// Compacts the metadata table first when it is due. Nothing when the table has no metadata table.
pub async fn record(storage: &Storage, config: &TableConfig, instant: &str, change: &FilesChange, lock: &TableLock<'_>, options: &LockOptions) -> Result<()> {
    if !config.lists_files_in_metadata_table() {
        return Ok(());
    }
    if config.metadata_partitions.iter().any(|p| p != "files") {
        declare_files_only(storage, config).await?;
    }
    let metadata = metadata_storage(storage)?;
    let mconfig = crate::table::load_config(&metadata).await.map_err(|e| e.context("loading the table's metadata table"))?;
    let dir = &mconfig.timeline_dir;
    let timeline = Timeline::load(&metadata, &mconfig).await?;
    if timeline.is_completed(instant) {
        return Ok(());
    }
    // Boxed: the compaction cleans the metadata table, and a clean records itself here.
    Box::pin(compact_if_due(storage, config, &metadata, &mconfig, &timeline, lock, options)).await?;
    let records = change.records();
    if records.is_empty() {
        return Ok(());
    }
    let mut header = BTreeMap::new();
    header.insert(header::INSTANT_TIME, instant.to_owned());
    header.insert(header::SCHEMA, files::RECORD_SCHEMA.to_owned());
    let log = Bytes::from(encode_block(BlockType::HFileData, &header, &hfile_of(&records)?));
    let log_name = format!(".{FILE_GROUP}_{instant}.log.1_{WRITE_TOKEN}");
    let size = log.len() as u64;
    metadata.put(&format!("{dir}/{instant}.deltacommit.requested"), Bytes::new()).await?;
    metadata.put(&format!("{dir}/{instant}.deltacommit.inflight"), Bytes::new()).await?;
    metadata.put(&format!("files/{log_name}"), log).await?;
    let mut stat = file_stat(format!("files/{log_name}"), size, records.len(), instant);
    stat.log_version = Some(1);
    stat.log_offset = Some(0);
    stat.base_file = Some(String::new());
    stat.log_files = Some(vec![log_name]);
    let completed = commit_metadata(stat, "UPSERT_PREPPED", false)?;
    let completion = lock.next_time(options).await?;
    lock.check().await?;
    metadata.put_if_absent(&format!("{dir}/{instant}_{completion}.deltacommit"), completed).await?;
    Ok(())
}

/// Compacts the metadata table's `files` partition when [`DELTACOMMITS_PER_COMPACTION`]
/// deltacommits completed since its latest base file: a new base file of the merged records at
/// a new instant, which every log so far is in (all completed before it). Not while a block of a
/// data instant that is still pending (a failed writer's, until rolled back) is among the logs:
/// merged into a base file it could not be told apart any more.
async fn compact_if_due(
    storage: &Storage,
    config: &TableConfig,
    metadata: &Storage,
    mconfig: &TableConfig,
    timeline: &Timeline,
    lock: &TableLock<'_>,
    options: &LockOptions,
) -> Result<()> {
    let dir = &mconfig.timeline_dir;
    // A compaction that stopped midway (its writer held the data table's lock, which it no
    // longer does) is undone: its base file was never read, and a pending compaction would
    // hold the metadata table's cleaning and archival back for good.
    for pending in timeline.instants().iter().filter(|i| i.requested_action == "compaction" && !i.is_completed()) {
        let instant = &pending.timestamp;
        metadata.delete(&format!("files/{FILE_GROUP}_{WRITE_TOKEN}_{instant}.hfile")).await?;
        metadata.delete(&format!("{dir}/{instant}.compaction.inflight")).await?;
        metadata.delete(&format!("{dir}/{instant}.compaction.requested")).await?;
    }
    let latest_base = timeline.instants().iter().filter(|i| i.is_completed() && i.action == "commit").map(|i| i.timestamp.as_str()).max().unwrap_or(INIT_INSTANT);
    let since = timeline.instants().iter().filter(|i| i.is_completed() && i.action == "deltacommit" && i.completion.as_deref() > Some(latest_base)).count();
    if since < DELTACOMMITS_PER_COMPACTION {
        return Ok(());
    }
    let data = Timeline::load(storage, config).await?;
    let merged = files::merged_as_of(metadata, timeline, &data).await?;
    let Some(slice) = merged.slice.filter(|_| !merged.skipped_pending) else { return Ok(()) };
    // Deleted entries have nothing older left to cancel.
    let mut records = merged.records;
    for record in records.values_mut() {
        record.entries.retain(|_, info| !info.deleted);
    }
    let instant = lock.next_time(options).await?;
    let plan = CompactionPlan {
        operations: vec![CompactionOperation {
            partition: "files".into(),
            file_id: FILE_GROUP.into(),
            base_instant: slice.base_instant.clone(),
            base_file: slice.base_file.as_ref().map(|b| b.name.clone()),
            log_files: slice.log_files.iter().map(|l| l.name.clone()).collect(),
            log_bytes: slice.log_files.iter().map(|l| l.size).sum(),
        }],
    };
    metadata.put(&format!("{dir}/{instant}.compaction.requested"), Bytes::from(plan.to_avro()?)).await?;
    metadata.put(&format!("{dir}/{instant}.compaction.inflight"), Bytes::new()).await?;
    let base = Bytes::from(hfile_of(&records)?);
    let base_name = format!("{FILE_GROUP}_{WRITE_TOKEN}_{instant}.hfile");
    let size = base.len() as u64;
    metadata.put(&format!("files/{base_name}"), base).await?;
    let mut stat = file_stat(format!("files/{base_name}"), size, records.len(), &slice.base_instant);
    stat.prev_base_file = slice.base_file.as_ref().map(|b| b.name.clone());
    stat.total_log_files_compacted = Some(slice.log_files.len() as i64);
    let completed = commit_metadata(stat, "COMPACT", true)?;
    let completion = lock.next_time(options).await?;
    lock.check().await?;
    metadata.put_if_absent(&format!("{dir}/{instant}_{completion}.commit"), completed).await?;
    // As Hudi's writer does after compacting it, the metadata table's old slices are cleaned
    // and its timeline archived (under its own lock; every writer of it holds the data
    // table's, so nothing else writes it meanwhile).
    let maintainer = WriterId { node: 0, process: std::process::id() };
    // Hudi's storage-based lock is the data table's alone: nothing takes the metadata table's.
    let options = &LockOptions { storage_lock: crate::write::time::StorageLockUse::Off, ..options.clone() };
    let retain = CleanOptions { retain_commits: RETAINED_COMMITS, ..Default::default() };
    clean(metadata, &maintainer, options, &retain).await.map_err(|e| e.context("cleaning the metadata table"))?;
    let archival = ArchiveOptions { min_commits: ARCHIVE_MIN_COMMITS, max_commits: ARCHIVE_MAX_COMMITS, start_above: None, compaction_delta_commits: 0 };
    archive(metadata, &maintainer, options, &archival).await.map_err(|e| e.context("archiving the metadata table"))?;
    Ok(())
}

/// The requested time of the latest completed compaction of the metadata table of the table
/// at `storage`.
pub async fn latest_compaction(storage: &Storage) -> Result<Option<String>> {
    let metadata = metadata_storage(storage)?;
    let mconfig = crate::table::load_config(&metadata).await?;
    let timeline = Timeline::load(&metadata, &mconfig).await?;
    Ok(timeline.instants().iter().filter(|i| i.is_completed() && i.action == "commit").map(|i| i.timestamp.clone()).max())
}

/// Takes the metadata table's deltacommit of the data instant `instant`, which is being rolled
/// back, out of the metadata table of the table at `storage`: its completed instant first (then
/// no reader reads its log), its log, its pending instant files. Nothing when there is none.
pub async fn roll_back(storage: &Storage, config: &TableConfig, instant: &str) -> Result<()> {
    if !config.lists_files_in_metadata_table() || instant.starts_with(INITIALISING) {
        return Ok(());
    }
    let metadata = metadata_storage(storage)?;
    let mconfig = crate::table::load_config(&metadata).await?;
    let dir = &mconfig.timeline_dir;
    for (name, _) in metadata.list_dir(dir).await? {
        if name.starts_with(&format!("{instant}_")) && name.ends_with(".deltacommit") {
            metadata.delete(&format!("{dir}/{name}")).await?;
        }
    }
    for (name, _) in metadata.list_dir("files").await? {
        if name.starts_with(&format!(".{FILE_GROUP}_{instant}.log.")) {
            metadata.delete(&format!("files/{name}")).await?;
        }
    }
    for state in ["inflight", "requested"] {
        metadata.delete(&format!("{dir}/{instant}.deltacommit.{state}")).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_lists_its_partitions_and_files() {
        let mut metadata = CommitMetadata { operation_type: "UPSERT".into(), ..Default::default() };
        let stat = |path: &str, size: i64| WriteStat { path: Some(path.into()), file_size_in_bytes: Some(size), ..Default::default() };
        metadata.partition_to_write_stats.insert("p=1".into(), vec![stat("p=1/.a_1.log.1_0-1-0", 10), stat("p=1/b_0-1-0_1.parquet", 20)]);
        metadata.partition_to_write_stats.insert("".into(), vec![stat(".c_1.log.1_0-1-0", 5)]);
        let change = FilesChange::of_commit(&metadata.to_avro().unwrap()).unwrap();
        let records = change.records();
        assert_eq!(records.keys().collect::<Vec<_>>(), [".", ALL_PARTITIONS, "p=1"]);
        assert_eq!(records[ALL_PARTITIONS].entries.keys().collect::<Vec<_>>(), [".", "p=1"]);
        assert_eq!(records["p=1"].entries[".a_1.log.1_0-1-0"], FileInfo { size: 10, deleted: false });
        assert_eq!(records["."].entries[".c_1.log.1_0-1-0"].size, 5);
        // Encoded and read back through an HFile.
        let file = crate::mdt::hfile::HFile::parse(Bytes::from(hfile_of(&records).unwrap())).unwrap();
        let schema = crate::avro::parse_schema(std::str::from_utf8(file.file_info("schema").unwrap()).unwrap()).unwrap();
        let read: BTreeMap<String, FilesRecord> = file
            .cells()
            .unwrap()
            .into_iter()
            .map(|(key, value)| (String::from_utf8(key.to_vec()).unwrap(), files::files_record(&schema, &value).unwrap()))
            .collect();
        assert_eq!(read, records);
    }
}
