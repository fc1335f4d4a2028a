//! Creating tables: `hoodie.properties` of a merge-on-read table of version 8 (timeline layout
//! 2) with the simple bucket index, and, when asked for, a metadata table listing its files
//! (hudi-format.md §1.3, §1.4, §9; docs/metadata-table.md).

use arrow::datatypes::Schema;
use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;
use crate::table::bucket::MAX_BUCKETS;
use crate::table::config::{keys, table_checksum};
use crate::table::{self, MergeMode, Properties, TableConfig, TableType, PROPERTIES_FILE};
use crate::write::schema::avro_record_schema;
use crate::write::time::LockOptions;

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
    /// Whether the table lists its files in a metadata table ([`crate::mdt::writer`]).
    pub metadata_table: bool,
}

/// Merge strategy ids Hudi 1.x records with the merge mode.
const EVENT_TIME_STRATEGY: &str = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5";
const COMMIT_TIME_STRATEGY: &str = "ce9acb64-bde0-424c-9b91-f6ebba25356d";
/// Merging by the payload class (Hudi 1.x `PAYLOAD_BASED_MERGE_STRATEGY_UUID`).
const PAYLOAD_STRATEGY: &str = "00000000-0000-0000-0000-000000000002";

/// Refuses an empty name, or one with a control character (Unicode category Cc: newline, tab,
/// NUL, DEL, C1 controls). Table and column names go into `hoodie.properties`, Avro schemas,
/// file paths (partition fields) and log lines, where a newline above all breaks the line it
/// is in. Any other character is kept: names in every script, with combining marks or
/// directional marks, round-trip.
fn check_name(what: &str, name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err(format!("the {what} is empty"));
    }
    if name.contains(char::is_control) {
        return Err(format!("the {what} \"{}\" has a control character", name.escape_debug()));
    }
    Ok(())
}

impl NewTable {
    fn invalid(&self, why: String) -> Error {
        // Escaped: the message must stay one line whatever the name holds.
        Error::new(ErrorKind::InvalidArgument, format!("cannot create Hudi table {}: {why}", self.name.escape_debug()))
    }

    fn validate(&self) -> Result<()> {
        check_name("table name", &self.name).map_err(|why| self.invalid(why))?;
        for field in self.schema.fields() {
            check_name("column name", field.name()).map_err(|why| self.invalid(why))?;
        }
        let options = [("primary key column", &self.record_key_fields), ("partition column", &self.partition_fields)];
        for (what, names) in options {
            for name in names {
                check_name(what, name).map_err(|why| self.invalid(why))?;
            }
        }
        if let Some(ordering) = &self.ordering_field {
            check_name("ordering field", ordering).map_err(|why| self.invalid(why))?;
        }
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
        if !(1..=MAX_BUCKETS).contains(&self.buckets) {
            return Err(self.invalid(format!("buckets must be from 1 to {MAX_BUCKETS}")));
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
            (keys::CREATED_BY, crate::table::config::CREATOR),
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
    create_table_locking(storage, spec, &LockOptions::default()).await
}

/// [`create_table`], taking the table lock as `lock_options` say to give the table a metadata
/// table.
pub async fn create_table_locking(storage: &Storage, spec: &NewTable, lock_options: &LockOptions) -> Result<TableConfig> {
    let properties = spec.properties()?;
    // The location, as its segments decode (a raw control character is no URI at all):
    // every file of the table is named below it.
    let location = percent_encoding::percent_decode_str(storage.uri().as_str()).decode_utf8_lossy();
    if location.contains(char::is_control) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("cannot create Hudi table {} at {}: the location has a control character", spec.name.escape_debug(), storage.uri()),
        ));
    }
    let text = properties.to_text(&["Created by pg_hudi"]);
    let created = storage.put_if_absent(PROPERTIES_FILE, Bytes::from(text)).await?;
    let config = table::load_config(storage).await?;
    if !created {
        spec.matches(&config).map_err(|why| {
            Error::new(
                ErrorKind::InvalidArgument,
                format!("a different Hudi table exists at {}: {why}", storage.uri()),
            )
        })?;
    }
    // The table exists before its metadata table does, and declares it once it exists: a
    // creation that stops midway leaves a table without one. (Not only for a table created
    // here: a create that finds the same properties takes them as its own.)
    if spec.metadata_table && !config.lists_files_in_metadata_table() {
        return crate::mdt::writer::create_for_existing(storage, "create_table", lock_options).await;
    }
    Ok(config)
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
            metadata_table: false,
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

    /// `(id, name)` of every row of the latest snapshot, sorted.
    pub async fn names(&self) -> Vec<(i64, String)> {
        names(&self.storage).await
    }
}

/// `(id, name)` of every row of the latest snapshot of a [`TestTable`] at `storage`, sorted.
#[cfg(test)]
pub(crate) async fn names(storage: &Storage) -> Vec<(i64, String)> {
    use arrow::array::{Int64Array, StringArray};
    let reader = crate::read::TableReader::open(storage.clone()).await.unwrap();
    let mut out = Vec::new();
    for batch in reader.read_snapshot(None).await.unwrap() {
        let ids = batch.column_by_name("id").unwrap().as_any().downcast_ref::<Int64Array>().unwrap().clone();
        let names = batch.column_by_name("name").unwrap().as_any().downcast_ref::<StringArray>().unwrap().clone();
        out.extend((0..batch.num_rows()).map(|i| (ids.value(i), names.value(i).to_owned())));
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field};

    fn memory(path: &str) -> Storage {
        Storage::open(&crate::storage::StorageUri::parse(&format!("memory:///{path}")).unwrap(), &Default::default()).unwrap()
    }

    fn spec(name: &str) -> NewTable {
        NewTable {
            name: name.into(),
            schema: Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("ts", DataType::Int64, true)]),
            record_key_fields: vec!["id".into()],
            ordering_field: Some("ts".into()),
            partition_fields: vec![],
            buckets: 2,
            merge_mode: MergeMode::EventTimeOrdering,
            metadata_table: false,
        }
    }

    /// Names in any script make tables that load again (checksum included), with the create
    /// schema Hudi would write for them.
    #[tokio::test]
    async fn tables_with_unicode_names_load_again() {
        for (i, name) in ["t\u{1F600}", "e\u{301}te\u{301}", "\u{5D8}\u{5D1}\u{5DC}\u{5D4}\u{200F}", "\u{8868}\u{683C}", "my-table"].iter().enumerate() {
            let storage = memory(&format!("unicode-{i}"));
            let created = create_table(&storage, &spec(name)).await.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(created.name, *name);
            let loaded = table::load_config(&storage).await.unwrap();
            assert_eq!(loaded.name, *name);
            let avro: serde_json::Value = serde_json::from_str(loaded.create_schema.as_deref().unwrap()).unwrap();
            let avro_name = crate::write::schema::avro_name(name);
            assert_eq!(avro["name"], format!("{avro_name}_record"));
            assert_eq!(avro["namespace"], format!("hoodie.{avro_name}"));
            // Creating it again finds the same table.
            create_table(&storage, &spec(name)).await.unwrap();
        }
    }

    /// Control characters in a table name, a column name, a key, partition or ordering field,
    /// or the location are refused before anything is written; so is an empty name.
    #[tokio::test]
    async fn control_characters_and_empty_names_are_refused() {
        let changed = |change: &dyn Fn(&mut NewTable)| {
            let mut spec = spec("t");
            change(&mut spec);
            spec
        };
        let with_column = |name: &str| {
            let name = name.to_owned();
            changed(&move |s| s.schema = Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("ts", DataType::Int64, true), Field::new(name.clone(), DataType::Utf8, true)]))
        };
        let cases = [
            ("newline in the name", spec("t\n1")),
            ("tab in the name", spec("t\t1")),
            ("DEL in the name", spec("t\u{7f}")),
            ("C1 control in the name", spec("t\u{85}")),
            ("empty name", spec("")),
            ("newline in a column", with_column("a\nb")),
            ("empty column name", with_column("")),
            ("carriage return in the ordering field", changed(&|s| s.ordering_field = Some("ts\r".into()))),
            ("NUL in a partition field", changed(&|s| s.partition_fields = vec!["p\0".into()])),
            ("newline in a primary key column", changed(&|s| s.record_key_fields = vec!["id\n".into()])),
        ];
        for (i, (what, spec)) in cases.into_iter().enumerate() {
            let storage = memory(&format!("control-{i}"));
            let err = create_table(&storage, &spec).await.map(|_| ()).expect_err(what);
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{what}: {err}");
            assert!(!err.to_string().contains(['\n', '\r', '\t', '\0']), "{what}: the message is one line: {err:?}");
            assert!(storage.get_if_exists(PROPERTIES_FILE).await.unwrap().is_none(), "{what}: nothing is written");
        }

        // A location whose path has a control character (percent-encoded: a raw one is no URI).
        let uri = crate::storage::StorageUri::parse("memory:///control-path/a%0Ab").unwrap();
        let storage = Storage::open(&uri, &Default::default()).unwrap();
        let err = create_table(&storage, &spec("t")).await.map(|_| ()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(storage.get_if_exists(PROPERTIES_FILE).await.unwrap().is_none());
    }
}
