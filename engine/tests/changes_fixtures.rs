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
