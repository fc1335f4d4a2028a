//! What the merges of file slices read and decided, kept per process: a repeated read of a
//! slice with logs (a dashboard's query, the scan under an UPDATE, the next statement of a
//! session) assembles its rows by what the last merge of the same versions decided
//! ([`MergeOutcome`]) instead of merging again. It then reads neither the ordering values nor
//! the record keys or positions that the merge compared, only the columns asked for: of each
//! Parquet data block, only their column chunks, found by the block's footer kept with the
//! log file's other blocks (their headers, without content).
//!
//! A slice's files never change once written, so an outcome is keyed by what the merge read:
//! the base file (path and size) and each visible block (file, offset and the instant that
//! wrote it: a block rolled back and written again has another instant), with the merge rule;
//! a log file by its path and size. A new block, a rolled-back one or a compacted slice is
//! another key; the entries of slices no longer read age out. Memory is bounded by
//! [`set_capacity`] (least recently used entries go first).
//!
//! Reads of a few record keys (a point query) keep, per log block, the hashes of its record
//! keys ([`BlockKeys`]): a later read of other keys skips the blocks that do not have them
//! without fetching or decoding anything, and decodes only the rows that do of the others.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;

use crate::log::block::header;
use crate::log::{BlockType, LogBlock};
use crate::read::merge::MergeOutcome;
use crate::table::MergeMode;

/// The default bound of the kept outcomes' memory (see [`set_capacity`]).
pub const DEFAULT_CAPACITY: usize = 64 << 20;

/// What identifies the versions a merge decided over, and how it decided.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct MergeKey {
    /// The table's storage URI.
    pub table: String,
    /// The base file's path in the table and its size.
    pub base: Option<(String, u64)>,
    /// Each visible block, in merge order: `(path of its file, offset, instant)`.
    pub blocks: Vec<(String, usize, String)>,
    /// Whether the versions were matched by record position (else by record key).
    pub by_position: bool,
    /// The merge mode and the ordering field's column.
    pub rule: (MergeMode, Option<usize>),
}

impl MergeKey {
    fn size(&self) -> usize {
        let base = self.base.as_ref().map_or(0, |(path, _)| path.len());
        let blocks: usize = self.blocks.iter().map(|(path, _, instant)| path.len() + instant.len() + 32).sum();
        std::mem::size_of::<Self>() + self.table.len() + base + blocks
    }
}

/// A log file as kept: by table, path and size (log files are written once).
pub(crate) type LogFileKey = (String, String, u64);

/// A block of a log file as kept, without its content (or the schema and positions of its
/// header, which a reused merge does not read): with, for a Parquet data block, its footer, so
/// that a reused merge fetches only the column chunks it needs.
#[derive(Debug, Clone)]
pub(crate) struct KnownBlock {
    pub block: LogBlock,
    /// The length of the block's content.
    pub content_length: u64,
    pub footer: Option<ArrowReaderMetadata>,
}

impl KnownBlock {
    /// `block` as kept.
    pub(crate) fn of(block: &LogBlock) -> KnownBlock {
        let mut header = block.header.clone();
        header.remove(&header::SCHEMA);
        if let Some(positions) = header.get_mut(&header::RECORD_POSITIONS) {
            // Whether the block has positions is part of the merge's key; their value is not.
            positions.clear();
        }
        let footer = match block.block_type {
            BlockType::ParquetData => ArrowReaderMetadata::load(&block.content, Default::default()).ok(),
            _ => None,
        };
        let kept = LogBlock { header, content: Bytes::new(), ..block.clone() };
        KnownBlock { block: kept, content_length: block.content.len() as u64, footer }
    }

    fn size(&self) -> usize {
        let header: usize = self.block.header.values().map(|v| v.len() + 32).sum();
        std::mem::size_of::<Self>() + header + self.footer.as_ref().map_or(0, |f| f.metadata().memory_size())
    }
}

/// The record keys of a data or delete block, as hashes sorted with the index of the record
/// each belongs to (a data block's row, a delete block's record): what a read of a few keys
/// looks up instead of decoding the block's keys. Twelve bytes a record.
#[derive(Debug, Default)]
pub(crate) struct BlockKeys {
    hashes: Vec<u64>,
    records: Vec<u32>,
}

/// The hash [`BlockKeys`] keeps of a record key (fixed within the process).
fn key_hash(key: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(key)
}

impl BlockKeys {
    /// The keys of a block's records, in record order (a record without a key matches none).
    pub(crate) fn of<'k>(keys: impl Iterator<Item = Option<&'k str>>) -> BlockKeys {
        let mut pairs: Vec<(u64, u32)> =
            keys.enumerate().filter_map(|(record, key)| Some((key_hash(key?), u32::try_from(record).ok()?))).collect();
        pairs.sort_unstable();
        let (hashes, records) = pairs.into_iter().unzip();
        BlockKeys { hashes, records }
    }

    /// The indices, ascending and distinct, of the records whose key may be one of `keys`:
    /// every record that has one, and rarely another whose key hashes alike (a reader checks
    /// the keys it decodes).
    pub(crate) fn records_of<'k>(&self, keys: impl Iterator<Item = &'k str>) -> Vec<u32> {
        let mut found = Vec::new();
        for key in keys {
            let hash = key_hash(key);
            let from = self.hashes.partition_point(|h| *h < hash);
            let to = from + self.hashes[from..].partition_point(|h| *h == hash);
            found.extend_from_slice(&self.records[from..to]);
        }
        found.sort_unstable();
        found.dedup();
        found
    }

    fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.hashes.capacity() * 8 + self.records.capacity() * 4
    }
}

/// A block of a log file: the file as kept ([`LogFileKey`]) and the block's offset in it.
pub(crate) type BlockKey = (LogFileKey, usize);

struct Entry<V> {
    value: Arc<V>,
    bytes: usize,
    last_used: u64,
}

/// Values by key, their memory bounded: the least recently used go first.
struct Cache<K, V> {
    entries: HashMap<K, Entry<V>>,
    bytes: usize,
    capacity: usize,
    clock: u64,
}

impl<K: std::hash::Hash + Eq + Clone, V> Cache<K, V> {
    fn new(capacity: usize) -> Cache<K, V> {
        Cache { entries: HashMap::new(), bytes: 0, capacity, clock: 0 }
    }

    /// Drops least recently used entries until `more` bytes fit.
    fn make_room(&mut self, more: usize) {
        while self.bytes + more > self.capacity {
            let Some(oldest) = self.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone()) else { return };
            if let Some(entry) = self.entries.remove(&oldest) {
                self.bytes -= entry.bytes;
            }
        }
    }

    fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.make_room(0);
    }

    fn get(&mut self, key: &K) -> Option<Arc<V>> {
        self.clock += 1;
        let now = self.clock;
        let entry = self.entries.get_mut(key)?;
        entry.last_used = now;
        Some(entry.value.clone())
    }

    /// Keeps `value` (of `bytes`), unless it alone exceeds the capacity.
    fn put(&mut self, key: K, value: Arc<V>, bytes: usize) {
        if bytes > self.capacity {
            return;
        }
        if let Some(old) = self.entries.remove(&key) {
            self.bytes -= old.bytes;
        }
        self.make_room(bytes);
        self.clock += 1;
        self.bytes += bytes;
        self.entries.insert(key, Entry { value, bytes, last_used: self.clock });
    }
}

/// The log files' share of the capacity (one part in this many): their blocks' headers and
/// footers are small beside the outcomes.
const LOG_FILES_SHARE: usize = 8;
/// The blocks' record keys' share (one part in this many): twelve bytes a log record.
const BLOCK_KEYS_SHARE: usize = 4;

static OUTCOMES: LazyLock<Mutex<Cache<MergeKey, MergeOutcome>>> = LazyLock::new(|| Mutex::new(Cache::new(DEFAULT_CAPACITY)));
static LOG_FILES: LazyLock<Mutex<Cache<LogFileKey, Vec<KnownBlock>>>> =
    LazyLock::new(|| Mutex::new(Cache::new(DEFAULT_CAPACITY / LOG_FILES_SHARE)));
static BLOCK_KEYS: LazyLock<Mutex<Cache<BlockKey, BlockKeys>>> =
    LazyLock::new(|| Mutex::new(Cache::new(DEFAULT_CAPACITY / BLOCK_KEYS_SHARE)));

fn lock<T>(cache: &'static Mutex<T>) -> std::sync::MutexGuard<'static, T> {
    // An entry is either in or not: a panic elsewhere cannot leave one half made.
    cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Bounds the memory this process keeps for merges to `bytes` (0: nothing is kept).
pub fn set_capacity(bytes: usize) {
    lock(&OUTCOMES).set_capacity(bytes - bytes / LOG_FILES_SHARE - bytes / BLOCK_KEYS_SHARE);
    lock(&LOG_FILES).set_capacity(bytes / LOG_FILES_SHARE);
    lock(&BLOCK_KEYS).set_capacity(bytes / BLOCK_KEYS_SHARE);
}

/// The kept outcome of the merge `key` names.
pub(crate) fn get(key: &MergeKey) -> Option<Arc<MergeOutcome>> {
    lock(&OUTCOMES).get(key)
}

/// Keeps `outcome` for `key`, unless it alone exceeds the capacity.
pub(crate) fn put(key: MergeKey, outcome: Arc<MergeOutcome>) {
    let bytes = key.size() + outcome.size();
    lock(&OUTCOMES).put(key, outcome, bytes)
}

/// The kept blocks of a log file.
pub(crate) fn log_file(key: &LogFileKey) -> Option<Arc<Vec<KnownBlock>>> {
    lock(&LOG_FILES).get(key)
}

/// Keeps the `blocks` of a log file, read whole.
pub(crate) fn keep_log_file(key: LogFileKey, blocks: &[LogBlock]) {
    {
        let files = lock(&LOG_FILES);
        if files.capacity == 0 || files.entries.contains_key(&key) {
            return;
        }
    }
    let known: Vec<KnownBlock> = blocks.iter().map(KnownBlock::of).collect();
    let bytes = known.iter().map(KnownBlock::size).sum::<usize>() + key.0.len() + key.1.len();
    lock(&LOG_FILES).put(key, Arc::new(known), bytes)
}

/// The kept record keys of a block.
pub(crate) fn block_keys(key: &BlockKey) -> Option<Arc<BlockKeys>> {
    lock(&BLOCK_KEYS).get(key)
}

/// Keeps the record keys of a block; returns them.
pub(crate) fn keep_block_keys(key: BlockKey, keys: BlockKeys) -> Arc<BlockKeys> {
    let keys = Arc::new(keys);
    let bytes = keys.size() + key.0 .0.len() + key.0 .1.len();
    lock(&BLOCK_KEYS).put(key, keys.clone(), bytes);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::merge::{merge, MergeOutput, MergeRule, MergeSource};
    use crate::read::schema::table_schema;
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;

    /// The outcome of merging a base of `rows` rows with one log version of its first key.
    fn outcome(rows: usize) -> Arc<MergeOutcome> {
        let schema = table_schema(&Schema::new(vec![Field::new("ts", DataType::Int64, true)]), true);
        let batch = |keys: Vec<String>| {
            let n = keys.len();
            let nulls = || Arc::new(StringArray::from(vec![None::<&str>; n])) as ArrayRef;
            let columns = vec![nulls(), nulls(), Arc::new(StringArray::from(keys)) as ArrayRef, nulls(), nulls(), Arc::new(Int64Array::from(vec![1; n]))];
            RecordBatch::try_new(schema.clone(), columns).unwrap()
        };
        let sources = vec![MergeSource::Base(batch((0..rows).map(|i| format!("k{i}")).collect())), MergeSource::rows(batch(vec!["k0".into()]))];
        let rule = MergeRule { mode: MergeMode::EventTimeOrdering, ordering_column: Some(5) };
        let merged = merge(&schema, sources, rule, None, MergeOutput { outcome: true, ..Default::default() }).unwrap();
        merged.outcome.unwrap()
    }

    fn key(base: &str) -> MergeKey {
        MergeKey { table: "file:///t".into(), base: Some((base.into(), 1)), blocks: vec![], by_position: false, rule: (MergeMode::EventTimeOrdering, Some(5)) }
    }

    #[test]
    fn a_blocks_keys_find_each_record_of_the_keys_asked_for() {
        let keys = ["b", "a", "c", "a", "d"];
        let index = BlockKeys::of(keys.iter().map(|k| Some(*k)).chain([None]));
        assert_eq!(index.records_of(["a"].into_iter()), [1, 3]);
        assert_eq!(index.records_of(["d", "b", "z"].into_iter()), [0, 4]);
        assert_eq!(index.records_of(["a", "a", "c"].into_iter()), [1, 2, 3]);
        assert!(index.records_of(["z", ""].into_iter()).is_empty());
        assert_eq!(index.hashes.len(), 5, "a record without a key is not kept");
    }

    #[test]
    fn the_least_recently_used_outcomes_go_first_and_the_bytes_stay_bounded() {
        let one = key("a").size() + outcome(1000).size();
        let mut cache = Cache::new(3 * one);
        let put = |cache: &mut Cache<MergeKey, MergeOutcome>, name: &str, rows: usize| {
            let (key, outcome) = (key(name), outcome(rows));
            let bytes = key.size() + outcome.size();
            cache.put(key, outcome, bytes);
        };
        for name in ["a", "b", "c"] {
            put(&mut cache, name, 1000);
        }
        assert!(cache.get(&key("a")).is_some());
        put(&mut cache, "d", 1000);
        // "b" was used least recently.
        assert!(cache.get(&key("b")).is_none());
        assert!(["a", "c", "d"].iter().all(|k| cache.get(&key(k)).is_some()));
        assert_eq!(cache.bytes, 3 * one);
        // An outcome larger than the whole capacity is not kept, and displaces nothing.
        put(&mut cache, "e", 100_000);
        assert!(cache.get(&key("e")).is_none() && cache.entries.len() == 3);
        // A smaller capacity drops entries until the rest fits; 0 keeps none.
        cache.set_capacity(one);
        assert_eq!((cache.entries.len(), cache.bytes), (1, one));
        cache.set_capacity(0);
        put(&mut cache, "f", 1000);
        assert_eq!((cache.entries.len(), cache.bytes), (0, 0));
    }
}
