//! The merge outcomes of file slices, kept per process: a repeated read of a slice with logs
//! (a dashboard's query, the scan under an UPDATE, the next statement of a session) assembles
//! its rows by what the last merge of the same versions decided ([`MergeOutcome`]) instead of
//! merging again. It then reads neither the ordering values nor the record keys or positions
//! that the merge compared, only the columns asked for.
//!
//! A slice's files never change once written, so an outcome is keyed by what the merge read:
//! the base file (path and size) and each visible block (file, offset, length and the instant
//! that wrote it: a block rolled back and written again has another instant), with the merge
//! rule. A new block, a rolled-back one or a compacted slice is another key; the entries of
//! slices no longer read age out. Memory is bounded by [`set_capacity`] (least recently used
//! entries go first).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use crate::read::merge::{MergeOutcome, MergeRule};

/// The default bound of the kept outcomes' memory (see [`set_capacity`]).
pub const DEFAULT_CAPACITY: usize = 64 << 20;

/// What identifies the versions a merge decided over, and how it decided.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct MergeKey {
    /// The table's storage URI.
    pub table: String,
    /// The base file's path in the table and its size.
    pub base: Option<(String, u64)>,
    /// Each visible block, in merge order: `(path of its file, offset, content length, instant)`.
    pub blocks: Vec<(String, usize, usize, String)>,
    /// Whether the versions were matched by record position (else by record key).
    pub by_position: bool,
    /// The merge mode (by name) and the ordering field's column.
    pub rule: (String, Option<usize>),
}

impl MergeKey {
    pub(crate) fn rule(rule: &MergeRule) -> (String, Option<usize>) {
        (format!("{:?}", rule.mode), rule.ordering_column)
    }

    fn size(&self) -> usize {
        let base = self.base.as_ref().map_or(0, |(path, _)| path.len());
        let blocks: usize = self.blocks.iter().map(|(path, _, _, instant)| path.len() + instant.len() + 32).sum();
        std::mem::size_of::<Self>() + self.table.len() + base + blocks + self.rule.0.len()
    }
}

struct Entry {
    outcome: Arc<MergeOutcome>,
    bytes: usize,
    last_used: u64,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<MergeKey, Entry>,
    bytes: usize,
    /// `None`: [`DEFAULT_CAPACITY`].
    capacity: Option<usize>,
    clock: u64,
}

impl Cache {
    fn capacity(&self) -> usize {
        self.capacity.unwrap_or(DEFAULT_CAPACITY)
    }

    /// Drops least recently used entries until `more` bytes fit.
    fn make_room(&mut self, more: usize) {
        while self.bytes + more > self.capacity() {
            let Some(oldest) = self.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone()) else { return };
            if let Some(entry) = self.entries.remove(&oldest) {
                self.bytes -= entry.bytes;
            }
        }
    }

    fn get(&mut self, key: &MergeKey) -> Option<Arc<MergeOutcome>> {
        self.clock += 1;
        let now = self.clock;
        let entry = self.entries.get_mut(key)?;
        entry.last_used = now;
        Some(entry.outcome.clone())
    }

    fn put(&mut self, key: MergeKey, outcome: Arc<MergeOutcome>) {
        let bytes = key.size() + outcome.size();
        if bytes > self.capacity() {
            return;
        }
        if let Some(old) = self.entries.remove(&key) {
            self.bytes -= old.bytes;
        }
        self.make_room(bytes);
        self.clock += 1;
        self.bytes += bytes;
        self.entries.insert(key, Entry { outcome, bytes, last_used: self.clock });
    }
}

static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(Default::default);

fn cache() -> std::sync::MutexGuard<'static, Cache> {
    // An outcome is either in or not: a panic elsewhere cannot leave an entry half made.
    CACHE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Bounds the memory of the outcomes this process keeps to `bytes` (0: none are kept).
pub fn set_capacity(bytes: usize) {
    let mut cache = cache();
    cache.capacity = Some(bytes);
    cache.make_room(0);
}

/// The kept outcome of the merge `key` names.
pub(crate) fn get(key: &MergeKey) -> Option<Arc<MergeOutcome>> {
    cache().get(key)
}

/// Keeps `outcome` for `key`, unless it alone exceeds the capacity.
pub(crate) fn put(key: MergeKey, outcome: Arc<MergeOutcome>) {
    cache().put(key, outcome)
}

/// The bytes the kept outcomes hold now.
pub fn bytes() -> usize {
    cache().bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::merge::{merge, MergeOutput, MergeSource};
    use crate::read::schema::table_schema;
    use crate::table::MergeMode;
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
        MergeKey { table: "file:///t".into(), base: Some((base.into(), 1)), blocks: vec![], by_position: false, rule: ("EventTimeOrdering".into(), Some(5)) }
    }

    #[test]
    fn the_least_recently_used_outcomes_go_first_and_the_bytes_stay_bounded() {
        let one = key("a").size() + outcome(1000).size();
        let mut cache = Cache { capacity: Some(3 * one), ..Default::default() };
        for name in ["a", "b", "c"] {
            cache.put(key(name), outcome(1000));
        }
        assert!(cache.get(&key("a")).is_some());
        cache.put(key("d"), outcome(1000));
        // "b" was used least recently.
        assert!(cache.get(&key("b")).is_none());
        assert!(["a", "c", "d"].iter().all(|k| cache.get(&key(k)).is_some()));
        assert_eq!(cache.bytes, 3 * one);
        // An outcome larger than the whole capacity is not kept, and displaces nothing.
        cache.put(key("e"), outcome(100_000));
        assert!(cache.get(&key("e")).is_none() && cache.entries.len() == 3);
        // A smaller capacity drops entries until the rest fits; 0 keeps none.
        cache.capacity = Some(one);
        cache.make_room(0);
        assert_eq!((cache.entries.len(), cache.bytes), (1, one));
        cache.capacity = Some(0);
        cache.put(key("f"), outcome(1000));
        cache.make_room(0);
        assert_eq!((cache.entries.len(), cache.bytes), (0, 0));
    }
}
