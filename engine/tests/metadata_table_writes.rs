//! Tables this engine creates with a metadata table, and Spark's tables that have one: every
//! action — writes, compactions, cleans, rollbacks, archival — keeps the metadata table's
//! `files` partition listing exactly the files of the completed actions, so the snapshot read
//! through it is the model's, and the metadata table compacts itself.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::customers::{local, rows, snapshot, spec, writer};
use engine::mdt::files::{listing, METADATA_TABLE_PATH};
use engine::services::archive::{archive, ArchiveOptions};
use engine::services::clean::{clean, CleanOptions};
use engine::services::compaction::compact;
use engine::services::rollback::rollback_failed_writes;
use engine::storage::Storage;
use engine::timeline::Timeline;
use engine::view::FileSystemView;
use engine::write::time::LockOptions;
use engine::write::{create_table, NewTable, Transaction};
use rand::{Rng, SeedableRng};

const EXPIRY: Duration = Duration::from_secs(60);

/// A new table with a metadata table, in a temporary directory.
async fn new_table() -> (tempfile::TempDir, Storage, engine::table::TableConfig) {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &NewTable { metadata_table: true, ..spec() }).await.unwrap();
    (dir, storage, config)
}

/// A transaction of writer `process` that upserted `data`.
async fn upserting(storage: &Storage, config: &engine::table::TableConfig, process: u32, data: &[(i64, &str, &str, i64)]) -> Transaction {
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(process), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(data)).await.unwrap();
    tx
}

/// `(path, size)` of every data file the metadata table lists, sorted.
async fn listed(storage: &Storage) -> Vec<(String, u64)> {
    let config = engine::table::load_config(storage).await.unwrap();
    let timeline = Timeline::load(storage, &config).await.unwrap();
    let mut files = listing(storage, &timeline).await.unwrap().expect("a metadata table").files;
    files.sort();
    files
}

/// `(path, size)` of every data file in storage, sorted.
async fn stored(storage: &Storage) -> Vec<(String, u64)> {
    let mut files = FileSystemView::load(storage).await.unwrap().listing();
    files.sort();
    files
}

/// Commits of the metadata table's timeline with `action`.
fn metadata_instants(base: &std::path::Path, action: &str) -> usize {
    std::fs::read_dir(base.join(METADATA_TABLE_PATH).join(".hoodie/timeline"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(&format!(".{action}")))
        .count()
}

#[tokio::test]
async fn every_action_keeps_the_files_partition_listing_what_storage_holds() {
    let seed = common::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (dir, storage, config) = new_table().await;
    assert!(config.lists_files_in_metadata_table());
    assert_eq!(listed(&storage).await, [], "a new table lists nothing");
    let options = LockOptions::default();
    let mut model: BTreeMap<i64, String> = BTreeMap::new();
    let countries = ["nl", "be", "fr"];
    for step in 0..36i64 {
        let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), options.clone()).await.unwrap();
        let mut upserts = Vec::new();
        for _ in 0..rng.random_range(1..6) {
            let id = rng.random_range(0..40i64);
            let name = format!("n{step}-{id}");
            model.insert(id, name.clone());
            upserts.push((id, name));
        }
        upserts.sort();
        upserts.dedup_by_key(|(id, _)| *id);
        let batch: Vec<(i64, &str, &str, i64)> = upserts.iter().map(|(id, n)| (*id, n.as_str(), countries[(*id % 3) as usize], step)).collect();
        tx.upsert(&rows(&batch)).await.unwrap();
        if rng.random_bool(0.3) {
            if let Some(&id) = model.keys().nth(rng.random_range(0..model.len())) {
                if !upserts.iter().any(|(u, _)| *u == id) {
                    model.remove(&id);
                    tx.delete(vec![(id.to_string(), format!("country={}", countries[(id % 3) as usize]), engine::ordering::OrderingValue::Int(0))]).await.unwrap();
                }
            }
        }
        tx.commit().await.unwrap();
        if step % 7 == 6 {
            compact(&storage, &writer(2), &options, EXPIRY).await.unwrap();
        }
        if step % 11 == 10 {
            clean(&storage, &writer(3), &options, &CleanOptions { retain_commits: 2, ..Default::default() }).await.unwrap();
        }
        assert_eq!(listed(&storage).await, stored(&storage).await, "seed {seed}, step {step}");
        let expected: Vec<(i64, String)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
        assert_eq!(snapshot(&storage).await, expected, "seed {seed}, step {step}");
    }
    // The metadata table compacts every ten deltacommits, then cleans its old slices and
    // archives its timeline.
    assert!(metadata_instants(dir.path(), "commit") >= 1, "compacted");
    let files_partition = dir.path().join(METADATA_TABLE_PATH).join("files");
    assert!(!files_partition.join("files-0000-0_0-0-0_00000000000000000.hfile").exists(), "its first slice is cleaned");
    assert!(metadata_instants(dir.path(), "clean") >= 1);
    assert!(dir.path().join(METADATA_TABLE_PATH).join(".hoodie/timeline/history/_version_").exists(), "its timeline is archived");
    assert!(metadata_instants(dir.path(), "deltacommit") <= 31, "archived down to at most 31 commits");
    // Archival passes only what the metadata table's compactions folded into its base file.
    let archived = archive(&storage, &writer(4), &options, &ArchiveOptions { min_commits: 5, max_commits: 8, start_above: None, compaction_delta_commits: 0 })
        .await
        .unwrap();
    let latest_compaction = engine::mdt::writer::latest_compaction(&storage).await.unwrap().unwrap();
    let archived = archived.archived.expect("something archived");
    assert!(archived.last < latest_compaction, "{archived:?} past {latest_compaction}");
    assert_eq!(listed(&storage).await, stored(&storage).await, "seed {seed}, after archival");
    let expected: Vec<(i64, String)> = model.into_iter().collect();
    assert_eq!(snapshot(&storage).await, expected, "seed {seed}, after archival");
}

/// A writer that stopped between the metadata table's completion and the data table's leaves
/// a pending write with a completed metadata deltacommit: not listed, and its rollback takes
/// the metadata deltacommit and its log away.
#[tokio::test]
async fn a_rollback_takes_the_metadata_deltacommit_of_its_write() {
    let (dir, storage, config) = new_table().await;
    let options = LockOptions::default();
    upserting(&storage, &config, 1, &[(1, "kept", "nl", 1)]).await.commit().await.unwrap();
    let kept = listed(&storage).await;
    let tx = upserting(&storage, &config, 2, &[(2, "lost", "be", 1)]).await;
    let instant = tx.instant().to_owned();
    tx.commit().await.unwrap();
    let timeline = dir.path().join(".hoodie/timeline");
    let completed = std::fs::read_dir(&timeline).unwrap().map(|e| e.unwrap().path()).find(|p| {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        name.starts_with(&format!("{instant}_")) && name.ends_with(".deltacommit")
    });
    std::fs::remove_file(completed.expect("the completed write")).unwrap();
    assert_eq!(listed(&storage).await, kept, "a pending write's files are not listed");
    assert_eq!(metadata_instants(dir.path(), "deltacommit"), 3, "the metadata table's creation and both writes");

    tokio::time::sleep(Duration::from_millis(20)).await;
    let rolled = rollback_failed_writes(&storage, &config, Duration::from_millis(10), "cleaner", &options).await.unwrap();
    assert_eq!(rolled.iter().map(|r| r.instant.as_str()).collect::<Vec<_>>(), [instant.as_str()]);
    assert_eq!(metadata_instants(dir.path(), "deltacommit"), 2);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join(METADATA_TABLE_PATH).join("files"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&instant))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(listed(&storage).await, stored(&storage).await);
    assert_eq!(snapshot(&storage).await, [(1, "kept".to_owned())]);
}

/// The same stop, then the write completed again (PostgreSQL finishes a committed
/// transaction's write from its commit intent): the metadata table is caught up already, its
/// deltacommit not written twice, and the write is listed.
#[tokio::test]
async fn a_write_completed_again_after_its_metadata_commit_is_listed_once() {
    let (dir, storage, config) = new_table().await;
    let options = LockOptions::default();
    let tx = upserting(&storage, &config, 1, &[(1, "ann", "nl", 1), (2, "bob", "be", 1)]).await;
    let prepared = tx.prepare().await.unwrap();
    let first = prepared.complete(&storage, "test", &options).await.unwrap();
    assert!(first.created);
    let completed = dir.path().join(".hoodie/timeline").join(format!("{}_{}.deltacommit", prepared.instant, first.completion));
    std::fs::remove_file(completed).unwrap();
    assert_eq!(listed(&storage).await, [], "pending again: not listed");
    let again = prepared.complete(&storage, "test", &options).await.unwrap();
    assert!(again.created && again.completion > first.completion);
    assert_eq!(metadata_instants(dir.path(), "deltacommit"), 2, "the metadata table's creation and the write, once");
    assert_eq!(listed(&storage).await, stored(&storage).await);
    assert_eq!(snapshot(&storage).await, [(1, "ann".to_owned()), (2, "bob".to_owned())]);
}

/// A compaction of the metadata table that stopped midway (requested, inflight, its base file
/// written) is undone by the next one that is due; its base file was never read.
#[tokio::test]
async fn a_metadata_compaction_that_stopped_midway_is_undone() {
    let (dir, storage, config) = new_table().await;
    let metadata = dir.path().join(METADATA_TABLE_PATH);
    let stopped = "20200101000000000";
    let planted = [
        metadata.join(format!(".hoodie/timeline/{stopped}.compaction.requested")),
        metadata.join(format!(".hoodie/timeline/{stopped}.compaction.inflight")),
        metadata.join(format!("files/files-0000-0_0-0-0_{stopped}.hfile")),
    ];
    for (i, path) in planted.iter().enumerate() {
        std::fs::write(path, if i == 2 { &b"not an hfile"[..] } else { &b""[..] }).unwrap();
    }
    for id in 0..12 {
        upserting(&storage, &config, 1, &[(id, "x", "nl", id)]).await.commit().await.unwrap();
        assert_eq!(listed(&storage).await, stored(&storage).await, "after write {id}");
    }
    assert!(planted.iter().all(|p| !p.exists()), "undone");
    assert!(metadata_instants(dir.path(), "commit") >= 1, "compacted since");
    assert_eq!(snapshot(&storage).await.len(), 12);
}

/// An existing table given a metadata table (created again with `metadata_table`): it lists the
/// files of the completed actions, and a write pending meanwhile records its own when it
/// completes.
#[tokio::test]
async fn an_existing_table_gets_a_metadata_table_listing_its_completed_files() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &spec()).await.unwrap();
    assert!(!config.lists_files_in_metadata_table());
    for round in 0..3 {
        upserting(&storage, &config, 1, &[(round, "a", "nl", round), (round + 10, "b", "be", round)]).await.commit().await.unwrap();
    }
    compact(&storage, &writer(2), &LockOptions::default(), EXPIRY).await.unwrap();
    upserting(&storage, &config, 1, &[(0, "a2", "nl", 5)]).await.commit().await.unwrap();
    let pending = upserting(&storage, &config, 3, &[(20, "pending", "fr", 1)]).await;
    let before = stored(&storage).await;
    // What a creation that stopped midway left: not declared, so replaced, timeline and all.
    let leftover = dir.path().join(METADATA_TABLE_PATH).join(".hoodie/timeline/00000000000000000_20200101000000000.deltacommit");
    std::fs::create_dir_all(leftover.parent().unwrap()).unwrap();
    std::fs::write(&leftover, b"").unwrap();

    let config = create_table(&storage, &NewTable { metadata_table: true, ..spec() }).await.unwrap();
    assert!(config.lists_files_in_metadata_table());
    assert!(!leftover.exists());
    let through_metadata = listed(&storage).await;
    let pending_files: Vec<&(String, u64)> = before.iter().filter(|(p, _)| p.contains(pending.instant())).collect();
    assert!(!pending_files.is_empty());
    assert_eq!(through_metadata, before.iter().filter(|f| !pending_files.contains(f)).cloned().collect::<Vec<_>>());
    pending.commit().await.unwrap();
    assert_eq!(listed(&storage).await, stored(&storage).await);
    let names: Vec<(i64, String)> = snapshot(&storage).await;
    assert_eq!(names.len(), 7);
    assert!(names.contains(&(20, "pending".to_owned())) && names.contains(&(0, "a2".to_owned())));
    // Created again, nothing changes.
    let again = create_table(&storage, &NewTable { metadata_table: true, ..spec() }).await.unwrap();
    assert!(again.lists_files_in_metadata_table());
    assert_eq!(listed(&storage).await, stored(&storage).await);
}
