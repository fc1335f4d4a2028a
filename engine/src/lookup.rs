//! The lookup cache of one Hudi table: its merged rows in a RocksDB database on local disk,
//! found by record key (the unique index) or by the values of other columns (secondary
//! indexes: join key → record keys), kept current from the table's incremental reads.
//!
//! Layout, in the one column family (so that one write batch and one flush cover everything):
//! - `m` — the cache's state ([`CacheState`]: definition, cached position), JSON;
//! - `r` record key `\0` partition path — the row's cached columns: the end offset of each
//!   (u32, little-endian), then each column's value in Arrow's row format of that column alone,
//!   so that a probe decodes only the columns its query reads;
//! - `s` index number (u16) join key length (u32) join key, record key `\0` partition path —
//!   the row's cached columns again, as under `r`, so that a probe by a secondary index is one
//!   prefix scan (reading each row by its `r` key took half of a probe's time); the join key in
//!   Arrow's row format of the index's columns.
//!
//! Filters: a prefix bloom filter over the record key of `r` keys and the index and join key
//! of `s` keys ([`key_prefix`]), so that a probe for an absent key seldom reads a data block.
//! Files are uncompressed and read through memory maps, index and filter blocks included: a
//! backend's reader holds them in place in the page cache, which all backends share, so its
//! private memory does not grow with the table.
//!
//! The write-ahead log is off. Each refresh is one write batch, with the new cached position
//! in it, flushed at once: readers (RocksDB secondaries, which catch up from flushed files) and
//! a restart after a crash see a whole applied commit or none of it. A load fills a new
//! generation by an external sort of its entries ([`load`]) and is published only when
//! complete ([`CacheGenerations`]); the table can always rebuild a cache. Record keys are
//! unique per partition (a bucket index is per partition), so rows are keyed by both; a probe
//! by record key reads the key's rows of every partition.

use crate::threads::with_signals_blocked;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::read::{ChangeRange, TableReader, OPERATION_COLUMN};
use crate::read::schema::{META_FIELDS, PARTITION_PATH_COLUMN, RECORD_KEY_COLUMN};
use crate::table::keygen::{self, KeyFormat};

mod load;

const STATE_KEY: &[u8] = b"m";
const ROW_TAG: u8 = b'r';
const SECONDARY_TAG: u8 = b's';
/// A load's staging directory in its generation's: its sorted runs and [`LoadProgress`].
const LOAD_DIR: &str = "load";
/// The file in the staging directory that says how far the load got.
const PROGRESS_FILE: &str = "progress.json";
/// The file beside a generation's database that says what it held at its last flush
/// ([`Flushed`]): a refresh with nothing to apply finds out without opening the database,
/// which would leave a new info log and write-ahead log behind each time.
const FLUSHED_FILE: &str = "flushed.json";

/// What a cache's database held when it was last flushed, written after the flush (so it is
/// never ahead of the database).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Flushed {
    definition: CacheDefinition,
    position: Option<String>,
    rows: u64,
    format: u32,
}

impl Flushed {
    fn read(dir: &Path) -> Option<Flushed> {
        serde_json::from_slice(&read_if_exists(&dir.join(FLUSHED_FILE)).ok()??).ok()
    }
}

/// How far a load got: file slices read of all, rows read, and whether it is merging what it
/// read into the cache's files (its last step).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadProgress {
    pub slices_read: usize,
    pub slices: usize,
    pub rows: u64,
    pub merging: bool,
}

impl LoadProgress {
    /// Stores the progress in the load's staging directory `dir`, replacing the file whole so
    /// that [`CacheGenerations::loading`] never reads half of it.
    fn store(&self, dir: &Path) -> Result<()> {
        let text = serde_json::to_vec(self).map_err(|e| Error::new(ErrorKind::Internal, "cannot encode a load's progress").with_source(e))?;
        // Shown while the load runs, and of no use after a crash: not synced.
        replace_file(&dir.join(PROGRESS_FILE), &text, false)
    }
}

/// What a cache holds: which columns, and which secondary indexes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheDefinition {
    /// The cached columns (the table's data columns by name; all of them when `None`). The
    /// columns of every secondary index are always cached.
    pub columns: Option<Vec<String>>,
    /// Each secondary index's columns.
    pub secondary: Vec<Vec<String>>,
}

/// The cache's state, stored with its rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CacheState {
    definition: CacheDefinition,
    /// The cached columns, in order.
    columns: Vec<String>,
    /// The completion time of the latest commit the cache holds (`""`: loaded before the
    /// table's first commit; `None`: not loaded).
    position: Option<String>,
    /// How many rows the cache holds.
    #[serde(default)]
    rows: u64,
    /// The table's record key fields.
    #[serde(default)]
    record_key_fields: Vec<String>,
    /// How the cached rows' record keys are made of their key fields' values: what a probe
    /// by those values needs to find them.
    #[serde(default)]
    record_keys: RecordKeys,
    /// Whether some row has a partition path (then a record key may have rows in several
    /// partitions, found by a prefix scan; otherwise by one point read).
    #[serde(default = "partitioned_unless_known")]
    partitioned: bool,
    /// The layout of cached rows and files ([`LAYOUT`]); a cache of another is loaded anew.
    #[serde(default)]
    format: u32,
}

/// The layout of cached rows and of the cache's files this version writes (1: all columns
/// in one Arrow row; 2: columns apart; 3: data blocks with a hash index; 4: restarts every four keys;
/// 5: secondary entries hold their rows).
const LAYOUT: u32 = 5;

fn partitioned_unless_known() -> bool {
    true
}

/// What the rows a cache took in say about their record keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
enum RecordKeys {
    /// No row yet.
    Unseen,
    /// Every row's record key is its key fields' values in this format.
    Derived(KeyFormat),
    /// Some row's is not (another key generator), or the cache predates this check.
    #[default]
    Unknown,
}

impl RecordKeys {
    /// What is known after also taking in the rows of `rows` for which `counts` is true, whose
    /// record keys are `keys`.
    fn after(self, fields: &[String], rows: &RecordBatch, keys: &arrow::array::StringArray, counts: impl Fn(usize) -> bool) -> RecordKeys {
        let candidates: Vec<KeyFormat> = match self {
            RecordKeys::Unknown => return RecordKeys::Unknown,
            RecordKeys::Derived(format) => vec![format],
            RecordKeys::Unseen if fields.len() == 1 => vec![KeyFormat::Value, KeyFormat::Named],
            RecordKeys::Unseen => vec![KeyFormat::Named],
        };
        let counted: Vec<usize> = (0..rows.num_rows()).filter(|&row| counts(row)).collect();
        if counted.is_empty() {
            return self;
        }
        let Some(columns) = fields.iter().map(|f| rows.column_by_name(f).cloned()).collect::<Option<Vec<ArrayRef>>>() else {
            return RecordKeys::Unknown;
        };
        for format in candidates {
            let Ok(derived) = keygen::record_keys(fields, &columns, format) else { continue };
            if counted.iter().all(|&row| derived.is_valid(row) && derived.value(row) == keys.value(row)) {
                return RecordKeys::Derived(format);
            }
        }
        RecordKeys::Unknown
    }
}

/// The cached columns a probe decodes, and their schema: made once per scan
/// ([`LookupCache::projection`]), used by every probe.
#[derive(Debug, Clone)]
pub struct Projection {
    columns: Vec<usize>,
    schema: SchemaRef,
}

impl Projection {
    /// The columns probes return.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }
}

/// Which index a probe uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Index {
    /// Rows by the values of the table's record key fields (the unique index).
    RecordKey,
    /// Secondary index `n` of the definition.
    Secondary(usize),
}

/// The part of a key that filters are built on: `r` record key `\0`, or `s` index length join
/// key (a probe's whole seek key; a row's partition or record key behind it is left out).
fn key_prefix(key: &[u8]) -> &[u8] {
    match key.first() {
        Some(&ROW_TAG) => match key[1..].iter().position(|&b| b == 0) {
            Some(end) => &key[..end + 2],
            None => key,
        },
        Some(&SECONDARY_TAG) if key.len() >= 7 => {
            let len = u32::from_be_bytes([key[3], key[4], key[5], key[6]]) as usize;
            &key[..(7 + len).min(key.len())]
        }
        _ => key,
    }
}

fn has_prefix(key: &[u8]) -> bool {
    matches!(key.first(), Some(&ROW_TAG) | Some(&SECONDARY_TAG))
}

/// The options of the writer's instance and of readers': the prefix filters, and blocks stored
/// uncompressed and read through memory maps. A probe reads index, filter and data blocks in
/// place from the page cache, which every backend shares, instead of copying (and
/// decompressing) them into memory of its own; the block cache of `block_cache` bytes holds
/// only what cannot be read in place.
fn db_options(block_cache: usize) -> Result<rocksdb::Options> {
    let mut options = rocksdb::Options::default();
    options.set_compression_type(rocksdb::DBCompressionType::None);
    options.set_allow_mmap_reads(true);
    // Each open starts a new info log and renames the last one: keep a few, not every one.
    options.set_keep_log_file_num(2);
    options.set_max_log_file_size(1 << 20);
    // The compaction that ends a load splits its key range between both cores.
    options.set_max_subcompactions(2);
    options.set_prefix_extractor(rocksdb::SliceTransform::create("pg_hudi.lookup.v1", key_prefix, Some(has_prefix)));
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    table.set_whole_key_filtering(false);
    // A hash index in each data block: a point read finds its key without a binary search.
    table.set_data_block_index_type(rocksdb::DataBlockIndexType::BinaryAndHash);
    // ... and a restart point every four keys, which bounds the keys it parses to get there.
    table.set_block_restart_interval(4);
    table.set_format_version(5);
    let cache = rocksdb::Cache::new_lru_cache(block_cache)
        .map_err(|e| Error::new(ErrorKind::Storage, "cannot make a block cache for a lookup cache").with_source(e))?;
    table.set_block_cache(&cache);
    options.set_block_based_table_factory(&table);
    Ok(options)
}

/// The block cache of the writer, which loads and refreshes.
const WRITER_BLOCK_CACHE: usize = 64 << 20;
/// The block cache of each reader (a backend): what cannot be read in place.
const READER_BLOCK_CACHE: usize = 8 << 20;

/// What changes when the writer flushed: its manifest's name and length.
fn flushed_marker(dir: &Path) -> Option<(String, u64)> {
    let manifest = std::fs::read_to_string(dir.join("CURRENT")).ok()?;
    let manifest = manifest.trim().to_owned();
    let length = std::fs::metadata(dir.join(&manifest)).ok()?.len();
    Some((manifest, length))
}

/// What a load or refresh applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The cached position before and after.
    pub from: Option<String>,
    pub to: Option<String>,
    /// Rows written (inserted or updated) and deleted.
    pub upserts: u64,
    pub deletes: u64,
    /// The generation now current, when this was a load of a new one ([`CacheGenerations`]).
    pub loaded_generation: Option<u64>,
    /// How many rows the cache holds now.
    pub rows: u64,
    /// Rows added minus rows removed.
    row_change: i64,
}

/// One table's lookup cache: open by its only writer ([`Self::open`]), or by a reader
/// ([`Self::open_reader`]).
pub struct LookupCache {
    db: rocksdb::DB,
    state: CacheState,
    /// The cached columns.
    schema: SchemaRef,
    /// Each cached column's row format.
    columns: Vec<RowConverter>,
    /// Per secondary index: its columns' positions in `schema`, and their row format.
    secondary: Vec<(Vec<usize>, RowConverter)>,
    /// Opened for reading ([`Self::open_reader`]): what the writer had flushed when this
    /// reader last caught up.
    reader: Option<Option<(String, u64)>>,
    /// How probes read rows ([`probe_options`]), made once.
    point_read: rocksdb::ReadOptions,
}

fn io_error<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::new(ErrorKind::Storage, format!("cannot {action} {}", path.display())).with_source(e)
}

/// Replaces the file at `path` with `contents` whole (written beside it, renamed), so that a
/// reader finds the old contents or the new, never part of them; with `durable`, synced before
/// the rename, so that a restart after a crash does too.
fn replace_file(path: &Path, contents: &[u8], durable: bool) -> Result<()> {
    use std::io::Write;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".new");
    let temporary = std::path::PathBuf::from(temporary);
    let mut file = std::fs::File::create(&temporary).map_err(io_error("write", path))?;
    file.write_all(contents).and_then(|()| if durable { file.sync_all() } else { Ok(()) }).map_err(io_error("write", path))?;
    std::fs::rename(&temporary, path).map_err(io_error("write", path))
}

/// The contents of the file at `path`, or `None` when there is none.
fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("read", path)(e)),
    }
}

fn rocks_error<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(rocksdb::Error) -> Error + 'a {
    move |e| Error::new(ErrorKind::Storage, format!("{action} the lookup cache {}", path.display())).with_source(e)
}

fn arrow_error(what: &'static str) -> impl FnOnce(arrow::error::ArrowError) -> Error {
    move |e| Error::new(ErrorKind::Internal, what).with_source(e)
}

fn row_key(record_key: &str, partition: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(2 + record_key.len() + partition.len());
    key.push(ROW_TAG);
    key.extend_from_slice(record_key.as_bytes());
    key.push(0);
    key.extend_from_slice(partition.as_bytes());
    key
}

/// The entry of secondary index `index` for the row stored under `row_key`.
fn secondary_key(index: usize, join_key: &[u8], row_key: &[u8]) -> Vec<u8> {
    let mut key = secondary_prefix(index, join_key);
    key.extend_from_slice(&row_key[1..]);
    key
}

fn secondary_prefix(index: usize, join_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(7 + join_key.len());
    key.push(SECONDARY_TAG);
    key.extend_from_slice(&(index as u16).to_be_bytes());
    key.extend_from_slice(&(join_key.len() as u32).to_be_bytes());
    key.extend_from_slice(join_key);
    key
}

impl LookupCache {
    /// Opens the cache in `dir` as its only writer, creating it for `definition` over a table
    /// whose data columns are `table_schema` when it does not exist. An existing cache must
    /// have the same definition.
    pub fn open(dir: &Path, definition: &CacheDefinition, table_schema: &Schema) -> Result<LookupCache> {
        let mut options = db_options(WRITER_BLOCK_CACHE)?;
        options.create_if_missing(true);
        let db = with_signals_blocked(|| rocksdb::DB::open(&options, dir)).map_err(rocks_error("opening", dir))?;
        let state = match read_state(&db, dir)? {
            Some(state) if state.definition != *definition || state.format != LAYOUT => {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("the lookup cache {} was made for other columns or indexes", dir.display()),
                ))
            }
            Some(state) => state,
            None => {
                // Stored at once: a later open with another definition is refused.
                let state = CacheState {
                    definition: definition.clone(),
                    columns: cached_columns(definition, table_schema)?,
                    position: None,
                    rows: 0,
                    record_key_fields: Vec::new(),
                    record_keys: RecordKeys::Unseen,
                    partitioned: false,
                    format: LAYOUT,
                };
                let mut batch = rocksdb::WriteBatch::default();
                batch.put(STATE_KEY, encode_state(&state)?);
                write_durably(&db, batch)?;
                state
            }
        };
        Self::with_state(db, state, table_schema, None)
    }

    /// Opens the cache that a writer keeps in `primary` for reading, as a RocksDB secondary
    /// instance with its own files in `own` (any number of readers at once, each in a
    /// directory of its own). It shows what the writer had flushed when it was opened, until
    /// [`Self::catch_up`]: a whole applied commit at a time, never part of one.
    pub fn open_reader(primary: &Path, own: &Path, table_schema: &Schema) -> Result<LookupCache> {
        let mut options = db_options(READER_BLOCK_CACHE)?;
        // Required of secondaries: every table file stays open.
        options.set_max_open_files(-1);
        let marker = flushed_marker(primary);
        let db = with_signals_blocked(|| rocksdb::DB::open_as_secondary(&options, primary, own)).map_err(rocks_error("opening", primary))?;
        let state = read_state(&db, primary)?
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("there is no lookup cache in {}", primary.display())))?;
        if state.format != LAYOUT {
            return Err(Error::new(ErrorKind::InvalidArgument, format!("the lookup cache {} has rows of another layout", primary.display())));
        }
        Self::with_state(db, state, table_schema, Some(marker))
    }

    /// A reader's catch-up with what the writer has flushed since: returns whether the cached
    /// position moved. Costs a read of two file names when the writer flushed nothing since.
    pub fn catch_up(&mut self) -> Result<bool> {
        let Some(seen) = &self.reader else { return Ok(false) };
        let marker = flushed_marker(self.db.path());
        if marker.is_some() && marker == *seen {
            return Ok(false);
        }
        with_signals_blocked(|| self.db.try_catch_up_with_primary()).map_err(rocks_error("catching up with", self.db.path()))?;
        self.reader = Some(marker);
        let state = read_state(&self.db, self.db.path())?
            .ok_or_else(|| Error::new(ErrorKind::Corrupt, format!("the lookup cache {} lost its state", self.db.path().display())))?;
        let moved = state.position != self.state.position;
        self.state = state;
        Ok(moved)
    }

    fn with_state(db: rocksdb::DB, state: CacheState, table_schema: &Schema, reader: Option<Option<(String, u64)>>) -> Result<LookupCache> {
        let definition = &state.definition;
        let fields = state
            .columns
            .iter()
            .map(|name| table_schema.field_with_name(name).cloned().map_err(|_| missing_column(name)))
            .collect::<Result<Vec<_>>>()?;
        let schema = Arc::new(Schema::new(fields));
        let converter = |positions: &[usize]| {
            RowConverter::new(positions.iter().map(|&i| SortField::new(schema.field(i).data_type().clone())).collect())
                .map_err(arrow_error("cannot encode these column types in a lookup cache"))
        };
        let columns = (0..schema.fields().len()).map(|i| converter(&[i])).collect::<Result<Vec<_>>>()?;
        let secondary = definition
            .secondary
            .iter()
            .map(|columns| {
                let positions: Vec<usize> = columns.iter().map(|c| schema.index_of(c).map_err(|_| missing_column(c))).collect::<Result<_>>()?;
                Ok((positions.clone(), converter(&positions)?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(LookupCache { db, state, schema, columns, secondary, reader, point_read: probe_options() })
    }

    /// The completion time of the latest commit the cache holds (`""` when it was loaded
    /// before the table's first commit, `None` before the first load).
    pub fn position(&self) -> Option<&str> {
        self.state.position.as_deref()
    }

    /// The cached columns.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Brings a loaded cache up to `reader`'s latest completed commit from the changes since
    /// the cached position (their merged rows: a late write that loses to a newer version
    /// changes nothing), in one batch. `None` when it cannot: the cache was never loaded, or
    /// those changes were cleaned; [`CacheGenerations::refresh`] then loads a new generation.
    /// Compactions change no row and write none.
    pub async fn refresh(&mut self, reader: &TableReader) -> Result<Option<Applied>> {
        if self.reader.is_some() {
            return Err(Error::new(ErrorKind::InvalidArgument, "a lookup cache opened for reading cannot be refreshed"));
        }
        let Some(from) = self.state.position.clone() else { return Ok(None) };
        self.state.record_key_fields = reader.config().record_key_fields.clone();
        let target = latest_completion(reader);
        let mut applied = Applied { from: Some(from.clone()), to: target.clone(), ..Default::default() };
        if target.is_none() || target.as_deref() == Some(from.as_str()) {
            applied.to = Some(from);
            applied.rows = self.state.rows;
            return Ok(Some(applied));
        }
        // A truncate (a replacecommit) removed rows that no change lists: the cache is loaded
        // anew.
        let end = target.as_deref().unwrap_or(from.as_str());
        let truncated = reader.timeline().completed_writes_between(Some(from.as_str()), end).any(|i| i.action == "replacecommit");
        if truncated {
            return Ok(None);
        }
        let changes = match reader.read_changes(&ChangeRange { start: Some(from), end: target.clone() }, true).await {
            Ok(changes) => changes,
            // The changes since the cached position were cleaned.
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut batch = rocksdb::WriteBatch::default();
        for rows in &changes {
            self.apply(rows, &mut batch, &mut applied)?;
        }
        self.store_position(batch, target, &mut applied)?;
        Ok(Some(applied))
    }

    /// Fills an empty cache from `reader`'s latest merged snapshot: each file slice's entries
    /// sorted into a run (the next two slices decoded on helper threads meanwhile; memory:
    /// three slices' rows and one's entries), the runs merged into table files that overlap
    /// nothing and ingested as they are ([`load`]), and the position stored. Says how far it
    /// got in its staging directory ([`LoadProgress`]). Readers must not open it before it is
    /// done: [`CacheGenerations`] publishes it only then.
    async fn load(&mut self, reader: &TableReader) -> Result<Applied> {
        // Before the table's first commit: the start, after which changes are read next.
        let target = Some(latest_completion(reader).unwrap_or_default());
        let mut applied = Applied { to: target.clone(), ..Default::default() };
        self.state.record_key_fields = reader.config().record_key_fields.clone();
        let bound = crate::timeline::ReadBound::Latest;
        let slices = reader.slices(&bound).await?;
        let mut progress = LoadProgress { slices: slices.len(), ..Default::default() };
        let query = crate::read::SliceQuery::Snapshot(bound);
        let mut scan = crate::read::prefetch::SliceScan::new(reader.clone(), query, Default::default(), slices, Default::default(), 2);
        let staging = self.db.path().join(LOAD_DIR);
        let mut runs = load::SortedRuns::new(&staging)?;
        progress.store(&staging)?;
        while let Some(rows) = scan.next().await {
            if let Some(rows) = rows? {
                let mut entries = SortedEntries::default();
                self.apply(&rows, &mut entries, &mut applied)?;
                runs.add(entries.0)?;
            }
            progress.slices_read += 1;
            progress.rows = applied.upserts;
            progress.store(&staging)?;
        }
        progress.merging = true;
        progress.store(&staging)?;
        let files = runs.merge(|| db_options(0)).await?;
        load::read_back_in_background(&files);
        if !files.is_empty() {
            let mut ingest = rocksdb::IngestExternalFileOptions::default();
            ingest.set_move_files(true);
            with_signals_blocked(|| self.db.ingest_external_file_opts(&ingest, files)).map_err(rocks_error("loading", self.db.path()))?;
        }
        std::fs::remove_dir_all(&staging).map_err(io_error("remove", &staging))?;
        self.store_position(rocksdb::WriteBatch::default(), target, &mut applied)?;
        Ok(applied)
    }

    /// Writes `batch` with the new position `target` and the row count `applied` leaves, and
    /// flushes it.
    fn store_position(&mut self, mut batch: rocksdb::WriteBatch, target: Option<String>, applied: &mut Applied) -> Result<()> {
        self.state.position = target;
        self.state.rows = self.state.rows.saturating_add_signed(applied.row_change);
        applied.rows = self.state.rows;
        batch.put(STATE_KEY, encode_state(&self.state)?);
        write_durably(&self.db, batch)?;
        let flushed = Flushed {
            definition: self.state.definition.clone(),
            position: self.state.position.clone(),
            rows: self.state.rows,
            format: self.state.format,
        };
        let text = serde_json::to_vec(&flushed).map_err(|e| Error::new(ErrorKind::Internal, "cannot encode a lookup cache's state").with_source(e))?;
        replace_file(&self.db.path().join(FLUSHED_FILE), &text, false)
    }

    /// Adds the changes of `rows` (snapshot rows, or change rows with their operation) to
    /// `batch`. A change replaces the key's cached row; its old row names the secondary
    /// entries to remove. Within one read a key appears once per partition.
    fn apply(&mut self, rows: &RecordBatch, batch: &mut impl Entries, applied: &mut Applied) -> Result<()> {
        let text = |name: &str| -> Result<arrow::array::StringArray> {
            let column = rows.column_by_name(name).ok_or_else(|| missing_column(name))?;
            Ok(arrow::compute::cast(column, &arrow::datatypes::DataType::Utf8).map_err(arrow_error("cannot read record keys"))?.as_string::<i32>().clone())
        };
        let keys = text(META_FIELDS[RECORD_KEY_COLUMN])?;
        let partitions = text(META_FIELDS[PARTITION_PATH_COLUMN])?;
        let operations = rows.column_by_name(OPERATION_COLUMN).map(|c| c.as_string::<i32>().clone());
        let deleted = |row: usize| operations.as_ref().is_some_and(|o| o.value(row) == "D");
        self.state.partitioned |= partitions.iter().any(|p| p.is_some_and(|p| !p.is_empty()));
        // Deletes may carry no values but their keys.
        self.state.record_keys = self.state.record_keys.after(&self.state.record_key_fields, rows, &keys, |row| !deleted(row));
        // The cached columns of every row, encoded together (those of a delete go unused).
        let cached: Vec<ArrayRef> = self
            .schema
            .fields()
            .iter()
            .map(|field| {
                let column = rows.column_by_name(field.name()).ok_or_else(|| missing_column(field.name()))?;
                // Reads name the UTC time zone as they please ("UTC", "+00:00").
                if column.data_type() == field.data_type() {
                    return Ok(column.clone());
                }
                arrow::compute::cast(column, field.data_type()).map_err(arrow_error("cannot encode cached rows"))
            })
            .collect::<Result<_>>()?;
        let encoded = self
            .columns
            .iter()
            .zip(&cached)
            .map(|(converter, column)| converter.convert_columns(std::slice::from_ref(column)).map_err(arrow_error("cannot encode cached rows")))
            .collect::<Result<Vec<_>>>()?;
        let secondary_keys = self
            .secondary
            .iter()
            .map(|(positions, converter)| {
                let columns: Vec<ArrayRef> = positions.iter().map(|&i| cached[i].clone()).collect();
                let nulls: Vec<bool> = (0..rows.num_rows()).map(|row| columns.iter().any(|c| c.is_null(row))).collect();
                Ok((converter.convert_columns(&columns).map_err(arrow_error("cannot encode join keys"))?, nulls))
            })
            .collect::<Result<Vec<_>>>()?;
        for row in 0..rows.num_rows() {
            let key = row_key(keys.value(row), partitions.value(row));
            // Snapshot rows go into an empty cache. A change's existing row gives up its
            // secondary entries first (its join key may change).
            let mut existed = false;
            if operations.is_some() {
                if let Some(old) = self.db.get(&key).map_err(rocks_error("reading", self.db.path()))? {
                    existed = true;
                    for (index, entry) in self.secondary_entries(&old, &key)?.into_iter().enumerate() {
                        if let Some(join_key) = entry {
                            batch.delete(&secondary_key(index, &join_key, &key));
                        }
                    }
                }
            }
            if deleted(row) {
                batch.delete(&key);
                applied.deletes += 1;
                applied.row_change -= i64::from(existed);
                continue;
            }
            applied.row_change += i64::from(!existed);
            batch.put(key.clone(), row_value(&encoded, row));
            for (index, (join_keys, nulls)) in secondary_keys.iter().enumerate() {
                // NULL join keys match nothing, so they are not indexed.
                if !nulls[row] {
                    batch.put(secondary_key(index, join_keys.row(row).as_ref(), &key), row_value(&encoded, row));
                }
            }
            applied.upserts += 1;
        }
        Ok(())
    }

    /// The join key of each secondary index in the cached row `encoded` (`None` when NULL).
    fn secondary_entries(&self, encoded: &[u8], key: &[u8]) -> Result<Vec<Option<Vec<u8>>>> {
        if self.secondary.is_empty() {
            // Decoding the old row is for its join keys only.
            return Ok(Vec::new());
        }
        self.secondary
            .iter()
            .map(|(positions, converter)| {
                let values = self.decode_columns(&[encoded], positions).map_err(|e| {
                    Error::new(ErrorKind::Corrupt, format!("the lookup cache holds an unreadable row for {}", String::from_utf8_lossy(key))).with_source(e)
                })?;
                if values.iter().any(|v| v.is_null(0)) {
                    return Ok(None);
                }
                let rows = converter.convert_columns(&values).map_err(arrow_error("cannot encode join keys"))?;
                Ok(Some(rows.row(0).as_ref().to_vec()))
            })
            .collect()
    }

    /// The cached columns `projection` (positions in [`Self::schema`]) of the rows `encoded`.
    fn decode_columns(&self, encoded: &[&[u8]], projection: &[usize]) -> Result<Vec<ArrayRef>> {
        let count = self.columns.len();
        projection
            .iter()
            .map(|&c| {
                let converter = self.columns.get(c).ok_or_else(|| Error::new(ErrorKind::InvalidArgument, format!("the cache has no column {c}")))?;
                let parser = converter.parser();
                let values = encoded
                    .iter()
                    .map(|row| column_bytes(row, c, count).map(|bytes| parser.parse(bytes)))
                    .collect::<Result<Vec<_>>>()?;
                let mut decoded = converter.convert_rows(values).map_err(arrow_error("cannot decode cached rows"))?;
                Ok(decoded.remove(0))
            })
            .collect()
    }

    /// The rows `encoded` as a batch of the cached columns of `projection`.
    fn decode(&self, encoded: &[&[u8]], projection: &Projection) -> Result<RecordBatch> {
        if encoded.is_empty() {
            return Ok(RecordBatch::new_empty(projection.schema.clone()));
        }
        let columns = self.decode_columns(encoded, &projection.columns)?;
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(encoded.len()));
        RecordBatch::try_new_with_options(projection.schema.clone(), columns, &options).map_err(arrow_error("cannot decode cached rows"))
    }

    /// The projection of the cached columns named `names` (all of them when `None`).
    pub fn projection(&self, names: Option<&[String]>) -> Result<Projection> {
        let columns = match names {
            Some(names) => names.iter().map(|n| self.schema.index_of(n).map_err(|_| missing_column(n))).collect::<Result<Vec<_>>>()?,
            None => (0..self.columns.len()).collect(),
        };
        let schema = Arc::new(self.schema.project(&columns).map_err(arrow_error("cannot project the cached columns"))?);
        Ok(Projection { columns, schema })
    }

    /// The row stored under `key`, read as probes read.
    fn read_row(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get_pinned_opt(key, &self.point_read).map_err(rocks_error("reading", self.db.path()))?.map(|row| row.to_vec()))
    }

    /// The table's record key fields, when probes by their values find the rows
    /// ([`Index::RecordKey`]): the cached rows' record keys were all made of those values.
    pub fn record_key_fields(&self) -> Option<&[String]> {
        let derived = matches!(self.state.record_keys, RecordKeys::Derived(_) | RecordKeys::Unseen);
        (derived && !self.state.record_key_fields.is_empty()).then_some(self.state.record_key_fields.as_slice())
    }

    /// The columns of each secondary index, by number.
    pub fn secondary_indexes(&self) -> &[Vec<String>] {
        &self.state.definition.secondary
    }

    /// The cached rows whose `index` columns equal a row of `keys` (those columns, in the
    /// index's order, cast to the cached types when they differ): a key with a NULL matches
    /// nothing, a key given twice matches once. By record key, the rows of every partition
    /// that has the key. Only the cached columns of `projection` are decoded.
    pub fn probe(&self, index: Index, keys: &[ArrayRef], projection: &Projection) -> Result<RecordBatch> {
        let count = keys.first().map_or(0, |k| k.len());
        let valid = |row: usize| keys.iter().all(|k| k.is_valid(row));
        let mut prefixes: Vec<Vec<u8>> = match index {
            Index::RecordKey => {
                let fields = &self.state.record_key_fields;
                let format = match self.state.record_keys {
                    RecordKeys::Derived(format) => format,
                    RecordKeys::Unseen => KeyFormat::written_for(fields.len()),
                    RecordKeys::Unknown => {
                        return Err(Error::new(ErrorKind::InvalidArgument, "the cached rows' record keys are not made of their key fields' values"))
                    }
                };
                let record_keys = keygen::record_keys(fields, keys, format)?;
                // The key's rows in every partition; in none (unpartitioned), its one row.
                (0..count).filter(|&row| valid(row)).map(|row| row_key(record_keys.value(row), "")).collect()
            }
            Index::Secondary(n) => {
                let (positions, converter) = self.secondary.get(n).ok_or_else(|| Error::new(ErrorKind::InvalidArgument, format!("the cache has no secondary index {n}")))?;
                let columns = positions
                    .iter()
                    .zip(keys)
                    .map(|(&i, key)| {
                        let cached = self.schema.field(i).data_type();
                        if key.data_type() == cached {
                            return Ok(key.clone());
                        }
                        arrow::compute::cast(key, cached).map_err(arrow_error("cannot encode join keys"))
                    })
                    .collect::<Result<Vec<ArrayRef>>>()?;
                let encoded = converter.convert_columns(&columns).map_err(arrow_error("cannot encode join keys"))?;
                (0..count).filter(|&row| valid(row)).map(|row| secondary_prefix(n, encoded.row(row).as_ref())).collect()
            }
        };
        if prefixes.len() > 1 {
            prefixes.sort_unstable();
            prefixes.dedup();
        }
        let mut rows = Vec::new();
        for prefix in &prefixes {
            if index == Index::RecordKey && !self.state.partitioned {
                rows.extend(self.read_row(prefix)?);
                continue;
            }
            // Rows, or secondary entries with their rows.
            rows.extend(self.scan_prefix(prefix, true)?.into_iter().map(|(_, row)| row));
        }
        self.decode(&rows.iter().map(Vec::as_slice).collect::<Vec<_>>(), projection)
    }

    /// The entries whose keys start with `prefix`: a probe's whole prefix ([`key_prefix`]),
    /// found through the filters, or any shorter one (`filtered` false).
    fn scan_prefix(&self, prefix: &[u8], filtered: bool) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut read = probe_options();
        if filtered {
            read.set_prefix_same_as_start(true);
        } else {
            read.set_total_order_seek(true);
        }
        let mut out = Vec::new();
        for item in self.db.iterator_opt(rocksdb::IteratorMode::From(prefix, rocksdb::Direction::Forward), read) {
            let (key, value) = item.map_err(rocks_error("reading", self.db.path()))?;
            if !key.starts_with(prefix) {
                break;
            }
            out.push((key.to_vec(), value.to_vec()));
        }
        Ok(out)
    }

    /// Every cached row, in key order (for checks).
    pub fn rows(&self) -> Result<RecordBatch> {
        let rows = self.scan_prefix(&[ROW_TAG], false)?.into_iter().map(|(_, value)| value).collect::<Vec<_>>();
        self.decode(&rows.iter().map(Vec::as_slice).collect::<Vec<_>>(), &self.projection(None)?)
    }
}

/// Where [`LookupCache::apply`] puts what it writes.
trait Entries {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>);
    fn delete(&mut self, key: &[u8]);
}

impl Entries for rocksdb::WriteBatch {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        rocksdb::WriteBatch::put(self, key, value)
    }

    fn delete(&mut self, key: &[u8]) {
        rocksdb::WriteBatch::delete(self, key)
    }
}

/// The entries of a load's file slice, for its sorted run. A load applies snapshot rows to an
/// empty cache, which deletes nothing.
#[derive(Default)]
struct SortedEntries(Vec<(Vec<u8>, Vec<u8>)>);

impl Entries for SortedEntries {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.0.push((key, value));
    }

    fn delete(&mut self, _key: &[u8]) {
        debug_assert!(false, "a load deletes nothing");
    }
}

/// Row `row` of the columns `encoded` as a cached row: each column's end offset, then the
/// columns' bytes.
fn row_value(encoded: &[arrow::row::Rows], row: usize) -> Vec<u8> {
    let header = 4 * encoded.len();
    let values: Vec<&[u8]> = encoded.iter().map(|rows| rows.row(row).data()).collect();
    let mut out = Vec::with_capacity(header + values.iter().map(|v| v.len()).sum::<usize>());
    let mut end = header;
    for value in &values {
        end += value.len();
        out.extend_from_slice(&(end as u32).to_le_bytes());
    }
    for value in values {
        out.extend_from_slice(value);
    }
    out
}

/// The bytes of column `c` of the `count` columns of the cached row `row`.
fn column_bytes(row: &[u8], c: usize, count: usize) -> Result<&[u8]> {
    let offset = |i: usize| -> Option<usize> { Some(u32::from_le_bytes(row.get(4 * i..4 * i + 4)?.try_into().ok()?) as usize) };
    let start = if c == 0 { Some(4 * count) } else { offset(c - 1) };
    start
        .zip(offset(c))
        .and_then(|(start, end)| row.get(start..end))
        .ok_or_else(|| Error::new(ErrorKind::Corrupt, "the lookup cache holds a damaged row"))
}

/// How probes read: without verifying block checksums on every read (a damaged cache is
/// rebuilt from the table; the writer's compactions verify what they read), and in place.
/// Iterators take their options by value, point reads share [`LookupCache::point_read`].
fn probe_options() -> rocksdb::ReadOptions {
    let mut read = rocksdb::ReadOptions::default();
    read.set_verify_checksums(false);
    // Blocks are read in place from their memory map; copying them into the block cache
    // would only cost.
    read.fill_cache(false);
    read
}

/// Writes `batch` without the write-ahead log, then flushes it: readers (which catch up from
/// flushed files only) and a restart after a crash see all of it or nothing.
fn write_durably(db: &rocksdb::DB, batch: rocksdb::WriteBatch) -> Result<()> {
    write_unlogged(db, batch)?;
    with_signals_blocked(|| db.flush()).map_err(rocks_error("flushing", db.path()))
}

fn write_unlogged(db: &rocksdb::DB, batch: rocksdb::WriteBatch) -> Result<()> {
    let mut write = rocksdb::WriteOptions::default();
    write.disable_wal(true);
    with_signals_blocked(|| db.write_opt(batch, &write)).map_err(rocks_error("writing", db.path()))
}

fn read_state(db: &rocksdb::DB, dir: &Path) -> Result<Option<CacheState>> {
    let Some(bytes) = db.get(STATE_KEY).map_err(rocks_error("reading", dir))? else { return Ok(None) };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::new(ErrorKind::Corrupt, format!("the lookup cache {} has no readable state", dir.display())).with_source(e)
    })
}

fn encode_state(state: &CacheState) -> Result<Vec<u8>> {
    serde_json::to_vec(state).map_err(|e| Error::new(ErrorKind::Internal, "cannot encode the cache state").with_source(e))
}

fn missing_column(name: &str) -> Error {
    Error::new(ErrorKind::InvalidArgument, format!("the table has no column {name}"))
}

/// The cached columns of `definition`: the chosen ones (all data columns when none were) plus
/// every secondary index's, in the table's order.
fn cached_columns(definition: &CacheDefinition, table_schema: &Schema) -> Result<Vec<String>> {
    let wanted = |name: &str| {
        definition.columns.as_ref().is_none_or(|c| c.iter().any(|c| c == name)) || definition.secondary.iter().flatten().any(|c| c == name)
    };
    for name in definition.columns.iter().flatten().chain(definition.secondary.iter().flatten()) {
        table_schema.field_with_name(name).map_err(|_| missing_column(name))?;
    }
    Ok(table_schema.fields().iter().map(|f| f.name().clone()).filter(|n| !n.starts_with("_hoodie_") && wanted(n)).collect())
}

/// The completion time of the latest completed commit `reader` sees (`None`: none).
fn latest_completion(reader: &TableReader) -> Option<String> {
    reader.timeline().latest_completion().map(str::to_owned)
}

/// How far a cache at `position` (a completion time) is behind the table a reader shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lag {
    /// The completed commits the cache does not hold.
    pub commits: usize,
    /// Milliseconds from the cached commit's completion to the latest one's.
    pub behind_ms: i64,
    /// How long ago the oldest commit the cache does not hold completed, in milliseconds.
    pub oldest_missing_age_ms: i64,
    /// The latest completed commit: the position that holds them all.
    pub latest: Option<String>,
}

impl Lag {
    pub fn of(reader: &TableReader, position: &str) -> Lag {
        let missing: Vec<&str> =
            reader.timeline().completed_writes().filter_map(|i| i.completion.as_deref()).filter(|c| *c > position).collect();
        let millis = |instant: Option<&&str>| instant.and_then(|i| crate::write::time::parse_instant(i));
        let (oldest, latest) = (missing.iter().min(), missing.iter().max());
        let behind_ms = match (millis(latest), crate::write::time::parse_instant(position)) {
            (Some(latest), Some(cached)) => (latest - cached).max(0),
            _ => 0,
        };
        let oldest_missing_age_ms = millis(oldest).map_or(0, |t| (crate::write::time::now_ms() as i64 - t).max(0));
        Lag { commits: missing.len(), behind_ms, oldest_missing_age_ms, latest: latest.map(|l| l.to_string()) }
    }
}

/// A table's lookup cache across generations: `<root>/<n>` are caches (RocksDB databases) and
/// `<root>/CURRENT` names the one that readers open. A load — the first, or after the changes
/// since the cached position were cleaned — builds the next generation from the snapshot and
/// makes it current once it is complete (a rename: readers find the old generation or the
/// new one, never a half-loaded one); refreshes apply changes to the current one in place.
/// Removing generations that readers may still have open is the caller's to decide
/// ([`Self::remove_older`]).
pub struct CacheGenerations {
    root: std::path::PathBuf,
}

impl CacheGenerations {
    pub fn new(root: &Path) -> CacheGenerations {
        CacheGenerations { root: root.to_owned() }
    }

    /// The directory of generation `n`.
    pub fn dir(&self, n: u64) -> std::path::PathBuf {
        self.root.join(n.to_string())
    }

    /// The current generation (`None` before the first load completed).
    pub fn current(&self) -> Result<Option<u64>> {
        let path = self.root.join("CURRENT");
        let Some(text) = read_if_exists(&path)? else { return Ok(None) };
        std::str::from_utf8(&text)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .map(Some)
            .ok_or_else(|| Error::new(ErrorKind::Corrupt, format!("{} does not name a generation", path.display())))
    }

    /// How far the load of a new generation got, while one runs (a load that a crash ended
    /// shows until the next refresh starts it over).
    pub fn loading(&self) -> Result<Option<LoadProgress>> {
        let next = self.current()?.map_or(1, |n| n + 1);
        // Replaced whole, so always readable; a load that ends removes it.
        Ok(read_if_exists(&self.dir(next).join(LOAD_DIR).join(PROGRESS_FILE))?.and_then(|text| serde_json::from_slice(&text).ok()))
    }

    /// The current generation's position (a completion time) and row count as its last flush
    /// left them: what lookups read now, whoever applied it. `None` before the first load.
    pub fn cached(&self) -> Result<Option<(Option<String>, u64)>> {
        let Some(n) = self.current()? else { return Ok(None) };
        Ok(Flushed::read(&self.dir(n)).map(|flushed| (flushed.position, flushed.rows)))
    }

    /// Opens the current generation for reading, with the reader's own files in `own`.
    pub fn open_reader(&self, own: &Path, table_schema: &Schema) -> Result<Option<LookupCache>> {
        let Some(n) = self.current()? else { return Ok(None) };
        LookupCache::open_reader(&self.dir(n), own, table_schema).map(Some)
    }

    /// Brings the current generation up to `reader`'s latest commit by applying the changes
    /// since its position; `None` when that cannot be done and a new generation must be
    /// loaded: there is none, its definition differs, or those changes were cleaned.
    pub async fn refresh_current(&self, definition: &CacheDefinition, table_schema: &Schema, reader: &TableReader) -> Result<Option<Applied>> {
        let Some(n) = self.current()? else { return Ok(None) };
        // Nothing to apply (the usual case of an idle table): the database stays closed.
        let target = latest_completion(reader);
        if let Some(flushed) = Flushed::read(&self.dir(n)) {
            let unchanged = flushed.position.is_some() && (target.is_none() || target == flushed.position);
            if unchanged && flushed.definition == *definition && flushed.format == LAYOUT {
                let position = flushed.position;
                return Ok(Some(Applied { from: position.clone(), to: position, rows: flushed.rows, ..Default::default() }));
            }
        }
        match LookupCache::open(&self.dir(n), definition, table_schema) {
            Ok(mut cache) => cache.refresh(reader).await,
            Err(e) if e.kind() == ErrorKind::InvalidArgument => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Brings the cache of `definition` up to `reader`'s latest commit: refreshes the current
    /// generation, or loads a new one when there is none, its definition differs, or the
    /// changes since its position were cleaned.
    pub async fn refresh(&self, definition: &CacheDefinition, table_schema: &Schema, reader: &TableReader) -> Result<Applied> {
        if let Some(applied) = self.refresh_current(definition, table_schema, reader).await? {
            return Ok(applied);
        }
        let current = self.current()?;
        let next = current.map_or(1, |n| n + 1);
        let dir = self.dir(next);
        // A load that did not finish (a crash) left its directory: it starts over.
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io_error("remove", &dir))?;
        }
        std::fs::create_dir_all(&self.root).map_err(io_error("create", &self.root))?;
        let loaded = match LookupCache::open(&dir, definition, table_schema) {
            Ok(mut cache) => cache.load(reader).await,
            Err(e) => Err(e),
        };
        let mut applied = match loaded {
            Ok(applied) => applied,
            Err(e) => {
                // Nothing of a failed load is kept (nor shown as loading).
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        replace_file(&self.root.join("CURRENT"), next.to_string().as_bytes(), true)?;
        applied.loaded_generation = Some(next);
        Ok(applied)
    }

    /// Deletes the generations before the current one (once no reader has them open).
    pub fn remove_older(&self) -> Result<()> {
        let Some(current) = self.current()? else { return Ok(()) };
        let entries = std::fs::read_dir(&self.root).map_err(io_error("list", &self.root))?;
        for entry in entries.flatten() {
            let older = entry.file_name().to_str().and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n < current);
            if older {
                std::fs::remove_dir_all(entry.path()).map_err(io_error("remove", &entry.path()))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of a table without record key fields (some Spark tables have none) say nothing
    /// of how keys are made; taking them in used to index an empty key array.
    #[test]
    fn rows_of_a_table_without_key_fields_leave_record_keys_unknown() {
        let rows = RecordBatch::try_new(
            Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new("id", arrow::datatypes::DataType::Int64, true)])),
            vec![Arc::new(arrow::array::Int64Array::from(vec![1, 2]))],
        )
        .unwrap();
        let keys = arrow::array::StringArray::from(vec!["k1", "k2"]);
        assert_eq!(RecordKeys::Unseen.after(&[], &rows, &keys, |_| true), RecordKeys::Unknown);
    }

    /// What a load stores of its progress is what [`CacheGenerations::loading`] shows of the
    /// next generation, and nothing once that generation is current.
    #[test]
    fn a_loads_progress_is_shown_until_its_generation_is_current() {
        let dir = tempfile::tempdir().unwrap();
        let generations = CacheGenerations::new(dir.path());
        assert_eq!(generations.loading().unwrap(), None);
        let staging = generations.dir(1).join(LOAD_DIR);
        std::fs::create_dir_all(&staging).unwrap();
        let progress = LoadProgress { slices_read: 3, slices: 20, rows: 750_000, merging: false };
        progress.store(&staging).unwrap();
        assert_eq!(generations.loading().unwrap(), Some(progress));
        std::fs::write(dir.path().join("CURRENT"), "1").unwrap();
        assert_eq!(generations.loading().unwrap(), None);
    }
}
