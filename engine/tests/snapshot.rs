//! Every shipped fixture reads, as a latest snapshot, exactly the rows of its expected/ file
//! (written by the reference reader `hudi` 0.5.0).

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use engine::error::ErrorKind;
use engine::read::{ScanOptions, ScanStats, TableReader};
use engine::timeline::ReadBound;
use engine::storage::{Storage, StorageUri};

async fn open(base: &std::path::Path) -> TableReader {
    let uri = StorageUri::parse(&format!("file://{}", base.display())).unwrap();
    TableReader::open(Storage::open(&uri, &Default::default()).unwrap()).await.unwrap()
}

#[tokio::test]
async fn every_fixture_snapshot_matches_expected() {
    let mut failures = Vec::new();
    let zips = common::fixture_zips();
    for zip in &zips {
        let (_dir, base) = common::unpack(zip);
        let name = zip.display().to_string();
        let reader = match TableReader::open(Storage::open(
            &StorageUri::parse(&format!("file://{}", base.display())).unwrap(),
            &Default::default(),
        ).unwrap())
        .await
        {
            Ok(reader) => reader,
            Err(e) => {
                failures.push(format!("{name}: open: {e}"));
                continue;
            }
        };
        let batches = match reader.read_snapshot(None).await {
            Ok(batches) => batches,
            Err(e) => {
                failures.push(format!("{name}: read: {e}"));
                continue;
            }
        };
        let mut expected = common::expected::load_expected(zip);
        let mut actual = common::expected::rows_as_expected_json(&batches);
        if !reader.config().populate_meta_fields {
            // Without record keys the rows have no defined order: compare them as sets.
            let by_text = |a: &serde_json::Value, b: &serde_json::Value| a.to_string().cmp(&b.to_string());
            actual.sort_by(by_text);
            expected["rows"].as_array_mut().unwrap().sort_by(by_text);
        }
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| {
            common::expected::assert_rows_match(&name, &actual, &expected)
        })) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(message.chars().take(3000).collect());
        }
    }
    assert!(failures.is_empty(), "{} of {} fixtures differ:\n{}", failures.len(), zips.len(), failures.join("\n\n"));
}

#[tokio::test]
async fn schema_has_meta_fields_then_data_columns() {
    let (_dir, base) = common::unpack(std::path::Path::new("sample_table/cow/v8_nonpartitioned.zip"));
    let reader = open(&base).await;
    let names: Vec<_> = reader.schema().fields().iter().map(|f| f.name().as_str()).collect();
    let expected = common::expected::load_expected(std::path::Path::new("sample_table/cow/v8_nonpartitioned.zip"));
    let expected_columns: Vec<_> = expected["columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(names, expected_columns);
}

/// Filters skip partitions and row groups but never change the answer: every row that
/// matches is still returned, and projection leaves unrequested columns NULL.
#[tokio::test]
async fn pruning_keeps_every_matching_row() {
    use arrow::array::{Array, AsArray};
    use engine::read::filter::{Op, Predicate, Scalar, ScanFilter};
    use engine::read::{ScanOptions, ScanStats};

    let zip = std::path::Path::new("sample_table/cow/v8_simplekeygen_nonhivestyle.zip");
    let (_dir, base) = common::unpack(zip);
    let reader = open(&base).await;
    let bound = TableReader::snapshot_bound(None);
    let filter = ScanFilter {
        predicates: vec![Predicate::Compare { column: "byteField".into(), op: Op::Eq, value: Scalar::Int(10) }],
    };
    let options = ScanOptions { filter, columns: Some(vec!["id".into(), "byteField".into()]), ..Default::default() };
    let (slices, stats) = reader.pruned_slices(&bound, &options).await.unwrap();
    assert!(stats.partitions_kept < stats.partitions_total, "{stats:?}");
    assert_eq!(stats.slices_kept, slices.len());

    let mut read_stats = ScanStats::default();
    let mut ids = Vec::new();
    for slice in &slices {
        if let Some(batch) = reader.read_slice(slice, &bound, &options, &mut read_stats).await.unwrap() {
            let name = batch.column_by_name("name").unwrap();
            assert_eq!(name.null_count(), batch.num_rows(), "unrequested columns are NULL");
            let byte = batch.column_by_name("byteField").unwrap().as_primitive::<arrow::datatypes::Int32Type>();
            let id = batch.column_by_name("id").unwrap().as_primitive::<arrow::datatypes::Int32Type>();
            for i in 0..batch.num_rows() {
                if byte.value(i) == 10 {
                    ids.push(id.value(i));
                }
            }
        }
    }
    let all = reader.read_snapshot(None).await.unwrap();
    let mut expected = Vec::new();
    for batch in &all {
        let byte = batch.column_by_name("byteField").unwrap().as_primitive::<arrow::datatypes::Int32Type>();
        let id = batch.column_by_name("id").unwrap().as_primitive::<arrow::datatypes::Int32Type>();
        expected.extend((0..batch.num_rows()).filter(|&i| byte.value(i) == 10).map(|i| id.value(i)));
    }
    ids.sort();
    expected.sort();
    assert!(!expected.is_empty());
    assert_eq!(ids, expected);
}

#[tokio::test]
async fn read_ahead_returns_every_fixture_slice_in_order_as_read_inline() {
    use engine::read::prefetch::SliceScan;
    use engine::read::{ScanOptions, ScanStats, SliceQuery};

    for zip in common::fixture_zips() {
        let (_dir, base) = common::unpack(&zip);
        let reader = open(&base).await;
        let bound = TableReader::snapshot_bound(None);
        let slices = reader.slices(&bound).await.unwrap();
        let inline = reader.read_snapshot(None).await.unwrap();
        for depth in [0, 1, 3] {
            let query = SliceQuery::Snapshot(bound.clone());
            let mut scan =
                SliceScan::new(reader.clone(), query, ScanOptions::default(), slices.clone(), ScanStats::default(), depth);
            for pass in ["first", "after a restart"] {
                let mut batches = Vec::new();
                while let Some(rows) = scan.next().await {
                    batches.extend(rows.unwrap());
                }
                assert_eq!(batches, inline, "{} at depth {depth}, {pass} pass", zip.display());
                scan.restart();
            }
        }
    }
}

#[tokio::test]
async fn a_base_file_removed_after_listing_is_not_found_and_a_damaged_one_is_corrupt() {
    let (_dir, base) = common::unpack(std::path::Path::new("sample_table/cow/v6_nonpartitioned.zip"));
    let reader = open(&base).await;
    let slices = reader.slices(&ReadBound::Latest).await.unwrap();
    let reader = &reader;
    let read = |slice| async move { reader.read_slice(slice, &ReadBound::Latest, &ScanOptions::default(), &mut ScanStats::default()).await };
    assert!(read(&slices[0]).await.unwrap().is_some());
    // A cleaner (or a rollback) removed the file between the listing and the read.
    let path = slices[0].base_path().unwrap();
    std::fs::remove_file(base.join(&path)).unwrap();
    let error = read(&slices[0]).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    assert!(error.to_string().contains(&path), "{error}");
    // Bytes that are not Parquet (as many as the listing saw) are a corrupt file.
    std::fs::write(base.join(&path), vec![b'x'; slices[0].base_file.as_ref().unwrap().size as usize]).unwrap();
    let error = read(&slices[0]).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corrupt, "{error}");
}
