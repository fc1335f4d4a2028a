//! Truncates ([`Transaction::begin_truncate`]) against concurrent writers, compaction and the
//! rollback of failed writes.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, StringArray};
use arrow::record_batch::RecordBatch;

use crate::error::ErrorKind;
use crate::services::compaction::{run_compaction, schedule_compaction};
use crate::write::table::TestTable;
use crate::write::time::LockOptions;
use crate::write::{Transaction, WriterId};

fn rows(table: &TestTable, ids: &[i64], name: &str) -> RecordBatch {
    let names = StringArray::from(vec![name; ids.len()]);
    RecordBatch::try_new(Arc::new(table.schema.clone()), vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(names)]).unwrap()
}

fn writer(process: u32) -> WriterId {
    WriterId { node: 7, process }
}

async fn begin(table: &TestTable, process: u32) -> Transaction {
    Transaction::begin(table.storage.clone(), table.config.clone(), writer(process), LockOptions::default()).await.unwrap()
}

async fn truncate(table: &TestTable, process: u32, options: LockOptions) -> crate::error::Result<Transaction> {
    Transaction::begin_truncate(table.storage.clone(), table.config.clone(), writer(process), options, None).await
}

fn named(ids: &[i64], name: &str) -> Vec<(i64, String)> {
    ids.iter().map(|id| (*id, name.to_owned())).collect()
}

async fn timeline_names(table: &TestTable) -> Vec<String> {
    table.storage.list_dir(&table.config.timeline_dir).await.unwrap().into_iter().map(|(n, _)| n).collect()
}

/// What completed before the truncate's instant is gone; what completes after it stays: rows
/// the truncating transaction writes after it, and a write that began before it but completed
/// after. Readers see nothing of the truncate until it completes. Its replacecommit is Spark's
/// `INSERT_OVERWRITE_TABLE` replacing no file group, with an empty base file in each.
#[tokio::test]
async fn a_truncate_removes_what_completed_before_it_and_keeps_what_completes_after() {
    let table = TestTable::new(4).await;
    table.upsert((0..20).collect(), "old").await;
    table.upsert((0..5).collect(), "older update").await;
    let before = table.names().await;
    let mut late = begin(&table, 2).await;
    late.upsert(&rows(&table, &[100, 101], "late")).await.unwrap();

    let mut truncating = truncate(&table, 3, LockOptions::default()).await.unwrap();
    let instant = truncating.instant().to_owned();
    truncating.upsert(&rows(&table, &[1], "after the truncate")).await.unwrap();
    assert_eq!(table.names().await, before, "a pending truncate changes nothing");
    assert_eq!(late.truncated_since().await.unwrap().as_deref(), Some(instant.as_str()), "the late write sees the truncate");
    truncating.commit().await.unwrap();
    assert_eq!(table.names().await, named(&[1], "after the truncate"));

    late.commit().await.unwrap();
    let mut expected = named(&[1], "after the truncate");
    expected.extend(named(&[100, 101], "late"));
    assert_eq!(table.names().await, expected);

    // The completed replacecommit, as Java reads it.
    let names = timeline_names(&table).await;
    let completed = names.iter().find(|n| n.starts_with(&format!("{instant}_")) && n.ends_with(".replacecommit")).expect("completed");
    let bytes = table.storage.get(&format!("{}/{completed}", table.config.timeline_dir)).await.unwrap();
    let metadata = crate::timeline::metadata::decode(&bytes).unwrap();
    assert_eq!(metadata["operationType"], "INSERT_OVERWRITE_TABLE");
    assert_eq!(metadata["partitionToReplaceFileIds"], serde_json::json!({}));
    let stats = metadata["partitionToWriteStats"][""].as_array().unwrap();
    let bases = stats.iter().filter(|s| s["path"].as_str().unwrap().ends_with(".parquet")).count();
    assert_eq!(bases, 4, "an empty base in each of the 4 bucket file groups: {stats:?}");
    let requested = table.storage.get(&format!("{}/{instant}.replacecommit.requested", table.config.timeline_dir)).await.unwrap();
    assert_eq!(crate::timeline::metadata::decode(&requested).unwrap()["operationType"], "INSERT_OVERWRITE_TABLE");

    // A write that begins after the truncate completed sees none.
    let after = begin(&table, 4).await;
    assert_eq!(after.truncated_since().await.unwrap(), None);
    after.abort().await.unwrap();

    // Compaction keeps the outcome.
    let compaction = schedule_compaction(&table.storage, &writer(5), &LockOptions::default()).await.unwrap().expect("logs to compact");
    run_compaction(&table.storage, &compaction, &writer(5), &LockOptions::default(), Duration::from_secs(60)).await.unwrap();
    assert_eq!(table.names().await, expected);
}

/// No compaction is scheduled while a truncate is pending (its base files would be newer than
/// the truncate's and hold the old rows); one scheduled before the truncate and run after it
/// brings nothing back.
#[tokio::test]
async fn compactions_around_a_truncate_bring_nothing_back() {
    let options = LockOptions::default();
    let compact = async |table: &TestTable, instant: &str| {
        run_compaction(&table.storage, instant, &writer(1), &LockOptions::default(), Duration::from_secs(60)).await.unwrap();
    };
    // Scheduled while the truncate is pending: nothing.
    let table = TestTable::new(2).await;
    table.upsert((0..10).collect(), "old").await;
    let truncating = truncate(&table, 2, options.clone()).await.unwrap();
    table.upsert(vec![50], "during").await;
    assert_eq!(schedule_compaction(&table.storage, &writer(1), &options).await.unwrap(), None, "nothing is planned while a truncate is pending");
    truncating.commit().await.unwrap();
    assert_eq!(table.names().await, named(&[50], "during"));
    let later = schedule_compaction(&table.storage, &writer(1), &options).await.unwrap().expect("the truncate's slices have logs");
    compact(&table, &later).await;
    assert_eq!(table.names().await, named(&[50], "during"));

    // Scheduled before the truncate, run after it.
    let table = TestTable::new(2).await;
    table.upsert((0..10).collect(), "old").await;
    let earlier = schedule_compaction(&table.storage, &writer(1), &options).await.unwrap().expect("logs to compact");
    truncate(&table, 2, options.clone()).await.unwrap().commit().await.unwrap();
    compact(&table, &earlier).await;
    assert_eq!(table.names().await, Vec::new());
}

/// A truncate does not start while another write is committing (marked prepared): it gives up
/// after the lock timeout, leaving nothing behind, and proceeds once that write completed —
/// removing it, since it completed first.
#[tokio::test]
async fn a_truncate_waits_for_writes_that_are_committing() {
    let table = TestTable::new(2).await;
    table.upsert(vec![1, 2], "old").await;
    let mut committing = begin(&table, 1).await;
    committing.upsert(&rows(&table, &[3], "committing")).await.unwrap();
    let prepared = committing.prepare().await.unwrap();
    let mark = crate::write::prepared::PreparedMark { node: 9, transaction: 42 };
    crate::write::prepared::mark(&table.storage, committing.instant(), &mark).await.unwrap();
    let timeline_before = timeline_names(&table).await;

    let impatient = LockOptions { timeout: Duration::from_millis(100), ..Default::default() };
    let err = truncate(&table, 2, impatient).await.map(|_| ()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InUse, "{err}");
    assert!(err.to_string().contains(committing.instant()), "the error names the write: {err}");
    assert_eq!(timeline_names(&table).await, timeline_before, "the attempts left nothing on the timeline");

    prepared.complete(&table.storage, &writer(1).owner(), &LockOptions::default()).await.unwrap();
    truncate(&table, 2, LockOptions::default()).await.unwrap().commit().await.unwrap();
    assert_eq!(table.names().await, Vec::new());
}

/// A truncate whose writer died is a failed write like any other: the rollback of failed
/// writes removes its base files and instant, and the rows are all there.
#[tokio::test]
async fn a_failed_truncate_is_rolled_back() {
    let table = TestTable::new(3).await;
    table.upsert((0..9).collect(), "old").await;
    let before = table.names().await;
    let listing_before = table.storage.list_recursive("").await.unwrap().into_iter().filter(|(p, _)| !p.starts_with(".hoodie")).count();
    let abandoned = truncate(&table, 2, LockOptions::default()).await.unwrap();
    let instant = abandoned.instant().to_owned();
    drop(abandoned);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let rolled = crate::services::rollback::rollback_failed_writes(
        &table.storage,
        &table.config,
        Duration::from_millis(1),
        &writer(3).owner(),
        &LockOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(rolled.iter().map(|r| (r.instant.as_str(), r.files_deleted)).collect::<Vec<_>>(), vec![(instant.as_str(), 3)]);
    assert_eq!(table.names().await, before);
    let names = timeline_names(&table).await;
    assert!(!names.iter().any(|n| n.starts_with(&instant)), "{names:?}");
    let data_files = table.storage.list_recursive("").await.unwrap().into_iter().filter(|(p, _)| !p.starts_with(".hoodie")).count();
    assert_eq!(data_files, listing_before);
    let rollback = names.iter().find(|n| n.ends_with(".rollback")).unwrap();
    let metadata = crate::timeline::metadata::decode(&table.storage.get(&format!("{}/{rollback}", table.config.timeline_dir)).await.unwrap()).unwrap();
    assert_eq!(metadata["instantsRollback"][0]["action"], "replacecommit");
}
