//! Incremental reads of the Spark-written fixtures agree with their time travel: between any
//! two completed writes, a changed key is `U` exactly when the snapshot at the start has it in
//! the same file group, and `D` exactly when the snapshot at the start has it there and the one
//! at the end does not. (A key is its file group's: Spark's `insert` may write a second row of a
//! key into another file group, which is then a new row, not an update of the first.)

mod common;

use std::collections::BTreeSet;

use arrow::array::{Array, AsArray, RecordBatch};
use common::customers::local;
use engine::read::{ChangeRange, TableReader};

/// A row's identity: record key, partition path and file group.
type RowKey = (String, String, String);

/// The identity and commit time of each row of `batches`.
fn keyed_rows(batches: &[RecordBatch]) -> Vec<(RowKey, String)> {
    let mut out = Vec::new();
    for batch in batches {
        let column = |name: &str| batch.column_by_name(name).unwrap().as_string::<i32>().clone();
        let (keys, partitions, times) = (column("_hoodie_record_key"), column("_hoodie_partition_path"), column("_hoodie_commit_time"));
        let files = column("_hoodie_file_name");
        for row in 0..batch.num_rows() {
            let partition = if partitions.is_valid(row) { partitions.value(row).to_owned() } else { String::new() };
            // A base file's name, or a log record's file id.
            let file_group = files.value(row).trim_start_matches('.').split('_').next().unwrap().to_owned();
            out.push(((keys.value(row).to_owned(), partition, file_group), times.value(row).to_owned()));
        }
    }
    out
}

#[tokio::test]
async fn every_incremental_range_of_every_fixture_agrees_with_time_travel() {
    let mut checked = 0;
    for zip in common::fixture_zips() {
        let (_dir, base) = common::unpack(&zip);
        let reader = TableReader::open(local(&base)).await.unwrap();
        let writes: Vec<_> = reader.timeline().completed_writes().cloned().collect();
        // Tables without meta fields have no incremental reads; an overwrite replaces whole
        // file groups, which change reads do not compare key by key.
        if !reader.config().populate_meta_fields || writes.iter().any(|w| w.action == "replacecommit") {
            continue;
        }
        let completion = |i: usize| writes[i].completion.clone().unwrap_or_else(|| writes[i].timestamp.clone());
        let mut snapshots = vec![Vec::new()];
        for write in &writes {
            snapshots.push(keyed_rows(&reader.read_snapshot(Some(&write.timestamp)).await.unwrap()));
        }
        for start in 0..writes.len() {
            for end in start + 1..=writes.len() {
                let range = ChangeRange { start: (start > 0).then(|| completion(start - 1)), end: Some(completion(end - 1)) };
                let in_range: BTreeSet<&str> = writes[start..end].iter().map(|w| w.timestamp.as_str()).collect();
                let before: BTreeSet<&RowKey> = snapshots[start].iter().map(|(key, _)| key).collect();
                let after = &snapshots[end];
                let mut expected: Vec<((String, String), &str)> = after
                    .iter()
                    .filter(|(_, time)| in_range.contains(time.as_str()))
                    .map(|(key, _)| ((key.0.clone(), key.1.clone()), if before.contains(key) { "U" } else { "I" }))
                    .collect();
                let alive_after: BTreeSet<&RowKey> = after.iter().map(|(key, _)| key).collect();
                expected.extend(before.difference(&alive_after).map(|key| ((key.0.clone(), key.1.clone()), "D")));
                expected.sort();

                let mut got = Vec::new();
                for batch in reader.read_changes(&range, true).await.unwrap() {
                    let column = |name: &str| batch.column_by_name(name).unwrap().as_string::<i32>().clone();
                    let (keys, partitions, operations) = (column("_hoodie_record_key"), column("_hoodie_partition_path"), column("_hoodie_operation"));
                    for row in 0..batch.num_rows() {
                        let partition = if partitions.is_valid(row) { partitions.value(row).to_owned() } else { String::new() };
                        let operation = match operations.value(row) {
                            "I" => "I",
                            "U" => "U",
                            "D" => "D",
                            other => panic!("operation {other}"),
                        };
                        got.push(((keys.value(row).to_owned(), partition), operation));
                    }
                }
                got.sort();
                assert_eq!(got, expected, "{}: changes after write {start} up to write {end}", zip.display());
                checked += 1;
            }
        }
    }
    assert!(checked > 20, "only {checked} ranges checked");
}

/// A completed clean in layout 1 (`<instant>.clean`, Avro as Hudi writes it) that kept the
/// files of commits from `earliest` on.
fn write_clean(base: &std::path::Path, instant: &str, earliest: &str) {
    use apache_avro::types::{Record, Value};
    // HoodieCleanMetadata's fields (hudi-common/src/main/avro), partitions left empty.
    let schema = apache_avro::Schema::parse_str(
        r#"{"type": "record", "name": "HoodieCleanMetadata", "namespace": "org.apache.hudi.avro.model", "fields": [
            {"name": "policy", "type": "string", "default": ""},
            {"name": "startCleanTime", "type": "string"},
            {"name": "timeTakenInMillis", "type": "long"},
            {"name": "totalFilesDeleted", "type": "int"},
            {"name": "earliestCommitToRetain", "type": "string"},
            {"name": "lastCompletedCommitTimestamp", "type": "string", "default": ""},
            {"name": "partitionMetadata", "type": {"type": "map", "values": {"type": "record", "name": "HoodieCleanPartitionMetadata", "fields": [
                {"name": "partitionPath", "type": "string"},
                {"name": "policy", "type": "string"},
                {"name": "deletePathPatterns", "type": {"type": "array", "items": "string"}},
                {"name": "successDeleteFiles", "type": {"type": "array", "items": "string"}},
                {"name": "failedDeleteFiles", "type": {"type": "array", "items": "string"}}]}}},
            {"name": "version", "type": ["int", "null"], "default": 1}]}"#,
    )
    .unwrap();
    let mut record = Record::new(&schema).unwrap();
    record.put("policy", "KEEP_LATEST_COMMITS");
    record.put("startCleanTime", instant);
    record.put("timeTakenInMillis", Value::Long(12));
    record.put("totalFilesDeleted", Value::Int(1));
    record.put("earliestCommitToRetain", earliest);
    record.put("lastCompletedCommitTimestamp", earliest);
    record.put("partitionMetadata", Value::Map(Default::default()));
    record.put("version", Value::Union(0, Box::new(Value::Int(2))));
    let mut writer = apache_avro::Writer::new(&schema, Vec::new());
    writer.append(record).unwrap();
    std::fs::write(base.join(format!(".hoodie/{instant}.clean.requested")), b"").unwrap();
    std::fs::write(base.join(format!(".hoodie/{instant}.clean")), writer.into_inner().unwrap()).unwrap();
}

#[tokio::test]
async fn changes_from_before_what_a_clean_kept_are_an_error_not_inserts() {
    // Two commits; the second rewrote Alice's file group (copy-on-write).
    let (first, second) = ("20240418173213674", "20240418173235694");
    let (_dir, base) = common::unpack(std::path::Path::new("sample_table/cow/v6_complexkeygen_hivestyle.zip"));
    let older = base.join(format!("byteField=10/shortField=300/a22e8257-e249-45e9-ba46-115bc85adcba-0_1-140-199_{first}.parquet"));
    let since_first = ChangeRange { start: Some(first.to_owned()), end: None };
    let operation_of_alice = |batches: &[RecordBatch]| {
        batches.iter().find_map(|b| {
            let keys = b.column_by_name("_hoodie_record_key").unwrap().as_string::<i32>();
            let row = (0..b.num_rows()).find(|&r| keys.value(r) == "id:1,name:Alice")?;
            Some(b.column_by_name("_hoodie_operation").unwrap().as_string::<i32>().value(row).to_owned())
        })
    };
    let reader = TableReader::open(local(&base)).await.unwrap();
    assert_eq!(operation_of_alice(&reader.read_changes(&since_first, true).await.unwrap()).as_deref(), Some("U"));
    let rows = |batches: Vec<RecordBatch>| batches.iter().map(RecordBatch::num_rows).sum::<usize>();
    let latest = rows(reader.read_snapshot(None).await.unwrap());

    // A cleaner removes the older version of the group and records that it kept `second` on.
    std::fs::remove_file(&older).unwrap();
    write_clean(&base, "20240418173240000", second);
    let reader = TableReader::open(local(&base)).await.unwrap();
    let error = reader.read_changes(&since_first, true).await.unwrap_err();
    assert_eq!(error.kind(), engine::error::ErrorKind::NotFound, "{error}");
    assert!(error.to_string().contains(&format!("kept the files of commits from {second} on")), "{error}");
    // Reads that need nothing the clean removed go on.
    assert_eq!(rows(reader.read_snapshot(None).await.unwrap()), latest);
    let since_second = ChangeRange { start: Some(second.to_owned()), end: None };
    assert!(reader.read_changes(&since_second, true).await.unwrap().is_empty());
}

/// Every row of `batches` as text, sorted.
fn as_text(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows: Vec<String> = common::expected::rows_as_expected_json(batches).iter().map(|r| r.to_string()).collect();
    rows.sort();
    rows
}

#[tokio::test]
async fn commits_moved_to_the_archived_timeline_still_count() {
    // Archival moves the oldest completed instants out of the active timeline; their files stay
    // and are committed (Hudi: an instant before the active timeline starts is archived).
    let mut archived = 0;
    for zip in common::fixture_zips() {
        let (_dir, base) = common::unpack(&zip);
        let reader = TableReader::open(local(&base)).await.unwrap();
        let instants = reader.timeline().instants().to_vec();
        // The first instant must be a completed write and not the only one.
        let Some(first) = instants.first().filter(|i| i.is_completed_write() && instants.len() > 1) else { continue };
        let snapshot = as_text(&reader.read_snapshot(None).await.unwrap());
        let all_changes = reader.config().populate_meta_fields.then_some(ChangeRange::default());
        let changes = match &all_changes {
            Some(range) => Some(as_text(&reader.read_changes(range, true).await.unwrap())),
            None => None,
        };
        let timeline_dir = base.join(&reader.timeline().dir()["".len()..]);
        for entry in std::fs::read_dir(&timeline_dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with(&format!("{}.", first.timestamp)) || name.starts_with(&format!("{}_", first.timestamp)) {
                std::fs::remove_file(&path).unwrap();
            }
        }
        let reader = TableReader::open(local(&base)).await.unwrap();
        assert!(reader.timeline().get(&first.timestamp).is_none());
        assert_eq!(as_text(&reader.read_snapshot(None).await.unwrap()), snapshot, "{}: the snapshot", zip.display());
        if let (Some(range), Some(changes)) = (&all_changes, changes) {
            assert_eq!(as_text(&reader.read_changes(range, true).await.unwrap()), changes, "{}: all changes", zip.display());
        }
        archived += 1;
    }
    assert!(archived > 10, "only {archived} fixtures had an instant to archive");
}
