//! Compaction: plans read from Spark's timeline, and plans of our own executed while writers
//! keep writing; the snapshot, time travel and incremental reads stay what they were.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use arrow::array::AsArray;
use bytes::Bytes;
use common::customers::{rows, snapshot, spec, writer};
use engine::read::{ChangeRange, TableReader};
use engine::services::compaction::{compact, run_compaction, schedule_compaction, CompactionPlan};
use engine::storage::{Storage, StorageUri};
use engine::timeline::ReadBound;
use engine::write::time::LockOptions;
use engine::write::{create_table, Transaction};

const EXPIRY: Duration = Duration::from_secs(60);

fn local(dir: &std::path::Path) -> Storage {
    Storage::open(&StorageUri::parse(&format!("file://{}", dir.display())).unwrap(), &BTreeMap::new()).unwrap()
}

async fn commit(storage: &Storage, config: &engine::table::TableConfig, data: &[(i64, &str, &str, i64)]) -> String {
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(data)).await.unwrap();
    tx.commit().await.unwrap()
}

#[tokio::test]
async fn reads_the_plan_spark_wrote() {
    let (_dir, base) = common::unpack(std::path::Path::new("sample_table/mor/avro/v9_txns_simple_nometa.zip"));
    let storage = local(&base);
    let config = engine::table::load_config(&storage).await.unwrap();
    let plan = CompactionPlan::load(&storage, &config, "20260307135839895").await.unwrap();
    // The compaction wrote one base file per planned file group, named with its instant.
    let mut planned: Vec<(String, String)> = plan.operations.iter().map(|op| (op.partition.clone(), op.file_id.clone())).collect();
    planned.sort();
    let mut written: Vec<(String, String)> = storage
        .list_recursive("")
        .await
        .unwrap()
        .into_iter()
        .filter(|(p, _)| p.ends_with("_20260307135839895.parquet"))
        .map(|(p, _)| {
            let (partition, name) = p.rsplit_once('/').unwrap();
            (partition.to_owned(), name.split('_').next().unwrap().to_owned())
        })
        .collect();
    written.sort();
    assert_eq!(planned, written);
    assert!(plan.operations.iter().all(|op| !op.log_files.is_empty() && op.log_files.iter().all(|l| l.starts_with('.'))));
}

#[tokio::test]
async fn compaction_keeps_every_read_and_writers_never_stop() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &spec()).await.unwrap();
    let first = commit(&storage, &config, &[(1, "ann", "nl", 10), (2, "bob", "nl", 10), (3, "cy", "be", 10), (4, "di", "fr", 10)]).await;
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(2), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&[(1, "ann-2", "nl", 20), (2, "bob-stale", "nl", 5)])).await.unwrap();
    tx.delete(vec![("3".into(), "country=be".into(), engine::ordering::OrderingValue::Int(0))]).await.unwrap();
    let second = tx.commit().await.unwrap();

    // A writer that started before the plan and commits after it.
    let mut during = Transaction::begin(storage.clone(), config.clone(), writer(3), LockOptions::default()).await.unwrap();
    during.upsert(&rows(&[(4, "di-2", "fr", 30), (5, "ed", "nl", 30)])).await.unwrap();

    let during_instant = during.instant().to_owned();
    let groups_with_logs = TableReader::open(storage.clone()).await.unwrap().slices(&ReadBound::Latest).await.unwrap().len();
    let instant = schedule_compaction(&storage, &writer(9), &LockOptions::default()).await.unwrap().unwrap();
    let plan = CompactionPlan::load(&storage, &config, &instant).await.unwrap();
    // Every file group written so far, without any of `during`'s logs.
    assert_eq!(plan.operations.len(), groups_with_logs, "{plan:?}");
    assert!(plan.operations.iter().flat_map(|op| &op.log_files).all(|l| !l.contains(&during_instant)));
    let third = during.commit().await.unwrap();
    assert!(third > instant, "a completion after the plan's instant");
    assert_eq!(snapshot(&storage).await, [(1, "ann-2"), (2, "bob"), (4, "di-2"), (5, "ed")].map(|(i, n)| (i, n.to_owned())));

    let outcome = run_compaction(&storage, &instant, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap();
    assert_eq!((outcome.file_groups, outcome.rows), (groups_with_logs, 3), "be has no live row left: an empty base file");
    let after = snapshot(&storage).await;
    assert_eq!(after, [(1, "ann-2"), (2, "bob"), (4, "di-2"), (5, "ed")].map(|(i, n)| (i, n.to_owned())));

    let reader = TableReader::open(storage.clone()).await.unwrap();
    let slices = reader.slices(&ReadBound::Latest).await.unwrap();
    for slice in &slices {
        let compacted = plan.operations.iter().any(|op| op.file_id == slice.file_id && op.partition == slice.partition);
        if compacted {
            assert_eq!(slice.base_instant, instant);
            assert!(slice.base_file.as_ref().unwrap().name.ends_with(&format!("_{instant}.parquet")));
        }
        // Only `during`'s logs, which completed after the plan, remain on top of the bases.
        assert!(slice.log_files.iter().all(|l| l.instant == during_instant), "{slice:?}");
    }
    // Commit times survive compaction: the base file's rows keep their writers' instants.
    let batches = reader.read_snapshot(None).await.unwrap();
    let mut commit_times: Vec<String> = batches
        .iter()
        .flat_map(|b| b.column(0).as_string::<i32>().iter().map(|v| v.unwrap().to_owned()).collect::<Vec<_>>())
        .collect();
    commit_times.sort();
    commit_times.dedup();
    assert!(!commit_times.contains(&instant));

    // Time travel to before the compaction, and incremental reads across it.
    let as_of_first = reader.read_snapshot(Some(&requested_of(&reader, &first))).await.unwrap();
    assert_eq!(as_of_first.iter().map(|b| b.num_rows()).sum::<usize>(), 4);
    let changes = reader.read_changes(&ChangeRange { start: Some(second.clone()), end: None }, false).await.unwrap();
    let mut changed: Vec<String> = changes
        .iter()
        .flat_map(|b| b.column_by_name("_hoodie_record_key").unwrap().as_string::<i32>().iter().map(|v| v.unwrap().to_owned()).collect::<Vec<_>>())
        .collect();
    changed.sort();
    assert_eq!(changed, ["4", "5"]);

    // Writes after the compaction merge onto the new base files.
    commit(&storage, &config, &[(2, "bob-3", "nl", 40)]).await;
    assert_eq!(snapshot(&storage).await, [(1, "ann-2"), (2, "bob-3"), (4, "di-2"), (5, "ed")].map(|(i, n)| (i, n.to_owned())));
    // And a second compaction takes the rest; nothing is left to compact after it.
    let again = compact(&storage, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap().unwrap();
    assert!(again.instant > instant);
    assert!(compact(&storage, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap().is_none());
    assert_eq!(snapshot(&storage).await, [(1, "ann-2"), (2, "bob-3"), (4, "di-2"), (5, "ed")].map(|(i, n)| (i, n.to_owned())));
}

fn requested_of(reader: &TableReader, completion: &str) -> String {
    let timeline = reader.timeline();
    timeline.instants().iter().find(|i| i.completion.as_deref() == Some(completion)).unwrap().timestamp.clone()
}

#[tokio::test]
async fn a_failed_attempt_is_redone_and_a_running_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &spec()).await.unwrap();
    commit(&storage, &config, &[(1, "ann", "nl", 10), (2, "bob", "nl", 10)]).await;
    let expected = snapshot(&storage).await;
    let instant = schedule_compaction(&storage, &writer(9), &LockOptions::default()).await.unwrap().unwrap();
    let plan = CompactionPlan::load(&storage, &config, &instant).await.unwrap();
    let op = &plan.operations[0];

    // A crashed attempt: inflight, a half-written base file, and a heartbeat that went stale.
    storage.put(&format!("{}/{instant}.compaction.inflight", config.timeline_dir), Bytes::new()).await.unwrap();
    let debris = format!("{}/{}_1-1-1_{instant}.parquet", op.partition, op.file_id);
    storage.put(&debris, Bytes::from_static(b"PAR1 truncated")).await.unwrap();
    engine::write::heartbeat::beat(&storage, &instant).await.unwrap();
    assert_eq!(snapshot(&storage).await, expected, "an uncompleted compaction is invisible");

    let err = run_compaction(&storage, &instant, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap_err();
    assert!(err.to_string().contains("being executed by another writer"), "{err}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    run_compaction(&storage, &instant, &writer(9), &LockOptions::default(), Duration::from_millis(10)).await.unwrap();
    assert!(storage.get(&debris).await.is_err(), "the failed attempt's file is gone");
    assert_eq!(snapshot(&storage).await, expected);

    let err = run_compaction(&storage, &instant, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap_err();
    assert!(err.to_string().contains("already completed"), "{err}");
    let err = run_compaction(&storage, "20200101000000000", &writer(9), &LockOptions::default(), EXPIRY).await.unwrap_err();
    assert_eq!(err.kind(), engine::ErrorKind::NotFound);
}
