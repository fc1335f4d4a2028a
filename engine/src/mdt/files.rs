//! The `files` partition of a table's metadata table: the data files Hudi's writers recorded,
//! per partition, as of the metadata table's latest completed instant — what Spark, Trino and
//! the reference reader list a table version 8+ table through instead of listing storage.
//!
//! The partition is one file group (`files-0000-0`): a base HFile and log files of HFILE_DATA
//! blocks (each a whole HFile), merged oldest first. A cell's row is a record key — a partition
//! path (`.` for a table without partitions) or `__all_partitions__` — and its value a
//! `HoodieMetadataRecord` in Avro, decoded with the schema the file or block carries. Records of
//! one key merge entry by entry as `HoodieMetadataPayload` merges file lists: a deletion removes
//! the live entry it meets (and is kept when it meets none: a later merge needs it), otherwise
//! the larger size wins.

use std::collections::{BTreeMap, BTreeSet};

use apache_avro::types::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::mdt::partition::{self, corrupt, Record};
use crate::storage::Storage;
use crate::table::files::path_in_partition;
use crate::timeline::Timeline;
use crate::view::FileSlice;

/// Where a table's metadata table is, relative to the table.
pub const METADATA_TABLE_PATH: &str = ".hoodie/metadata";
/// The record key of the list of partitions.
pub(super) const ALL_PARTITIONS: &str = "__all_partitions__";
/// The record key standing for the one partition of a table without partitions.
pub(super) const NON_PARTITIONED: &str = ".";
/// `HoodieMetadataRecord.type` of the partition list and of one partition's files.
pub(super) const PARTITION_LIST: i32 = 1;
pub(super) const FILE_LIST: i32 = 2;

/// One file's entry in a file list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileInfo {
    pub size: u64,
    pub deleted: bool,
}

/// One record of the `files` partition: its type and its entries.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct FilesRecord {
    pub kind: i32,
    pub entries: BTreeMap<String, FileInfo>,
}

impl FilesRecord {
    /// This record with `newer` merged over it.
    pub fn merge(&mut self, newer: FilesRecord) {
        self.kind = newer.kind;
        for (name, info) in newer.entries {
            match self.entries.get(&name) {
                Some(old) if info.deleted && !old.deleted => {
                    self.entries.remove(&name);
                }
                Some(old) if !info.deleted && !old.deleted => {
                    self.entries.insert(name, FileInfo { size: old.size.max(info.size), deleted: false });
                }
                _ => {
                    self.entries.insert(name, info);
                }
            }
        }
    }

    fn live(&self) -> impl Iterator<Item = (&String, &FileInfo)> {
        self.entries.iter().filter(|(_, info)| !info.deleted)
    }
}

/// What the `files` partition lists, and as of which metadata table instant.
#[derive(Debug, Clone)]
pub struct FilesListing {
    /// `(path relative to the table, size)` of every data file it lists.
    pub files: Vec<(String, u64)>,
    /// The metadata table's latest completed instant, which the listing is as of.
    pub as_of: String,
}

/// The data files the metadata table of the table at `storage` lists, for the data table's
/// timeline `data`: blocks written for data instants that are still pending (the metadata table
/// commits first) or that failed are left out. `None` when the table has no metadata table.
pub async fn listing(storage: &Storage, data: &Timeline) -> Result<Option<FilesListing>> {
    let metadata = storage.child(METADATA_TABLE_PATH)?;
    let Some(merged) = merged(&metadata, data).await? else { return Ok(None) };
    Ok(Some(FilesListing { files: files_of(&merged.records), as_of: merged.as_of }))
}

/// The `files` partition's latest slice, its records merged.
pub(super) struct Merged {
    pub records: BTreeMap<String, FilesRecord>,
    /// The metadata table's latest completed instant (empty when none is).
    pub as_of: String,
    pub slice: Option<FileSlice>,
    /// Whether a block was left out because its data instant is still pending.
    pub skipped_pending: bool,
}

/// The records of the `files` partition of the metadata table at `metadata`, merged as of its
/// latest completed instant, for the data table's timeline `data`. `None` when there is no
/// metadata table.
pub(super) async fn merged(metadata: &Storage, data: &Timeline) -> Result<Option<Merged>> {
    let config = match crate::table::load_config(metadata).await {
        Ok(config) => config,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let timeline = Timeline::load(metadata, &config).await?;
    merged_as_of(metadata, &timeline, data).await.map(Some)
}

/// [`merged`], for the metadata table's timeline `timeline`, loaded already.
pub(super) async fn merged_as_of(metadata: &Storage, timeline: &Timeline, data: &Timeline) -> Result<Merged> {
    let as_of = timeline.latest_completion().unwrap_or_default().to_owned();
    let read = partition::read(metadata, timeline, "files", data).await?;
    if read.slices.len() > 1 {
        return Err(corrupt(format!("its files partition has {} file groups, not one", read.slices.len())));
    }
    let mut records: BTreeMap<String, FilesRecord> = BTreeMap::new();
    for record in read.records {
        match record {
            Record::Put { key, value, schema } => {
                let record = files_record(&schema, &value)?;
                if record.kind != PARTITION_LIST && record.kind != FILE_LIST {
                    continue;
                }
                match records.get_mut(&key) {
                    Some(older) => older.merge(record),
                    None => {
                        records.insert(key, record);
                    }
                }
            }
            Record::Delete { key } => {
                records.remove(&key);
            }
        }
    }
    Ok(Merged { records, as_of, slice: read.slices.into_iter().next(), skipped_pending: read.skipped_pending })
}

/// The data files `records` list: `(path, size)` of each live entry of each partition's file
/// list (not of partitions the partition list marks deleted).
pub(super) fn files_of(records: &BTreeMap<String, FilesRecord>) -> Vec<(String, u64)> {
    let deleted: BTreeSet<&str> = records
        .get(ALL_PARTITIONS)
        .map(|all| all.entries.iter().filter(|(_, i)| i.deleted).map(|(p, _)| p.as_str()).collect())
        .unwrap_or_default();
    let mut files = Vec::new();
    for (key, record) in records {
        if key == ALL_PARTITIONS || record.kind != FILE_LIST || deleted.contains(key.as_str()) {
            continue;
        }
        let partition = if key == NON_PARTITIONED { "" } else { key.as_str() };
        files.extend(record.live().map(|(name, info)| (path_in_partition(partition, name), info.size)));
    }
    files
}

/// The writer schema of `HoodieMetadataRecord` (as Hudi 1.0 writes it for table version 8,
/// with the meta fields, which the metadata table leaves null).
pub(super) const RECORD_SCHEMA: &str = include_str!("HoodieMetadataRecord.avsc");

pub(super) fn record_schema() -> &'static apache_avro::Schema {
    static SCHEMA: std::sync::OnceLock<apache_avro::Schema> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| crate::avro::parse_schema(RECORD_SCHEMA).expect("valid built-in schema"))
}

impl FilesRecord {
    /// The record's value in an HFile: Avro `HoodieMetadataRecord` with an empty `key` (the
    /// cell's row is the key) and every other index's metadata null.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let schema = record_schema();
        let apache_avro::Schema::Record(record) = schema else { unreachable!("a record schema") };
        let entries: std::collections::HashMap<String, Value> = self
            .entries
            .iter()
            .map(|(name, info)| {
                let info = Value::Record(vec![("size".into(), Value::Long(info.size as i64)), ("isDeleted".into(), Value::Boolean(info.deleted))]);
                (name.clone(), info)
            })
            .collect();
        let fields = record
            .fields
            .iter()
            .map(|field| {
                let value = match field.name.as_str() {
                    "key" => Value::String(String::new()),
                    "type" => Value::Int(self.kind),
                    "filesystemMetadata" => Value::Union(1, Box::new(Value::Map(entries.clone()))),
                    _ => Value::Union(0, Box::new(Value::Null)),
                };
                (field.name.clone(), value)
            })
            .collect();
        apache_avro::to_avro_datum(schema, Value::Record(fields))
            .map_err(|e| Error::new(ErrorKind::Internal, "cannot encode a metadata table record").with_source(e))
    }
}

/// The type and file list of one `HoodieMetadataRecord`.
pub(super) fn files_record(schema: &apache_avro::Schema, value: &[u8]) -> Result<FilesRecord> {
    let mut record = FilesRecord::default();
    for (name, field) in partition::decode(schema, value)? {
        match (name.as_str(), field) {
            ("type", Value::Int(kind)) => record.kind = kind,
            ("filesystemMetadata", Value::Union(_, inner)) => {
                if let Value::Map(entries) = *inner {
                    for (file, info) in entries {
                        record.entries.insert(file, file_info(info)?);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(record)
}

fn file_info(value: Value) -> Result<FileInfo> {
    let Value::Record(fields) = value else { return Err(corrupt("a file entry that is not a record")) };
    let mut info = FileInfo { size: 0, deleted: false };
    for (name, field) in fields {
        match (name.as_str(), field) {
            ("size", Value::Long(size)) => info.size = u64::try_from(size).map_err(|_| corrupt("a negative file size"))?,
            ("isDeleted", Value::Boolean(deleted)) => info.deleted = deleted,
            _ => {}
        }
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: i32, entries: &[(&str, u64, bool)]) -> FilesRecord {
        FilesRecord { kind, entries: entries.iter().map(|&(n, size, deleted)| (n.to_owned(), FileInfo { size, deleted })).collect() }
    }

    /// `HoodieMetadataPayload`'s merge of file lists: none of the fixtures ran a clean, so
    /// deletions are checked here.
    #[test]
    fn file_lists_merge_as_hudi_merges_them() {
        let mut base = record(FILE_LIST, &[("a.parquet", 10, false), ("b.parquet", 20, false)]);
        // A larger size wins either way round; a deletion removes the live entry; a deletion
        // of a file the list does not have is kept (a later merge with an older base needs it).
        base.merge(record(FILE_LIST, &[("a.parquet", 5, false), ("b.parquet", 0, true), ("c.parquet", 0, true), ("d.log", 7, false)]));
        assert_eq!(base.entries.keys().collect::<Vec<_>>(), ["a.parquet", "c.parquet", "d.log"]);
        assert_eq!(base.entries["a.parquet"], FileInfo { size: 10, deleted: false });
        assert_eq!(base.live().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a.parquet", "d.log"]);
        base.merge(record(FILE_LIST, &[("d.log", 9, false), ("c.parquet", 0, true)]));
        assert_eq!(base.entries["d.log"].size, 9);
        assert!(base.entries["c.parquet"].deleted);

        let mut records = BTreeMap::new();
        records.insert(ALL_PARTITIONS.to_owned(), record(PARTITION_LIST, &[("p=1", 0, false), ("p=2", 0, true)]));
        records.insert("p=1".to_owned(), base);
        records.insert("p=2".to_owned(), record(FILE_LIST, &[("gone.parquet", 3, false)]));
        records.insert(NON_PARTITIONED.to_owned(), record(FILE_LIST, &[("top.parquet", 4, false)]));
        assert_eq!(
            files_of(&records),
            [("top.parquet".to_owned(), 4), ("p=1/a.parquet".to_owned(), 10), ("p=1/d.log".to_owned(), 9)]
        );
    }
}
