//! Every fixture's `hoodie.properties` loads through the object store, passes its checksum and
//! agrees with what the fixture's name says about it.

mod common;


use engine::storage::{Storage, StorageUri};
use engine::table::{self, TableType};

#[tokio::test]
async fn every_fixture_config_loads_and_matches_its_name() {
    let zips = common::fixture_zips();
    assert!(zips.len() >= 30, "expected the 33 shipped fixtures, found {}", zips.len());
    for zip in zips {
        let (_dir, base) = common::unpack(&zip);
        let uri = StorageUri::parse(&format!("file://{}", base.display())).unwrap();
        let storage = Storage::open(&uri, &Default::default()).unwrap();
        let config = table::load_config(&storage)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", zip.display()));

        let stem = zip.file_stem().unwrap().to_str().unwrap();
        let version: u32 = stem[1..2].parse().unwrap();
        assert_eq!(config.version, version, "{stem}");
        assert_eq!(config.timeline_layout, if version == 6 { 1 } else { 2 }, "{stem}");
        let components: Vec<_> = zip.iter().map(|c| c.to_str().unwrap()).collect();
        let expected_type = if components.contains(&"mor") {
            TableType::MergeOnRead
        } else {
            TableType::CopyOnWrite
        };
        assert_eq!(config.table_type, expected_type, "{stem}");
        assert!(!config.record_key_fields.is_empty(), "{stem} has record keys");
        // The create schema is the Avro record of the data columns.
        let schema: serde_json::Value =
            serde_json::from_str(config.create_schema.as_deref().unwrap()).unwrap();
        assert_eq!(schema["type"], "record", "{stem}");
        if stem.contains("nonpartitioned") {
            assert!(!config.is_partitioned(), "{stem}");
        }
        if stem.contains("no_metafields") {
            assert!(!config.populate_meta_fields, "{stem}");
        }
        // `txns_*_nometa` tables were written without a metadata table.
        if stem.contains("_nometa") {
            assert!(config.metadata_partitions.is_empty(), "{stem}");
        }
        if stem.ends_with("_meta") {
            assert!(config.metadata_partitions.iter().any(|p| p == "files"), "{stem}");
        }
        if stem.contains("_hivestyle") && !stem.contains("nonhivestyle") {
            assert!(config.hive_style_partitioning, "{stem}");
        }
    }
}

#[tokio::test]
async fn a_missing_table_is_not_found_and_a_tampered_one_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let uri = StorageUri::parse(&format!("file://{}", dir.path().display())).unwrap();
    let storage = Storage::open(&uri, &Default::default()).unwrap();
    let err = table::load_config(&storage).await.unwrap_err();
    assert_eq!(err.kind(), engine::ErrorKind::NotFound);
    assert!(err.to_string().contains("no Hudi table at"), "{err}");

    let (_fixture, base) = common::unpack(std::path::Path::new("sample_table/cow/v8_nonpartitioned.zip"));
    let file = base.join(".hoodie/hoodie.properties");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("hoodie.table.name=v8_nonpartitioned", "hoodie.table.name=renamed")).unwrap();
    let uri = StorageUri::parse(&format!("file://{}", base.display())).unwrap();
    let err = table::load_config(&Storage::open(&uri, &Default::default()).unwrap()).await.unwrap_err();
    assert_eq!(err.kind(), engine::ErrorKind::Corrupt);
    assert!(err.to_string().contains("hoodie.properties: checksum mismatch"), "{err}");
}
