//! Which record keys a snapshot holds: what `INSERT … ON CONFLICT DO NOTHING` asks before it
//! writes a row.

use std::collections::HashSet;

use arrow::array::{Array, AsArray};

use crate::error::{Error, ErrorKind, Result};
use crate::read::filter::{RecordKeys, ScanFilter};
use crate::read::schema::{META_FIELDS, RECORD_KEY_COLUMN};
use crate::read::{ScanOptions, ScanStats, TableReader};
use crate::timeline::ReadBound;

/// A row's identity in a Hudi table: its partition path and record key.
pub type RowKey = (String, String);

impl TableReader {
    /// Which of `keys` have a live row in the latest snapshot: only the file groups the keys
    /// hash to, in their partitions, are read, and of them only the record keys (and what
    /// the merge needs).
    pub async fn live_keys(&self, keys: &[RowKey]) -> Result<HashSet<RowKey>> {
        let mut live = HashSet::new();
        if keys.is_empty() {
            return Ok(live);
        }
        if !self.config().populate_meta_fields {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "finding existing keys needs the _hoodie_record_key meta field, which this table does not populate",
            ));
        }
        let wanted: HashSet<&RowKey> = keys.iter().collect();
        let partitions: HashSet<&str> = keys.iter().map(|(p, _)| p.as_str()).collect();
        let record_keys = RecordKeys::new(keys.iter().map(|(_, k)| k.clone()).collect());
        let columns = vec![META_FIELDS[RECORD_KEY_COLUMN].to_owned()];
        let options = ScanOptions { filter: ScanFilter::of_record_keys(&record_keys), columns: Some(columns), ..Default::default() };
        let bound = ReadBound::Latest;
        let (slices, _) = self.pruned_slices(&bound, &options).await?;
        // With one key, its bucket alone was kept; with several, the buckets are checked
        // here (the filter names one bucket only when all keys share it).
        let buckets: Option<HashSet<u32>> = self
            .bucket_count()
            .map(|n| keys.iter().map(|(_, k)| crate::table::bucket::bucket_of_key(k, n)).collect());
        for slice in slices.iter().filter(|s| partitions.contains(s.partition.as_str())) {
            let in_buckets = buckets
                .as_ref()
                .is_none_or(|b| crate::table::bucket::bucket_of_file_id(&slice.file_id).is_some_and(|id| b.contains(&id)));
            if !in_buckets {
                continue;
            }
            let Some(rows) = self.read_slice(slice, &bound, &options, &mut ScanStats::default()).await? else { continue };
            let Some(found) = rows.column(RECORD_KEY_COLUMN).as_string_opt::<i32>() else {
                return Err(Error::new(ErrorKind::Corrupt, "the record keys of a file slice are not strings"));
            };
            for row in 0..rows.num_rows() {
                if found.is_null(row) {
                    continue;
                }
                let key = (slice.partition.clone(), found.value(row).to_owned());
                if wanted.contains(&key) {
                    live.insert(key);
                }
            }
        }
        Ok(live)
    }
}

#[cfg(test)]
mod tests {
    use crate::read::TableReader;
    use crate::write::table::TestTable;

    fn keys(ids: &[i64]) -> Vec<super::RowKey> {
        ids.iter().map(|id| (String::new(), id.to_string())).collect()
    }

    /// Keys written, then deleted, then written again: each snapshot's live keys, whether
    /// they share a bucket or not; another partition's key of the same value is not live.
    #[tokio::test]
    async fn live_keys_are_those_of_the_snapshot() {
        let table = TestTable::new(4).await;
        table.upsert(vec![1, 2, 3, 10], "a").await;
        let reader = TableReader::open(table.storage.clone()).await.unwrap();
        let mut live: Vec<_> = reader.live_keys(&keys(&[1, 3, 4, 5, 10, 11])).await.unwrap().into_iter().collect();
        live.sort();
        assert_eq!(live, keys(&[1, 10, 3]));
        assert!(reader.live_keys(&[("p=x".into(), "1".into())]).await.unwrap().is_empty());
        assert!(reader.live_keys(&[]).await.unwrap().is_empty());

        let writer = crate::write::WriterId { node: 1, process: 1 };
        let mut tx = crate::write::Transaction::begin(table.storage.clone(), table.config.clone(), writer, Default::default()).await.unwrap();
        tx.delete(vec![("3".into(), String::new(), crate::ordering::OrderingValue::Int(0))]).await.unwrap();
        tx.commit().await.unwrap();
        table.upsert(vec![4], "b").await;
        let reader = TableReader::open(table.storage.clone()).await.unwrap();
        let mut live: Vec<_> = reader.live_keys(&keys(&[1, 3, 4])).await.unwrap().into_iter().collect();
        live.sort();
        assert_eq!(live, keys(&[1, 4]));
    }
}
