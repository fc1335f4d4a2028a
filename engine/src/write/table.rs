//! Creating tables: `hoodie.properties` of a merge-on-read table of version 8 (timeline layout
//! 2) with the simple bucket index and no metadata table (hudi-format.md §1.3, §1.4, §9).

use arrow::datatypes::Schema;
use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;
use crate::table::config::{keys, table_checksum};
use crate::table::{self, MergeMode, Properties, TableConfig, TableType, PROPERTIES_FILE};
use crate::write::schema::avro_record_schema;

/// What a new table looks like.
#[derive(Debug, Clone)]
pub struct NewTable {
    pub name: String,
    /// Data columns (no meta fields).
    pub schema: Schema,
    pub record_key_fields: Vec<String>,
    pub ordering_field: Option<String>,
    pub partition_fields: Vec<String>,
    pub buckets: u32,
    pub merge_mode: MergeMode,
}

/// Merge strategy ids Hudi 1.x records with the merge mode.
const EVENT_TIME_STRATEGY: &str = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5";
const COMMIT_TIME_STRATEGY: &str = "ce9acb64-bde0-424c-9b91-f6ebba25356d";
/// Merging by the payload class (Hudi 1.x `PAYLOAD_BASED_MERGE_STRATEGY_UUID`).
const PAYLOAD_STRATEGY: &str = "00000000-0000-0000-0000-000000000002";

impl NewTable {
    fn invalid(&self, why: String) -> Error {
        Error::new(ErrorKind::InvalidArgument, format!("cannot create Hudi table {}: {why}", self.name))
    }

    fn validate(&self) -> Result<()> {
        let has = |f: &str| self.schema.field_with_name(f).is_ok();
        if self.record_key_fields.is_empty() {
            return Err(self.invalid("a primary key is required".into()));
        }
        for field in self.record_key_fields.iter().chain(&self.partition_fields).chain(&self.ordering_field) {
            if !has(field) {
                return Err(self.invalid(format!("column \"{field}\" does not exist")));
            }
        }
        if matches!(self.merge_mode, MergeMode::EventTimeOrdering | MergeMode::PartialUpdate) && self.ordering_field.is_none() {
            return Err(self.invalid("merge modes event_time and partial_update need an ordering field".into()));
        }
        if self.buckets == 0 {
            return Err(self.invalid("buckets must be at least 1".into()));
        }
        Ok(())
    }

    /// The complete `hoodie.properties`.
    pub fn properties(&self) -> Result<Properties> {
        self.validate()?;
        let mut p = Properties::new();
        let key_generator = if !self.partition_fields.is_empty() && self.record_key_fields.len() == 1 {
            "SIMPLE"
        } else if self.partition_fields.is_empty() && self.record_key_fields.len() == 1 {
            "NON_PARTITION"
        } else {
            "COMPLEX"
        };
        let (mode, strategy, payload) = match self.merge_mode {
            MergeMode::CommitTimeOrdering => {
                ("COMMIT_TIME_ORDERING", COMMIT_TIME_STRATEGY, "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload")
            }
            MergeMode::PartialUpdate => ("CUSTOM", PAYLOAD_STRATEGY, crate::table::config::PARTIAL_UPDATE_PAYLOAD),
            _ => ("EVENT_TIME_ORDERING", EVENT_TIME_STRATEGY, "org.apache.hudi.common.model.DefaultHoodieRecordPayload"),
        };
        for (key, value) in [
            (keys::NAME, self.name.as_str()),
            (keys::DATABASE, "default"),
            (keys::TYPE, "MERGE_ON_READ"),
            (keys::VERSION, "8"),
            (keys::INITIAL_VERSION, "8"),
            (keys::TIMELINE_LAYOUT, "2"),
            (keys::TIMELINE_PATH, "timeline"),
            (keys::TIMELINE_HISTORY_PATH, "history"),
            (keys::ARCHIVE_FOLDER, "archived"),
            (keys::KEYGEN_TYPE, key_generator),
            (keys::BASE_FILE_FORMAT, "PARQUET"),
            (keys::POPULATE_META_FIELDS, "true"),
            (keys::HIVE_STYLE_PARTITIONING, "true"),
            (keys::URL_ENCODE_PARTITIONS, "false"),
            (keys::DROP_PARTITION_COLUMNS, "false"),
            (keys::MERGE_MODE, mode),
            ("hoodie.record.merge.strategy.id", strategy),
            ("hoodie.compaction.payload.class", payload),
            (keys::TIMELINE_TIMEZONE, "UTC"),
            ("hoodie.index.type", "BUCKET"),
            ("hoodie.index.bucket.engine", "SIMPLE"),
            ("hoodie.write.concurrency.mode", "NON_BLOCKING_CONCURRENCY_CONTROL"),
        ] {
            p.set(key, value);
        }
        p.set(keys::RECORD_KEY_FIELDS, self.record_key_fields.join(","));
        p.set("hoodie.bucket.index.hash.field", self.record_key_fields.join(","));
        p.set("hoodie.bucket.index.num.buckets", self.buckets.to_string());
        if let Some(ordering) = &self.ordering_field {
            p.set(keys::PRECOMBINE_FIELD, ordering.clone());
        }
        if !self.partition_fields.is_empty() {
            p.set(keys::PARTITION_FIELDS, self.partition_fields.join(","));
        }
        p.set(keys::CREATE_SCHEMA, avro_record_schema(&self.name, &self.schema)?);
        p.set(keys::CHECKSUM, table_checksum(Some("default"), &self.name).to_string());
        Ok(p)
    }

    /// Whether an existing table has this table's keys, partitioning, buckets and columns.
    fn matches(&self, existing: &TableConfig) -> std::result::Result<(), String> {
        let buckets = existing.properties.get("hoodie.bucket.index.num.buckets").and_then(|b| b.parse().ok());
        let checks = [
            ("primary key", existing.record_key_fields.join(","), self.record_key_fields.join(",")),
            ("ordering field", existing.ordering_fields.join(","), self.ordering_field.clone().unwrap_or_default()),
            ("partitioning", existing.partition_fields.join(","), self.partition_fields.join(",")),
            ("buckets", buckets.map_or("none".to_owned(), |b: u32| b.to_string()), self.buckets.to_string()),
            ("table type", format!("{:?}", existing.table_type), format!("{:?}", TableType::MergeOnRead)),
        ];
        for (what, theirs, ours) in checks {
            if theirs != ours {
                return Err(format!("its {what} is \"{theirs}\", not \"{ours}\""));
            }
        }
        let avro = existing.create_schema.as_deref().unwrap_or("{}");
        let existing_schema = crate::read::schema::arrow_schema_of_avro(avro).map_err(|e| e.to_string())?;
        for field in self.schema.fields() {
            match existing_schema.field_with_name(field.name()) {
                Ok(f) if crate::write::schema::same_type(f.data_type(), field.data_type()) => {}
                Ok(f) => return Err(format!("its column {} has type {}, not {}", field.name(), f.data_type(), field.data_type())),
                Err(_) => return Err(format!("it has no column {}", field.name())),
            }
        }
        Ok(())
    }
}

/// Creates the table at `storage`, or accepts an existing one that matches `spec`.
pub async fn create_table(storage: &Storage, spec: &NewTable) -> Result<TableConfig> {
    let properties = spec.properties()?;
    let text = properties.to_text(&["Created by pg_hudi"]);
    if !storage.put_if_absent(PROPERTIES_FILE, Bytes::from(text)).await? {
        let existing = table::load_config(storage).await?;
        spec.matches(&existing).map_err(|why| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("a different Hudi table exists at {}: {why}", storage.uri()),
            )
        })?;
        return Ok(existing);
    }
    table::load_config(storage).await
}

/// A table for tests: `(id bigint key, name text)`, commit-time merging, no partitions, in a
/// temporary directory of its own.
#[cfg(test)]
pub(crate) struct TestTable {
    _dir: tempfile::TempDir,
    pub storage: Storage,
    pub config: TableConfig,
    pub schema: Schema,
}

#[cfg(test)]
impl TestTable {
    pub async fn new(buckets: u32) -> TestTable {
        use arrow::datatypes::{DataType, Field};
        let dir = tempfile::tempdir().unwrap();
        let uri = crate::storage::StorageUri::parse(&format!("file://{}", dir.path().display())).unwrap();
        let storage = Storage::open(&uri, &Default::default()).unwrap();
        let schema = Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)]);
        let spec = NewTable {
            name: "t".into(),
            schema: schema.clone(),
            record_key_fields: vec!["id".into()],
            ordering_field: None,
            partition_fields: vec![],
            buckets,
            merge_mode: MergeMode::CommitTimeOrdering,
        };
        let config = create_table(&storage, &spec).await.unwrap();
        TestTable { _dir: dir, storage, config, schema }
    }

    /// One committed transaction that upserts `ids`, each named `name`.
    pub async fn upsert(&self, ids: Vec<i64>, name: &str) {
        use arrow::array::{Int64Array, StringArray};
        use std::sync::Arc;
        let names = StringArray::from(vec![name; ids.len()]);
        let rows = arrow::record_batch::RecordBatch::try_new(Arc::new(self.schema.clone()), vec![Arc::new(Int64Array::from(ids)), Arc::new(names)])
            .unwrap();
        let writer = crate::write::WriterId { node: 1, process: 1 };
        let mut tx = crate::write::Transaction::begin(self.storage.clone(), self.config.clone(), writer, Default::default()).await.unwrap();
        tx.upsert(&rows).await.unwrap();
        tx.commit().await.unwrap();
    }
}
