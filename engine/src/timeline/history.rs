//! The LSM history of archived instants (layout 2; hudi-services-format.md §2): the directory
//! `.hoodie/timeline/history/` holds Parquet files of `HoodieLSMTimelineInstant` rows named
//! `<min>_<max>_<level>.parquet`, a `manifest_<N>` listing the live files of each version, and
//! `_version_`, the current version. Archival appends level-0 files ([`History::append`]) and
//! then merges and drops them ([`History::compact_and_clean`]); readers take the completion
//! times of archived instants from it ([`History::completions`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{Array, AsArray, BinaryArray, Int32Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use futures::TryStreamExt;
use parquet::arrow::async_reader::ParquetRecordBatchStreamBuilder;
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::KeyValue;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;
use crate::table::TableConfig;

/// The Avro schema parquet-avro writes into the footer of history files (Hudi's
/// `HoodieLSMTimelineInstant.avsc`, compact).
const AVRO_SCHEMA: &str = r#"{"type":"record","name":"HoodieLSMTimelineInstant","namespace":"org.apache.hudi.avro.model","fields":[{"name":"instantTime","type":["null","string"],"default":null},{"name":"completionTime","type":["null","string"],"default":null},{"name":"action","type":["null","string"],"default":null},{"name":"metadata","type":["null","bytes"],"default":null},{"name":"plan","type":["null","bytes"],"default":null},{"name":"version","type":"int","default":1}]}"#;
/// The `version` of every row (`LSM_TIMELINE_INSTANT_VERSION_1`).
const ROW_VERSION: i32 = 1;
const VERSION_FILE: &str = "_version_";
const MANIFEST_PREFIX: &str = "manifest_";
/// Files of one level merged into the next at once (`hoodie.timeline.compaction.batch.size`).
pub const COMPACTION_BATCH: usize = 10;
/// The most bytes one merge reads (Java's `MAX_FILE_SIZE_IN_BYTES`).
const COMPACTION_MAX_BYTES: u64 = 1000 * 1024 * 1024;
/// Manifest versions kept besides those a compaction just made (Java's retained versions).
const RETAINED_VERSIONS: usize = 3;

/// One archived action: its requested time, completion time, completed action, and the raw
/// bytes of its completed file and plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedInstant {
    pub timestamp: String,
    pub completion: String,
    pub action: String,
    pub metadata: Option<Bytes>,
    pub plan: Option<Bytes>,
}

/// An archived action's completion time and completed action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedCompletion {
    pub completion: String,
    pub action: String,
}

/// Completion times of archived actions, by requested time.
pub type ArchivedCompletions = BTreeMap<String, ArchivedCompletion>;

/// Java's `HoodieLSMTimelineManifest`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Manifest {
    #[serde(default)]
    files: Vec<ManifestFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestFile {
    file_name: String,
    file_len: u64,
}

/// `(min instant, max instant, level)` of a history file name (`^(\d+)_(\d+)_(\d)\.parquet$`;
/// Java takes an unparsable level as 0).
fn parse_file_name(name: &str) -> Option<(&str, &str, u32)> {
    let stem = name.strip_suffix(".parquet")?;
    let mut parts = stem.splitn(3, '_');
    let (min, max, level) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(min) && digits(max) && level.len() == 1 && digits(level)).then(|| (min, max, level.parse().unwrap_or(0)))
}

fn file_name(min: &str, max: &str, level: u32) -> String {
    format!("{min}_{max}_{level}.parquet")
}

fn manifest_version(name: &str) -> Option<u32> {
    name.strip_prefix(MANIFEST_PREFIX).filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))?.parse().ok()
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("instantTime", DataType::Utf8, true),
        Field::new("completionTime", DataType::Utf8, true),
        Field::new("action", DataType::Utf8, true),
        Field::new("metadata", DataType::Binary, true),
        Field::new("plan", DataType::Binary, true),
        Field::new("version", DataType::Int32, false),
    ]))
}

fn corrupt(path: &str, what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Corrupt, format!("invalid LSM history file {path}: {what}"))
}

/// The LSM history of one table.
pub struct History<'a> {
    storage: &'a Storage,
    dir: String,
}

impl<'a> History<'a> {
    /// The history of the table at `storage` (`hoodie.timeline.history.path` below the
    /// timeline directory).
    pub fn of(storage: &'a Storage, config: &TableConfig) -> History<'a> {
        let name = config.properties.get("hoodie.timeline.history.path").map_or("history", |p| p.trim());
        History::at(storage, format!("{}/{name}", config.timeline_dir))
    }

    /// The history in the directory `dir` (relative to the table's base path).
    pub fn at(storage: &'a Storage, dir: String) -> History<'a> {
        History { storage, dir }
    }

    /// The directory's name inside the timeline directory.
    pub fn dir_name(&self) -> &str {
        self.dir.rsplit('/').next().unwrap_or(&self.dir)
    }

    fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.dir)
    }

    /// The current version: `_version_`, or (while a writer replaces it, or when it is
    /// unreadable) the greatest manifest listed; `None` for an empty history.
    async fn version(&self) -> Result<Option<u32>> {
        match self.storage.get(&self.path(VERSION_FILE)).await {
            Ok(bytes) => {
                if let Some(v) = std::str::from_utf8(&bytes).ok().and_then(|t| t.parse().ok()) {
                    return Ok(Some(v));
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listing = self.storage.list_dir(&self.dir).await?;
        Ok(listing.iter().filter_map(|(name, _)| manifest_version(name)).max())
    }

    async fn manifest(&self, version: Option<u32>) -> Result<Manifest> {
        let Some(version) = version else { return Ok(Manifest::default()) };
        let path = self.path(&format!("{MANIFEST_PREFIX}{version}"));
        let bytes = self.storage.get(&path).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Manifest::default());
        }
        serde_json::from_slice(&bytes).map_err(|e| corrupt(&path, e))
    }

    /// Completion times of every archived action. A file dropped by a concurrent merge
    /// between reading the manifest and the file sends the read back to the new manifest.
    pub async fn completions(&self) -> Result<ArchivedCompletions> {
        let mut attempts = 0;
        loop {
            let manifest = self.manifest(self.version().await?).await?;
            let mut out = ArchivedCompletions::new();
            let mut gone = false;
            for file in &manifest.files {
                match self.read_rows(file, false).await {
                    Ok(rows) => {
                        for row in rows {
                            // As Java: the first row of an instant wins.
                            out.entry(row.timestamp).or_insert(ArchivedCompletion { completion: row.completion, action: row.action });
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound && attempts < 3 => gone = true,
                    Err(e) => return Err(e),
                }
            }
            if !gone {
                return Ok(out);
            }
            attempts += 1;
        }
    }

    /// The rows of one history file; with `whole`, also the metadata and plan bytes.
    async fn read_rows(&self, file: &ManifestFile, whole: bool) -> Result<Vec<ArchivedInstant>> {
        let path = self.path(&file.file_name);
        let reader = self.storage.parquet_reader(&path, Some(file.file_len));
        let parquet_error = |e: parquet::errors::ParquetError| {
            if let parquet::errors::ParquetError::External(inner) = e {
                match inner.downcast::<object_store::Error>() {
                    Ok(storage_error) => Error::from(*storage_error).context(format!("reading {path}")),
                    Err(inner) => corrupt(&path, inner),
                }
            } else {
                corrupt(&path, e)
            }
        };
        let builder = ParquetRecordBatchStreamBuilder::new(reader).await.map_err(parquet_error)?;
        let wanted: &[&str] = if whole { &["instantTime", "completionTime", "action", "metadata", "plan"] } else { &["instantTime", "completionTime", "action"] };
        let descr = builder.metadata().file_metadata().schema_descr();
        let leaves: Vec<usize> = (0..descr.num_columns()).filter(|&i| wanted.contains(&descr.column(i).name())).collect();
        let mask = ProjectionMask::leaves(descr, leaves);
        let batches: Vec<RecordBatch> = builder.with_projection(mask).build().map_err(parquet_error)?.try_collect().await.map_err(parquet_error)?;
        let mut rows = Vec::new();
        for batch in batches {
            let strings = |name: &str| -> Result<StringArray> {
                let column = batch.column_by_name(name).ok_or_else(|| corrupt(&path, format!("no column {name}")))?;
                let column = arrow::compute::cast(column, &DataType::Utf8).map_err(|e| corrupt(&path, e))?;
                Ok(column.as_string::<i32>().clone())
            };
            let bytes = |name: &str| -> Result<Option<BinaryArray>> {
                let Some(column) = batch.column_by_name(name) else { return Ok(None) };
                let column = arrow::compute::cast(column, &DataType::Binary).map_err(|e| corrupt(&path, e))?;
                Ok(Some(column.as_binary::<i32>().clone()))
            };
            let (instants, completions, actions) = (strings("instantTime")?, strings("completionTime")?, strings("action")?);
            let (metadata, plans) = if whole { (bytes("metadata")?, bytes("plan")?) } else { (None, None) };
            let value = |array: &Option<BinaryArray>, i: usize| {
                array.as_ref().filter(|a| a.is_valid(i)).map(|a| Bytes::copy_from_slice(a.value(i)))
            };
            for i in 0..batch.num_rows() {
                if instants.is_null(i) || completions.is_null(i) || actions.is_null(i) {
                    return Err(corrupt(&path, "a row without instant, completion time or action"));
                }
                rows.push(ArchivedInstant {
                    timestamp: instants.value(i).to_owned(),
                    completion: completions.value(i).to_owned(),
                    action: actions.value(i).to_owned(),
                    metadata: value(&metadata, i),
                    plan: value(&plans, i),
                });
            }
        }
        Ok(rows)
    }

    /// Writes `rows` (sorted by requested time) as the history file `name`: its size.
    async fn write_file(&self, name: &str, rows: &[ArchivedInstant]) -> Result<u64> {
        let strings = |f: fn(&ArchivedInstant) -> &str| Arc::new(StringArray::from_iter_values(rows.iter().map(f))) as Arc<dyn Array>;
        let bytes = |f: fn(&ArchivedInstant) -> Option<&[u8]>| Arc::new(BinaryArray::from_iter(rows.iter().map(f))) as Arc<dyn Array>;
        let batch = RecordBatch::try_new(
            schema(),
            vec![
                strings(|r| &r.timestamp),
                strings(|r| &r.completion),
                strings(|r| &r.action),
                bytes(|r| r.metadata.as_deref()),
                bytes(|r| r.plan.as_deref()),
                Arc::new(Int32Array::from(vec![ROW_VERSION; rows.len()])),
            ],
        )
        .map_err(|e| Error::new(ErrorKind::Internal, "cannot build history rows").with_source(e))?;
        let footer = vec![KeyValue::new("parquet.avro.schema".to_owned(), AVRO_SCHEMA.to_owned())];
        let bytes = Bytes::from(crate::write::parquet_bytes(&batch, crate::write::ParquetFile::BaseFile(footer))?);
        let size = bytes.len() as u64;
        self.storage.put(&self.path(name), bytes).await?;
        Ok(size)
    }

    /// Publishes `manifest` as the version after `current`: the manifest first, then
    /// `_version_` (a reader that meets neither falls back to the greatest manifest).
    async fn publish(&self, current: Option<u32>, manifest: &Manifest) -> Result<u32> {
        let next = current.map_or(1, |v| v + 1);
        let path = self.path(&format!("{MANIFEST_PREFIX}{next}"));
        // A leftover of an attempt that stopped before `_version_` named it.
        self.storage.delete(&path).await?;
        let json = serde_json::to_vec_pretty(manifest).map_err(|e| Error::new(ErrorKind::Internal, "cannot encode a manifest").with_source(e))?;
        self.storage.put(&path, Bytes::from(json)).await?;
        self.storage.delete(&self.path(VERSION_FILE)).await?;
        self.storage.put(&self.path(VERSION_FILE), Bytes::from(next.to_string())).await?;
        Ok(next)
    }

    /// Adds `rows` (sorted by requested time, not empty) as a level-0 file and publishes it;
    /// done already when the current manifest lists that file (an archival that stopped
    /// after publishing). The caller holds the table lock.
    pub async fn append(&self, rows: &[ArchivedInstant]) -> Result<()> {
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else { return Ok(()) };
        let name = file_name(&first.timestamp, &last.timestamp, 0);
        let version = self.version().await?;
        let mut manifest = self.manifest(version).await?;
        if manifest.files.iter().any(|f| f.file_name == name) {
            return Ok(());
        }
        let file_len = self.write_file(&name, rows).await?;
        manifest.files.push(ManifestFile { file_name: name, file_len });
        self.publish(version, &manifest).await?;
        Ok(())
    }

    /// Merges each level's files into the next once a level holds [`COMPACTION_BATCH`] of
    /// them, then drops manifests beyond the retained versions and the files none of the kept
    /// ones lists. The caller holds the table lock (a file written by an archival that has not
    /// published yet would be dropped). Returns the number of merges.
    pub async fn compact_and_clean(&self) -> Result<usize> {
        let mut merges = 0;
        let mut level = 0;
        loop {
            let version = self.version().await?;
            let manifest = self.manifest(version).await?;
            let mut at_level: Vec<&ManifestFile> =
                manifest.files.iter().filter(|f| parse_file_name(&f.file_name).is_some_and(|(_, _, l)| l == level)).collect();
            if at_level.len() < COMPACTION_BATCH {
                if at_level.is_empty() || level >= 9 {
                    break;
                }
                level += 1;
                continue;
            }
            at_level.sort_by(|a, b| a.file_name.cmp(&b.file_name));
            let mut chosen: Vec<&ManifestFile> = Vec::new();
            let mut bytes = 0;
            for file in at_level {
                if chosen.len() == COMPACTION_BATCH {
                    break;
                }
                if bytes + file.file_len > COMPACTION_MAX_BYTES {
                    if chosen.len() >= 2 {
                        break;
                    }
                    (chosen, bytes) = (Vec::new(), 0);
                }
                bytes += file.file_len;
                chosen.push(file);
            }
            if chosen.len() < 2 {
                break;
            }
            let mut rows = Vec::new();
            for file in &chosen {
                rows.extend(self.read_rows(file, true).await?);
            }
            let bounds: Vec<(&str, &str, u32)> = chosen.iter().filter_map(|f| parse_file_name(&f.file_name)).collect();
            let min = bounds.iter().map(|b| b.0).min().unwrap_or_default();
            let max = bounds.iter().map(|b| b.1).max().unwrap_or_default();
            let name = file_name(min, max, level + 1);
            let file_len = self.write_file(&name, &rows).await?;
            let dropped: BTreeSet<&str> = chosen.iter().map(|f| f.file_name.as_str()).collect();
            let mut files: Vec<ManifestFile> = manifest.files.iter().filter(|f| !dropped.contains(f.file_name.as_str())).cloned().collect();
            files.push(ManifestFile { file_name: name, file_len });
            self.publish(version, &Manifest { files }).await?;
            merges += 1;
        }
        self.clean(RETAINED_VERSIONS + merges).await?;
        Ok(merges)
    }

    /// Keeps the newest `keep` manifest versions and the files they list.
    async fn clean(&self, keep: usize) -> Result<()> {
        let listing = self.storage.list_dir(&self.dir).await?;
        let mut versions: Vec<u32> = listing.iter().filter_map(|(name, _)| manifest_version(name)).collect();
        if versions.len() <= keep {
            return Ok(());
        }
        versions.sort_unstable();
        let (old, kept) = versions.split_at(versions.len() - keep);
        let mut live = BTreeSet::new();
        for &version in kept {
            live.extend(self.manifest(Some(version)).await?.files.into_iter().map(|f| f.file_name));
        }
        for version in old {
            self.storage.delete(&self.path(&format!("{MANIFEST_PREFIX}{version}"))).await?;
        }
        for (name, _) in &listing {
            if name.ends_with(".parquet") && !live.contains(name) {
                self.storage.delete(&self.path(name)).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageUri;

    fn storage() -> Storage {
        Storage::open(&StorageUri::parse("memory:///history-test").unwrap(), &Default::default()).unwrap()
    }

    fn row(t: u64) -> ArchivedInstant {
        ArchivedInstant {
            timestamp: format!("{:017}", 20260101000000000u64 + t),
            completion: format!("{:017}", 20260101000000000u64 + t + 5),
            action: "deltacommit".into(),
            metadata: Some(Bytes::from(format!("meta {t}"))),
            plan: (t % 2 == 0).then(|| Bytes::from_static(b"plan")),
        }
    }

    #[test]
    fn names_follow_java() {
        assert_eq!(parse_file_name("20260101000000001_20260101000000009_0.parquet"), Some(("20260101000000001", "20260101000000009", 0)));
        assert_eq!(parse_file_name("1_2_12.parquet"), None, "one-digit levels");
        assert_eq!(parse_file_name("manifest_3"), None);
        assert_eq!(manifest_version("manifest_12"), Some(12));
        assert_eq!(manifest_version("manifest_"), None);
        let json = serde_json::to_string(&Manifest { files: vec![ManifestFile { file_name: "a.parquet".into(), file_len: 7 }] }).unwrap();
        assert_eq!(json, r#"{"files":[{"fileName":"a.parquet","fileLen":7}]}"#);
    }

    #[tokio::test]
    async fn appends_merge_into_the_next_level_and_keep_every_row() {
        let storage = storage();
        let history = History::at(&storage, ".hoodie/timeline/history".into());
        assert!(history.completions().await.unwrap().is_empty(), "no history yet");
        for batch in 0..12u64 {
            let rows: Vec<_> = (0..3).map(|i| row(batch * 10 + i)).collect();
            history.append(&rows).await.unwrap();
            // Appending the same rows again (an archival redone) changes nothing.
            history.append(&rows).await.unwrap();
        }
        assert_eq!(history.version().await.unwrap(), Some(12));
        let merges = history.compact_and_clean().await.unwrap();
        assert_eq!(merges, 1);
        let manifest = history.manifest(history.version().await.unwrap()).await.unwrap();
        let levels: Vec<u32> = manifest.files.iter().filter_map(|f| parse_file_name(&f.file_name)).map(|b| b.2).collect();
        assert_eq!(levels.iter().filter(|&&l| l == 0).count(), 2);
        assert_eq!(levels.iter().filter(|&&l| l == 1).count(), 1);
        let completions = history.completions().await.unwrap();
        assert_eq!(completions.len(), 36);
        let third = row(21);
        assert_eq!(completions[&third.timestamp], ArchivedCompletion { completion: third.completion, action: "deltacommit".into() });
        // Only the retained manifests and the files they list remain.
        let listing = storage.list_dir(&history.dir).await.unwrap();
        let manifests = listing.iter().filter(|(n, _)| manifest_version(n).is_some()).count();
        assert_eq!(manifests, RETAINED_VERSIONS + 1);
        let merged = manifest.files.iter().find(|f| f.file_name.ends_with("_1.parquet")).unwrap();
        let rows = history.read_rows(merged, true).await.unwrap();
        assert_eq!(rows, (0..10u64).flat_map(|b| (0..3).map(move |i| row(b * 10 + i))).collect::<Vec<_>>());
    }
}
