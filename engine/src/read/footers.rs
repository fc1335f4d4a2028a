//! The footers of base files read lately, kept by this process. A base file is never
//! changed once written (a new version of a file group is a new file), so its footer, with
//! the page index that prunes a point query's pages, need not be fetched and parsed again
//! by every query that reads the file (a tenth of a point query's work before).

use std::collections::HashMap;
use std::sync::Mutex;

use parquet::arrow::arrow_reader::ArrowReaderMetadata;

/// The most bytes of parsed footers kept.
const CAPACITY_BYTES: usize = 32 << 20;

struct Entry {
    metadata: ArrowReaderMetadata,
    has_page_index: bool,
    bytes: usize,
    last_used: u64,
}

#[derive(Default)]
struct Footers {
    entries: HashMap<(u64, String, u64), Entry>,
    bytes: usize,
    clock: u64,
}

static FOOTERS: Mutex<Option<Footers>> = Mutex::new(None);

/// The footer of the file at `location` of `size` bytes read through a store opened with the
/// settings of digest `access` ([`crate::storage::Storage::access`]), if kept (with its page
/// index when `page_index`).
pub(crate) fn get(access: u64, location: &str, size: u64, page_index: bool) -> Option<ArrowReaderMetadata> {
    let mut guard = FOOTERS.lock().unwrap_or_else(|e| e.into_inner());
    let footers = guard.get_or_insert_with(Footers::default);
    footers.clock += 1;
    let clock = footers.clock;
    let entry = footers.entries.get_mut(&(access, location.to_owned(), size))?;
    if page_index && !entry.has_page_index {
        return None;
    }
    entry.last_used = clock;
    Some(entry.metadata.clone())
}

/// Keeps the footer of the file at `location` of `size` bytes read with `access` ([`get`]),
/// evicting the least recently used ones beyond the capacity.
pub(crate) fn put(access: u64, location: &str, size: u64, metadata: &ArrowReaderMetadata, has_page_index: bool) {
    let bytes = metadata.metadata().memory_size();
    if bytes > CAPACITY_BYTES / 4 {
        return;
    }
    let mut guard = FOOTERS.lock().unwrap_or_else(|e| e.into_inner());
    let footers = guard.get_or_insert_with(Footers::default);
    footers.clock += 1;
    let entry = Entry { metadata: metadata.clone(), has_page_index, bytes, last_used: footers.clock };
    if let Some(old) = footers.entries.insert((access, location.to_owned(), size), entry) {
        footers.bytes -= old.bytes;
    }
    footers.bytes += bytes;
    while footers.bytes > CAPACITY_BYTES {
        let Some(oldest) = footers.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone()) else { break };
        if let Some(evicted) = footers.entries.remove(&oldest) {
            footers.bytes -= evicted.bytes;
        }
    }
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
        let batch = RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(vec![1, 2, 3])) as _)]).unwrap();
        let bytes = bytes::Bytes::from(crate::write::parquet_bytes(&batch, crate::write::ParquetFile::BaseFile(Vec::new())).unwrap());
        let metadata = ArrowReaderMetadata::load(&bytes, ArrowReaderOptions::new()).unwrap();
        put(1, "mem://t/a.parquet", 10, &metadata, false);
        assert!(get(1, "mem://t/a.parquet", 10, false).is_some());
        // Another size is another file, other credentials another reader; a footer without
        // its page index does not answer for one.
        assert!(get(1, "mem://t/a.parquet", 11, false).is_none() && get(2, "mem://t/a.parquet", 10, false).is_none());
        assert!(get(1, "mem://t/a.parquet", 10, true).is_none());
        let each = metadata.metadata().memory_size();
        for i in 0..CAPACITY_BYTES / each + 1 {
            put(1, &format!("mem://t/f{i}.parquet"), 10, &metadata, true);
            if i % 8 == 0 {
                assert!(get(1, "mem://t/f0.parquet", 10, true).is_some());
            }
        }
        // The oldest unused is gone; the one used all along is kept.
        assert!(get(1, "mem://t/a.parquet", 10, false).is_none());
        assert!(get(1, "mem://t/f0.parquet", 10, true).is_some());
        let guard = FOOTERS.lock().unwrap();
        assert!(guard.as_ref().unwrap().bytes <= CAPACITY_BYTES);
    }
}
