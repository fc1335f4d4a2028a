//! The footers of base files read lately, kept by this process. A base file is never
//! changed once written (a new version of a file group is a new file), so its footer, with
//! the page index that prunes a point query's pages, need not be fetched and parsed again
//! by every query that reads the file (a tenth of a point query's work before).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use parquet::arrow::arrow_reader::ArrowReaderMetadata;

use crate::read::filter::PageBounds;

/// The most bytes of parsed footers kept.
const CAPACITY_BYTES: usize = 32 << 20;

/// A base file as its footer is kept: read through a store opened with the settings of digest
/// `access` ([`crate::storage::Storage::access`]), at `location`, of `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FooterKey {
    pub access: u64,
    pub location: String,
    pub size: u64,
}

struct Entry {
    metadata: ArrowReaderMetadata,
    has_page_index: bool,
    /// Data-page bounds of a column over some row groups, as a point query's pruning reads
    /// them: converted once per file, not once per query ([`PageBounds`]).
    page_bounds: HashMap<(String, Vec<usize>), Arc<PageBounds>>,
    bytes: usize,
    last_used: u64,
}

#[derive(Default)]
struct Footers {
    entries: HashMap<FooterKey, Entry>,
    bytes: usize,
    clock: u64,
}

impl Footers {
    /// The entry of `key`, marked used.
    fn used(&mut self, key: &FooterKey) -> Option<&mut Entry> {
        self.clock += 1;
        let clock = self.clock;
        let entry = self.entries.get_mut(key)?;
        entry.last_used = clock;
        Some(entry)
    }

    fn evict(&mut self) {
        while self.bytes > CAPACITY_BYTES {
            let Some(oldest) = self.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone()) else { break };
            if let Some(evicted) = self.entries.remove(&oldest) {
                self.bytes -= evicted.bytes;
            }
        }
    }
}

static FOOTERS: Mutex<Option<Footers>> = Mutex::new(None);

/// Held by tests that fill or assert this process's footers, which tests share.
#[cfg(test)]
pub(crate) static TESTS: Mutex<()> = Mutex::new(());

fn with_footers<T>(f: impl FnOnce(&mut Footers) -> T) -> T {
    let mut guard = FOOTERS.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(Footers::default))
}

/// The footer of the file of `key`, if kept (with its page index when `page_index`).
pub(crate) fn get(key: &FooterKey, page_index: bool) -> Option<ArrowReaderMetadata> {
    with_footers(|footers| {
        let entry = footers.used(key)?;
        (!page_index || entry.has_page_index).then(|| entry.metadata.clone())
    })
}

/// Keeps the footer of the file of `key` ([`get`]), evicting the least recently used ones
/// beyond the capacity.
pub(crate) fn put(key: &FooterKey, metadata: &ArrowReaderMetadata, has_page_index: bool) {
    let bytes = metadata.metadata().memory_size();
    if bytes > CAPACITY_BYTES / 4 {
        return;
    }
    with_footers(|footers| {
        footers.clock += 1;
        let entry = Entry { metadata: metadata.clone(), has_page_index, page_bounds: HashMap::new(), bytes, last_used: footers.clock };
        if let Some(old) = footers.entries.insert(key.clone(), entry) {
            footers.bytes -= old.bytes;
        }
        footers.bytes += bytes;
        footers.evict();
    })
}

/// The data-page bounds of `column` over the row groups `groups` of the file of `key`, if
/// kept.
pub(crate) fn page_bounds(key: &FooterKey, column: &str, groups: &[usize]) -> Option<Arc<PageBounds>> {
    with_footers(|footers| footers.used(key)?.page_bounds.get(&(column.to_owned(), groups.to_vec())).cloned())
}

/// Keeps page bounds with the file's footer (while it is kept).
pub(crate) fn put_page_bounds(key: &FooterKey, column: &str, groups: &[usize], bounds: Arc<PageBounds>) {
    with_footers(|footers| {
        let bytes = bounds.bytes();
        let Some(entry) = footers.used(key) else { return };
        if entry.page_bounds.insert((column.to_owned(), groups.to_vec()), bounds).is_none() {
            entry.bytes += bytes;
            footers.bytes += bytes;
            footers.evict();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::arrow_reader::ArrowReaderOptions;
    use std::sync::Arc;

    #[test]
    fn footers_are_kept_by_location_and_size_and_evicted_by_age() {
        let _alone = TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let batch = RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(vec![1, 2, 3])) as _)]).unwrap();
        let bytes = bytes::Bytes::from(crate::write::parquet_bytes(&batch, crate::write::ParquetFile::BaseFile(Vec::new())).unwrap());
        let metadata = ArrowReaderMetadata::load(&bytes, ArrowReaderOptions::new()).unwrap();
        let key = |access: u64, name: &str, size: u64| FooterKey { access, location: format!("mem://t/{name}"), size };
        put(&key(1, "a.parquet", 10), &metadata, false);
        assert!(get(&key(1, "a.parquet", 10), false).is_some());
        // Another size is another file, other credentials another reader; a footer without
        // its page index does not answer for one.
        assert!(get(&key(1, "a.parquet", 11), false).is_none() && get(&key(2, "a.parquet", 10), false).is_none());
        assert!(get(&key(1, "a.parquet", 10), true).is_none());
        let each = metadata.metadata().memory_size();
        for i in 0..CAPACITY_BYTES / each + 1 {
            put(&key(1, &format!("f{i}.parquet"), 10), &metadata, true);
            if i % 8 == 0 {
                assert!(get(&key(1, "f0.parquet", 10), true).is_some());
            }
        }
        // The oldest unused is gone; the one used all along is kept.
        assert!(get(&key(1, "a.parquet", 10), false).is_none());
        assert!(get(&key(1, "f0.parquet", 10), true).is_some());
        let guard = FOOTERS.lock().unwrap();
        assert!(guard.as_ref().unwrap().bytes <= CAPACITY_BYTES);
    }
}
