//! File groups replaced by a replacecommit (Spark's insert overwrite or clustering): the clean
//! deletes them once the replacecommit is older than what it retains, and archival then goes
//! past the replacecommit (it stops at one whose replaced groups may still be in storage).

use bytes::Bytes;

use crate::services::archive::{archive, ArchiveOptions};
use crate::services::clean::{clean, CleanOptions};
use crate::table::bucket::file_id_of_bucket;
use crate::write::commit::{requested_replace_avro, CommitMetadata};
use crate::write::table::TestTable;
use crate::write::time::{LockOptions, TableLock};
use crate::write::WriterId;

fn writer() -> WriterId {
    WriterId { node: 9, process: 1 }
}

/// A completed replacecommit (insert overwrite) that replaces `file_ids` and writes nothing.
async fn replace(table: &TestTable, file_ids: &[String]) -> String {
    let options = LockOptions::default();
    let dir = &table.config.timeline_dir;
    let (instant, completion) = TableLock::hold(&table.storage, "test", &options, async |lock| {
        Ok((lock.next_time(&options).await?, lock.next_time(&options).await?))
    })
    .await
    .unwrap();
    let metadata = CommitMetadata {
        operation_type: "INSERT_OVERWRITE".into(),
        replaced_file_ids: Some([(String::new(), file_ids.to_vec())].into()),
        ..Default::default()
    };
    let storage = &table.storage;
    storage.put(&format!("{dir}/{instant}.replacecommit.requested"), Bytes::from(requested_replace_avro("INSERT_OVERWRITE").unwrap())).await.unwrap();
    storage.put(&format!("{dir}/{instant}.replacecommit.inflight"), Bytes::from(CommitMetadata::default().to_avro().unwrap())).await.unwrap();
    storage.put(&format!("{dir}/{instant}_{completion}.replacecommit"), Bytes::from(metadata.to_avro().unwrap())).await.unwrap();
    instant
}

fn files_of(listing: &[(String, u64)], file_id: &str) -> usize {
    listing.iter().filter(|(path, _)| path.contains(file_id) && !path.starts_with(".hoodie")).count()
}

#[tokio::test]
async fn replaced_file_groups_are_cleaned_and_then_archived_past() {
    let table = TestTable::new(2).await;
    for round in 0..3 {
        table.upsert((0..20).collect(), &format!("r{round}")).await;
    }
    let (gone, kept) = (file_id_of_bucket(0), file_id_of_bucket(1));
    let listing = table.storage.list_recursive("").await.unwrap();
    assert!(files_of(&listing, &gone) > 0 && files_of(&listing, &kept) > 0);
    let replaced_at = replace(&table, &[gone.clone()]).await;
    let expected: Vec<(i64, String)> = table.names().await;
    assert!(!expected.is_empty() && expected.len() < 20, "the replaced group's rows are gone from reads: {expected:?}");
    for _ in 0..3 {
        table.upsert(vec![expected[0].0], &expected[0].1).await;
    }
    // Compacted: the latest slices hold no file of the commits before (archival stops there).
    for instant in crate::services::compaction::compact(&table.storage, &writer(), &LockOptions::default(), std::time::Duration::from_secs(60)).await.unwrap() {
        assert!(instant.file_groups > 0);
    }
    table.upsert(vec![expected[0].0], &expected[0].1).await;

    let options = CleanOptions { retain_commits: 1, ..Default::default() };
    let cleaned = clean(&table.storage, &writer(), &LockOptions::default(), &options).await.unwrap().expect("something to clean");
    assert!(cleaned.earliest_commit_to_retain > replaced_at);
    let listing = table.storage.list_recursive("").await.unwrap();
    assert_eq!(files_of(&listing, &gone), 0, "every file of the replaced group is deleted: {listing:?}");
    assert!(files_of(&listing, &kept) > 0, "the other group keeps its latest slice");
    assert_eq!(table.names().await, expected);

    // Archival goes past the replacecommit now that its groups are gone.
    let options = ArchiveOptions { min_commits: 1, max_commits: 2, compaction_delta_commits: 0, ..Default::default() };
    let outcome = archive(&table.storage, &writer(), &LockOptions::default(), &options).await.unwrap();
    let archived = outcome.archived.unwrap_or_else(|| panic!("nothing archived: {:?}", outcome.held_back));
    assert!(archived.last >= replaced_at, "{archived:?} {:?}", outcome.held_back);
    assert_eq!(table.names().await, expected);
}
