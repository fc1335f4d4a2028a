//! A cache's bulk load as an external sort. Each file slice's entries are sorted and spilled
//! to a run file of their own; once every slice is read, the runs are merged, over
//! [`MERGE_RANGES`] key ranges at once, into table files that do not overlap,
//! which RocksDB then takes into its bottom level as they are. Ingesting a table file per
//! slice instead leaves files that overlap each other (a bucket's keys spread over the whole
//! key space), which RocksDB stacks in level 0 and one compaction of everything must merge:
//! at 5M rows, 11 of the load's 15 s.
//!
//! Memory: one slice's entries while they are sorted, and a read buffer per run per range
//! while merging.

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::io_error;
use crate::error::{Error, ErrorKind, Result};

/// Key ranges merged at once: the load's final step uses both cores of a small machine.
const MERGE_RANGES: usize = 2;
/// Every this many entries of a run, its key and offset are kept in memory: where the merge of
/// a key range starts reading the run.
const SAMPLE_EVERY: usize = 512;
/// A table file written by the merge is closed at about this size (RocksDB's default target
/// file size: later compactions of the bottom level rewrite files of this size, not larger).
const TABLE_FILE_BYTES: u64 = 64 << 20;
/// Read and write buffers of run files.
const RUN_BUFFER: usize = 256 << 10;

/// One sorted run: its file and its sampled keys with their offsets (the first entry's
/// included).
struct Run {
    path: PathBuf,
    samples: Vec<(Vec<u8>, u64)>,
}

/// The sorted runs of a load, in a staging directory of their own (removed with them).
pub(super) struct SortedRuns {
    dir: PathBuf,
    runs: Vec<Run>,
}

impl SortedRuns {
    /// Runs in `dir` (of a new generation's, so empty), created.
    pub(super) fn new(dir: &Path) -> Result<SortedRuns> {
        std::fs::create_dir_all(dir).map_err(io_error("create", dir))?;
        Ok(SortedRuns { dir: dir.to_owned(), runs: Vec::new() })
    }

    /// Sorts `entries` (keys unique) and writes them as a new run: each entry as its key's
    /// length and its value's (u32, little-endian), then the key and the value.
    pub(super) fn add(&mut self, mut entries: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let path = self.dir.join(format!("{}.run", self.runs.len()));
        let file = File::create(&path).map_err(io_error("create", &path))?;
        let mut out = BufWriter::with_capacity(RUN_BUFFER, file);
        let mut samples = Vec::with_capacity(entries.len() / SAMPLE_EVERY + 1);
        let mut offset = 0u64;
        for (i, (key, value)) in entries.iter().enumerate() {
            if i % SAMPLE_EVERY == 0 {
                samples.push((key.clone(), offset));
            }
            let lengths = [u32_length(key)?, u32_length(value)?];
            out.write_all(&lengths[0].to_le_bytes()).map_err(io_error("write", &path))?;
            out.write_all(&lengths[1].to_le_bytes()).map_err(io_error("write", &path))?;
            out.write_all(key).map_err(io_error("write", &path))?;
            out.write_all(value).map_err(io_error("write", &path))?;
            offset += 8 + key.len() as u64 + value.len() as u64;
        }
        out.flush().map_err(io_error("write", &path))?;
        self.runs.push(Run { path, samples });
        Ok(())
    }

    /// Merges the runs into table files written with `options` (the cache's, for its filters
    /// and block format), each range of keys on a helper thread; returns the files, which
    /// overlap neither each other nor anything else, in key order. The runs stay, for the
    /// caller to remove with the staging directory.
    pub(super) async fn merge(self, options: fn() -> Result<rocksdb::Options>) -> Result<Vec<PathBuf>> {
        let bounds = self.split_keys(MERGE_RANGES);
        let runs = Arc::new(self.runs);
        let mut merges = Vec::new();
        for (range, (start, end)) in bounds.iter().cloned().zip(bounds.iter().skip(1).cloned()).enumerate() {
            let runs = runs.clone();
            let dir = self.dir.clone();
            merges.push(crate::threads::on_helper("merging a lookup cache's sorted runs", move || {
                merge_range(&runs, start.as_deref(), end.as_deref(), &dir, range, &options()?)
            }));
        }
        let mut files = Vec::new();
        for merge in merges {
            files.extend(merge.get().await?);
        }
        Ok(files)
    }

    /// The bounds of `ranges` key ranges of about the same number of entries, chosen from the
    /// runs' samples: `None` first and last (open ends), split keys between.
    fn split_keys(&self, ranges: usize) -> Vec<Option<Vec<u8>>> {
        let mut keys: Vec<&[u8]> = self.runs.iter().flat_map(|run| run.samples.iter().map(|(key, _)| key.as_slice())).collect();
        keys.sort_unstable();
        let mut bounds = vec![None];
        for i in 1..ranges {
            let key = keys.get(i * keys.len() / ranges).map(|k| k.to_vec());
            // Few samples: fewer ranges.
            if key.is_some() && !bounds.contains(&key) {
                bounds.push(key);
            }
        }
        bounds.push(None);
        bounds
    }
}

fn u32_length(bytes: &[u8]) -> Result<u32> {
    u32::try_from(bytes.len()).map_err(|_| Error::new(ErrorKind::InvalidArgument, "a lookup cache entry is larger than 4 GiB"))
}

/// A run read from an offset on: its current entry in buffers reused for every entry.
struct RunReader {
    input: BufReader<File>,
    path: PathBuf,
    value: Vec<u8>,
}

impl RunReader {
    fn open(run: &Run, start: Option<&[u8]>) -> Result<RunReader> {
        // The last sample at or before `start`: the first entry of the range is at most
        // SAMPLE_EVERY entries after it.
        let from = match start {
            None => 0,
            Some(start) => {
                let after = run.samples.partition_point(|(key, _)| key.as_slice() <= start);
                run.samples[after.saturating_sub(1)].1
            }
        };
        let mut file = File::open(&run.path).map_err(io_error("open", &run.path))?;
        file.seek(SeekFrom::Start(from)).map_err(io_error("read", &run.path))?;
        Ok(RunReader { input: BufReader::with_capacity(RUN_BUFFER, file), path: run.path.clone(), value: Vec::new() })
    }

    /// Reads the next entry: its key into `key`, its value into `self.value`; false at the
    /// end of the run.
    fn next_into(&mut self, key: &mut Vec<u8>) -> Result<bool> {
        let mut lengths = [0u8; 8];
        match self.input.read_exact(&mut lengths) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(io_error("read", &self.path)(e)),
        }
        let key_length = u32::from_le_bytes(lengths[..4].try_into().expect("four bytes")) as usize;
        let value_length = u32::from_le_bytes(lengths[4..].try_into().expect("four bytes")) as usize;
        key.resize(key_length, 0);
        self.input.read_exact(key).map_err(io_error("read", &self.path))?;
        self.value.resize(value_length, 0);
        self.input.read_exact(&mut self.value).map_err(io_error("read", &self.path))?;
        Ok(true)
    }
}

/// The next entry of run `run` in the merge: ordered so that the heap's top is the least key.
#[derive(PartialEq, Eq)]
struct Head {
    key: Vec<u8>,
    run: usize,
}

impl Ord for Head {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key.cmp(&self.key)
    }
}

impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Merges the entries of `runs` with keys in `start..end` into table files `<range>-<n>.sst`
/// in `dir`, each closed at about [`TABLE_FILE_BYTES`]; returns them in order.
fn merge_range(runs: &[Run], start: Option<&[u8]>, end: Option<&[u8]>, dir: &Path, range: usize, options: &rocksdb::Options) -> Result<Vec<PathBuf>> {
    let mut readers = Vec::with_capacity(runs.len());
    let mut heap = BinaryHeap::with_capacity(runs.len());
    for (i, run) in runs.iter().enumerate() {
        let mut reader = RunReader::open(run, start)?;
        let mut key = Vec::new();
        // Skip what lies before the range (at most a sample's distance).
        while reader.next_into(&mut key)? {
            if start.is_none_or(|start| key.as_slice() >= start) {
                heap.push(Head { key, run: i });
                break;
            }
        }
        readers.push(reader);
    }
    let mut files = Vec::new();
    let mut writer: Option<(rocksdb::SstFileWriter, PathBuf)> = None;
    while let Some(mut head) = heap.pop() {
        if end.is_some_and(|end| head.key.as_slice() >= end) {
            break;
        }
        let (file, path) = match &mut writer {
            Some(open) => open,
            None => {
                let path = dir.join(format!("{range}-{}.sst", files.len()));
                let file = rocksdb::SstFileWriter::create(options);
                file.open(&path).map_err(super::rocks_error("writing", &path))?;
                writer.insert((file, path))
            }
        };
        let reader = &mut readers[head.run];
        file.put(&head.key, &reader.value).map_err(super::rocks_error("writing", path))?;
        if file.file_size() >= TABLE_FILE_BYTES {
            let (mut file, path) = writer.take().expect("a file is open");
            file.finish().map_err(super::rocks_error("writing", &path))?;
            files.push(path);
        }
        if reader.next_into(&mut head.key)? {
            heap.push(head);
        }
    }
    if let Some((mut file, path)) = writer {
        file.finish().map_err(super::rocks_error("writing", &path))?;
        files.push(path);
    }
    Ok(files)
}

/// Has the kernel read the table files `files` back into the page cache, on a thread of its
/// own that nobody waits for. RocksDB's table file writer drops what it wrote from the page
/// cache as it goes (so that a load does not evict everything else), which leaves the first
/// probes and the first refresh of a loaded cache reading from disk a page at a time: a
/// refresh of 500,000 rows of a 5M-row cache took 20 s instead of 6. A compaction's output
/// stays cached; a load's should too. The files are opened now, so this may run after they
/// were moved into the cache. The kernel reads ahead a few megabytes per request at most,
/// hence one request per [`READ_BACK_CHUNK`]. Best effort: without it, reads only start cold.
pub(super) fn read_back_in_background(files: &[PathBuf]) {
    #[cfg(target_os = "linux")]
    {
        let open: Vec<File> = files.iter().filter_map(|path| File::open(path).ok()).collect();
        let _ = crate::threads::spawn_without_signals("hudi-read-back", move || {
            use std::os::fd::AsRawFd;
            for file in open {
                let length = file.metadata().map_or(0, |m| m.len()) as i64;
                let mut offset = 0i64;
                while offset < length {
                    // SAFETY: a valid open descriptor; the call only gives the kernel advice.
                    unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, READ_BACK_CHUNK, libc::POSIX_FADV_WILLNEED) };
                    offset += READ_BACK_CHUNK;
                }
            }
        });
    }
}

/// See [`read_back_in_background`].
#[cfg(target_os = "linux")]
const READ_BACK_CHUNK: i64 = 4 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Result<rocksdb::Options> {
        Ok(rocksdb::Options::default())
    }

    /// Runs of interleaved keys, merged over split ranges, give every entry once and in order,
    /// in files that do not overlap.
    #[tokio::test]
    async fn merged_runs_give_every_entry_once_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut runs = SortedRuns::new(&dir.path().join("load")).unwrap();
        let mut all = Vec::new();
        for run in 0..5u32 {
            // Run r holds the keys k with k % 5 == r, shuffled (add sorts them).
            let mut entries: Vec<(Vec<u8>, Vec<u8>)> =
                (0..3000u32).filter(|k| k % 5 == run).map(|k| (format!("{:08}", k * 7919 % 3000).into_bytes(), k.to_le_bytes().to_vec())).collect();
            entries.reverse();
            all.extend(entries.clone());
            runs.add(entries).unwrap();
        }
        runs.add(Vec::new()).unwrap();
        let files = runs.merge(options).await.unwrap();
        assert!(!files.is_empty());
        let db_dir = dir.path().join("db");
        let mut open = rocksdb::Options::default();
        open.create_if_missing(true);
        let db = rocksdb::DB::open(&open, &db_dir).unwrap();
        // Ingesting files that overlap would put them in level 0; these all reach the bottom.
        db.ingest_external_file(files).unwrap();
        assert_eq!(db.property_int_value("rocksdb.num-files-at-level0").unwrap(), Some(0));
        let merged: Vec<(Vec<u8>, Vec<u8>)> = db.iterator(rocksdb::IteratorMode::Start).map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap()).collect();
        all.sort();
        assert_eq!(merged, all);
    }
}
