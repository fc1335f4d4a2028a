//! Point reads: a filter that fixes the record keys (`id = k`, `id IN (...)`,
//! `_hoodie_record_key = '...'`) reads only the data pages of the base file whose statistics
//! admit those keys, and only those keys' versions from the logs, in slices with logs too.
//! Checked against the whole snapshot over seeded random keys: same rows, same base positions
//! (what an UPDATE writes into its log blocks).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::customers::{local, read_rows, read_with_positions, rows, spec, writer, ReadRow};
use engine::read::filter::{Op, Predicate, Scalar, ScanFilter};
use engine::read::{ScanOptions, ScanStats, TableReader};
use engine::services::compaction::compact;
use engine::storage::{Storage, StorageUri};
use engine::timeline::ReadBound;
use engine::write::time::LockOptions;
use engine::write::{create_table, BaseFileRef, BaseRow, NewTable, Transaction};
use rand::{Rng, SeedableRng};

/// Rows of the table: four data pages (of 20,480 rows at most) in one file group.
const ROWS: i64 = 65_000;

/// `(id, name, base position)` of a read, sorted by id.
fn summary(rows: Vec<ReadRow>) -> Vec<(i64, String, Option<u64>)> {
    let mut out: Vec<_> = rows.into_iter().map(|r| (r.id, r.name, r.at.map(|at| at.position))).collect();
    out.sort();
    out
}

/// The rows a scan with `filter` returns (each of which must satisfy `keep`: the reader drops
/// the other keys' rows and versions), and how much of the base files it read.
async fn read_filtered(storage: &Storage, filter: ScanFilter, columns: Option<Vec<String>>, keep: impl Fn(i64) -> bool) -> (Vec<ReadRow>, ScanStats) {
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let options = ScanOptions { filter, columns, row_positions: true, ..Default::default() };
    let (slices, mut stats) = reader.pruned_slices(&ReadBound::Latest, &options).await.unwrap();
    let mut out = Vec::new();
    for slice in slices {
        let base = slice.base_file.as_ref().map(|b| {
            std::sync::Arc::new(BaseFileRef { partition: slice.partition.clone(), file_id: slice.file_id.clone(), instant: b.instant.clone() })
        });
        if let Some(batch) = reader.read_slice(&slice, &ReadBound::Latest, &options, &mut stats).await.unwrap() {
            let rows = read_rows(&batch, base.as_ref());
            assert!(rows.iter().all(|r| keep(r.id)), "rows of other keys: {:?}", rows.iter().map(|r| r.id).collect::<Vec<_>>());
            out.extend(rows);
        }
    }
    (out, stats)
}

/// A key filter of one of three shapes, and the ids it selects.
fn random_filter(rng: &mut rand::rngs::StdRng) -> (ScanFilter, Vec<i64>) {
    let id = |rng: &mut rand::rngs::StdRng| rng.random_range(0..ROWS + 100);
    let predicates_and_ids = match rng.random_range(0..3) {
        0 => {
            let k = id(rng);
            (vec![Predicate::Compare { column: "id".into(), op: Op::Eq, value: Scalar::Int(k) }], vec![k])
        }
        1 => {
            let ids: Vec<i64> = (0..rng.random_range(1..6)).map(|_| id(rng)).collect();
            (vec![Predicate::In { column: "id".into(), values: ids.iter().map(|&k| Scalar::Int(k)).collect() }], ids)
        }
        _ => {
            let k = id(rng);
            let value = Scalar::String(k.to_string());
            (vec![Predicate::Compare { column: "_hoodie_record_key".into(), op: Op::Eq, value }], vec![k])
        }
    };
    (ScanFilter { predicates: predicates_and_ids.0 }, predicates_and_ids.1)
}

/// Checks `cases` seeded random key filters against the whole snapshot, that a single key's
/// read decodes one data page of the base file (less than a third of its rows), and that a
/// read decodes only the log blocks that have versions of its keys (`blocks_with(ids)` of
/// them; how many blocks have which keys is kept per process after the first read).
async fn check_against_snapshot(storage: &Storage, seed: u64, cases: usize, blocks_with: impl Fn(&[i64]) -> usize) {
    let all = summary(read_with_positions(storage, None).await);
    let by_id: BTreeMap<i64, (String, Option<u64>)> = all.into_iter().map(|(id, name, at)| (id, (name, at))).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for case in 0..cases {
        let (filter, ids) = random_filter(&mut rng);
        // All columns, or the data columns only (the record keys are then read to select rows
        // alone).
        let columns = rng.random_bool(0.5).then(|| ["id", "name", "country", "ts"].map(String::from).to_vec());
        let (rows, stats) = read_filtered(storage, filter.clone(), columns, |id| ids.contains(&id)).await;
        let mut expected: Vec<_> = ids.iter().filter_map(|id| by_id.get(id).map(|(n, at)| (*id, n.clone(), *at))).collect();
        expected.sort();
        expected.dedup();
        assert_eq!(summary(rows), expected, "seed {seed}, case {case}: {filter:?}");
        assert_eq!(stats.log_blocks_read, blocks_with(&ids), "seed {seed}, case {case}: {filter:?}: {stats:?}");
        if ids.len() == 1 {
            let (read, total) = (stats.base_rows_read, stats.base_rows_total);
            assert!(total <= ROWS as u64 && read * 3 < ROWS as u64, "seed {seed}, case {case}: {filter:?} read {read} of {total} rows");
        }
    }
}

/// On the local file system a read decodes the record keys of the pages first, then the
/// other columns of the matching rows; on an object store (here the in-memory one) it decodes
/// the pages' rows whole and selects them (a request fewer).
#[tokio::test]
async fn key_filters_read_the_pages_and_versions_of_their_keys() {
    let seed = common::seed();
    let dir = tempfile::tempdir().unwrap();
    point_reads(local(dir.path()), seed).await;
    let uri = StorageUri::parse(&format!("memory:///point-reads-{seed}")).unwrap();
    point_reads(Storage::open(&uri, &Default::default()).unwrap(), seed).await;
}

async fn point_reads(storage: Storage, seed: u64) {
    let config = create_table(&storage, &NewTable { buckets: 1, ..spec() }).await.unwrap();
    let names: Vec<String> = (0..ROWS).map(|i| format!("c{i}")).collect();
    let data: Vec<(i64, &str, &str, i64)> = (0..ROWS).map(|i| (i, names[i as usize].as_str(), "nl", 10)).collect();
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&data)).await.unwrap();
    tx.commit().await.unwrap();
    compact(&storage, &writer(9), &LockOptions::default(), Duration::from_secs(60)).await.unwrap().pop().unwrap();

    // Base files only.
    check_against_snapshot(&storage, seed, 30, |_| 0).await;

    // Updates and deletes that name their base rows, and upserts that do not (existing keys
    // and keys only the logs have): the logs' versions of the keys asked for win as in a full
    // merge, and the base rows keep their positions.
    let before = read_with_positions(&storage, None).await;
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    let updated: Vec<&ReadRow> = before.iter().filter(|r| r.id % 11 == 0).collect();
    let new_names: Vec<String> = updated.iter().map(|r| format!("{}-u", r.name)).collect();
    let data: Vec<(i64, &str, &str, i64)> = updated.iter().zip(&new_names).map(|(r, n)| (r.id, n.as_str(), "nl", 20)).collect();
    let positions: Vec<Option<BaseRow>> = updated.iter().map(|r| r.at.clone()).collect();
    tx.upsert_with_positions(&rows(&data), &positions).await.unwrap();
    let deleted: Vec<&ReadRow> = before.iter().filter(|r| r.id % 13 == 0).collect();
    let data: Vec<(i64, &str, &str, i64)> = deleted.iter().map(|r| (r.id, r.name.as_str(), "nl", 30)).collect();
    let positions: Vec<Option<BaseRow>> = deleted.iter().map(|r| r.at.clone()).collect();
    tx.delete_rows_with_positions(&rows(&data), &positions).await.unwrap();
    tx.commit().await.unwrap();
    // One data block has the updated keys, one delete block the deleted ones (of the table's
    // rows: ids drawn above ROWS are in neither).
    let updates_and_deletes = |ids: &[i64]| {
        let existing = || ids.iter().filter(|id| **id < ROWS);
        usize::from(existing().any(|id| id % 11 == 0)) + usize::from(existing().any(|id| id % 13 == 0))
    };
    check_against_snapshot(&storage, seed + 1, 30, updates_and_deletes).await;

    let mut tx = Transaction::begin(storage.clone(), config, writer(1), LockOptions::default()).await.unwrap();
    let upserts: Vec<(i64, &str, &str, i64)> =
        (0..ROWS + 50).filter(|i| i % 17 == 0 || *i >= ROWS).map(|i| (i, "upserted", "nl", 40)).collect();
    tx.upsert(&rows(&upserts)).await.unwrap();
    tx.commit().await.unwrap();
    // The keys of that block (ids drawn above ROWS + 50 are in none).
    let upserted = |ids: &[i64]| usize::from(ids.iter().any(|id| (id % 17 == 0 && *id < ROWS) || (ROWS..ROWS + 50).contains(id)));
    check_against_snapshot(&storage, seed + 2, 40, |ids| updates_and_deletes(ids) + upserted(ids)).await;
}
