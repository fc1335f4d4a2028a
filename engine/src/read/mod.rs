//! Reading tables: snapshot queries (latest or as of an instant) and incremental queries
//! (the rows changed by the commits of a range) over file slices, one slice at a time. Each
//! slice read is fetched ([`TableReader::fetch_slice`], I/O) and then decoded and merged
//! ([`SliceRead::run`], CPU only), so that [`prefetch::SliceScan`] can merge the next slices on
//! helper threads. Memory is bounded per file slice (its base file's rows plus its log
//! records): one for a plain read, one plus the read-ahead depth for a scan. An incremental
//! read of a slice whose base file was written inside the range also holds the record keys of
//! its file group as of the range start.

pub mod aggregate;
pub mod base_ordering;
mod buffered;
pub mod chunk_bytes;
pub mod condition;
pub mod expression;
pub mod filter;
mod footers;
pub mod live_keys;
pub mod merge;
pub mod merge_cache;
pub mod prefetch;
pub mod reading;
pub mod schema;
pub mod slice;

use crate::mdt::column_stats::ColumnStats;
use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::AsArray;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader, RowSelection};
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::arrow::push_decoder::ParquetPushDecoderBuilder;
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use parquet::DecodeResult;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::log::{read_blocks, BlockType, LogBlock};
use crate::read::base_ordering::{BaseOrdering, OrderingChunks, StoredBound};
use crate::read::filter::{RecordKeys, ScanFilter};
use crate::read::footers::FooterKey;
use crate::read::chunk_bytes::ChunkBytes;
use crate::read::merge::{MergeOutcome, MergeRule};
use crate::read::merge_cache::MergeKey;
pub use crate::read::slice::SliceRead;
pub use crate::read::buffered::BUFFERED_INSTANT;
use crate::read::slice::{FetchedBase, FetchedColumns, FetchedRecords, KeptMerge, RangeStart, SliceOutput};
use crate::storage::Storage;
use crate::table::{self, MergeMode, TableConfig};
use crate::timeline::history::History;
use crate::timeline::{metadata, ReadBound, Timeline, WritesInRange};
use crate::view::{FileSlice, FileSystemView};

/// The column incremental reads add: `I` (insert), `U` (update) or `D` (delete).
pub const OPERATION_COLUMN: &str = "_hoodie_operation";

/// The column snapshot reads add after the table's columns when [`ScanOptions::row_positions`]
/// asks: each row's position in its slice's base file (NULL for rows only the logs have),
/// which a writer of updates and deletes puts in its log blocks ([`crate::log::positions`]).
pub const ROW_POSITION_COLUMN: &str = "_hoodie_row_position";

/// An incremental range: the commits that completed in `(start, end]` (completion times on
/// layout-2 tables, requested times on layout 1); open bounds when `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRange {
    pub start: Option<String>,
    pub end: Option<String>,
}

/// What a slice read returns: the snapshot within a bound, or the changes of a range (with
/// `D` rows for deletes when `with_deletes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SliceQuery {
    Snapshot(ReadBound),
    Changes { range: ChangeRange, with_deletes: bool },
}

/// What a scan asks for beyond the bound: filters that may skip data, the columns it needs
/// (others come back as NULL; `None` means all), whether snapshot rows come with their
/// [`ROW_POSITION_COLUMN`], and whether slices are merged by key even where log blocks carry
/// record positions (Hudi's `hoodie.merge.use.record.positions = false`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScanOptions {
    pub filter: ScanFilter,
    pub columns: Option<Vec<String>>,
    #[serde(default)]
    pub row_positions: bool,
    #[serde(default)]
    pub ignore_record_positions: bool,
    /// Rows that do not satisfy this condition (false or unknown) are dropped after merging,
    /// before the caller sees them. It must be bound ([`Condition::bind`]) and its columns
    /// among [`Self::columns`]. Unlike [`Self::filter`] it is exact: the caller need not check
    /// it again.
    #[serde(default)]
    pub row_filter: Option<crate::read::condition::Condition>,
}

/// The share of a file slice that one reader of a scan split between processes takes: part
/// `index` of `count` equal ranges of the base file's rows ([`Self::WHOLE`]: the slice).
/// Only a slice whose rows need no merge (a base file without logs, read as a snapshot) is
/// split: a merge needs every version of a key at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlicePart {
    pub index: u32,
    pub count: u32,
}

impl SlicePart {
    pub const WHOLE: SlicePart = SlicePart { index: 0, count: 1 };

    /// Whether this is less than the whole slice.
    pub fn is_split(&self) -> bool {
        self.count > 1
    }

    /// The positions of this part's rows in a base file of `rows` rows.
    pub fn rows(&self, rows: u64) -> Range<u64> {
        let at = |i: u32| (rows as u128 * i as u128 / self.count.max(1) as u128) as u64;
        at(self.index)..at(self.index + 1)
    }
}

/// What [`TableReader::reusable_merge`] returns: the visible blocks (without their content),
/// the kept outcome of their merge, and per block the footer and needed column chunks of a
/// Parquet data block.
type ReusedMerge = (Vec<(String, String, LogBlock)>, Arc<MergeOutcome>, FetchedColumns);

/// A table state's column statistics ([`TableReader::column_stats`]): the statistics, or
/// why they cannot be used and whether that was told.
#[derive(Debug, Default)]
struct LoadedColumnStats {
    stats: Option<Arc<ColumnStats>>,
    problem: Option<String>,
    told: std::sync::atomic::AtomicBool,
}

/// How much of the table a scan kept, for EXPLAIN.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    pub partitions_total: usize,
    pub partitions_kept: usize,
    pub slices_total: usize,
    pub slices_kept: usize,
    /// Bytes of every slice, and of the slices kept.
    pub bytes_total: u64,
    pub bytes_kept: u64,
    pub row_groups_total: usize,
    pub row_groups_kept: usize,
    /// Rows of the base files' row groups kept, and of those the rows decoded: the data pages
    /// that the page index did not rule out.
    pub base_rows_total: u64,
    pub base_rows_read: u64,
    /// Visible data and delete blocks of the slices' log files, and of those the blocks
    /// decoded: a read of a few record keys skips the blocks without versions of them.
    pub log_blocks_total: usize,
    pub log_blocks_read: usize,
    /// Slices with logs whose rows were assembled by a kept merge outcome
    /// ([`merge_cache`]), without merging them again.
    pub merges_reused: usize,
}

/// What [`TableReader::state`] returns: a reader's timeline listing, data files and decided
/// writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderState {
    timeline_listing: Vec<(String, u64)>,
    timeline_subdirs: Vec<String>,
    files: Vec<(String, u64)>,
    decided: Vec<String>,
}

/// The table schema (meta fields first when the table populates them) and the schema of change
/// rows (plus `_hoodie_operation`) of the Avro record schema `avro`.
fn schemas_of(avro: &str, config: &TableConfig) -> Result<(SchemaRef, SchemaRef)> {
    let schema = schema::table_schema(&*schema::arrow_schema_of_avro(avro)?, config.populate_meta_fields);
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(OPERATION_COLUMN, DataType::Utf8, true));
    Ok((schema, Arc::new(Schema::new(fields))))
}

/// A table opened for reading: its configuration, timeline, files and schema, loaded once.
#[derive(Debug, Clone)]
pub struct TableReader {
    storage: Storage,
    /// Shared by clones: change reads hand it to slices to read keys back (see
    /// [`crate::table::keygen::key_field_values`]).
    config: Arc<TableConfig>,
    timeline: Timeline,
    /// The timeline directory's listing the timeline was parsed from, sorted: what
    /// [`Self::refreshed`] compares to tell whether the table changed.
    timeline_listing: Arc<Vec<(String, u64)>>,
    /// The timeline directory's subdirectories in that listing (the LSM history's).
    timeline_subdirs: Arc<Vec<String>>,
    /// The pending writes this reader sees as decided ([`Self::with_decided_writes`]).
    decided: Vec<String>,
    /// Shared by the clones of one load: a large table's listing is not copied per query.
    view: Arc<FileSystemView>,
    /// Where the data files of the view were listed.
    listed_from: ListedFrom,
    /// The latest writer schema (Avro JSON, without meta fields).
    avro_schema: String,
    schema: SchemaRef,
    changes_schema: SchemaRef,
    /// The columns a scan does not read, shared by all its batches.
    nulls: schema::NullColumns,
    /// What the latest clean kept ([`metadata::retained_by_clean`]), read when a change read
    /// first needs a file group's earlier slices.
    retained_by_clean: std::sync::OnceLock<Option<(String, String)>>,
    /// The latest slices ([`Self::slices`] of [`ReadBound::Latest`]), computed once for the
    /// clones of one load (a backend's table state answers every query of an unchanged table
    /// with such a clone), anew for a reader that sees other files or writes.
    latest_slices: Arc<std::sync::OnceLock<Arc<Vec<FileSlice>>>>,
    /// The metadata table's column statistics, where the table declares them: read the first
    /// time a filter could use them, for the clones of one load.
    column_stats: Arc<std::sync::OnceLock<LoadedColumnStats>>,
    /// Log files that exist only in memory, by path: rows buffered outside the lake
    /// ([`Self::with_buffered`]).
    buffered: Arc<std::collections::HashMap<String, bytes::Bytes>>,
}

/// Where a reader's data files were listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListedFrom {
    /// Storage, directory by directory: a table without a metadata table listing its files.
    Storage,
    /// The `files` partition of the table's metadata table, as of its instant `as_of`.
    MetadataTable { as_of: String },
    /// A listing handed over (a parallel scan's worker reads its leader's).
    Given,
}

impl std::fmt::Display for ListedFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListedFrom::Storage => f.write_str("storage"),
            ListedFrom::MetadataTable { as_of } if as_of.is_empty() => f.write_str("metadata table (no completed instant)"),
            ListedFrom::MetadataTable { as_of } => write!(f, "metadata table as of {as_of}"),
            ListedFrom::Given => f.write_str("the leader's listing"),
        }
    }
}

/// The data files of the table at `storage`: through its metadata table where the table says
/// its files are listed there ([`TableConfig::lists_files_in_metadata_table`]), as Hudi 1.x
/// readers list them — one read of the `files` partition's few files instead of one LIST per
/// partition, and only the files its writers recorded; by listing storage otherwise, or when
/// the metadata table it names does not exist (hudi-rs falls back the same way).
async fn list_files(storage: &Storage, config: &TableConfig, timeline: &Timeline) -> Result<(FileSystemView, ListedFrom)> {
    if config.lists_files_in_metadata_table() {
        let listed = crate::mdt::files::listing(storage, timeline).await.map_err(|e| e.context("reading the table's metadata table"))?;
        if let Some(listed) = listed {
            return Ok((FileSystemView::from_listing(listed.files), ListedFrom::MetadataTable { as_of: listed.as_of }));
        }
    }
    Ok((FileSystemView::load(storage).await?, ListedFrom::Storage))
}

/// An error reading the Parquet file at `location`: what storage said when the bytes could not
/// be fetched (a file a cleaner removed is not found, a refused request is denied), and a
/// corrupt file otherwise.
fn parquet_error(location: &str, error: parquet::errors::ParquetError) -> Error {
    use parquet::errors::ParquetError;
    let error = match error {
        ParquetError::External(inner) => match inner.downcast::<object_store::Error>() {
            Ok(storage_error) => return Error::from(*storage_error).context(format!("reading the base file {location}")),
            Err(inner) => ParquetError::External(inner),
        },
        other => other,
    };
    corrupt_file(location, error)
}

/// The Parquet file at `location` cannot be read: what `error` says of it.
pub(crate) fn corrupt_file(location: &str, error: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::new(ErrorKind::Corrupt, format!("invalid Parquet file {location}")).with_source(error)
}

fn sorted(mut listing: Vec<(String, u64)>) -> Vec<(String, u64)> {
    listing.sort_unstable();
    listing
}

impl TableReader {
    /// Loads everything a read needs from the table at `storage`: its configuration, then
    /// its timeline, then its files (in that order, so that every instant the timeline shows
    /// completed has all its files in the listing), and the latest schema.
    pub async fn open(storage: Storage) -> Result<TableReader> {
        let config = table::load_config(&storage).await?;
        let listing = storage.list_dir_and_subdirs(&config.timeline_dir).await?;
        Self::load(storage, config, listing, None, None).await
    }

    /// The table as it is now. One LIST of the timeline tells whether anything happened since
    /// this reader was loaded: if not, the answer is this reader again (a cheap clone, no
    /// other request); if so, the table is loaded anew. Every change a Hudi writer, cleaner or
    /// rollback makes to the files shows in the timeline directory; a `hoodie.properties`
    /// rewritten without any instant (an upgrade by hand) is seen only with the next instant.
    pub async fn refreshed(&self) -> Result<TableReader> {
        let listing = self.storage.list_dir_and_subdirs(&self.config.timeline_dir).await?;
        if sorted(listing.0.clone()) == *self.timeline_listing {
            return Ok(self.clone());
        }
        let config = table::load_config(&self.storage).await?;
        if config.timeline_dir != self.config.timeline_dir {
            return Self::open(self.storage.clone()).await;
        }
        Self::load(self.storage.clone(), config, listing, Some(&self.timeline), None).await
    }

    /// Reads also see the data files `files` (`(relative path, size)` pairs) that were written
    /// after the table was listed: a transaction's own, which no timeline listing announces.
    pub fn with_files(mut self, files: Vec<(String, u64)>) -> TableReader {
        if !files.is_empty() {
            // A copy of the view for this reader alone; the loaded one stays as it was listed.
            Arc::make_mut(&mut self.view).extend(files);
            self.latest_slices = Default::default();
        }
        self
    }

    /// Whether `other` comes from the same load as this reader (a refresh that found nothing new).
    pub fn is_same_load(&self, other: &TableReader) -> bool {
        Arc::ptr_eq(&self.view, &other.view)
    }

    /// Loads the table from the timeline directory's listing (files and subdirectories).
    /// Archived actions' completion times come from the LSM history when the table has one;
    /// `before`, the timeline of an earlier load, lends its history while the first write is
    /// the same (archival always moves writes out of the active timeline). The data files are
    /// listed after the timeline, unless `files` lists them already.
    async fn load(
        storage: Storage,
        config: TableConfig,
        (timeline_listing, subdirs): (Vec<(String, u64)>, Vec<String>),
        before: Option<&Timeline>,
        files: Option<Vec<(String, u64)>>,
    ) -> Result<TableReader> {
        let mut timeline = Timeline::from_listing(&config, &timeline_listing);
        let history = History::of(&storage, &config);
        if config.timeline_layout >= 2 && subdirs.iter().any(|d| d == history.dir_name()) {
            let first_write = |t: &Timeline| t.first_write().map(|i| i.timestamp.clone());
            let archived = match before.filter(|b| first_write(b) == first_write(&timeline)) {
                Some(before) => before.archived().clone(),
                None => Arc::new(history.completions().await?),
            };
            timeline = timeline.with_archived(archived);
        }
        let (view, listed_from) = match files {
            Some(files) => (FileSystemView::from_listing(files), ListedFrom::Given),
            None => list_files(&storage, &config, &timeline).await?,
        };
        let timeline_subdirs = Arc::new(subdirs);
        let avro = metadata::table_schema(&storage, &config, &timeline).await?;
        let (schema, changes_schema) = schemas_of(&avro, &config)?;
        Ok(TableReader {
            storage,
            config: Arc::new(config),
            timeline,
            timeline_listing: Arc::new(sorted(timeline_listing)),
            timeline_subdirs,
            decided: Vec::new(),
            view: Arc::new(view),
            listed_from,
            avro_schema: avro,
            schema,
            changes_schema,
            nulls: Default::default(),
            retained_by_clean: Default::default(),
            latest_slices: Default::default(),
            column_stats: Default::default(),
            buffered: Default::default(),
        })
    }

    /// The reader with `avro` as the table's schema: what this transaction's own pending schema
    /// change makes it (see [`Self::with_decided_writes`]), before any commit records it.
    pub fn with_avro_schema(mut self, avro: String) -> Result<TableReader> {
        (self.schema, self.changes_schema) = schemas_of(&avro, &self.config)?;
        self.avro_schema = avro;
        Ok(self)
    }

    /// Reads also see the pending deltacommits `instants` (see [`Timeline::with_decided_writes`]):
    /// for snapshot reads of the latest state only, never for time travel or change ranges,
    /// which are about completed instants.
    pub fn with_decided_writes<'a>(mut self, instants: impl IntoIterator<Item = &'a str>) -> TableReader {
        let instants: Vec<&str> = instants.into_iter().collect();
        self.decided.extend(instants.iter().map(|i| (*i).to_owned()));
        self.timeline.with_decided_writes(instants);
        self.latest_slices = Default::default();
        self
    }

    /// What another process needs to read the table exactly as this reader does
    /// ([`Self::at_state`]): the timeline listing it was loaded from, the data files it listed
    /// (and those added with [`Self::with_files`]) and the writes it sees as decided.
    pub fn state(&self) -> ReaderState {
        ReaderState {
            timeline_listing: self.timeline_listing.as_ref().clone(),
            timeline_subdirs: self.timeline_subdirs.as_ref().clone(),
            files: self.view.listing(),
            decided: self.decided.clone(),
        }
    }

    /// The table at `storage` as a reader with `state` saw it (a parallel scan's worker reads
    /// the leader's snapshot, whatever committed since): loaded from that timeline listing and
    /// those data files, without listing the table again (listing is most of a load: 12 ms of
    /// 13 for 827 files on a local disk).
    pub async fn at_state(storage: Storage, state: &ReaderState) -> Result<TableReader> {
        let config = table::load_config(&storage).await?;
        let listing = (state.timeline_listing.clone(), state.timeline_subdirs.clone());
        let reader = Self::load(storage, config, listing, None, Some(state.files.clone())).await?;
        Ok(reader.with_decided_writes(state.decided.iter().map(String::as_str)))
    }

    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    /// Where the data files this reader reads were listed.
    pub fn listed_from(&self) -> &ListedFrom {
        &self.listed_from
    }

    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// The latest writer schema as Avro JSON, without meta fields.
    pub fn avro_schema(&self) -> &str {
        &self.avro_schema
    }

    /// Meta fields first (when the table populates them), then the data columns of the latest
    /// schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// [`Self::schema`] plus `_hoodie_operation`: the rows of incremental reads.
    pub fn changes_schema(&self) -> &SchemaRef {
        &self.changes_schema
    }

    /// The instant a snapshot read without `as_of` sees.
    pub fn latest_instant(&self) -> Option<&str> {
        self.timeline.latest_completed_write().map(|i| i.timestamp.as_str())
    }

    /// The file slices a read within `bound` sees.
    pub async fn slices(&self, bound: &ReadBound) -> Result<Vec<FileSlice>> {
        if let ReadBound::Latest = bound {
            return Ok(self.shared_latest_slices().await?.as_ref().clone());
        }
        self.compute_slices(bound).await
    }

    /// [`Self::slices`] of the latest snapshot, computed once per load.
    async fn shared_latest_slices(&self) -> Result<Arc<Vec<FileSlice>>> {
        if let Some(slices) = self.latest_slices.get() {
            return Ok(slices.clone());
        }
        let slices = Arc::new(self.compute_slices(&ReadBound::Latest).await?);
        Ok(self.latest_slices.get_or_init(|| slices).clone())
    }

    async fn compute_slices(&self, bound: &ReadBound) -> Result<Vec<FileSlice>> {
        // Time travel to before what the latest clean kept (as Java refuses it).
        if let ReadBound::RequestedBy(as_of) = bound {
            if let Some((clean, earliest)) = self.retained_by_clean().await?.filter(|(_, e)| as_of.as_str() < e.as_str()) {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("the table as of {as_of} is no longer in storage: clean {clean} kept the files of commits from {earliest} on; read as of {earliest} or later"),
                ));
            }
        }
        let replaced = metadata::replaced_file_groups(&self.storage, &self.timeline, bound).await?;
        Ok(self.view.latest_slices(&self.timeline, bound, &replaced))
    }

    /// The number of buckets when the table uses the simple bucket index.
    pub fn bucket_count(&self) -> Option<u32> {
        let props = &self.config.properties;
        let is_bucket = props.get("hoodie.index.type").is_some_and(|t| t.eq_ignore_ascii_case("BUCKET"));
        let simple = props.get("hoodie.index.bucket.engine").is_none_or(|e| e.eq_ignore_ascii_case("SIMPLE"));
        // A count outside 1..=MAX_BUCKETS is damage: no pruning by bucket, then.
        let buckets = props.get("hoodie.bucket.index.num.buckets")?.trim().parse().ok().filter(|n| (1..=crate::table::bucket::MAX_BUCKETS).contains(n))?;
        (is_bucket && simple).then_some(buckets)
    }

    /// The base-file rows a read decodes where it fixes its record keys, estimated before it
    /// runs (`stats`: what pruning by `options.filter` kept): one data page of the slice of
    /// each partition that holds a key, per key. The keys are fixed by the filter's constants,
    /// or by an equality on every record key field among the top-level `conditions` of the
    /// row filter, whose parameters are bound at execution (a generic plan's read prunes by
    /// them then). `None` where the keys are not fixed, or the table has no bucket index (whose
    /// slices this extension compacts into files sorted by key: another writer's base files
    /// may hold a key on every page).
    pub fn keyed_read_rows(&self, options: &ScanOptions, conditions: &[&crate::read::condition::Condition], stats: &ScanStats) -> Option<f64> {
        use crate::read::condition::{Condition, Operand};
        let keys = match options.filter.record_keys(&self.config, &self.schema) {
            Some(keys) => keys.as_slice().len(),
            None => {
                let items = conditions.iter().flat_map(|c| match c {
                    Condition::And(items) => items.iter().collect(),
                    one => vec![*one],
                });
                let fixed: HashSet<&str> = items
                    .filter_map(|c| match c {
                        Condition::Compare { column, op: crate::read::filter::Op::Eq, operand: Operand::Param(_) | Operand::Value(_) } => Some(column.field.as_str()),
                        _ => None,
                    })
                    .collect();
                let key_fields = &self.config.record_key_fields;
                let all_fixed = !key_fields.is_empty() && key_fields.iter().all(|f| fixed.contains(f.as_str()));
                (self.config.populate_meta_fields && all_fixed).then_some(1)?
            }
        };
        // A key is in one bucket of each partition.
        let slices = stats.slices_kept.div_ceil(self.bucket_count()? as usize);
        Some((keys * slices * crate::write::BASE_PAGE_ROWS) as f64)
    }

    /// The metadata table's column statistics, when the table lists its files there and
    /// declares them (Spark's tables; this engine's writes stop declaring them). Statistics
    /// that cannot be read — damaged, or in a form this engine does not know — are not used:
    /// reads go on without skipping files by them, as Hudi's own readers do by default
    /// (`hoodie.fileIndex.dataSkippingFailureMode` `fallback`), and
    /// [`Self::take_column_stats_problem`] tells why once. A storage error is an error: it is
    /// not the statistics' fault, and the read would meet it again.
    async fn column_stats(&self) -> Result<Option<Arc<ColumnStats>>> {
        if let Some(loaded) = self.column_stats.get() {
            return Ok(loaded.stats.clone());
        }
        let declared = matches!(self.listed_from, ListedFrom::MetadataTable { .. })
            && self.config.metadata_partitions.iter().any(|p| p == crate::mdt::column_stats::PARTITION);
        let loaded = match declared {
            false => LoadedColumnStats::default(),
            true => match ColumnStats::load(&self.storage, &self.timeline).await {
                Ok(stats) => LoadedColumnStats { stats: Some(Arc::new(stats)), ..Default::default() },
                Err(e) if matches!(e.kind(), ErrorKind::Storage | ErrorKind::PermissionDenied) => {
                    return Err(e.context("reading the metadata table's column statistics"));
                }
                Err(e) => LoadedColumnStats { problem: Some(e.to_string()), ..Default::default() },
            },
        };
        Ok(self.column_stats.get_or_init(|| loaded).stats.clone())
    }

    /// Why the metadata table's column statistics of this table state are not used (see
    /// [`Self::column_stats`]): told to the first caller after a read found it, then `None`.
    pub fn take_column_stats_problem(&self) -> Option<String> {
        let loaded = self.column_stats.get()?;
        let problem = loaded.problem.as_ref()?;
        (!loaded.told.swap(true, std::sync::atomic::Ordering::Relaxed)).then(|| problem.clone())
    }

    /// The slices within `bound` that `options.filter` does not rule out (by partition, bucket
    /// and the metadata table's column statistics), and how many of the table's partitions and
    /// slices that is.
    pub async fn pruned_slices(&self, bound: &ReadBound, options: &ScanOptions) -> Result<(Vec<FileSlice>, ScanStats)> {
        let all = match bound {
            ReadBound::Latest => self.shared_latest_slices().await?,
            _ => Arc::new(self.compute_slices(bound).await?),
        };
        let mut stats = ScanStats { slices_total: all.len(), ..Default::default() };
        let partitions: std::collections::BTreeSet<&str> = all.iter().map(|s| s.partition.as_str()).collect();
        stats.partitions_total = partitions.len();
        let kept_partitions: HashSet<&str> = partitions
            .into_iter()
            .filter(|p| options.filter.may_match_partition(&self.config, &self.schema, p))
            .collect();
        stats.partitions_kept = kept_partitions.len();
        let bucket = self.bucket_count().and_then(|n| options.filter.bucket(&self.config, n));
        let column_stats = if options.filter.is_empty() { None } else { self.column_stats().await? };
        let kept: Vec<FileSlice> = all
            .iter()
            .filter(|s| kept_partitions.contains(s.partition.as_str()))
            .filter(|s| bucket.is_none_or(|b| crate::table::bucket::bucket_of_file_id(&s.file_id) == Some(b)))
            .filter(|s| column_stats.as_deref().is_none_or(|stats| stats.may_match(s, &options.filter, &self.schema)))
            .cloned()
            .collect();
        stats.slices_kept = kept.len();
        stats.bytes_total = all.iter().map(FileSlice::size).sum();
        stats.bytes_kept = kept.iter().map(FileSlice::size).sum();
        Ok((kept, stats))
    }

    /// The bound of a snapshot as of `as_of` (requested instant, inclusive; latest if `None`).
    pub fn snapshot_bound(as_of: Option<&str>) -> ReadBound {
        as_of.map_or(ReadBound::Latest, |t| ReadBound::RequestedBy(t.to_owned()))
    }

    /// The bound an incremental read of `range` reads up to.
    pub fn change_bound(&self, range: &ChangeRange) -> ReadBound {
        range.end.clone().map_or(ReadBound::Latest, ReadBound::CompletedBy)
    }

    /// All rows of the snapshot as of `as_of`. Convenient for small tables and tests; large
    /// scans read [`Self::slices`] one [`Self::read_slice`] at a time.
    pub async fn read_snapshot(&self, as_of: Option<&str>) -> Result<Vec<RecordBatch>> {
        let bound = Self::snapshot_bound(as_of);
        let options = ScanOptions::default();
        let mut out = Vec::new();
        for slice in self.slices(&bound).await? {
            out.extend(self.read_slice(&slice, &bound, &options, &mut ScanStats::default()).await?);
        }
        Ok(out)
    }

    /// All changed rows of `range` (see [`Self::read_slice_changes`]).
    pub async fn read_changes(&self, range: &ChangeRange, with_deletes: bool) -> Result<Vec<RecordBatch>> {
        let (options, mut stats) = (ScanOptions::default(), ScanStats::default());
        let mut out = Vec::new();
        for slice in self.slices(&self.change_bound(range)).await? {
            out.extend(self.read_slice_changes(&slice, range, with_deletes, &options, &mut stats).await?);
        }
        Ok(out)
    }

    /// The merged rows of one file slice within `bound`.
    pub async fn read_slice(
        &self,
        slice: &FileSlice,
        bound: &ReadBound,
        options: &ScanOptions,
        stats: &mut ScanStats,
    ) -> Result<Option<RecordBatch>> {
        self.fetch_slice(slice, &SliceQuery::Snapshot(bound.clone()), options, stats).await?.run()
    }

    /// The rows of one file slice changed by the commits of `range`, with `_hoodie_operation`:
    /// each key's latest version in the range, `I` if the key did not exist before the range
    /// and `U` if it did; with `with_deletes`, also a `D` row (key and partition path only) for
    /// each key the range deleted. Keys inserted and deleted within the range do not appear.
    pub async fn read_slice_changes(
        &self,
        slice: &FileSlice,
        range: &ChangeRange,
        with_deletes: bool,
        options: &ScanOptions,
        stats: &mut ScanStats,
    ) -> Result<Option<RecordBatch>> {
        let query = SliceQuery::Changes { range: range.clone(), with_deletes };
        self.fetch_slice(slice, &query, options, stats).await?.run()
    }

    /// The I/O half of reading one slice: fetches the base file's column chunks that `query`
    /// and `options` need and the log blocks written by instants visible within the query's
    /// bound and not rolled back. [`SliceRead::run`] then decodes and merges them. Row groups
    /// are skipped by statistics only when the slice has no logs: a log version may lose to a
    /// base version that the filter alone would have dropped. A change read of a slice whose
    /// base file was written inside the range also fetches the group's slice as of the range
    /// start and the delete blocks written since (see `range_start`).
    pub async fn fetch_slice(
        &self,
        slice: &FileSlice,
        query: &SliceQuery,
        options: &ScanOptions,
        stats: &mut ScanStats,
    ) -> Result<SliceRead> {
        self.fetch_slice_part(slice, SlicePart::WHOLE, query, options, stats).await
    }

    /// [`Self::fetch_slice`] of a `part` of the slice: with a page index in the base file, the
    /// part's rows and the data pages that hold them; without one, the row groups that start
    /// in the part's rows. The rows are counted by each part, the row groups by the first.
    /// A part of a slice whose rows need merging (see [`SlicePart`]) is an error.
    pub async fn fetch_slice_part(
        &self,
        slice: &FileSlice,
        part: SlicePart,
        query: &SliceQuery,
        options: &ScanOptions,
        stats: &mut ScanStats,
    ) -> Result<SliceRead> {
        if part.is_split() && !(slice.log_files.is_empty() && matches!(query, SliceQuery::Snapshot(_))) {
            return Err(Error::new(ErrorKind::Internal, "only a slice read without merging is read in parts"));
        }
        let (bound, kind) = match query {
            SliceQuery::Snapshot(bound) => (bound.clone(), SliceOutput::Snapshot),
            SliceQuery::Changes { range, with_deletes } => {
                if !self.config.populate_meta_fields {
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        "incremental queries need the _hoodie_commit_time meta field, which this table does not populate",
                    ));
                }
                let instants = self.timeline.writes_in_range(range.start.as_deref(), range.end.as_deref());
                let bound = self.change_bound(range);
                let start = self.range_start(slice, range, &bound, &instants).await?;
                // A base file completed by the range start holds no change of the range (one
                // a compaction completed inside it may hold the versions of logs it folded).
                let base_before = |start: &str| self.timeline.completion_time(&slice.base_instant).is_some_and(|c| c <= start);
                let changes_in_blocks = range.start.as_deref().is_some_and(|start| slice.base_file.is_none() || base_before(start));
                let kind = SliceOutput::Changes {
                    instants,
                    with_deletes: with_deletes.then(|| self.config.clone()),
                    changes_schema: self.changes_schema.clone(),
                    start,
                    changes_in_blocks,
                };
                (bound, kind)
            }
        };
        // Rows compared with the keys alive at the range start need their own keys.
        let with_keys;
        let options = match (&kind, &options.columns) {
            (SliceOutput::Changes { start: Some(_), .. }, Some(columns)) => {
                let columns = columns.iter().cloned().chain([schema::META_FIELDS[schema::RECORD_KEY_COLUMN].to_owned()]);
                with_keys = ScanOptions { columns: Some(columns.collect()), ..options.clone() };
                &with_keys
            }
            _ => options,
        };
        self.fetch_slice_files(slice, part, bound, kind, options, None, stats).await
    }

    /// For a change read of `slice` whose base file a write inside `range` (its `instants`)
    /// wrote: the group's slice as of the range start and the delete blocks written since in
    /// the slices before this one ([`RangeStart`]). Those files are still in storage unless a
    /// cleaner removed them, and then the read fails rather than report wrong operations.
    async fn range_start(
        &self,
        slice: &FileSlice,
        range: &ChangeRange,
        end: &ReadBound,
        instants: &WritesInRange,
    ) -> Result<Option<RangeStart>> {
        let Some(start) = &range.start else { return Ok(None) };
        if slice.base_file.is_none() || !instants.contains(&slice.base_instant) {
            return Ok(None);
        }
        let (partition, file_id) = (&slice.partition, &slice.file_id);
        let start_bound = ReadBound::CompletedBy(start.clone());
        let mut range_start = RangeStart { state: None, deletes: Vec::new(), rewritten_by: slice.base_instant.clone() };
        let Some(at_start) = self.view.group_slices(partition, file_id, &self.timeline, &start_bound).pop() else {
            // No slice as of the start: the group is new, unless a cleaner removed its slices
            // from then. A compaction's base file is never a group's first; and a clean says
            // from which commit on it kept everything.
            let oldest = self.view.group_slices(partition, file_id, &self.timeline, end).into_iter().next();
            let compacted = oldest.as_ref().and_then(|s| self.timeline.get(&s.base_instant)).is_some_and(|i| i.requested_action == "compaction");
            let cleaned = self.retained_by_clean().await?.filter(|(_, earliest)| start.as_str() < earliest.as_str());
            if compacted || cleaned.is_some() {
                let kept = match cleaned {
                    Some((clean, earliest)) => format!(" (clean {clean} kept the files of commits from {earliest} on)"),
                    None => String::new(),
                };
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("the changes since {start} are no longer in storage: the earlier files of file group {file_id} in \"{partition}\" were cleaned{kept}; read from a later start instant"),
                ));
            }
            return Ok(Some(range_start));
        };
        // Each log file is read once: the slices before this one hold the start slice's logs
        // (as of the end, with the logs written since), and their delete blocks.
        let mut earlier_logs = Vec::new();
        for earlier in self.view.group_slices(partition, file_id, &self.timeline, end) {
            if earlier.base_instant >= at_start.base_instant && earlier.base_instant < slice.base_instant {
                earlier_logs.push(self.read_log_blocks(&earlier).await?);
            }
        }
        let mut start_logs = Vec::new();
        for log in &at_start.log_files {
            let path = at_start.log_path(log);
            let read: Vec<_> = earlier_logs.iter().flatten().filter(|(p, _)| *p == path).cloned().collect();
            start_logs.extend(if read.is_empty() { self.read_log_file(path).await? } else { read });
        }
        let keys = [schema::RECORD_KEY_COLUMN, schema::PARTITION_PATH_COLUMN].map(|c| schema::META_FIELDS[c].to_owned());
        let options = ScanOptions { columns: Some(keys.into()), ..Default::default() };
        let mut unreported = ScanStats::default();
        let state = self.fetch_slice_files(&at_start, SlicePart::WHOLE, start_bound, SliceOutput::Snapshot, &options, Some(start_logs), &mut unreported);
        range_start.state = Some(Box::new(state.await?));
        for logs in earlier_logs {
            let deletes = self.visible_blocks(logs, end).into_iter().filter(|(_, instant, block)| {
                matches!(block.block_type, BlockType::Delete) && instants.contains(instant)
            });
            range_start.deletes.extend(deletes);
        }
        Ok(Some(range_start))
    }

    /// What the latest clean kept, read once.
    async fn retained_by_clean(&self) -> Result<Option<(String, String)>> {
        if let Some(retained) = self.retained_by_clean.get() {
            return Ok(retained.clone());
        }
        let retained = metadata::retained_by_clean(&self.storage, &self.timeline).await?;
        Ok(self.retained_by_clean.get_or_init(|| retained).clone())
    }

    /// [`Self::fetch_slice`] once the bound and output are known; `logs` are the slice's log
    /// blocks when the caller has read them already ([`Self::read_log_blocks`]).
    async fn fetch_slice_files(
        &self,
        slice: &FileSlice,
        part: SlicePart,
        bound: ReadBound,
        kind: SliceOutput,
        options: &ScanOptions,
        logs: Option<Vec<(String, LogBlock)>>,
        stats: &mut ScanStats,
    ) -> Result<SliceRead> {
        let changes = matches!(kind, SliceOutput::Changes { .. });
        // A change read of a range without commits reads nothing.
        let nothing = matches!(&kind, SliceOutput::Changes { instants, .. } if instants.is_empty());
        // A slice without logs read as a snapshot needs no merging: only the asked-for columns
        // are decoded, and row groups may be skipped by statistics.
        let merging = !nothing && (!slice.log_files.is_empty() || changes);
        if merging && !self.config.populate_meta_fields {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "log files of a table without meta fields cannot be merged (no record keys)",
            ));
        }
        // A snapshot whose filter fixes the record keys reads only rows and versions of those
        // keys, in slices with logs too. They are matched by key: positions would name base
        // rows that are not read.
        let record_keys = match changes {
            false => options.filter.record_keys(&self.config, &self.schema),
            true => None,
        };
        // A snapshot of a whole slice, not narrowed to record keys, decides each key's winner
        // the same way whatever columns it reads: what the last merge of the same versions
        // decided is kept and reused. (Partial updates take each column from its own version,
        // decided by the columns read.)
        let keeps_merge = merging
            && !changes
            && !part.is_split()
            && record_keys.is_none()
            && self.config.merge_mode != MergeMode::PartialUpdate
            && !self.has_buffered_logs(slice);
        // Of a slice whose merge is known, only the needed columns of the blocks are fetched.
        let reused = match (keeps_merge, &logs) {
            (true, None) => self.reusable_merge(slice, &bound, options).await?,
            _ => None,
        };
        let mut keyed_records = None;
        let (blocks, kept_merge) = match reused {
            Some((blocks, outcome, columns)) => (blocks, KeptMerge::Reuse(outcome, Some(columns))),
            None => {
                let blocks = match (merging, logs, &record_keys) {
                    (false, _, _) => Vec::new(),
                    (true, Some(logs), _) => self.visible_blocks(logs, &bound),
                    (true, None, Some(keys)) if !changes => {
                        let (blocks, records) = self.keyed_blocks(slice, &bound, keys, options, stats).await?;
                        keyed_records = Some(records);
                        blocks
                    }
                    (true, None, _) => self.visible_blocks(self.read_log_blocks(slice).await?, &bound),
                };
                let kept_merge = match keeps_merge {
                    false => KeptMerge::No,
                    true => {
                        let key = self.merge_key(slice, &blocks, options);
                        match merge_cache::get(&key) {
                            Some(outcome) => KeptMerge::Reuse(outcome, None),
                            None => KeptMerge::Keep(key),
                        }
                    }
                };
                (blocks, kept_merge)
            }
        };
        // A change read of a slice whose changes are all in the range's blocks merges only the
        // keys those blocks write or delete (with their earlier versions, which say `I` or `U`):
        // a small commit to a large file group costs its own size, not the group's.
        let (blocks, record_keys, nothing) = match (&kind, record_keys) {
            (SliceOutput::Changes { instants, changes_in_blocks: true, .. }, None) if !nothing => match keys_written_by(&blocks, instants)? {
                Some(keys) if keys.as_slice().is_empty() => (Vec::new(), None, true),
                keys => (blocks, keys, false),
            },
            (_, record_keys) => (blocks, record_keys, nothing),
        };
        if keyed_records.is_none() {
            stats.log_blocks_total += blocks.len();
        }
        stats.log_blocks_read += blocks.len();
        let reusing = matches!(kept_merge, KeptMerge::Reuse(..));
        if reusing {
            stats.merges_reused += 1;
        }
        let positions_of = self.positions_of(slice, &blocks, options).filter(|_| record_keys.is_none());
        // What may skip base-file rows: the whole filter where the slice has no logs (each
        // key's one version is the result); with logs only the keys, as a log version that
        // fails the filter may still win over a base version that passes it.
        let pruning = match (&record_keys, slice.log_files.is_empty()) {
            (Some(keys), false) => Some(ScanFilter::of_record_keys(keys)),
            (Some(keys), true) => Some(ScanFilter {
                predicates: options.filter.predicates.iter().cloned().chain(ScanFilter::of_record_keys(keys).predicates).collect(),
            }),
            (None, true) if !options.filter.is_empty() => Some(options.filter.clone()),
            (None, _) => None,
        };
        // Reusing a merge's outcome reads only the columns asked for, and no positions.
        let mut needed = self.needed_columns(options, merging && !reusing, positions_of.is_none(), changes);
        let positions_of = positions_of.filter(|_| !reusing);
        let key_column = schema::META_FIELDS[schema::RECORD_KEY_COLUMN];
        // Record keys read only to select rows: the base rows' keys need not be read again
        // with the other columns, unless a merge matches them.
        let keys_to_select = needed.as_ref().is_some_and(|n| !n.contains(key_column)) && !merging;
        if let (Some(needed), Some(_)) = (&mut needed, &record_keys) {
            needed.insert(key_column.to_owned());
        }
        let record_keys = record_keys.map(Arc::new);
        // A snapshot merged by position compares the ordering values of the base rows the
        // blocks name only: unless the read returns the field, those are read in place.
        let ordering_in_place = match (&kind, &positions_of, &options.columns) {
            (SliceOutput::Snapshot, Some(_), Some(columns)) => {
                let field = self.merge_rule().compared_ordering_column().map(|c| self.schema.field(c));
                field.filter(|f| !columns.contains(f.name()))
            }
            _ => None,
        };
        // The least ordering value of the blocks' versions, where statistics may bound it.
        let ordering_in_place = ordering_in_place.map(|field| {
            let least = StoredBound::applies_to(field.data_type()).then(|| StoredBound::least_in_blocks(&blocks, field.name()));
            (field, least.flatten())
        });
        // Reading the keys first costs a request more: on an object store that is more than
        // decoding the other columns of the page's rows too (which the slice read then selects).
        let keys_first = self.storage.uri().scheme() == crate::storage::Scheme::File;
        let base = match nothing {
            true => None,
            false => {
                let keys = record_keys.as_deref().filter(|_| keys_first).map(|keys| (keys, keys_to_select));
                self.fetch_base_file(slice, part, pruning.as_ref(), keys, needed.as_ref(), ordering_in_place, stats).await?
            }
        };
        Ok(SliceRead {
            base,
            merging,
            kept_merge,
            blocks,
            keyed_records,
            positions_of,
            record_keys,
            row_positions: options.row_positions && !changes,
            schema: self.schema.clone(),
            nulls: self.nulls.clone(),
            output: self.output_columns(options, changes),
            needed,
            rule: self.merge_rule(),
            kind,
        })
    }

    /// The base file's instant when every one of the slice's visible `blocks` names its
    /// records' rows in the base file: then the merge matches them by position, and record
    /// keys are read only when asked for.
    fn positions_of(&self, slice: &FileSlice, blocks: &[(String, String, LogBlock)], options: &ScanOptions) -> Option<String> {
        slice
            .base_file
            .as_ref()
            .map(|base| base.instant.clone())
            .filter(|_| !options.ignore_record_positions && !blocks.is_empty())
            .filter(|instant| blocks.iter().all(|(_, _, b)| b.has_positions_for(instant)))
    }

    /// For a slice whose log files were read before, when what the merge of its versions
    /// visible within `bound` decided is kept: those blocks (without their content), the
    /// outcome, and for each block, the column chunks of a Parquet data block that `options`
    /// need, fetched with its footer. `None` when a log file is not known, the outcome not
    /// kept, or a data block is not in Parquet.
    async fn reusable_merge(&self, slice: &FileSlice, bound: &ReadBound, options: &ScanOptions) -> Result<Option<ReusedMerge>> {
        let table = self.storage.uri().to_string();
        let mut files = Vec::with_capacity(slice.log_files.len());
        for log in &slice.log_files {
            let path = slice.log_path(log);
            let Some(blocks) = merge_cache::log_file(&(table.clone(), path.clone(), log.size)) else { return Ok(None) };
            files.push((path, blocks));
        }
        let known = || files.iter().flat_map(|(path, blocks)| blocks.iter().map(move |b| (path, b)));
        let blocks = self.visible_blocks(known().map(|(path, b)| (path.clone(), b.block.clone())).collect(), bound);
        let Some(outcome) = merge_cache::get(&self.merge_key(slice, &blocks, options)) else { return Ok(None) };
        let needed = self.needed_columns(options, false, false, false);
        let mut columns = Vec::with_capacity(blocks.len());
        for (path, _, block) in &blocks {
            let fetched = match block.block_type {
                BlockType::Delete => None,
                BlockType::ParquetData => {
                    let footer = known().find(|(p, b)| *p == path && b.block.offset == block.offset).and_then(|(_, b)| Some((b.footer.clone()?, b.content_length)));
                    let Some((footer, content_length)) = footer else { return Ok(None) };
                    let ranges = crate::log::data::parquet_column_ranges(&footer, needed.as_ref(), content_length);
                    Some((footer, self.fetch_block_ranges(path, block, ranges).await?))
                }
                _ => return Ok(None),
            };
            columns.push(fetched);
        }
        Ok(Some((blocks, outcome, columns)))
    }

    /// Byte `ranges` of a block's content (as offsets in the content), fetched from its log
    /// file at `path`.
    async fn fetch_block_ranges(&self, path: &str, block: &LogBlock, ranges: Vec<Range<u64>>) -> Result<ChunkBytes> {
        let at = block.content_offset as u64;
        let mut reader = self.storage.parquet_reader(path, None);
        let in_file = ranges.iter().map(|r| r.start + at..r.end + at).collect();
        let bytes = reader.get_byte_ranges(in_file).await.map_err(|e| parquet_error(&format!("{}/{path}", self.storage.uri()), e))?;
        Ok(ChunkBytes(ranges.iter().map(|r| r.start).zip(bytes).collect()))
    }

    /// Fetches the content (of `length` bytes) of a block kept without it.
    async fn fill_block_content(&self, path: &str, block: &mut LogBlock, length: u64) -> Result<()> {
        if block.content.is_empty() && length > 0 {
            block.content = self.fetch_block_ranges(path, block, vec![0..length]).await?.0.remove(0).1;
        }
        Ok(())
    }

    /// The record keys of a Parquet data block (of its content, or of its key column chunk
    /// fetched by its `footer`) or of a delete block (whose content is fetched if kept without);
    /// `None` for other blocks, which are decoded whole anyway.
    async fn read_block_keys(&self, path: &str, block: &mut LogBlock, footer: Option<&ArrowReaderMetadata>, length: u64) -> Result<Option<merge_cache::BlockKeys>> {
        let key_columns: HashSet<String> = [schema::META_FIELDS[schema::RECORD_KEY_COLUMN].to_owned()].into();
        Ok(match (block.block_type, footer) {
            (BlockType::ParquetData, Some(footer)) => {
                let batches = match block.content.is_empty() && length > 0 {
                    false => match crate::log::decode_block(block, Some(&key_columns), None)? {
                        Some(crate::log::BlockContent::Data(batches)) => batches,
                        _ => return Ok(None),
                    },
                    true => {
                        let ranges = crate::log::data::parquet_column_ranges(footer, Some(&key_columns), length);
                        let chunks = self.fetch_block_ranges(path, block, ranges).await?;
                        crate::log::data::decode_parquet_columns(footer.clone(), chunks, Some(&key_columns))?
                    }
                };
                // A block without record keys (or not as text) is decoded whole.
                let key_column = schema::META_FIELDS[schema::RECORD_KEY_COLUMN];
                let columns: Option<Vec<&arrow::array::StringArray>> = batches.iter().map(|b| b.column_by_name(key_column)?.as_string_opt::<i32>()).collect();
                columns.map(|columns| merge_cache::BlockKeys::of(columns.into_iter().flat_map(|c| c.iter())))
            }
            (BlockType::Delete, _) => {
                self.fill_block_content(path, block, length).await?;
                match crate::log::decode_block(block, None, None)? {
                    Some(crate::log::BlockContent::Deletes(deletes)) => Some(merge_cache::BlockKeys::of(deletes.iter().map(|d| Some(d.record_key.as_str())))),
                    _ => None,
                }
            }
            _ => None,
        })
    }

    /// For a snapshot of a few record `keys`: the slice's visible blocks that may hold versions
    /// of them, in the order written, and per block where it is a Parquet data block, its
    /// footer, the column chunks `options` need and the indices of those versions' records.
    /// Which records of a block have which keys is kept per process
    /// ([`merge_cache::BlockKeys`]): a block is read for its keys once, and a later read of
    /// other keys fetches nothing of the blocks without them (nor, of a log file read before,
    /// the file itself).
    async fn keyed_blocks(
        &self,
        slice: &FileSlice,
        bound: &ReadBound,
        keys: &RecordKeys,
        options: &ScanOptions,
        stats: &mut ScanStats,
    ) -> Result<(Vec<(String, String, LogBlock)>, FetchedRecords)> {
        // What the slice read decodes of the blocks (see fetch_slice_files: merged by key).
        let needed = self.needed_columns(options, true, true, false);
        let table = self.storage.uri().to_string();
        // Every block of the slice's log files, with its file, footer and content length.
        let mut listed = Vec::new();
        let mut about = std::collections::HashMap::new();
        for log in &slice.log_files {
            let path = slice.log_path(log);
            let file = (table.clone(), path.clone(), log.size);
            // Blocks are kept without the Avro schema that an Avro data block is decoded by.
            let known = merge_cache::log_file(&file).filter(|known| known.iter().all(|k| k.block.block_type != BlockType::AvroData));
            let blocks: Vec<(LogBlock, Option<ArrowReaderMetadata>, u64)> = match known {
                Some(known) => known.iter().map(|k| (k.block.clone(), k.footer.clone(), k.content_length)).collect(),
                None => self.read_log_file(path.clone()).await?.into_iter().map(|(_, b)| { let length = b.content.len() as u64; (b, None, length) }).collect(),
            };
            for (block, footer, length) in blocks {
                about.insert((path.clone(), block.offset), (file.clone(), footer, length));
                listed.push((path.clone(), block));
            }
        }
        let mut blocks = Vec::new();
        let mut records = Vec::new();
        let visible = self.visible_blocks(listed, bound);
        stats.log_blocks_total += visible.len();
        for (path, instant, mut block) in visible {
            let (file, footer, length) = about.remove(&(path.clone(), block.offset)).expect("a listed block");
            let offset = block.offset;
            let context = || format!("reading block at {offset} of {path}");
            let has_content = !block.content.is_empty() || length == 0;
            let footer = match (block.block_type, footer) {
                (BlockType::ParquetData, None) if has_content => ArrowReaderMetadata::load(&block.content, Default::default()).ok(),
                (_, footer) => footer,
            };
            let block_key = (file, block.offset);
            let index = match merge_cache::block_keys(&block_key) {
                Some(index) => Some(index),
                None => {
                    let index = self.read_block_keys(&path, &mut block, footer.as_ref(), length).await.context(context)?;
                    match self.buffered_file(&path) {
                        Some(_) => index.map(Arc::new),
                        None => index.map(|index| merge_cache::keep_block_keys(block_key, index)),
                    }
                }
            };
            let found = index.map(|index| index.records_of(keys.as_slice().iter().map(String::as_str)));
            if found.as_ref().is_some_and(Vec::is_empty) {
                // No version of the keys.
                continue;
            }
            let selected = match (block.block_type, footer, found) {
                (BlockType::ParquetData, Some(footer), Some(found)) => {
                    let chunks = match has_content {
                        true => ChunkBytes(vec![(0, block.content.clone())]),
                        false => self.fetch_block_ranges(&path, &block, crate::log::data::parquet_column_ranges(&footer, needed.as_ref(), length)).await?,
                    };
                    Some((footer, chunks, found))
                }
                _ => {
                    self.fill_block_content(&path, &mut block, length).await?;
                    None
                }
            };
            blocks.push((path, instant, block));
            records.push(selected);
        }
        Ok((blocks, records))
    }

    /// What identifies the merge of `slice`'s base file with its visible `blocks`, read with
    /// `options` ([`merge_cache`]).
    fn merge_key(&self, slice: &FileSlice, blocks: &[(String, String, LogBlock)], options: &ScanOptions) -> MergeKey {
        let rule = self.merge_rule();
        MergeKey {
            table: self.storage.uri().to_string(),
            base: slice.base_path().zip(slice.base_file.as_ref().map(|b| b.size)),
            blocks: blocks.iter().map(|(path, instant, block)| (path.clone(), block.offset, instant.clone())).collect(),
            by_position: self.positions_of(slice, blocks, options).is_some(),
            rule: (rule.mode, rule.ordering_column),
        }
    }

    /// The blocks of the slice's log files, in the order written: `(file path, block)`.
    async fn read_log_blocks(&self, slice: &FileSlice) -> Result<Vec<(String, LogBlock)>> {
        let mut blocks = Vec::new();
        for log in &slice.log_files {
            blocks.extend(self.read_log_file(slice.log_path(log)).await?);
        }
        Ok(blocks)
    }

    /// The blocks of the log file at `path` (kept without their content for later reads of
    /// the same slice: [`Self::reusable_merge`]).
    async fn read_log_file(&self, path: String) -> Result<Vec<(String, LogBlock)>> {
        if let Some(bytes) = self.buffered_file(&path) {
            return Ok(read_blocks(&bytes).into_iter().map(|b| (path.clone(), b)).collect());
        }
        let bytes = self.storage.get(&path).await?;
        let blocks = read_blocks(&bytes);
        merge_cache::keep_log_file((self.storage.uri().to_string(), path.clone(), bytes.len() as u64), &blocks);
        Ok(blocks.into_iter().map(|b| (path.clone(), b)).collect())
    }

    /// Of a slice's log `blocks`, the data and delete blocks that instants visible within
    /// `bound` wrote and no rollback cancelled, in the order written: `(file path, instant,
    /// block)`.
    fn visible_blocks(&self, blocks: Vec<(String, LogBlock)>, bound: &ReadBound) -> Vec<(String, String, LogBlock)> {
        let rolled_back: HashSet<String> =
            blocks.iter().filter_map(|(_, b)| b.rollback_target().map(str::to_owned)).collect();
        blocks
            .into_iter()
            .filter(|(_, block)| !matches!(block.block_type, BlockType::Corrupt | BlockType::Command))
            .filter_map(|(path, block)| {
                let instant = block.instant()?.to_owned();
                let visible = self.timeline.is_visible(&instant, bound) && !rolled_back.contains(&instant);
                visible.then_some((path, instant, block))
            })
            .collect()
    }

    /// The columns a read returns: the requested ones, and the commit time that change reads
    /// select rows by (`None`: all).
    fn output_columns(&self, options: &ScanOptions, changes: bool) -> Option<HashSet<usize>> {
        let names = options.columns.as_ref()?;
        let mut out: HashSet<usize> = names.iter().filter_map(|n| self.schema.index_of(n).ok()).collect();
        if changes {
            out.insert(schema::COMMIT_TIME_COLUMN);
        }
        Some(out)
    }

    /// How the versions of a key replace each other in this table.
    fn merge_rule(&self) -> MergeRule {
        MergeRule {
            mode: self.config.merge_mode,
            ordering_column: self.config.ordering_fields.first().and_then(|f| self.schema.index_of(f).ok()),
        }
    }

    /// The columns a read must decode: the requested ones; when merging, the ordering field
    /// (if the merge compares it), and the record key if versions are matched `by_key`; for
    /// change reads, the commit time.
    fn needed_columns(&self, options: &ScanOptions, merging: bool, by_key: bool, changes: bool) -> Option<HashSet<String>> {
        let mut needed: HashSet<String> = options.columns.as_ref()?.iter().cloned().collect();
        if merging {
            if by_key {
                needed.insert("_hoodie_record_key".to_owned());
            }
            if self.merge_rule().compared_ordering_column().is_some() {
                needed.extend(self.config.ordering_fields.iter().cloned());
            }
        }
        if changes {
            needed.insert("_hoodie_commit_time".to_owned());
        }
        Some(needed)
    }

    /// The footer of the slice's base file (`None`: the slice has none).
    pub(crate) async fn base_file_metadata(&self, slice: &FileSlice) -> Result<Option<ArrowReaderMetadata>> {
        Ok(self.open_base_file(slice, false).await?.map(|(_, _, metadata)| metadata))
    }

    /// The slice's base file: its key in this process's footers (its location, for errors),
    /// a reader, and its footer; with `page_index`, also the page index where the file has one.
    async fn open_base_file(
        &self,
        slice: &FileSlice,
        page_index: bool,
    ) -> Result<Option<(FooterKey, parquet::arrow::async_reader::ParquetObjectReader, ArrowReaderMetadata)>> {
        let (Some(path), Some(base)) = (slice.base_path(), slice.base_file.as_ref()) else {
            return Ok(None);
        };
        let location = format!("{}/{path}", self.storage.uri());
        // A slice from a compaction plan names its base file without a size. Without one the
        // footer would be fetched with a suffix range, which Azure does not serve.
        let size = if base.size > 0 { base.size } else { self.storage.size(&path).await? };
        let mut reader = self.storage.parquet_reader(&path, Some(size));
        let key = FooterKey { access: self.storage.access(), location, size };
        if let Some(metadata) = footers::get(&key, page_index) {
            return Ok(Some((key, reader, metadata)));
        }
        let policy = if page_index { PageIndexPolicy::Optional } else { PageIndexPolicy::Skip };
        let options = ArrowReaderOptions::new().with_page_index_policy(policy);
        let metadata = ArrowReaderMetadata::load_async(&mut reader, options).await;
        let metadata = metadata.map_err(|e| parquet_error(&key.location, e))?;
        footers::put(&key, &metadata, page_index);
        Ok(Some((key, reader, metadata)))
    }

    /// Fetches the column chunks of the slice's base file that `needed` names (all when
    /// `None`): of the row groups, and the data pages where the file has a page index, whose
    /// statistics `pruning` does not rule out, of the rows of `part` ([`Self::fetch_slice_part`]).
    /// With `record_keys`, the record keys of those rows are read first, and then the other
    /// columns of the rows with one of the keys only (and not the record keys again when
    /// `(keys, true)`). The field `ordering_in_place`, of a read of the whole file, is fetched
    /// with them but not decoded ([`OrderingChunks`]), when the file allows, or not fetched at
    /// all when the file's statistics put it at or below the later versions' least value (the
    /// [`StoredBound`] given with it).
    #[allow(clippy::too_many_arguments)]
    async fn fetch_base_file(
        &self,
        slice: &FileSlice,
        part: SlicePart,
        pruning: Option<&ScanFilter>,
        record_keys: Option<(&RecordKeys, bool)>,
        needed: Option<&HashSet<String>>,
        ordering_in_place: Option<(&Field, Option<StoredBound>)>,
        stats: &mut ScanStats,
    ) -> Result<Option<FetchedBase>> {
        let page_index = pruning.is_some() || part.is_split();
        let Some((key, mut reader, metadata)) = self.open_base_file(slice, page_index).await? else { return Ok(None) };
        let location = key.location.clone();
        let row_groups = metadata.metadata().row_groups();
        // The file positions of each row group's rows.
        let group_rows: Vec<Range<u64>> = row_groups
            .iter()
            .scan(0u64, |next, group| {
                let first = *next;
                *next += group.num_rows().max(0) as u64;
                Some(first..*next)
            })
            .collect();
        let (file_schema, parquet_schema) = (metadata.schema().as_ref(), metadata.parquet_schema());
        let mut groups = match pruning {
            Some(filter) => filter.row_groups(metadata.metadata(), file_schema, parquet_schema),
            None => (0..group_rows.len()).collect(),
        };
        // The row groups of a file split in parts count once, with its first part.
        if part.index == 0 {
            stats.row_groups_total += row_groups.len();
            stats.row_groups_kept += groups.len();
        }
        let mut roots: Option<Vec<usize>> = needed.map(|needed| {
            file_schema.fields().iter().enumerate().filter(|(_, f)| needed.contains(f.name())).map(|(i, _)| i).collect()
        });
        // A part reads its share of the rows: the rows themselves where a page index tells
        // which pages hold them, otherwise the row groups that start among them.
        let leaves: Vec<usize> = (0..parquet_schema.num_columns())
            .filter(|&leaf| roots.as_ref().is_none_or(|roots| roots.contains(&parquet_schema.get_column_root_idx(leaf))))
            .collect();
        let share = part_rows(part, metadata.metadata(), &group_rows, &leaves);
        let by_pages = part.is_split() && metadata.metadata().offset_index().is_some();
        if part.is_split() {
            groups.retain(|&g| match by_pages {
                true => group_rows[g].start < share.end && share.start < group_rows[g].end,
                false => share.contains(&group_rows[g].start),
            });
        }
        let kept_rows: Vec<Range<u64>> = groups.iter().map(|&g| group_rows[g].clone()).collect();
        let share_selection = by_pages.then(|| selection_of(&kept_rows, [share.clone()]));
        stats.base_rows_total += share_selection.as_ref().map_or(row_count(&kept_rows), |share| share.row_count() as u64);
        let mut selection = pruning.and_then(|f| f.row_selection(metadata.metadata(), &groups, file_schema, parquet_schema, Some(&key)));
        selection = match (selection, share_selection) {
            (Some(pruned), Some(share)) => Some(pruned.intersection(&share)),
            (pruned, share) => pruned.or(share),
        };
        let mut rows = match &selection {
            Some(selection) => selected_positions(&kept_rows, selection),
            None => kept_rows.clone(),
        };
        stats.base_rows_read += row_count(&rows);
        let key_column = file_schema.index_of(schema::META_FIELDS[schema::RECORD_KEY_COLUMN]).ok();
        let mut keys_matched = false;
        if let (Some((keys, keys_to_select)), Some(key_column)) = (record_keys, key_column) {
            let read = BaseFileRead { groups: &groups, selection: selection.clone(), roots: Some(vec![key_column]) };
            let matched = read.positions_of_keys(&rows, keys, &location, &mut reader, &metadata).await?;
            if matched.is_empty() {
                return Ok(Some(FetchedBase { location, row_groups: Vec::new(), rows: Vec::new(), keys_matched: true, ordering: None }));
            }
            selection = Some(selection_of(&kept_rows, matched.iter().map(|&p| p..p + 1)));
            rows = matched.into_iter().map(|p| p..p + 1).collect();
            keys_matched = true;
            // (Some column stays: an empty projection would leave the rows uncounted.)
            if let (true, Some(roots)) = (keys_to_select, &mut roots) {
                if roots.iter().any(|&r| r != key_column) {
                    roots.retain(|&r| r != key_column);
                }
            }
        }
        // (Not when it is the only column: an empty projection would leave the rows uncounted.)
        let in_place = ordering_in_place.filter(|_| pruning.is_none() && record_keys.is_none()).and_then(|(field, least)| {
            let root = file_schema.index_of(field.name()).ok()?;
            roots.as_ref().is_some_and(|roots| roots.iter().any(|&r| r != root)).then_some((field, least, root))
        });
        // Statistics that put every base row's value at or below the later versions' spare
        // fetching the values at all; otherwise they are read from their chunks.
        let at_most = in_place.as_ref().and_then(|(field, least, root)| {
            let stored_as_read = file_schema.field(*root).data_type() == field.data_type();
            least.as_ref().filter(|_| stored_as_read)?.base_at_most(metadata.metadata(), field.name())
        });
        let plan = in_place.as_ref().filter(|_| at_most.is_none()).and_then(|(field, _, _)| Some((*field, OrderingChunks::plan(&metadata, field.name())?)));
        if let (Some((_, _, root)), Some(roots)) = (&in_place, &mut roots) {
            if at_most.is_some() || plan.is_some() {
                roots.retain(|r| r != root);
            }
        }
        let ordering_ranges = plan.as_ref().map(|(_, plan)| plan.ranges.clone()).unwrap_or_default();
        // The ordering chunks are fetched with the other columns' first ranges: one round trip.
        let read = BaseFileRead { groups: &groups, selection, roots };
        let (row_groups, ordering_bytes) = read.fetch_with(ordering_ranges, &location, &mut reader, &metadata).await?;
        let chunks = plan.map(|(field, plan)| BaseOrdering::Chunks(OrderingChunks::of_fetched(&location, &metadata, plan, field.data_type(), ordering_bytes)));
        let ordering = at_most.or(chunks);
        Ok(Some(FetchedBase { location, row_groups, rows, keys_matched, ordering }))
    }
}

/// One decoding pass over a base file: of the row groups `groups`, the rows of `selection`
/// (all when `None`), the root columns `roots` (all when `None`).
struct BaseFileRead<'a> {
    groups: &'a [usize],
    selection: Option<RowSelection>,
    roots: Option<Vec<usize>>,
}

impl BaseFileRead<'_> {
    /// Fetches what the pass needs: a reader per row group, over bytes in memory.
    async fn fetch(
        self,
        location: &str,
        reader: &mut parquet::arrow::async_reader::ParquetObjectReader,
        metadata: &ArrowReaderMetadata,
    ) -> Result<Vec<ParquetRecordBatchReader>> {
        Ok(self.fetch_with(Vec::new(), location, reader, metadata).await?.0)
    }

    /// [`Self::fetch`], and the bytes of the file's ranges `also`, requested with the pass's
    /// first ranges.
    async fn fetch_with(
        self,
        mut also: Vec<Range<u64>>,
        location: &str,
        reader: &mut parquet::arrow::async_reader::ParquetObjectReader,
        metadata: &ArrowReaderMetadata,
    ) -> Result<(Vec<ParquetRecordBatchReader>, Vec<bytes::Bytes>)> {
        let invalid = |e| parquet_error(location, e);
        let mut builder = ParquetPushDecoderBuilder::new_with_metadata(metadata.clone());
        if self.groups.len() < builder.metadata().num_row_groups() {
            builder = builder.with_row_groups(self.groups.to_vec());
        }
        if let Some(selection) = self.selection {
            builder = builder.with_row_selection(selection);
        }
        if let Some(roots) = self.roots {
            let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
            builder = builder.with_projection(mask);
        }
        // One batch per row group: the slice is decoded whole anyway.
        let largest = builder.metadata().row_groups().iter().map(|g| g.num_rows()).max().unwrap_or(0);
        builder = builder.with_batch_size((largest as usize).clamp(1024, 1 << 22));
        let mut decoder = builder.build().map_err(invalid)?;
        let mut row_groups = Vec::new();
        let mut also_bytes = Vec::new();
        loop {
            match decoder.try_next_reader().map_err(invalid)? {
                DecodeResult::NeedsData(ranges) => {
                    let needed = ranges.len();
                    let mut data = reader.get_byte_ranges(ranges.iter().cloned().chain(also.drain(..)).collect()).await.map_err(invalid)?;
                    also_bytes.extend(data.drain(needed..));
                    decoder.push_ranges(ranges, data).map_err(invalid)?;
                }
                DecodeResult::Data(row_group) => row_groups.push(row_group),
                DecodeResult::Finished => break,
            }
        }
        if !also.is_empty() {
            also_bytes = reader.get_byte_ranges(also).await.map_err(invalid)?;
        }
        Ok((row_groups, also_bytes))
    }

    /// Of the rows this pass of the record key column reads, whose file positions are `rows`
    /// (in order), the positions of those with one of `keys`.
    async fn positions_of_keys(
        self,
        rows: &[Range<u64>],
        keys: &RecordKeys,
        location: &str,
        reader: &mut parquet::arrow::async_reader::ParquetObjectReader,
        metadata: &ArrowReaderMetadata,
    ) -> Result<Vec<u64>> {
        let corrupt = |what: &str| Error::new(ErrorKind::Corrupt, format!("invalid Parquet file {location}: {what}"));
        let mut positions = rows.iter().flat_map(|r| r.clone());
        let mut matched = Vec::new();
        for row_group in self.fetch(location, reader, metadata).await? {
            for batch in row_group {
                let batch = batch.map_err(|e| corrupt("cannot decode record keys").with_source(e))?;
                let record_keys = batch.column(0).as_string_opt::<i32>().ok_or_else(|| corrupt("record keys are not strings"))?;
                let batch_positions: Vec<u64> = positions.by_ref().take(batch.num_rows()).collect();
                if batch_positions.len() < batch.num_rows() {
                    return Err(Error::new(ErrorKind::Internal, "more record keys than rows selected"));
                }
                matched.extend(keys.mask(record_keys).values().set_indices().map(|i| batch_positions[i]));
            }
        }
        Ok(matched)
    }
}

/// The number of rows in position `ranges`.
fn row_count(ranges: &[Range<u64>]) -> u64 {
    ranges.iter().map(|r| r.end - r.start).sum()
}

/// The selection of the rows at file positions `ranges` (ascending, disjoint, each within
/// the rows read) among the rows of the row groups at `groups` (file position ranges, in the
/// order read).
fn selection_of(groups: &[Range<u64>], ranges: impl IntoIterator<Item = Range<u64>>) -> RowSelection {
    let mut offset = 0u64;
    let mut indices = Vec::new();
    let mut ranges = ranges.into_iter().peekable();
    for group in groups {
        while let Some(range) = ranges.peek() {
            let (start, end) = (group.start.max(range.start), group.end.min(range.end));
            if start < end {
                indices.push((offset + start - group.start) as usize..(offset + end - group.start) as usize);
            }
            // A range that goes on past this group goes on in the next.
            if range.end > group.end {
                break;
            }
            ranges.next();
        }
        offset += group.end - group.start;
    }
    RowSelection::from_consecutive_ranges(indices.into_iter(), offset as usize)
}

/// The rows of `part` of a base file whose row groups hold the rows at `group_rows`: its
/// equal share of them, with each end moved to the nearest start of a data page of the
/// largest of the `leaves` read (by compressed bytes, in the row group there) where the file
/// has a page index, so that neighbouring parts do not both decode the page at their boundary.
/// The ends move the same way for both parts they divide, and in order: the parts still
/// divide the file.
fn part_rows(part: SlicePart, metadata: &ParquetMetaData, group_rows: &[Range<u64>], leaves: &[usize]) -> Range<u64> {
    let rows = group_rows.last().map_or(0, |rows| rows.end);
    let share = part.rows(rows);
    let Some(offsets) = metadata.offset_index() else { return share };
    let page_start_near = |position: u64| -> Option<u64> {
        let group = group_rows.iter().position(|r| r.contains(&position))?;
        let columns = metadata.row_group(group).columns();
        let leaf = leaves.iter().copied().max_by_key(|&leaf| columns.get(leaf).map_or(0, |c| c.compressed_size()))?;
        let pages = offsets.get(group)?.get(leaf)?.page_locations();
        let starts = pages.iter().map(|page| group_rows[group].start + page.first_row_index.max(0) as u64);
        starts.min_by_key(|start| start.abs_diff(position))
    };
    let end = |position: u64| if position == 0 || position >= rows { position } else { page_start_near(position).unwrap_or(position) };
    end(share.start)..end(share.end)
}

/// The file positions that `selection` selects of the rows of row groups at `groups` (file
/// position ranges, in the order read), as ranges.
fn selected_positions(groups: &[Range<u64>], selection: &RowSelection) -> Vec<Range<u64>> {
    let mut positions = Vec::new();
    let mut groups = groups.iter().cloned();
    let mut group = groups.next();
    for selector in selection.iter() {
        let mut count = selector.row_count as u64;
        while count > 0 {
            let Some(current) = group.as_mut() else { return positions };
            let take = count.min(current.end - current.start);
            if !selector.skip {
                positions.push(current.start..current.start + take);
            }
            current.start += take;
            count -= take;
            if current.start == current.end {
                group = groups.next();
            }
        }
    }
    positions
}

/// The record keys that the `blocks` written by the range's `instants` write or delete; `None`
/// when a data block does not say (no record key column), so that no key may be left out.
fn keys_written_by(blocks: &[(String, String, LogBlock)], instants: &WritesInRange) -> Result<Option<RecordKeys>> {
    use crate::error::ResultExt;
    use crate::log::data::{decode_block, BlockContent};
    let key_column = schema::META_FIELDS[schema::RECORD_KEY_COLUMN];
    let only_keys: HashSet<String> = [key_column.to_owned()].into();
    let mut keys = Vec::new();
    for (path, _, block) in blocks.iter().filter(|(_, instant, _)| instants.contains(instant)) {
        match decode_block(block, Some(&only_keys), None).context(|| format!("reading block at {} of {path}", block.offset))? {
            Some(BlockContent::Data(batches)) => {
                for batch in batches {
                    let Some(column) = batch.column_by_name(key_column).and_then(|c| c.as_string_opt::<i32>()) else {
                        return Ok(None);
                    };
                    keys.extend(column.iter().flatten().map(str::to_owned));
                }
            }
            Some(BlockContent::Deletes(records)) => keys.extend(records.into_iter().map(|r| r.record_key)),
            None => {}
        }
    }
    Ok(Some(RecordKeys::new(keys)))
}

#[cfg(test)]
mod state_tests {
    use super::*;
    use crate::write::table::TestTable;
    use arrow::array::{Array, StringArray};

    fn names(batches: Vec<RecordBatch>) -> Vec<String> {
        let mut out: Vec<String> = batches
            .iter()
            .flat_map(|b| {
                let names = b.column_by_name("name").unwrap().as_any().downcast_ref::<StringArray>().unwrap().clone();
                (0..names.len()).map(move |i| names.value(i).to_owned())
            })
            .collect();
        out.sort();
        out
    }

    /// A reader made from another reader's state reads what that one reads, after later commits.
    #[tokio::test]
    async fn a_reader_at_a_state_reads_that_snapshot() {
        let table = TestTable::new(2).await;
        table.upsert(vec![1, 2, 3], "a").await;
        let reader = TableReader::open(table.storage.clone()).await.unwrap();
        let state = reader.state();
        table.upsert(vec![1, 2, 3], "b").await;
        let later = TableReader::at_state(table.storage.clone(), &state).await.unwrap();
        assert_eq!(names(later.read_snapshot(None).await.unwrap()), vec!["a"; 3]);
        assert_eq!(later.state(), state);
        let now = TableReader::open(table.storage.clone()).await.unwrap();
        assert_eq!(names(now.read_snapshot(None).await.unwrap()), vec!["b"; 3]);
    }
}
