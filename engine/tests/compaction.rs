//! Compaction: plans read from Spark's timeline, and plans of our own executed while writers
//! keep writing; the snapshot, time travel and incremental reads stay what they were.

mod common;

use std::time::Duration;

use arrow::array::{Array, AsArray};
use bytes::Bytes;
use common::customers::{local, rows, snapshot, snapshot_of, spec, writer};
use engine::read::{ChangeRange, TableReader};
use engine::services::compaction::{compact, run_compaction, schedule_compaction, CompactionPlan};
use engine::storage::Storage;
use engine::timeline::ReadBound;
use engine::write::time::LockOptions;
use engine::write::{create_table, Transaction};

const EXPIRY: Duration = Duration::from_secs(60);

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
    let again = compact(&storage, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap().pop().unwrap();
    assert!(again.instant > instant);
    assert!(compact(&storage, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap().is_empty());
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

/// One commit of the twin tables below: upserts `(id, name, country, ts)` and deletes ids.
struct Step {
    upserts: &'static [(i64, &'static str, &'static str, i64)],
    deletes: &'static [(i64, &'static str)],
    compact_after: bool,
}

/// The changes of a range as `(key, operation, name, index of the step that wrote it)`, sorted;
/// `D` rows have no name and take the step of their commit time.
async fn changes_by_step(reader: &TableReader, range: &ChangeRange, steps: &[String], columns: Option<Vec<String>>) -> Vec<(String, String, Option<String>, usize)> {
    let options = engine::read::ScanOptions { columns, ..Default::default() };
    let mut out = Vec::new();
    let mut stats = Default::default();
    for slice in reader.slices(&reader.change_bound(range)).await.unwrap() {
        let Some(batch) = reader.read_slice_changes(&slice, range, true, &options, &mut stats).await.unwrap() else { continue };
        let text = |name: &str, row: usize| {
            let column = batch.column_by_name(name).unwrap().as_string::<i32>();
            column.is_valid(row).then(|| column.value(row).to_owned())
        };
        for row in 0..batch.num_rows() {
            let commit_time = text("_hoodie_commit_time", row).unwrap();
            let step = steps.iter().position(|s| *s == commit_time).unwrap_or_else(|| panic!("{commit_time} is no step's instant"));
            // Rows read without the key column have no key: then the name stands for it.
            let key = text("_hoodie_record_key", row).or_else(|| text("name", row)).unwrap();
            out.push((key, text("_hoodie_operation", row).unwrap(), text("name", row), step));
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn incremental_reads_across_compactions_report_what_the_uncompacted_table_reports() {
    const STEPS: [Step; 5] = [
        Step { upserts: &[(1, "ann", "nl", 1), (2, "bob", "nl", 1), (3, "cy", "be", 1), (4, "di", "fr", 1), (5, "ed", "nl", 1), (6, "flo", "be", 1)], deletes: &[], compact_after: false },
        Step { upserts: &[(1, "ann-2", "nl", 2), (7, "gus", "fr", 2)], deletes: &[(3, "be")], compact_after: false },
        Step { upserts: &[(2, "bob-2", "nl", 3)], deletes: &[(7, "fr")], compact_after: true },
        Step { upserts: &[(1, "ann-3", "nl", 4), (8, "hal", "be", 4), (3, "cy-again", "be", 4)], deletes: &[(4, "fr")], compact_after: true },
        Step { upserts: &[(5, "ed-2", "nl", 5)], deletes: &[(6, "be")], compact_after: false },
    ];
    // Twin tables with the same writes; only `compacted` is compacted between steps.
    let (plain_dir, compacted_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (plain, compacted) = (local(plain_dir.path()), local(compacted_dir.path()));
    let mut instants: [(Vec<String>, Vec<String>); 2] = Default::default();
    for (table, (requested, completed)) in [&plain, &compacted].into_iter().zip(instants.iter_mut()) {
        let config = create_table(table, &spec()).await.unwrap();
        for step in &STEPS {
            let mut tx = Transaction::begin(table.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
            requested.push(tx.instant().to_owned());
            tx.upsert(&rows(step.upserts)).await.unwrap();
            let deletes = step.deletes.iter().map(|(id, country)| (id.to_string(), format!("country={country}"), engine::ordering::OrderingValue::Int(0)));
            tx.delete(deletes.collect()).await.unwrap();
            completed.push(tx.commit().await.unwrap());
            if step.compact_after && std::ptr::eq(table, &compacted) {
                compact(table, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap().pop().unwrap();
            }
        }
    }
    let (plain_reader, compacted_reader) = (TableReader::open(plain.clone()).await.unwrap(), TableReader::open(compacted.clone()).await.unwrap());
    assert!(compacted_reader.slices(&ReadBound::Latest).await.unwrap().iter().all(|s| s.base_file.is_some()));
    // Every range between steps (and from the beginning, and to the latest).
    let bounds = |completed: &[String], i: usize| (i > 0).then(|| completed[i - 1].clone());
    let name_only = Some(vec!["name".to_owned()]);
    for start in 0..=STEPS.len() {
        for end in start + 1..=STEPS.len() {
            let range = |(_, completed): &(Vec<String>, Vec<String>)| ChangeRange { start: bounds(completed, start), end: bounds(completed, end) };
            let expected = changes_by_step(&plain_reader, &range(&instants[0]), &instants[0].0, None).await;
            let got = changes_by_step(&compacted_reader, &range(&instants[1]), &instants[1].0, None).await;
            assert_eq!(got, expected, "changes after step {start} up to step {end}");
            let projected = changes_by_step(&compacted_reader, &range(&instants[1]), &instants[1].0, name_only.clone()).await;
            let without_keys = |changes: Vec<(String, String, Option<String>, usize)>| {
                let mut changes: Vec<_> = changes.into_iter().map(|(key, op, name, step)| (name.is_none().then_some(key), op, name, step)).collect();
                changes.sort();
                changes
            };
            assert_eq!(without_keys(projected), without_keys(expected.clone()), "changes after step {start} up to step {end}, reading only name");
        }
    }
    // And what they are, from after the first step to the latest: every operation appears.
    let all = changes_by_step(&compacted_reader, &ChangeRange { start: Some(instants[1].1[0].clone()), end: None }, &instants[1].0, None).await;
    let row = |key: &str, op: &str, name: Option<&str>, step| (key.to_owned(), op.to_owned(), name.map(str::to_owned), step);
    assert_eq!(all, [
        row("1", "U", Some("ann-3"), 3),
        row("2", "U", Some("bob-2"), 2),
        row("3", "U", Some("cy-again"), 3),
        row("4", "D", None, 3),
        row("5", "U", Some("ed-2"), 4),
        row("6", "D", None, 4),
        row("8", "I", Some("hal"), 3),
    ]);

    // A cleaner that removes the files the first compaction folded away leaves no way to tell
    // which keys were alive after step 1: the read fails instead of guessing.
    let first_steps = &instants[1].0[..3];
    for (path, _) in compacted.list_recursive("").await.unwrap() {
        if !path.starts_with(".hoodie") && first_steps.iter().any(|instant| path.contains(instant.as_str())) {
            compacted.delete(&path).await.unwrap();
        }
    }
    let cleaned = TableReader::open(compacted.clone()).await.unwrap();
    let error = cleaned.read_changes(&ChangeRange { start: Some(instants[1].1[0].clone()), end: None }, true).await.unwrap_err();
    assert_eq!(error.kind(), engine::error::ErrorKind::NotFound, "{error}");
    assert!(error.to_string().contains("no longer in storage"), "{error}");
    // From after the first compaction, the table still answers.
    let later = ChangeRange { start: Some(instants[1].1[3].clone()), end: None };
    assert_eq!(changes_by_step(&cleaned, &later, &instants[1].0, None).await, [row("5", "U", Some("ed-2"), 4), row("6", "D", None, 4)]);
}

#[tokio::test]
async fn a_clean_deletes_the_slices_no_read_needs_and_reads_stay_the_same() {
    use engine::services::clean::{clean, CleanOptions};
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &spec()).await.unwrap();
    let mut model = std::collections::BTreeMap::new();
    // Four rounds of two commits and a compaction: every file group gets four slices.
    let mut first_of_round = Vec::new();
    for round in 0..4i64 {
        for step in 0..2i64 {
            let data: Vec<(i64, String)> = (1..=6).map(|id| (id, format!("r{round}s{step}id{id}"))).collect();
            let rows_: Vec<(i64, &str, &str, i64)> = data.iter().map(|(id, n)| (*id, n.as_str(), if id % 2 == 0 { "nl" } else { "be" }, round * 10 + step)).collect();
            let instant = commit(&storage, &config, &rows_).await;
            if step == 0 {
                first_of_round.push(instant);
            }
            model.extend(data);
        }
        compact(&storage, &writer(2), &LockOptions::default(), EXPIRY).await.unwrap().pop().unwrap();
    }
    let expected: Vec<(i64, String)> = model.into_iter().collect();
    assert_eq!(snapshot(&storage).await, expected);
    let files_before = storage.list_recursive("").await.unwrap();
    let retain = CleanOptions { retain_commits: 3, ..Default::default() };

    // A consumer that has read nothing yet holds every slice back.
    let held = CleanOptions { keep_changes_after: Some(String::new()), ..retain.clone() };
    assert_eq!(clean(&storage, &writer(3), &LockOptions::default(), &held).await.unwrap(), None);

    let cleaned = clean(&storage, &writer(3), &LockOptions::default(), &retain).await.unwrap().unwrap();
    assert!(cleaned.files_deleted > 0 && cleaned.bytes_freed > 0, "{cleaned:?}");
    let data = |files: Vec<(String, u64)>| -> std::collections::BTreeSet<String> {
        files.into_iter().map(|(p, _)| p).filter(|p| !p.starts_with(".hoodie/")).collect()
    };
    let (before, after) = (data(files_before), data(storage.list_recursive("").await.unwrap()));
    assert!(after.is_subset(&before));
    assert_eq!(before.len() - after.len(), cleaned.files_deleted);
    // The latest slices and everything the retained commits read are still there.
    assert_eq!(snapshot(&storage).await, expected);
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let since_retained = reader.read_changes(&ChangeRange { start: Some(cleaned.earliest_commit_to_retain.clone()), end: None }, true).await;
    assert!(since_retained.is_ok(), "{since_retained:?}");
    let from_start = reader.read_changes(&ChangeRange { start: Some(first_of_round[0].clone()), end: None }, true).await;
    assert!(from_start.is_err(), "changes from before the earliest commit to retain are gone");
    // Time travel to before the earliest commit to retain is refused, from it on it reads.
    let refused = reader.read_snapshot(Some(&first_of_round[0])).await.unwrap_err();
    assert!(refused.to_string().contains("no longer in storage"), "{refused}");
    assert!(reader.read_snapshot(Some(&cleaned.earliest_commit_to_retain)).await.is_ok());
    // Nothing more to clean: no instant.
    assert_eq!(clean(&storage, &writer(3), &LockOptions::default(), &retain).await.unwrap(), None);
    let timeline = reader.timeline();
    let cleans: Vec<_> = timeline.instants().iter().filter(|i| i.action == "clean").collect();
    assert_eq!(cleans.len(), 1);
    assert!(cleans[0].is_completed());

    // A clean that stopped after its plan (the deleted files back, no completed instant) is
    // finished from that plan by the next clean, and completed once.
    for path in before.difference(&after) {
        storage.put(path, Bytes::from_static(b"left by a clean that stopped")).await.unwrap();
    }
    let completed = format!(".hoodie/timeline/{}_{}.clean", cleaned.instant, cleaned.completion);
    storage.delete(&completed).await.unwrap();
    assert_eq!(clean(&storage, &writer(4), &LockOptions::default(), &retain).await.unwrap(), None);
    assert_eq!(data(storage.list_recursive("").await.unwrap()), after, "the plan's files are gone again");
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let cleans: Vec<_> = reader.timeline().instants().iter().filter(|i| i.action == "clean").collect();
    assert!(cleans.len() == 1 && cleans[0].timestamp == cleaned.instant && cleans[0].is_completed(), "{cleans:?}");
    assert_eq!(snapshot(&storage).await, expected);
}

/// The snapshot, time travel and change reads of every range stay what they were when the
/// oldest commits move to the LSM history, including a write that completed after a later one
/// had (its range is decided by the completion time the history keeps, not by its request);
/// the history is what Hudi's layout says; a second archival finds nothing to do and one
/// redone after a crash (its active files back) ends the same.
#[tokio::test]
async fn archived_commits_read_as_before_from_the_lsm_history() {
    use engine::services::archive::{archive, ArchiveOptions};
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &spec()).await.unwrap();
    // A slow write requested before a fast one and completed after it.
    let mut slow_write = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    slow_write.upsert(&rows(&[(1, "slow", "nl", 1)])).await.unwrap();
    let slow = slow_write.instant().to_owned();
    let fast_completed = commit(&storage, &config, &[(2, "fast", "be", 1)]).await;
    let slow_completed = slow_write.commit().await.unwrap();
    assert!(slow_completed > fast_completed);
    let fast = requested_of(&TableReader::open(storage.clone()).await.unwrap(), &fast_completed);
    assert!(slow < fast, "requested first");
    let mut model = std::collections::BTreeMap::from([(1, "slow".to_owned()), (2, "fast".to_owned())]);
    for round in 0..6i64 {
        for step in 0..3i64 {
            let id = 3 + step;
            let name = format!("r{round}s{step}");
            commit(&storage, &config, &[(id, &name, if id % 2 == 0 { "nl" } else { "be" }, round * 10 + step + 2)]).await;
            model.insert(id, name);
        }
        if round % 2 == 1 {
            compact(&storage, &writer(2), &LockOptions::default(), EXPIRY).await.unwrap().pop().unwrap();
        }
    }
    let expected: Vec<(i64, String)> = model.into_iter().collect();
    let before = TableReader::open(storage.clone()).await.unwrap();
    assert_eq!(snapshot_of(&before).await, expected);
    let commits: Vec<(String, String)> =
        before.timeline().completed_writes().map(|i| (i.timestamp.clone(), i.completion.clone().unwrap())).collect();
    // Ranges starting at every completion time, and time travel to every commit.
    let steps: Vec<String> = commits.iter().map(|(t, _)| t.clone()).collect();
    let mut reads = Vec::new();
    for (instant, completion) in &commits {
        let range = ChangeRange { start: Some(completion.clone()), end: None };
        reads.push((changes_by_step(&before, &range, &steps, None).await, snapshot_of(&before).await, before.read_snapshot(Some(instant)).await.unwrap().len()));
    }
    let since_fast = changes_by_step(&before, &ChangeRange { start: Some(fast_completed.clone()), end: None }, &steps, None).await;
    assert!(since_fast.iter().any(|(_, _, name, _)| name.as_deref() == Some("slow")), "the slow write completed after the fast one: {since_fast:?}");

    let timeline_before: std::collections::BTreeMap<String, Vec<u8>> = std::fs::read_dir(dir.path().join(".hoodie/timeline"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap()))
        .collect();
    let options = ArchiveOptions { min_commits: 4, max_commits: 6, start_above: None, compaction_delta_commits: 1 };
    let archived = archive(&storage, &writer(3), &LockOptions::default(), &options).await.unwrap().archived.unwrap();
    assert!(archived.commits >= 2 && archived.first == slow, "{archived:?}");
    let history = dir.path().join(".hoodie/timeline/history");
    let version = std::fs::read_to_string(history.join("_version_")).unwrap();
    assert_eq!(version, "1");
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(history.join("manifest_1")).unwrap()).unwrap();
    let file = &manifest["files"][0];
    let name = file["fileName"].as_str().unwrap();
    assert_eq!(name, format!("{}_{}_0.parquet", archived.first, archived.last));
    assert_eq!(file["fileLen"].as_u64().unwrap(), std::fs::metadata(history.join(name)).unwrap().len());

    let after = TableReader::open(storage.clone()).await.unwrap();
    assert!(after.timeline().is_archived(&slow) && after.timeline().is_archived(&fast));
    assert_eq!(after.timeline().completion_time(&fast), Some(fast_completed.as_str()), "from the history");
    let active = after.timeline().completed_writes().count();
    assert_eq!(active, commits.len() - archived.commits);
    for ((instant, completion), (changes, latest, as_of)) in commits.iter().zip(&reads) {
        let range = ChangeRange { start: Some(completion.clone()), end: None };
        assert_eq!(&changes_by_step(&after, &range, &steps, None).await, changes, "changes after {completion}");
        assert_eq!(&snapshot_of(&after).await, latest);
        assert_eq!(after.read_snapshot(Some(instant)).await.unwrap().len(), *as_of, "as of {instant}");
    }
    assert_eq!(archive(&storage, &writer(3), &LockOptions::default(), &options).await.unwrap().archived, None, "nothing more to archive");

    // Redone after a crash between publishing and deleting (the archived files back): the
    // history gains nothing, and the same files go.
    let timeline_dir = dir.path().join(".hoodie/timeline");
    let names = |d: &std::path::Path| -> std::collections::BTreeSet<String> {
        std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).filter(|n| n != "history").collect()
    };
    let archived_names: Vec<String> = timeline_before.keys().filter(|n| !names(&timeline_dir).contains(*n)).cloned().collect();
    assert_eq!(archived_names.len(), archived.files_deleted);
    let after_names = names(&timeline_dir);
    for name in &archived_names {
        std::fs::write(timeline_dir.join(name), &timeline_before[name]).unwrap();
    }
    let redone = archive(&storage, &writer(3), &LockOptions::default(), &options).await.unwrap().archived.unwrap();
    assert_eq!(redone, archived);
    assert_eq!(names(&timeline_dir), after_names);
    assert_eq!(std::fs::read_to_string(history.join("_version_")).unwrap(), "1", "the history was complete");
    assert_eq!(snapshot(&storage).await, expected);
}

/// `compact` while another writer executes a pending compaction (a worker's round): it waits
/// for that one to complete (not "being executed by another writer"), then compacts what is
/// left, the logs written after that plan; nothing is left after it.
#[tokio::test]
async fn compact_waits_for_a_running_compaction_and_compacts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &spec()).await.unwrap();
    commit(&storage, &config, &[(1, "ann", "nl", 10), (2, "bob", "nl", 10), (3, "cy", "be", 10)]).await;
    commit(&storage, &config, &[(1, "ann-2", "nl", 20)]).await;
    let running = schedule_compaction(&storage, &writer(8), &LockOptions::default()).await.unwrap().unwrap();
    // Logs after the plan, in its file groups: left for a later compaction.
    commit(&storage, &config, &[(2, "bob-2", "nl", 30), (3, "cy-2", "be", 30)]).await;
    let slow = LockOptions { pause_before_completing: Duration::from_millis(1500), ..LockOptions::default() };
    let heartbeat = dir.path().join(".hoodie/.heartbeat").join(&running);
    let executor = writer(8);
    let (executed, done) = tokio::join!(run_compaction(&storage, &running, &executor, &slow, EXPIRY), async {
        // Its heartbeat shows it executing.
        while !heartbeat.exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        compact(&storage, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap()
    });
    assert_eq!(executed.unwrap().instant, running);
    assert_eq!(done.len(), 1, "{done:?}");
    assert!(done[0].instant > running);
    let reader = TableReader::open(storage.clone()).await.unwrap();
    assert!(reader.timeline().pending_compactions().next().is_none());
    assert!(reader.slices(&ReadBound::Latest).await.unwrap().iter().all(|s| s.log_files.is_empty()));
    assert_eq!(snapshot(&storage).await, [(1, "ann-2"), (2, "bob-2"), (3, "cy-2")].map(|(i, n)| (i, n.to_owned())));
}
