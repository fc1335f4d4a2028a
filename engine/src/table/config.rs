//! `.hoodie/hoodie.properties` as a typed table configuration (hudi-format.md §1.3, §1.4).

use crate::error::{Error, ErrorKind, Result};
use crate::table::properties::Properties;
use crate::{READ_TABLE_VERSIONS, WRITE_TABLE_VERSION};

/// Property keys the engine reads or writes.
pub mod keys {
    pub const NAME: &str = "hoodie.table.name";
    pub const DATABASE: &str = "hoodie.database.name";
    pub const TYPE: &str = "hoodie.table.type";
    pub const VERSION: &str = "hoodie.table.version";
    pub const INITIAL_VERSION: &str = "hoodie.table.initial.version";
    pub const TIMELINE_LAYOUT: &str = "hoodie.timeline.layout.version";
    pub const TIMELINE_PATH: &str = "hoodie.timeline.path";
    pub const TIMELINE_HISTORY_PATH: &str = "hoodie.timeline.history.path";
    pub const ARCHIVE_FOLDER: &str = "hoodie.archivelog.folder";
    pub const RECORD_KEY_FIELDS: &str = "hoodie.table.recordkey.fields";
    pub const PRECOMBINE_FIELD: &str = "hoodie.table.precombine.field";
    pub const ORDERING_FIELDS: &str = "hoodie.table.ordering.fields";
    pub const PARTITION_FIELDS: &str = "hoodie.table.partition.fields";
    pub const KEYGEN_CLASS: &str = "hoodie.table.keygenerator.class";
    pub const KEYGEN_TYPE: &str = "hoodie.table.keygenerator.type";
    pub const BASE_FILE_FORMAT: &str = "hoodie.table.base.file.format";
    pub const CREATE_SCHEMA: &str = "hoodie.table.create.schema";
    pub const POPULATE_META_FIELDS: &str = "hoodie.populate.meta.fields";
    pub const HIVE_STYLE_PARTITIONING: &str = "hoodie.datasource.write.hive_style_partitioning";
    pub const URL_ENCODE_PARTITIONS: &str = "hoodie.datasource.write.partitionpath.urlencode";
    pub const DROP_PARTITION_COLUMNS: &str = "hoodie.datasource.write.drop.partition.columns";
    pub const MERGE_MODE: &str = "hoodie.record.merge.mode";
    pub const TIMELINE_TIMEZONE: &str = "hoodie.table.timeline.timezone";
    pub const METADATA_PARTITIONS: &str = "hoodie.table.metadata.partitions";
    pub const CHECKSUM: &str = "hoodie.table.checksum";
    /// Set on tables this engine created (Hudi keeps keys it does not know): the ones a
    /// PostgreSQL server maintains unless told otherwise.
    pub const CREATED_BY: &str = "hoodie.table.created.by";
}

/// The value of [`keys::CREATED_BY`] on tables this engine created.
pub const CREATOR: &str = "pg_hudi";

/// Copy-on-write or merge-on-read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableType {
    CopyOnWrite,
    MergeOnRead,
}

/// How records of one key are merged (`hoodie.record.merge.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MergeMode {
    /// The record with the greatest ordering value wins (ties: the later write).
    EventTimeOrdering,
    /// The latest write wins.
    CommitTimeOrdering,
    /// Event-time ordering, except that a NULL in the winning version keeps the other
    /// version's value of that column (Hudi's `PartialUpdateAvroPayload`): several writers
    /// may each fill some columns of the same keys.
    PartialUpdate,
    /// A user-defined merger; not something this engine can reproduce.
    Custom,
}

/// The payload class of [`MergeMode::PartialUpdate`] tables.
pub const PARTIAL_UPDATE_PAYLOAD: &str = "org.apache.hudi.common.model.PartialUpdateAvroPayload";

/// Which time zone instant times are written in (`hoodie.table.timeline.timezone`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimelineTimezone {
    /// The writer's local time zone: Java's default.
    Local,
    Utc,
}

/// The typed configuration of one table, plus every raw property for keys not modelled here.
#[derive(Debug, Clone, PartialEq)]
pub struct TableConfig {
    pub name: String,
    pub database: Option<String>,
    pub table_type: TableType,
    /// `hoodie.table.version`: 6, 8 or 9 for tables this engine reads.
    pub version: u32,
    /// 1 (flat `.hoodie/`, no completion times) or 2 (`.hoodie/timeline/`).
    pub timeline_layout: u32,
    /// Timeline directory relative to the base path: `.hoodie` or `.hoodie/timeline`.
    pub timeline_dir: String,
    pub record_key_fields: Vec<String>,
    /// Ordering (precombine) fields; empty when the table has none.
    pub ordering_fields: Vec<String>,
    /// Partition fields without any `:TYPE` suffix of the custom key generator.
    pub partition_fields: Vec<String>,
    /// `hoodie.table.keygenerator.type` (v8+) or the key generator class name (v6).
    pub key_generator: Option<String>,
    /// `PARQUET` unless the table says otherwise.
    pub base_file_format: String,
    /// Avro schema (JSON) of the data columns, without meta fields.
    pub create_schema: Option<String>,
    pub populate_meta_fields: bool,
    pub hive_style_partitioning: bool,
    pub url_encode_partitions: bool,
    pub drop_partition_columns: bool,
    pub merge_mode: MergeMode,
    pub timeline_timezone: TimelineTimezone,
    /// Partitions of the metadata table, when the table has one (`files` enables listings).
    pub metadata_partitions: Vec<String>,
    pub properties: Properties,
}

/// `hoodie.table.checksum`: unsigned CRC-32 of `"<database>.<table>"` (database may be empty).
pub fn table_checksum(database: Option<&str>, table: &str) -> u32 {
    crc32fast::hash(format!("{}.{}", database.unwrap_or(""), table).as_bytes())
}

fn list(value: Option<&str>) -> Vec<String> {
    value
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

impl TableConfig {
    /// Whether the table's data files are listed in its metadata table (table version 8 and
    /// later, `files` among `hoodie.table.metadata.partitions`): Hudi 1.x readers list them
    /// there, and a writer must record its files there too.
    pub fn lists_files_in_metadata_table(&self) -> bool {
        self.version >= 8 && self.metadata_partitions.iter().any(|p| p == "files")
    }

    /// Whether this engine created the table ([`keys::CREATED_BY`]).
    pub fn created_here(&self) -> bool {
        self.properties.get(keys::CREATED_BY) == Some(CREATOR)
    }

    /// Validates and types the properties read from `file` (named in every error).
    pub fn from_properties(properties: Properties, file: &str) -> Result<TableConfig> {
        let corrupt =
            |what: String| Error::new(ErrorKind::Corrupt, format!("{file}: {what}"));
        let required = |key: &str| {
            properties
                .get(key)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| corrupt(format!("required property {key} is missing")))
        };
        let flag = |key: &str, default: bool| -> Result<bool> {
            match properties.get(key).map(str::trim) {
                None | Some("") => Ok(default),
                Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
                Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
                Some(v) => Err(corrupt(format!("{key} is \"{v}\", expected true or false"))),
            }
        };

        let name = required(keys::NAME)?.to_owned();
        let database = properties.get(keys::DATABASE).filter(|d| !d.is_empty()).map(str::to_owned);
        if let Some(stored) = properties.get(keys::CHECKSUM) {
            let expected = table_checksum(database.as_deref(), &name);
            if stored.trim().parse::<u64>().ok() != Some(u64::from(expected)) {
                return Err(corrupt(format!(
                    "checksum mismatch: {} is {stored} but CRC-32 of \"{}.{name}\" is {expected} \
                     (the file may be half-written)",
                    keys::CHECKSUM,
                    database.as_deref().unwrap_or("")
                )));
            }
        }

        let table_type = match required(keys::TYPE)? {
            "COPY_ON_WRITE" => TableType::CopyOnWrite,
            "MERGE_ON_READ" => TableType::MergeOnRead,
            other => return Err(corrupt(format!("unknown {} \"{other}\"", keys::TYPE))),
        };
        let version_text = required(keys::VERSION)?;
        let version: u32 = version_text
            .trim()
            .parse()
            .map_err(|_| corrupt(format!("{} \"{version_text}\" is not a number", keys::VERSION)))?;
        if !READ_TABLE_VERSIONS.contains(&version) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{file}: Hudi table version {version} is not supported (supported: {:?})",
                    READ_TABLE_VERSIONS
                ),
            ));
        }
        let timeline_layout = match properties.get(keys::TIMELINE_LAYOUT).map(str::trim) {
            Some("1") => 1,
            Some("2") => 2,
            None | Some("") => {
                if version >= WRITE_TABLE_VERSION { 2 } else { 1 }
            }
            Some(other) => {
                return Err(corrupt(format!("unknown {} \"{other}\"", keys::TIMELINE_LAYOUT)))
            }
        };
        let timeline_dir = match timeline_layout {
            1 => ".hoodie".to_owned(),
            _ => format!(".hoodie/{}", properties.get(keys::TIMELINE_PATH).unwrap_or("timeline")),
        };

        // v9 renamed the precombine field to ordering fields.
        let ordering_fields = match properties.get(keys::ORDERING_FIELDS) {
            Some(v) if !v.trim().is_empty() => list(Some(v)),
            _ => list(properties.get(keys::PRECOMBINE_FIELD)),
        };
        let partition_fields = list(properties.get(keys::PARTITION_FIELDS))
            .into_iter()
            .map(|f| f.split(':').next().unwrap_or_default().to_owned())
            .collect();
        let merge_mode = match properties.get(keys::MERGE_MODE).map(str::trim) {
            Some("EVENT_TIME_ORDERING") => MergeMode::EventTimeOrdering,
            Some("COMMIT_TIME_ORDERING") => MergeMode::CommitTimeOrdering,
            Some("CUSTOM") if properties.get("hoodie.compaction.payload.class").map(str::trim) == Some(PARTIAL_UPDATE_PAYLOAD) => {
                MergeMode::PartialUpdate
            }
            Some("CUSTOM") => MergeMode::Custom,
            // v6 tables have no merge mode: the payload decides; with an ordering field that is
            // event-time ordering, without one the latest write wins.
            None | Some("") if !ordering_fields.is_empty() => MergeMode::EventTimeOrdering,
            None | Some("") => MergeMode::CommitTimeOrdering,
            Some(other) => return Err(corrupt(format!("unknown {} \"{other}\"", keys::MERGE_MODE))),
        };
        let timeline_timezone = match properties.get(keys::TIMELINE_TIMEZONE).map(str::trim) {
            Some(tz) if tz.eq_ignore_ascii_case("UTC") => TimelineTimezone::Utc,
            _ => TimelineTimezone::Local,
        };

        Ok(TableConfig {
            name,
            database,
            table_type,
            version,
            timeline_layout,
            timeline_dir,
            record_key_fields: list(properties.get(keys::RECORD_KEY_FIELDS)),
            ordering_fields,
            partition_fields,
            key_generator: properties
                .get(keys::KEYGEN_TYPE)
                .or(properties.get(keys::KEYGEN_CLASS))
                .filter(|v| !v.is_empty())
                .map(str::to_owned),
            base_file_format: properties
                .get(keys::BASE_FILE_FORMAT)
                .filter(|v| !v.is_empty())
                .unwrap_or("PARQUET")
                .to_ascii_uppercase(),
            create_schema: properties.get(keys::CREATE_SCHEMA).map(str::to_owned),
            populate_meta_fields: flag(keys::POPULATE_META_FIELDS, true)?,
            hive_style_partitioning: flag(keys::HIVE_STYLE_PARTITIONING, false)?,
            url_encode_partitions: flag(keys::URL_ENCODE_PARTITIONS, false)?,
            drop_partition_columns: flag(keys::DROP_PARTITION_COLUMNS, false)?,
            merge_mode,
            timeline_timezone,
            metadata_partitions: list(properties.get(keys::METADATA_PARTITIONS)),
            properties,
        })
    }

    pub fn is_partitioned(&self) -> bool {
        !self.partition_fields.is_empty()
    }

    /// For unit tests: a version 8 merge-on-read table `t` keyed by `id`, partitioned by
    /// `partition_fields`, with `extra` properties on top.
    #[cfg(test)]
    pub(crate) fn for_tests(partition_fields: &str, extra: &[(&str, &str)]) -> TableConfig {
        let mut p = Properties::new();
        let base = [(keys::NAME, "t"), (keys::TYPE, "MERGE_ON_READ"), (keys::VERSION, "8"), (keys::RECORD_KEY_FIELDS, "id")];
        for (k, v) in base.iter().chain(&[(keys::PARTITION_FIELDS, partition_fields)]).chain(extra) {
            p.set(*k, *v);
        }
        TableConfig::from_properties(p, "t").expect("a valid test configuration")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v8_properties() -> Properties {
        let mut p = Properties::new();
        p.set(keys::NAME, "v8_trips_8i3u1d");
        p.set(keys::DATABASE, "default");
        p.set(keys::TYPE, "MERGE_ON_READ");
        p.set(keys::VERSION, "8");
        p.set(keys::TIMELINE_LAYOUT, "2");
        p.set(keys::TIMELINE_PATH, "timeline");
        p.set(keys::RECORD_KEY_FIELDS, "uuid");
        p.set(keys::PRECOMBINE_FIELD, "ts");
        p.set(keys::PARTITION_FIELDS, "city");
        p.set(keys::MERGE_MODE, "EVENT_TIME_ORDERING");
        p.set(keys::CHECKSUM, "1197752875");
        p
    }

    #[test]
    fn checksum_matches_the_values_in_hudi_format_md() {
        assert_eq!(table_checksum(Some("default"), "v6_trips_8i1u"), 3843273058);
        assert_eq!(table_checksum(Some("default"), "v8_trips_8i3u1d"), 1197752875);
    }

    /// CRC-32 of the UTF-8 bytes, as Java 17 computed them (`CRC32` over
    /// `("default." + name).getBytes(UTF_8)`, which Hudi's `generateChecksum` does), for names
    /// outside ASCII: emoji, combining marks, right-to-left, CJK, and a lone surrogate (which
    /// Java encodes as `?`).
    #[test]
    fn checksum_matches_java_for_any_unicode_name() {
        for (name, java) in [
            ("t\u{1F600}", 3340849440),
            ("e\u{301}te\u{301}", 1803562606),
            ("\u{62C}\u{62F}\u{648}\u{644}", 3540188995),
            ("\u{5D8}\u{5D1}\u{5DC}\u{5D4}", 3247282665),
            ("\u{8868}\u{683C}", 3804004368),
            ("t?", 983641386),
        ] {
            assert_eq!(table_checksum(Some("default"), name), java, "{name}");
        }
    }

    /// `hoodie.properties` as Java writes it for a name outside the Basic Multilingual Plane
    /// (a surrogate pair of escapes) loads, and so does one with a lone surrogate.
    #[test]
    fn loads_java_written_names_with_surrogates() {
        for (escaped, name, checksum) in [("t\\uD83D\\uDE00", "t\u{1F600}", 3340849440u32), ("t\\uD83D", "t?", 983641386)] {
            let text = format!(
                "#Updated at 2025-12-20T21:01:18Z\nhoodie.database.name=default\nhoodie.table.name={escaped}\n\
                 hoodie.table.type=MERGE_ON_READ\nhoodie.table.version=8\nhoodie.table.checksum={checksum}\n"
            );
            let c = TableConfig::from_properties(Properties::parse(&text), "f").unwrap();
            assert_eq!(c.name, name);
        }
    }

    /// Names in any script survive writing `hoodie.properties` and reading it back, checksum
    /// included.
    #[test]
    fn unicode_names_round_trip_through_the_file() {
        for name in ["t\u{1F600}", "\u{1F600}", "e\u{301}te\u{301}", "\u{62C}\u{62F}\u{648}\u{644}_\u{200F}1", "\u{8868}\u{683C}", "\u{10FFFF}"] {
            let mut p = v8_properties();
            p.set(keys::NAME, name);
            p.set(keys::CHECKSUM, table_checksum(Some("default"), name).to_string());
            let text = p.to_text(&["Created by pg_hudi"]);
            assert!(text.is_ascii());
            let c = TableConfig::from_properties(Properties::parse(&text), "f").unwrap();
            assert_eq!(c.name, name);
        }
    }

    /// Every truncation of a `hoodie.properties`, and every one-byte change of it, loads or is
    /// an error; none panics.
    #[test]
    fn damaged_properties_files_are_errors_not_panics() {
        let mut p = v8_properties();
        p.set(keys::CREATE_SCHEMA, r#"{"type":"record","name":"r","fields":[{"name":"a=b:c","type":"long"}]}"#);
        p.set(keys::NAME, "t\u{1F600}\\ x");
        p.set(keys::CHECKSUM, table_checksum(Some("default"), "t\u{1F600}\\ x").to_string());
        let text = p.to_text(&["Updated at 2025-12-20T21:01:18Z"]).into_bytes();
        let mut damaged: Vec<Vec<u8>> = (0..text.len()).map(|n| text[..n].to_vec()).collect();
        for i in 0..text.len() {
            for byte in [b'\\', b'=', b'\n', b'\r', b'u', b' ', 0x00, 0xe9] {
                let mut copy = text.clone();
                copy[i] = byte;
                damaged.push(copy);
            }
        }
        for bytes in &damaged {
            let text: String = bytes.iter().map(|&b| char::from(b)).collect();
            let loaded = std::panic::catch_unwind(|| TableConfig::from_properties(Properties::parse(&text), "f").map(|_| ()));
            let loaded = loaded.unwrap_or_else(|_| panic!("loading panicked: {text:?}"));
            if let Err(e) = loaded {
                assert!(matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::Unsupported), "{e}");
            }
        }
    }

    #[test]
    fn types_a_v8_mor_table() {
        let c = TableConfig::from_properties(v8_properties(), "hoodie.properties").unwrap();
        assert_eq!(c.table_type, TableType::MergeOnRead);
        assert_eq!((c.version, c.timeline_layout), (8, 2));
        assert_eq!(c.timeline_dir, ".hoodie/timeline");
        assert_eq!(c.record_key_fields, ["uuid"]);
        assert_eq!(c.ordering_fields, ["ts"]);
        assert_eq!(c.partition_fields, ["city"]);
        assert_eq!(c.merge_mode, MergeMode::EventTimeOrdering);
        assert_eq!(c.base_file_format, "PARQUET");
        assert!(c.populate_meta_fields);
    }

    #[test]
    fn checksum_mismatch_is_corrupt_and_names_the_file() {
        let mut p = v8_properties();
        p.set(keys::CHECKSUM, "12345");
        let err = TableConfig::from_properties(p, "file:///lake/t/.hoodie/hoodie.properties")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt);
        assert!(err.to_string().starts_with("file:///lake/t/.hoodie/hoodie.properties: checksum"));
    }

    #[test]
    fn unsupported_version_and_missing_keys() {
        let mut p = v8_properties();
        p.set(keys::VERSION, "5");
        let err = TableConfig::from_properties(p, "f").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);

        let mut p = v8_properties();
        p.set(keys::TYPE, "");
        let err = TableConfig::from_properties(p, "f").unwrap_err();
        assert!(err.to_string().contains("hoodie.table.type is missing"), "{err}");
    }

    #[test]
    fn v9_ordering_fields_and_custom_partition_types() {
        let mut p = v8_properties();
        p.set(keys::VERSION, "9");
        p.set(keys::ORDERING_FIELDS, "txn_ts");
        p.set(keys::PARTITION_FIELDS, "ts:TIMESTAMP,region:SIMPLE");
        let c = TableConfig::from_properties(p, "f").unwrap();
        assert_eq!(c.ordering_fields, ["txn_ts"]);
        assert_eq!(c.partition_fields, ["ts", "region"]);
    }
}
