//! Writing tables: create, upsert, delete, abort, and read back what was committed.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{AsArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use common::customers::{local, rows, schema, snapshot, snapshot_of, spec, writer};
use engine::ordering::OrderingValue;
use engine::read::{ChangeRange, TableReader};
use engine::storage::{Storage, StorageUri};
use engine::write::time::LockOptions;
use engine::write::{create_table, Change, Transaction};

#[tokio::test]
async fn upserts_and_deletes_commit_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::open(&StorageUri::parse(&format!("file://{}", dir.path().display())).unwrap(), &Default::default()).unwrap();
    let config = create_table(&storage, &spec()).await.unwrap();
    assert_eq!(config.version, 8);

    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&[(1, "ann", "nl", 10), (2, "bob", "nl", 10), (3, "cy", "be", 10), (4, "di", "be", 10), (5, "ed", "fr", 10)]))
        .await
        .unwrap();
    let first = tx.commit().await.unwrap();
    assert_eq!(snapshot(&storage).await.len(), 5);

    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&[(1, "ann-new", "nl", 20), (2, "bob-stale", "nl", 5)])).await.unwrap();
    tx.delete(vec![("3".into(), "country=be".into(), OrderingValue::Int(0))]).await.unwrap();
    let second = tx.commit().await.unwrap();
    assert!(first < second);
    assert_eq!(
        snapshot(&storage).await,
        [(1, "ann-new"), (2, "bob"), (4, "di"), (5, "ed")].map(|(i, n)| (i, n.to_owned()))
    );

    // An aborted transaction leaves nothing behind.
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(2), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&[(9, "ghost", "nl", 30)])).await.unwrap();
    let instant = tx.instant().to_owned();
    tx.abort().await.unwrap();
    assert_eq!(snapshot(&storage).await.len(), 4);
    let leftovers: Vec<_> = storage.list_recursive("").await.unwrap().into_iter().filter(|(p, _)| p.contains(&instant)).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // The second commit's changes, incrementally.
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let changes = reader.read_changes(&ChangeRange { start: Some(first), end: None }, true).await.unwrap();
    let mut ops: Vec<(String, String)> = changes
        .iter()
        .flat_map(|b| {
            let key = b.column_by_name("_hoodie_record_key").unwrap().as_string::<i32>().clone();
            let op = b.column_by_name("_hoodie_operation").unwrap().as_string::<i32>().clone();
            (0..b.num_rows()).map(move |i| (key.value(i).to_owned(), op.value(i).to_owned())).collect::<Vec<_>>()
        })
        .collect();
    ops.sort();
    assert_eq!(ops, [("1".to_owned(), "U".to_owned()), ("3".to_owned(), "D".to_owned())]);
}

#[tokio::test]
async fn creating_again_accepts_the_same_table_and_refuses_another() {
    let storage = Storage::open(&StorageUri::parse("memory:///write-create-again").unwrap(), &Default::default()).unwrap();
    create_table(&storage, &spec()).await.unwrap();
    create_table(&storage, &spec()).await.unwrap();
    let mut other = spec();
    other.buckets = 8;
    let err = create_table(&storage, &other).await.unwrap_err();
    assert!(err.to_string().contains("its buckets is \"4\", not \"8\""), "{err}");
    let mut bad = spec();
    bad.ordering_field = None;
    assert!(create_table(&storage, &bad).await.unwrap_err().to_string().contains("need an ordering field"));
}

/// Blocks encoded on a helper thread while the caller goes on: written in order they read back
/// as the same rows written inline; written out of order they are refused, before any file.
#[tokio::test]
async fn blocks_encoded_in_the_background_are_written_in_order() {
    let storage = Storage::open(&StorageUri::parse("memory:///write-background").unwrap(), &Default::default()).unwrap();
    let config = create_table(&storage, &spec()).await.unwrap();
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(4), LockOptions::default()).await.unwrap();
    let first = tx.encode(Change::Upsert, rows(&[(1, "ann", "nl", 10), (2, "bob", "be", 10), (3, "cy", "fr", 10)]), Vec::new());
    tx.write_blocks(first).await.unwrap();
    let deletes = tx.encode(Change::Delete, rows(&[(2, "bob", "be", 10)]), Vec::new());
    let stale = tx.encode(Change::Upsert, rows(&[(4, "di", "nl", 10)]), Vec::new());
    tx.write_blocks(deletes).await.unwrap();
    let files = tx.written_files().len();
    let refused = tx.write_blocks(stale).await.unwrap_err();
    assert!(refused.to_string().contains("encoded before"), "{refused}");
    assert_eq!(tx.written_files().len(), files);
    let again = tx.encode(Change::Upsert, rows(&[(4, "di", "nl", 10), (1, "ann-2", "nl", 20)]), Vec::new());
    tx.write_blocks(again).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(snapshot(&storage).await, [(1, "ann-2"), (3, "cy"), (4, "di")].map(|(i, n)| (i, n.to_owned())));
    // Every record's sequence number is unique within the commit, as when written inline.
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let changes = reader.read_changes(&ChangeRange { start: None, end: None }, true).await.unwrap();
    let seqnos: Vec<String> = changes
        .iter()
        .flat_map(|b| {
            let column = b.column_by_name("_hoodie_commit_seqno").unwrap().as_string::<i32>().clone();
            (0..b.num_rows()).map(move |i| column.value(i).to_owned()).collect::<Vec<_>>()
        })
        .collect();
    let unique: std::collections::BTreeSet<_> = seqnos.iter().collect();
    assert_eq!(unique.len(), seqnos.len(), "{seqnos:?}");
}

#[tokio::test]
async fn a_null_key_is_an_error_naming_the_row() {
    let storage = Storage::open(&StorageUri::parse("memory:///write-null-key").unwrap(), &Default::default()).unwrap();
    let config = create_table(&storage, &spec()).await.unwrap();
    let mut tx = Transaction::begin(storage.clone(), config, writer(3), LockOptions::default()).await.unwrap();
    let batch = RecordBatch::try_new(
        Arc::new(schema()),
        vec![
            Arc::new(Int64Array::from(vec![Some(1), None])),
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(StringArray::from(vec!["nl", "nl"])),
            Arc::new(TimestampMicrosecondArray::from(vec![1, 2]).with_timezone("UTC")),
        ],
    )
    .unwrap();
    let err = tx.upsert(&batch).await.unwrap_err();
    assert_eq!(err.to_string(), "row 2 has a NULL value in key column id");
    tx.abort().await.unwrap();
}

/// NBCC: 8 writers x 50 commits with open transactions on overlapping keys, committing in an order
/// different from their start order; every key ends with its greatest ordering value (ties: the
/// later instant, as Hudi orders log files), and there are no conflicts or aborts.
#[tokio::test]
async fn concurrent_writers_converge_on_the_greatest_ordering_value() {
    let storage = Storage::open(&StorageUri::parse("memory:///write-nbcc").unwrap(), &Default::default()).unwrap();
    let config = create_table(&storage, &spec()).await.unwrap();
    let writers = 8;
    let rounds = 50;
    let keys = 20i64;
    let mut model: BTreeMap<i64, (i64, String)> = BTreeMap::new();
    let mut seed = 42u64;
    let mut random = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..rounds {
        let mut open = Vec::new();
        for w in 0..writers {
            let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(100 + w), LockOptions::default()).await.unwrap();
            let mut data = Vec::new();
            for _ in 0..6 {
                let id = (random() % keys as u64) as i64;
                let ts = (random() % 40) as i64; // many ties
                let name = format!("w{w}-r{round}-ts{ts}");
                data.push((id, name, ts));
            }
            let batch_rows: Vec<(i64, &str, &str, i64)> = data.iter().map(|(i, n, t)| (*i, n.as_str(), "nl", *t)).collect();
            tx.upsert(&rows(&batch_rows)).await.unwrap();
            open.push((tx, data));
        }
        // Commit in reverse start order: completion order differs from instant order.
        let mut committed = Vec::new();
        while let Some((tx, data)) = open.pop() {
            tx.commit().await.unwrap();
            committed.push(data);
        }
        // A greater ordering value always wins; ties go to the later instant (the later start,
        // whatever the completion order), and within one commit to the key's last row.
        for data in committed.into_iter().rev() {
            for (id, name, ts) in data {
                let entry = model.entry(id).or_insert((i64::MIN, String::new()));
                if ts >= entry.0 {
                    *entry = (ts, name);
                }
            }
        }
    }
    let got: BTreeMap<i64, String> = snapshot(&storage).await.into_iter().collect();
    let want: BTreeMap<i64, String> = model.into_iter().map(|(k, (_, n))| (k, n)).collect();
    assert_eq!(got, want);
}

/// A writer that dies mid-transaction leaves a pending instant and log files; once its
/// heartbeat expires, rollback removes them, records a rollback instant, and the table reads
/// as before. A rolled-back writer that wakes up cannot commit.
#[tokio::test]
async fn failed_writes_are_rolled_back_after_their_heartbeat_expires() {
    use engine::services::rollback::rollback_failed_writes;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::open(&StorageUri::parse(&format!("file://{}", dir.path().display())).unwrap(), &Default::default()).unwrap();
    let config = create_table(&storage, &spec()).await.unwrap();
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&[(1, "kept", "nl", 1)])).await.unwrap();
    tx.commit().await.unwrap();
    let before = snapshot(&storage).await;

    let mut crashed = Transaction::begin(storage.clone(), config.clone(), writer(2), LockOptions::default()).await.unwrap();
    crashed.upsert(&rows(&[(2, "lost", "nl", 1), (3, "lost", "be", 1)])).await.unwrap();
    let instant = crashed.instant().to_owned();
    assert_eq!(snapshot(&storage).await, before, "pending writes are invisible");

    // Alive: nothing is rolled back.
    let alive = rollback_failed_writes(&storage, &config, Duration::from_secs(600), "cleaner", &LockOptions::default()).await.unwrap();
    assert!(alive.is_empty());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut written = Vec::new();
    for (path, _) in storage.list_recursive("").await.unwrap().into_iter().filter(|(p, _)| p.contains(&instant)) {
        written.push((path.clone(), storage.get(&path).await.unwrap()));
    }
    let rolled = rollback_failed_writes(&storage, &config, Duration::from_millis(10), "cleaner", &LockOptions::default()).await.unwrap();
    assert_eq!(rolled.len(), 1);
    assert_eq!((rolled[0].instant.as_str(), rolled[0].files_deleted), (instant.as_str(), 2));
    let leftovers: Vec<_> = storage.list_recursive("").await.unwrap().into_iter().filter(|(p, _)| p.contains(&instant)).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let rollback = reader.timeline().instants().iter().find(|i| i.action == "rollback" && i.is_completed()).unwrap().clone();
    assert_eq!(snapshot(&storage).await, before);
    // The plan came first and lists the write's files by absolute path, as Java's does; the
    // completed rollback says the same.
    let base = storage.uri().to_string();
    let data_files: Vec<String> =
        written.iter().filter(|(p, _)| !p.starts_with(".hoodie/")).map(|(p, _)| format!("{base}/{p}")).collect();
    assert_eq!(data_files.len(), 2);
    let requested = format!(".hoodie/timeline/{}.rollback.requested", rollback.timestamp);
    let plan = engine::timeline::metadata::decode(&storage.get(&requested).await.unwrap()).unwrap();
    assert_eq!(plan["instantToRollback"]["commitTime"], instant.as_str());
    assert_eq!(plan["version"], 1);
    let mut planned: Vec<String> = plan["RollbackRequests"].as_array().unwrap().iter()
        .flat_map(|r| r["filesToBeDeleted"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_owned()))
        .collect();
    planned.sort();
    let mut expected_files = data_files.clone();
    expected_files.sort();
    assert_eq!(planned, expected_files);
    assert!(plan["RollbackRequests"].as_array().unwrap().iter().all(|r| r["logBlocksToBeDeleted"] == serde_json::json!({})));
    let completed = engine::timeline::metadata::decode(&storage.get(&format!(".hoodie/timeline/{}", rollback.file_name)).await.unwrap()).unwrap();
    let mut deleted: Vec<String> = completed["partitionMetadata"].as_object().unwrap().values()
        .flat_map(|p| p["successDeleteFiles"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_owned()))
        .collect();
    deleted.sort();
    assert_eq!(deleted, expected_files);

    // A rollback that stopped after its plan (the write's files and requested file still
    // there, no completed rollback) is finished from that plan, under its own instant: the
    // write is not planned again.
    for (path, bytes) in &written {
        storage.put(path, bytes.clone()).await.unwrap();
    }
    storage.delete(&format!(".hoodie/timeline/{}", rollback.file_name)).await.unwrap();
    storage.delete(&format!(".hoodie/timeline/{instant}.deltacommit.inflight")).await.unwrap();
    let resumed = rollback_failed_writes(&storage, &config, Duration::from_millis(10), "cleaner", &LockOptions::default()).await.unwrap();
    assert_eq!(resumed.len(), 1);
    assert_eq!((resumed[0].instant.as_str(), resumed[0].rollback_instant.as_str()), (instant.as_str(), rollback.timestamp.as_str()));
    let leftovers: Vec<_> = storage.list_recursive("").await.unwrap().into_iter().filter(|(p, _)| p.contains(&instant)).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let timeline = TableReader::open(storage.clone()).await.unwrap();
    let rollbacks: Vec<_> = timeline.timeline().instants().iter().filter(|i| i.action == "rollback").collect();
    assert!(rollbacks.len() == 1 && rollbacks[0].is_completed(), "{rollbacks:?}");
    assert_eq!(snapshot(&storage).await, before);

    let err = crashed.commit().await.unwrap_err();
    assert!(err.to_string().contains("was rolled back after its heartbeat expired"), "{err}");
    assert_eq!(snapshot(&storage).await, before);
}

/// A prepared commit is completed by whoever holds it, after its writer is gone, exactly once
/// however often it is retried. Before that, a reader told that the write is decided sees its
/// rows; a rollback of failed writes leaves a write with a prepared mark to its deciding
/// server, and one that rolls it back anyway makes a later completion fail.
#[tokio::test]
async fn prepared_commits_complete_once_and_decided_writes_are_read() {
    use engine::services::rollback::{failed_writes, rollback_failed_writes, rollback_writes, FailedWrite};
    use engine::write::prepared::{self, PreparedMark};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &spec()).await.unwrap();
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&[(1, "kept", "nl", 1)])).await.unwrap();
    tx.commit().await.unwrap();

    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(2), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&[(1, "decided", "nl", 2), (2, "new", "be", 2)])).await.unwrap();
    let prepared = tx.prepare().await.unwrap();
    let mark = PreparedMark { node: 7, transaction: 42 };
    prepared::mark(&storage, tx.instant(), &mark).await.unwrap();
    drop(tx); // the writer is gone; what is kept is the prepared commit
    assert_eq!(snapshot(&storage).await, [(1, "kept".to_owned())]);

    // A reader that knows the write is decided sees it merged on top.
    let reader = TableReader::open(storage.clone()).await.unwrap().with_decided_writes([prepared.instant.as_str()]);
    assert_eq!(snapshot_of(&reader).await, [(1, "decided".to_owned()), (2, "new".to_owned())]);

    // Expired, but prepared: listed with its mark, and not rolled back blindly.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let failed = failed_writes(&storage, &config, Duration::from_millis(10)).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].prepared, Some(mark));
    assert!(rollback_failed_writes(&storage, &config, Duration::from_millis(10), "cleaner", &LockOptions::default()).await.unwrap().is_empty());

    // Completed twice (a retry after a lost answer): one completed instant, the same time.
    let first = prepared.complete(&storage, "finisher", &LockOptions::default()).await.unwrap();
    let again = prepared.complete(&storage, "finisher", &LockOptions::default()).await.unwrap();
    assert!(first.created && !again.created);
    assert_eq!(first.completion, again.completion);
    assert_eq!(snapshot(&storage).await, [(1, "decided".to_owned()), (2, "new".to_owned())]);
    assert_eq!(prepared::read(&storage, &prepared.instant).await.unwrap(), None, "the mark goes with the completion");
    // A completed write is not rolled back, even when named.
    let named = FailedWrite { instant: prepared.instant.clone(), action: "deltacommit".into(), prepared: None };
    assert!(rollback_writes(&storage, &config, &[named], Duration::ZERO, "cleaner", &LockOptions::default()).await.unwrap().is_empty());

    // One rolled back before it completes cannot complete afterwards.
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(3), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&[(3, "late", "nl", 3)])).await.unwrap();
    let late = tx.prepare().await.unwrap();
    // Named with a mark it does not have, or while its heartbeat is fresh: left alone.
    let named = |prepared| FailedWrite { instant: late.instant.clone(), action: "deltacommit".into(), prepared };
    let marked = named(Some(PreparedMark { node: 7, transaction: 43 }));
    assert!(rollback_writes(&storage, &config, &[marked], Duration::ZERO, "cleaner", &LockOptions::default()).await.unwrap().is_empty());
    let fresh = Duration::from_secs(600);
    assert!(rollback_writes(&storage, &config, &[named(None)], fresh, "cleaner", &LockOptions::default()).await.unwrap().is_empty());
    late.confirm_pending(&storage).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    let rolled = rollback_writes(&storage, &config, &[named(None)], Duration::ZERO, "cleaner", &LockOptions::default()).await.unwrap();
    assert_eq!(rolled.len(), 1);
    // Its writer finds out before its transaction commits.
    let err = late.confirm_pending(&storage).await.unwrap_err();
    assert_eq!(err.kind(), engine::ErrorKind::NotFound, "{err}");
    let err = late.complete(&storage, "finisher", &LockOptions::default()).await.unwrap_err();
    assert!(err.to_string().contains("was rolled back"), "{err}");
    assert_eq!(snapshot(&storage).await, [(1, "decided".to_owned()), (2, "new".to_owned())]);
}

#[tokio::test]
async fn a_refreshed_reader_is_the_same_until_the_timeline_changes() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &spec()).await.unwrap();
    let commit = |rows_: Vec<(i64, &'static str, &'static str, i64)>, process| {
        let (storage, config) = (storage.clone(), config.clone());
        async move {
            let mut tx = Transaction::begin(storage, config, writer(process), LockOptions::default()).await.unwrap();
            tx.upsert(&rows(&rows_)).await.unwrap();
            tx
        }
    };
    commit(vec![(1, "ann", "nl", 1)], 1).await.commit().await.unwrap();
    let first = TableReader::open(storage.clone()).await.unwrap();
    let again = first.refreshed().await.unwrap();
    assert!(again.is_same_load(&first));
    assert_eq!(snapshot_of(&again).await, [(1, "ann".to_owned())]);
    // A write that is open changes the timeline (its requested and inflight instants), a
    // completed one again: each is a new load, and only the completed write's rows show.
    let open = commit(vec![(2, "bob", "be", 1)], 2).await;
    let with_pending = again.refreshed().await.unwrap();
    assert!(!with_pending.is_same_load(&again));
    assert_eq!(snapshot_of(&with_pending).await, [(1, "ann".to_owned())]);
    open.commit().await.unwrap();
    let after = with_pending.refreshed().await.unwrap();
    assert!(!after.is_same_load(&with_pending));
    assert_eq!(snapshot_of(&after).await, [(1, "ann".to_owned()), (2, "bob".to_owned())]);
    assert!(after.refreshed().await.unwrap().is_same_load(&after));
}

/// A writer that marks its write prepared and then confirms that it is still pending, racing a
/// rollback that takes the write for failed, with the two interleaved between every storage
/// step (seeded): never does the writer confirm a write that the rollback rolls back. Either
/// the rollback finds the mark (and puts back the inflight file it removed), or the writer
/// finds its write gone and must not commit (sometimes both: the writer looked while the file
/// was away, and aborts a write the rollback left alone).
#[tokio::test(flavor = "current_thread")]
async fn a_rollback_racing_a_writers_confirmation_never_takes_a_confirmed_write() {
    use common::interleaving::Interleaving;
    use engine::services::rollback::{rollback_writes, FailedWrite};
    use engine::write::prepared::{self, PreparedMark};
    use std::time::Duration;

    let seed = common::seed();
    let (mut confirmed_count, mut rolled_count) = (0, 0);
    for round in 0..60u64 {
        let dir = tempfile::tempdir().unwrap();
        let plain = local(dir.path());
        let config = create_table(&plain, &spec()).await.unwrap();
        let storage = plain.layered(|inner| Arc::new(Interleaving::new(inner, seed.wrapping_add(round.wrapping_mul(0x2545_f491)))));
        let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
        tx.upsert(&rows(&[(1, "raced", "nl", 1)])).await.unwrap();
        let prepared = tx.prepare().await.unwrap();
        // Its heartbeat is older than an expiry of zero.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let mark = PreparedMark { node: 7, transaction: 42 };
        // The writer starts anywhere in the rollback's course.
        let head_start = Duration::from_micros(seed.wrapping_add(round).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 50);
        let writer_side = async {
            tokio::time::sleep(head_start).await;
            prepared::mark(&storage, &prepared.instant, &mark).await.unwrap();
            prepared.confirm_pending(&storage).await
        };
        let failed = [FailedWrite { instant: prepared.instant.clone(), action: "deltacommit".into(), prepared: None }];
        let lock_options = LockOptions::default();
        let rollback_side = rollback_writes(&storage, &config, &failed, Duration::ZERO, "cleaner", &lock_options);
        let (confirmed, rolled) = tokio::join!(writer_side, rollback_side);
        let rolled = rolled.unwrap();
        let context = format!("seed {seed}, round {round}");
        match confirmed {
            Ok(()) => {
                confirmed_count += 1;
                assert!(rolled.is_empty(), "{context}: a confirmed write was rolled back");
                prepared.complete(&plain, "finisher", &LockOptions::default()).await.unwrap();
                assert_eq!(snapshot(&plain).await, [(1, "raced".to_owned())], "{context}");
            }
            Err(e) => {
                rolled_count += 1;
                assert_eq!(e.kind(), engine::ErrorKind::NotFound, "{context}: {e}");
                // Rolled back; or, when the mark appeared just after the writer looked, put
                // back for the writer's own abort (which would follow) to remove.
                assert!(rolled.len() <= 1, "{context}");
                assert!(snapshot(&plain).await.is_empty(), "{context}");
            }
        }
        // No rollback left half done: each one requested is completed.
        let names: Vec<String> = plain.list_dir(&config.timeline_dir).await.unwrap().into_iter().map(|(n, _)| n).collect();
        for requested in names.iter().filter_map(|n| n.strip_suffix(".rollback.requested")) {
            assert!(names.iter().any(|n| n.starts_with(&format!("{requested}_")) && n.ends_with(".rollback")), "{context}: {names:?}");
        }
        drop(tx);
    }
    println!("confirmed {confirmed_count}, rolled back {rolled_count}");
}
