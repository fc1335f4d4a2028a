//! Commit metadata this engine writes (hudi-format.md §2.6): Avro `HoodieCommitMetadata` in an
//! object container file, with the schema Java writes (HoodieCommitMetadata.avsc), so Java,
//! hudi-rs and this engine all read it.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;
use crate::write::time::{LockOptions, TableLock};

/// The writer schema of commit metadata, as Hudi 1.x writes it.
pub const COMMIT_METADATA_SCHEMA: &str = include_str!("HoodieCommitMetadata.avsc");

/// What one written file contributed to a commit (`HoodieWriteStat`; fields Java reads).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WriteStat {
    pub file_id: Option<String>,
    /// Partition-relative path of the written file.
    pub path: Option<String>,
    pub prev_commit: Option<String>,
    pub num_writes: Option<i64>,
    pub num_deletes: Option<i64>,
    pub num_update_writes: Option<i64>,
    pub total_write_bytes: Option<i64>,
    pub total_write_errors: Option<i64>,
    pub partition_path: Option<String>,
    pub num_inserts: Option<i64>,
    pub file_size_in_bytes: Option<i64>,
    pub log_version: Option<i32>,
    pub log_offset: Option<i64>,
    pub base_file: Option<String>,
    pub log_files: Option<Vec<String>>,
    /// Compaction only: the slice's base file before, and what its logs held.
    pub prev_base_file: Option<String>,
    pub total_log_files_compacted: Option<i64>,
    pub total_log_size_compacted: Option<i64>,
    pub total_log_files: Option<i64>,
}

/// A commit's metadata.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommitMetadata {
    pub partition_to_write_stats: BTreeMap<String, Vec<WriteStat>>,
    pub compacted: bool,
    pub extra_metadata: BTreeMap<String, String>,
    pub operation_type: String,
    /// A replacecommit's: the file groups it replaced, by partition (`HoodieReplaceCommitMetadata`
    /// instead of `HoodieCommitMetadata` when set).
    pub replaced_file_ids: Option<BTreeMap<String, Vec<String>>>,
}

fn schema() -> &'static apache_avro::Schema {
    static SCHEMA: std::sync::OnceLock<apache_avro::Schema> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| crate::avro::parse_schema(COMMIT_METADATA_SCHEMA).expect("valid built-in schema"))
}

/// `HoodieReplaceCommitMetadata`: the commit schema renamed, without `compacted`, with
/// `partitionToReplaceFileIds` (Java resolves records by name, so the name must be its own).
fn replace_schema() -> &'static apache_avro::Schema {
    static SCHEMA: std::sync::OnceLock<apache_avro::Schema> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| {
        let mut json: serde_json::Value = serde_json::from_str(COMMIT_METADATA_SCHEMA).expect("valid built-in schema");
        json["name"] = "HoodieReplaceCommitMetadata".into();
        let fields = json["fields"].as_array_mut().expect("a record");
        fields.retain(|f| f["name"] != "compacted");
        fields.push(serde_json::json!({
            "name": "partitionToReplaceFileIds",
            "type": ["null", {"type": "map", "values": {"type": "array", "items": "string"}}],
            "default": null
        }));
        crate::avro::parse_schema(&json.to_string()).expect("valid built-in schema")
    })
}

/// `HoodieRequestedReplaceMetadata` of a replacecommit that is no clustering (whose plan, a
/// union with null in Java's schema, is written as null).
fn requested_replace_schema() -> &'static apache_avro::Schema {
    static SCHEMA: std::sync::OnceLock<apache_avro::Schema> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| {
        let json = r#"{"type": "record", "name": "HoodieRequestedReplaceMetadata", "namespace": "org.apache.hudi.avro.model",
            "fields": [
                {"name": "operationType", "type": ["null", "string"], "default": null},
                {"name": "clusteringPlan", "type": "null", "default": null},
                {"name": "extraMetadata", "type": ["null", {"type": "map", "values": "string"}], "default": null},
                {"name": "version", "type": ["int", "null"], "default": 1}
            ]}"#;
        crate::avro::parse_schema(json).expect("valid built-in schema")
    })
}

/// The content of `<instant>.replacecommit.requested` for `operation_type`.
pub fn requested_replace_avro(operation_type: &str) -> Result<Vec<u8>> {
    use apache_avro::types::Value as Avro;
    let internal = |e: apache_avro::Error| Error::new(ErrorKind::Internal, "cannot encode requested replace metadata").with_source(e);
    let record = Avro::Record(vec![
        ("operationType".into(), Avro::Union(1, Box::new(Avro::String(operation_type.to_owned())))),
        ("clusteringPlan".into(), Avro::Null),
        ("extraMetadata".into(), Avro::Union(1, Box::new(Avro::Map(Default::default())))),
        ("version".into(), Avro::Union(0, Box::new(Avro::Int(1)))),
    ]);
    let mut writer = apache_avro::Writer::new(requested_replace_schema(), Vec::new());
    writer.append(record).map_err(internal)?;
    writer.into_inner().map_err(internal)
}

impl CommitMetadata {
    /// The Avro object container file of this metadata.
    pub fn to_avro(&self) -> Result<Vec<u8>> {
        use apache_avro::types::Value as Avro;
        let internal = |e: apache_avro::Error| Error::new(ErrorKind::Internal, "cannot encode commit metadata").with_source(e);
        let some = |v: Avro| Avro::Union(1, Box::new(v));
        let stats: std::collections::HashMap<String, Avro> = self
            .partition_to_write_stats
            .iter()
            .map(|(partition, stats)| {
                let items = stats
                    .iter()
                    .map(|s| apache_avro::to_value(s).map_err(internal))
                    .collect::<Result<Vec<_>>>()?;
                Ok((partition.clone(), Avro::Array(items)))
            })
            .collect::<Result<_>>()?;
        let extra: std::collections::HashMap<String, Avro> =
            self.extra_metadata.iter().map(|(k, v)| (k.clone(), Avro::String(v.clone()))).collect();
        let mut fields = vec![("partitionToWriteStats".to_owned(), some(Avro::Map(stats)))];
        if self.replaced_file_ids.is_none() {
            fields.push(("compacted".into(), some(Avro::Boolean(self.compacted))));
        }
        fields.extend([
            ("extraMetadata".into(), some(Avro::Map(extra))),
            ("version".into(), Avro::Union(0, Box::new(Avro::Int(1)))),
            ("operationType".into(), some(Avro::String(self.operation_type.clone()))),
        ]);
        if let Some(replaced) = &self.replaced_file_ids {
            let ids = replaced
                .iter()
                .map(|(partition, ids)| (partition.clone(), Avro::Array(ids.iter().map(|id| Avro::String(id.clone())).collect())))
                .collect();
            fields.push(("partitionToReplaceFileIds".into(), some(Avro::Map(ids))));
        }
        let schema = if self.replaced_file_ids.is_some() { replace_schema() } else { schema() };
        let record = Avro::Record(fields).resolve(schema).map_err(internal)?;
        let mut writer = apache_avro::Writer::new(schema, Vec::new());
        writer.append(record).map_err(internal)?;
        writer.into_inner().map_err(internal)
    }
}

/// A write (a deltacommit, or a truncate's replacecommit) whose files are written and whose
/// commit metadata is ready: what is left is creating `<instant>_<completion>.<action>`. It can be kept (PostgreSQL keeps it in
/// a commit intent) and completed later, by another process, any number of times: only the
/// first completion creates the instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedCommit {
    /// The table's timeline directory (`TableConfig::timeline_dir`).
    pub timeline_dir: String,
    pub instant: String,
    /// The completed instant's content: Avro `HoodieCommitMetadata`.
    pub metadata: Bytes,
}

/// The actions a prepared write completes as: a deltacommit, or a truncate's replacecommit.
pub const WRITE_ACTIONS: [&str; 2] = ["deltacommit", "replacecommit"];

/// The completion time of the write `instant` among the timeline files `files`.
fn completion_in(files: &[(String, u64)], instant: &str) -> Option<String> {
    WRITE_ACTIONS.iter().find_map(|action| crate::timeline::instant::completion_in(files.iter().map(|(n, _)| n.as_str()), instant, action))
}

/// The action of the pending write `instant` among the timeline files `files`: the one whose
/// inflight file is there.
fn pending_action(files: &[(String, u64)], instant: &str) -> Option<&'static str> {
    WRITE_ACTIONS.into_iter().find(|action| files.iter().any(|(n, _)| *n == format!("{instant}.{action}.inflight")))
}

/// How a [`PreparedCommit::complete`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub completion: String,
    /// Whether this call created the completed instant (`false`: it existed already).
    pub created: bool,
}

impl PreparedCommit {
    /// The completion time of this deltacommit if it is completed already (one listing, no
    /// lock): what a finisher checks first, since most writes it meets completed normally.
    pub async fn completed(&self, storage: &Storage) -> Result<Option<String>> {
        let files = storage.list_dir(&self.timeline_dir).await?;
        Ok(completion_in(&files, &self.instant))
    }

    /// Checks that this deltacommit is still pending: that no rollback of failed writes took it
    /// (its writer silent past the heartbeat expiry, or taken for dead). Called after the
    /// write's prepared mark is written and before its transaction commits; a rollback reads
    /// the mark again after it removed the write's inflight file, and puts the file back when
    /// the mark appeared ([`crate::services::rollback::rollback_writes`]). So either this
    /// finds the file gone (a `NotFound` error: the transaction must not commit), or the
    /// rollback finds the mark and leaves the write alone — with no lock on the commit's path.
    pub async fn confirm_pending(&self, storage: &Storage) -> Result<()> {
        for action in WRITE_ACTIONS {
            match storage.size(&format!("{}/{}.{action}.inflight", self.timeline_dir, self.instant)).await {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::new(ErrorKind::NotFound, format!("write {} was rolled back by a rollback of failed writes before it could commit", self.instant)))
    }

    /// Completes the deltacommit under the table lock: takes a completion time and creates the
    /// completed instant, unless it exists already; then ends the write's heartbeat and
    /// prepared mark. An instant that is no longer pending (rolled back) is a `NotFound`
    /// error; an empty timeline (the table cannot be seen) a `Storage` one.
    pub async fn complete(&self, storage: &Storage, owner: &str, lock_options: &LockOptions) -> Result<Completed> {
        let dir = &self.timeline_dir;
        let completed = TableLock::hold(storage, owner, lock_options, async |lock| {
            // One listing says whether someone completed it already (a retry, another
            // completer) or rolled it back (a writer silent past the heartbeat expiry).
            let files = storage.list_dir(dir).await?;
            if let Some(completion) = completion_in(&files, &self.instant) {
                return Ok(Completed { completion, created: false });
            }
            if files.is_empty() {
                // Not a table that lost this write, but one that cannot be seen (a missing
                // bucket, a wrong location): nothing can be concluded, try again later.
                return Err(Error::new(ErrorKind::Storage, format!("the timeline {}/{dir} is empty or cannot be listed", storage.uri())));
            }
            let Some(action) = pending_action(&files, &self.instant) else {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("write {} was rolled back after its heartbeat expired; nothing was committed", self.instant),
                ));
            };
            // The metadata table, where the table has one, lists the write's files first.
            let config = crate::table::load_config(storage).await?;
            if config.lists_files_in_metadata_table() {
                let change = crate::mdt::writer::FilesChange::of_commit(&self.metadata)?;
                crate::mdt::writer::record(storage, &config, &self.instant, &change, lock, lock_options).await?;
            }
            let completion = lock.next_time(lock_options).await?;
            if !lock_options.pause_before_completing.is_zero() {
                tokio::time::sleep(lock_options.pause_before_completing).await;
            }
            let name = format!("{dir}/{}_{completion}.{action}", self.instant);
            // Still ours: no later completion time can be visible before this one.
            lock.check().await?;
            if !storage.put_if_absent(&name, self.metadata.clone()).await? {
                return Err(Error::new(ErrorKind::Internal, format!("{name} already exists")));
            }
            Ok(Completed { completion, created: true })
        })
        .await?;
        // The write is committed now, whatever happens to its bookkeeping: a heartbeat or
        // mark left behind is harmless (a completed instant is never rolled back).
        let _ = crate::write::heartbeat::stop(storage, &self.instant).await;
        let _ = crate::write::prepared::clear(storage, &self.instant).await;
        Ok(completed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_what_the_reader_decodes() {
        let mut metadata = CommitMetadata { operation_type: "UPSERT".into(), ..Default::default() };
        metadata.extra_metadata.insert("schema".into(), "{\"type\":\"record\"}".into());
        metadata.partition_to_write_stats.insert(
            "country=nl".into(),
            vec![WriteStat {
                file_id: Some("00000003-0000-0000-0000-000000000000-0".into()),
                path: Some("country=nl/.00000003-0000-0000-0000-000000000000-0_1.log.1_0-1-0".into()),
                num_writes: Some(2),
                log_files: Some(vec![".x.log.1_0-1-0".into()]),
                ..Default::default()
            }],
        );
        let bytes = metadata.to_avro().unwrap();
        let json = crate::timeline::metadata::decode(&bytes).unwrap();
        assert_eq!(json["operationType"], "UPSERT");
        assert_eq!(json["extraMetadata"]["schema"], "{\"type\":\"record\"}");
        let stat = &json["partitionToWriteStats"]["country=nl"][0];
        assert_eq!(stat["fileId"], "00000003-0000-0000-0000-000000000000-0");
        assert_eq!(stat["numWrites"], 2);
        assert_eq!(stat["numDeletes"], serde_json::Value::Null);
        assert_eq!(json["compacted"], false);
    }
}
