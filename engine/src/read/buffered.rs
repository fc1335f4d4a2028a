//! Reads that see rows a writer keeps outside the lake until it writes them there (PostgreSQL's
//! write buffer, `write_mode 'buffered'`). The rows are encoded as the log blocks a commit of
//! them would write, into log files that exist only in the reader's memory, of one deltacommit
//! that completes after everything else. So they merge with the table exactly as they will once
//! written: by key and ordering value, in the order buffered, through the one merge routine —
//! and every read built on [`TableReader`] (scans, pushed aggregates, key checks) sees them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use bytes::Bytes;

use crate::error::Result;
use crate::read::TableReader;
use crate::write::Change;

/// The requested time of the buffered rows' deltacommit: later than any real instant, and
/// below [`crate::timeline::DECIDED_COMPLETION`], the completion time of decided writes.
pub const BUFFERED_INSTANT: &str = "99999999999999998";

/// Numbers the in-memory log files of each reader apart, so that the caches of log files and
/// merges, keyed by file name, never take one reader's buffered rows for another's.
static OVERLAYS: AtomicU64 = AtomicU64::new(1);

impl TableReader {
    /// The reader, seeing also `changes`: batches of data rows (by column name, in any schema
    /// the table had) upserted or deleted in this order after everything the table holds.
    /// Such a reader reads the table's latest state only; its [`Self::state`] names files that
    /// no other process can read.
    pub fn with_buffered(mut self, changes: Vec<(Change, RecordBatch)>) -> Result<TableReader> {
        let changes = crate::write::rows::coalesce(changes)?;
        if changes.is_empty() {
            return Ok(self);
        }
        let buckets = crate::write::transaction::bucket_count(&self.config)?;
        let encoder = crate::write::transaction::encoder(&self.config, &self.avro_schema, BUFFERED_INSTANT.to_owned(), buckets)?;
        let token = format!("0-0-{}", OVERLAYS.fetch_add(1, Ordering::Relaxed));
        let mut files: HashMap<String, Bytes> = HashMap::new();
        let mut versions: HashMap<(String, String), u32> = HashMap::new();
        let mut listing = Vec::new();
        let mut sequence = 0;
        for (change, rows) in &changes {
            let encoded = encoder.encode(*change, rows, &[], sequence)?;
            for block in encoded.blocks {
                sequence += 1;
                let version = versions.entry((block.partition.clone(), block.file_id.clone())).or_default();
                *version += 1;
                let name = format!(".{}_{BUFFERED_INSTANT}.log.{version}_{token}", block.file_id);
                let path = crate::table::files::path_in_partition(&block.partition, &name);
                listing.push((path.clone(), block.bytes.len() as u64));
                files.insert(path, Bytes::from(block.bytes));
            }
        }
        self.timeline.with_buffered_write(BUFFERED_INSTANT);
        self.buffered = Arc::new(files);
        Ok(self.with_files(listing))
    }

    /// The bytes of the in-memory log file at `path`, if it is one.
    pub(crate) fn buffered_file(&self, path: &str) -> Option<Bytes> {
        self.buffered.get(path).cloned()
    }

    /// Whether any of `slice`'s log files is in memory: its merges are not kept.
    pub(crate) fn has_buffered_logs(&self, slice: &crate::view::FileSlice) -> bool {
        !self.buffered.is_empty() && slice.log_files.iter().any(|log| self.buffered.contains_key(&slice.log_path(log)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};

    use super::*;
    use crate::write::table::TestTable;
    use crate::write::{Transaction, WriterId};

    fn rows(table: &TestTable, ids: &[i64], name: &str) -> RecordBatch {
        let names = StringArray::from(vec![name; ids.len()]);
        RecordBatch::try_new(Arc::new(table.schema.clone()), vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(names)]).unwrap()
    }

    fn names_of(batches: &[RecordBatch]) -> Vec<(i64, String)> {
        let mut out = Vec::new();
        for batch in batches {
            let ids = batch.column_by_name("id").unwrap().as_any().downcast_ref::<Int64Array>().unwrap();
            let names = batch.column_by_name("name").unwrap().as_any().downcast_ref::<StringArray>().unwrap();
            out.extend((0..batch.num_rows()).map(|i| (ids.value(i), names.value(i).to_owned())));
        }
        out.sort();
        out
    }

    /// A small deterministic generator (the seed is printed on failure).
    struct Random(u64);

    impl Random {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// Buffered changes read as the table will be once a commit writes them, in the same order:
    /// over random committed states and random changes (upserts and deletes of overlapping
    /// keys, including keys of buckets without a file group yet).
    #[tokio::test]
    async fn buffered_changes_read_as_their_commit_will() {
        for seed in 1..=12u64 {
            let mut random = Random(seed);
            let table = TestTable::new(4).await;
            for round in 0..random.below(3) {
                let ids: Vec<i64> = (0..1 + random.below(20)).map(|_| random.below(30) as i64).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
                table.upsert(ids, &format!("committed {round}")).await;
            }
            let mut changes = Vec::new();
            for step in 0..1 + random.below(6) {
                let ids: Vec<i64> = (0..1 + random.below(10)).map(|_| random.below(40) as i64).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
                let change = if random.below(3) == 0 { Change::Delete } else { Change::Upsert };
                changes.push((change, rows(&table, &ids, &format!("buffered {step}"))));
            }
            let reader = TableReader::open(table.storage.clone()).await.unwrap();
            let before = names_of(&reader.read_snapshot(None).await.unwrap());
            let buffered = reader.clone().with_buffered(changes.clone()).unwrap();
            let seen = names_of(&buffered.read_snapshot(None).await.unwrap());
            // Twice: nothing of the first read is kept for the second, or for other readers.
            assert_eq!(names_of(&buffered.read_snapshot(None).await.unwrap()), seen, "seed {seed}");
            assert_eq!(names_of(&reader.read_snapshot(None).await.unwrap()), before, "seed {seed}: the reader without them");

            let writer = WriterId { node: 9, process: 9 };
            let mut transaction = Transaction::begin(table.storage.clone(), table.config.clone(), writer, Default::default()).await.unwrap();
            for (change, rows) in &changes {
                match change {
                    Change::Upsert => transaction.upsert(rows).await.unwrap(),
                    Change::Delete => transaction.delete_rows(rows).await.unwrap(),
                }
            }
            transaction.commit().await.unwrap();
            assert_eq!(seen, table.names().await, "seed {seed}: {changes:?}");
        }
    }
}
