//! Reading tables: snapshot queries (latest or as of an instant) and incremental queries
//! (the rows changed by the commits of a range) over file slices, one slice at a time. Memory
//! is bounded by one file slice: its base file's rows plus its log records.

pub mod filter;
pub mod merge;
pub mod schema;

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, StringArray};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use parquet::arrow::{ParquetRecordBatchStreamBuilder, ProjectionMask};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::log::{decode_block, read_blocks, BlockContent, BlockType};
use crate::read::filter::ScanFilter;
use crate::read::merge::{merge, Merged, MergeRule, MergeSource};
use crate::storage::Storage;
use crate::table::{self, TableConfig};
use crate::timeline::{metadata, ReadBound, Timeline};
use crate::view::{FileSlice, FileSystemView};

/// The column incremental reads add: `I` (insert), `U` (update) or `D` (delete).
pub const OPERATION_COLUMN: &str = "_hoodie_operation";

/// An incremental range: the commits that completed in `(start, end]` (completion times on
/// layout-2 tables, requested times on layout 1); open bounds when `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeRange {
    pub start: Option<String>,
    pub end: Option<String>,
}

/// What a scan asks for beyond the bound: filters that may skip data, and the columns it
/// needs (others come back as NULL; `None` means all).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScanOptions {
    pub filter: ScanFilter,
    pub columns: Option<Vec<String>>,
}

/// How much of the table a scan kept, for EXPLAIN.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    pub partitions_total: usize,
    pub partitions_kept: usize,
    pub slices_total: usize,
    pub slices_kept: usize,
    pub row_groups_total: usize,
    pub row_groups_kept: usize,
}

/// A table opened for reading: its configuration, timeline, files and schema, loaded once.
#[derive(Debug, Clone)]
pub struct TableReader {
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    view: FileSystemView,
    /// The latest writer schema (Avro JSON, without meta fields).
    avro_schema: String,
    schema: SchemaRef,
    changes_schema: SchemaRef,
    /// The columns a scan does not read, shared by all its batches.
    nulls: schema::NullColumns,
}

impl TableReader {
    /// Loads everything a read needs from the table at `storage`.
    pub async fn open(storage: Storage) -> Result<TableReader> {
        let config = table::load_config(&storage).await?;
        let timeline = Timeline::load(&storage, &config).await?;
        let view = FileSystemView::load(&storage).await?;
        let avro = match metadata::latest_schema(&storage, &timeline).await? {
            Some(schema) => schema,
            None => config.create_schema.clone().ok_or_else(|| {
                Error::new(ErrorKind::Corrupt, "the table has neither a create schema nor a commit schema")
            })?,
        };
        let schema = schema::table_schema(&*schema::arrow_schema_of_avro(&avro)?, config.populate_meta_fields);
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(OPERATION_COLUMN, DataType::Utf8, true));
        let changes_schema = Arc::new(Schema::new(fields));
        Ok(TableReader { storage, config, timeline, view, avro_schema: avro, schema, changes_schema, nulls: Default::default() })
    }

    pub fn config(&self) -> &TableConfig {
        &self.config
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
        let replaced = metadata::replaced_file_groups(&self.storage, &self.timeline, bound).await?;
        Ok(self.view.latest_slices(&self.timeline, bound, &replaced))
    }

    /// The number of buckets when the table uses the simple bucket index.
    pub fn bucket_count(&self) -> Option<u32> {
        let props = &self.config.properties;
        let is_bucket = props.get("hoodie.index.type").is_some_and(|t| t.eq_ignore_ascii_case("BUCKET"));
        let simple = props.get("hoodie.index.bucket.engine").is_none_or(|e| e.eq_ignore_ascii_case("SIMPLE"));
        let buckets = props.get("hoodie.bucket.index.num.buckets")?.trim().parse().ok()?;
        (is_bucket && simple).then_some(buckets)
    }

    /// The slices within `bound` that `options.filter` does not rule out, and how many of the
    /// table's partitions and slices that is.
    pub async fn pruned_slices(&self, bound: &ReadBound, options: &ScanOptions) -> Result<(Vec<FileSlice>, ScanStats)> {
        let all = self.slices(bound).await?;
        let mut stats = ScanStats { slices_total: all.len(), ..Default::default() };
        let partitions: std::collections::BTreeSet<&str> = all.iter().map(|s| s.partition.as_str()).collect();
        stats.partitions_total = partitions.len();
        let kept_partitions: HashSet<&str> = partitions
            .into_iter()
            .filter(|p| options.filter.may_match_partition(&self.config, &self.schema, p))
            .collect();
        stats.partitions_kept = kept_partitions.len();
        let bucket = self.bucket_count().and_then(|n| options.filter.bucket(&self.config, n));
        let kept: Vec<FileSlice> = all
            .iter()
            .filter(|s| kept_partitions.contains(s.partition.as_str()))
            .filter(|s| bucket.is_none_or(|b| crate::table::bucket::bucket_of_file_id(&s.file_id) == Some(b)))
            .cloned()
            .collect();
        stats.slices_kept = kept.len();
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
        Ok(self.merge_slice(slice, bound, None, options, stats).await?.rows)
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
        if !self.config.populate_meta_fields {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "incremental queries need the _hoodie_commit_time meta field, which this table does not populate",
            ));
        }
        let instants = self.timeline.writes_in_range(range.start.as_deref(), range.end.as_deref());
        if instants.is_empty() {
            return Ok(None);
        }
        let merged = self.merge_slice(slice, &self.change_bound(range), Some(&instants), options, stats).await?;
        let mut parts = Vec::new();
        if let Some(rows) = &merged.rows {
            let commit_times = rows.column(schema::COMMIT_TIME_COLUMN);
            let commit_times = commit_times.as_any().downcast_ref::<StringArray>().ok_or_else(|| {
                Error::new(ErrorKind::Internal, "_hoodie_commit_time is not a string column")
            })?;
            let keep: arrow::array::BooleanArray = (0..rows.num_rows())
                .map(|i| Some(commit_times.is_valid(i) && instants.contains(commit_times.value(i))))
                .collect();
            let operations: StringArray = merged
                .alive_before_range
                .iter()
                .map(|&alive| Some(if alive { "U" } else { "I" }))
                .collect();
            let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
            columns.push(Arc::new(operations));
            let with_operation = RecordBatch::try_new(self.changes_schema.clone(), columns)
                .map_err(|e| Error::new(ErrorKind::Internal, "cannot assemble changes").with_source(e))?;
            let changed = filter_record_batch(&with_operation, &keep)
                .map_err(|e| Error::new(ErrorKind::Internal, "cannot filter changes").with_source(e))?;
            if changed.num_rows() > 0 {
                parts.push(changed);
            }
        }
        if with_deletes && !merged.deleted.is_empty() {
            parts.push(self.delete_rows(&merged)?);
        }
        match parts.len() {
            0 => Ok(None),
            1 => Ok(parts.pop()),
            _ => concat_batches(&self.changes_schema, &parts)
                .map(Some)
                .map_err(|e| Error::new(ErrorKind::Internal, "cannot concatenate changes").with_source(e)),
        }
    }

    /// `D` rows: commit time, record key and partition path of each deleted key.
    fn delete_rows(&self, merged: &Merged) -> Result<RecordBatch> {
        let n = merged.deleted.len();
        let columns: Vec<ArrayRef> = self
            .changes_schema
            .fields()
            .iter()
            .map(|field| -> ArrayRef {
                let strings = |values: Vec<Option<&str>>| Arc::new(StringArray::from(values)) as ArrayRef;
                match field.name().as_str() {
                    "_hoodie_commit_time" => strings(merged.deleted.iter().map(|d| Some(d.instant.as_str())).collect()),
                    "_hoodie_record_key" => strings(merged.deleted.iter().map(|d| Some(d.record_key.as_str())).collect()),
                    "_hoodie_partition_path" => {
                        strings(merged.deleted.iter().map(|d| d.partition_path.as_deref()).collect())
                    }
                    OPERATION_COLUMN => strings(vec![Some("D"); n]),
                    _ => new_null_array(field.data_type(), n),
                }
            })
            .collect();
        RecordBatch::try_new(self.changes_schema.clone(), columns)
            .map_err(|e| Error::new(ErrorKind::Internal, "cannot assemble delete rows").with_source(e))
    }

    /// Reads and merges one slice: the base file, then every log block written by an instant
    /// visible within `bound` and not rolled back. Row groups are skipped by statistics only
    /// when the slice has no logs: a log version may lose to a base version that the filter
    /// alone would have dropped.
    async fn merge_slice(
        &self,
        slice: &FileSlice,
        bound: &ReadBound,
        change_range: Option<&HashSet<String>>,
        options: &ScanOptions,
        stats: &mut ScanStats,
    ) -> Result<Merged> {
        // A slice without logs read as a snapshot needs no merging: only the asked-for columns
        // are decoded, and row groups may be skipped by statistics.
        let merging = !slice.log_files.is_empty() || change_range.is_some();
        let mut sources = Vec::new();
        if slice.base_file.is_some() {
            let base = self.read_base_file(slice, options, merging, change_range.is_some(), stats).await?;
            if !merging {
                return Ok(Merged { rows: (base.num_rows() > 0).then_some(base), ..Default::default() });
            }
            sources.push(MergeSource::Base(base));
        } else if !merging {
            return Ok(Merged::default());
        }
        if !self.config.populate_meta_fields {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "log files of a table without meta fields cannot be merged (no record keys)",
            ));
        }

        let mut blocks = Vec::new();
        for log in &slice.log_files {
            let path = slice.log_path(log);
            let bytes = self.storage.get(&path).await?;
            blocks.extend(read_blocks(&bytes).into_iter().map(|b| (path.clone(), b)));
        }
        let needed = self.needed_columns(options, true, change_range.is_some());
        let rolled_back: HashSet<String> =
            blocks.iter().filter_map(|(_, b)| b.rollback_target().map(str::to_owned)).collect();
        for (path, block) in blocks {
            if matches!(block.block_type, BlockType::Corrupt | BlockType::Command) {
                continue;
            }
            let Some(instant) = block.instant() else { continue };
            if !self.timeline.is_visible(instant, bound) || rolled_back.contains(instant) {
                continue;
            }
            let instant = instant.to_owned();
            let content = decode_block(&block, needed.as_ref())
                .context(|| format!("reading block at {} of {path}", block.offset))?;
            match content {
                Some(BlockContent::Data(batches)) => {
                    for batch in batches {
                        sources.push(MergeSource::Data(schema::align_batch_with(&batch, &self.schema, &self.nulls)?));
                    }
                }
                Some(BlockContent::Deletes(records)) => sources.push(MergeSource::Deletes { records, instant }),
                None => {}
            }
        }
        let ordering_column = self.config.ordering_fields.first().and_then(|f| self.schema.index_of(f).ok());
        // Only the columns the scan returns are assembled from the merged versions.
        let output: Option<HashSet<usize>> = self.output_columns(options, change_range.is_some());
        let rule = MergeRule { mode: self.config.merge_mode, ordering_column };
        merge(&self.schema, sources, rule, change_range, output.as_ref().map(|o| (o, &self.nulls)))
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

    /// The columns a read must decode: the requested ones, plus the record key and ordering
    /// field when merging, plus the commit time for change reads.
    fn needed_columns(&self, options: &ScanOptions, merging: bool, changes: bool) -> Option<HashSet<String>> {
        let mut needed: HashSet<String> = options.columns.as_ref()?.iter().cloned().collect();
        if merging {
            needed.insert("_hoodie_record_key".to_owned());
            needed.extend(self.config.ordering_fields.iter().cloned());
        }
        if changes {
            needed.insert("_hoodie_commit_time".to_owned());
        }
        Some(needed)
    }

    /// Reads the slice's base file, fetching only the column chunks it decodes. Row groups are
    /// skipped by statistics only when the slice has no logs; `merging` and `changes` add the
    /// columns merging and change reads need.
    async fn read_base_file(
        &self,
        slice: &FileSlice,
        options: &ScanOptions,
        merging: bool,
        changes: bool,
        stats: &mut ScanStats,
    ) -> Result<RecordBatch> {
        let (Some(path), Some(base)) = (slice.base_path(), slice.base_file.as_ref()) else {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        };
        let invalid = |e: parquet::errors::ParquetError| {
            Error::new(ErrorKind::Corrupt, format!("invalid Parquet file {}/{path}", self.storage.uri())).with_source(e)
        };
        let reader = self.storage.parquet_reader(&path, Some(base.size));
        let mut builder = ParquetRecordBatchStreamBuilder::new(reader).await.map_err(invalid)?;
        let total = builder.metadata().num_row_groups();
        stats.row_groups_total += total;
        if slice.log_files.is_empty() && !options.filter.is_empty() {
            let groups = options.filter.row_groups(builder.metadata(), builder.schema(), builder.parquet_schema());
            stats.row_groups_kept += groups.len();
            builder = builder.with_row_groups(groups);
        } else {
            stats.row_groups_kept += total;
        }
        if let Some(needed) = self.needed_columns(options, merging, changes) {
            let roots: Vec<usize> = builder
                .schema()
                .fields()
                .iter()
                .enumerate()
                .filter(|(_, f)| needed.contains(f.name()))
                .map(|(i, _)| i)
                .collect();
            let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
            builder = builder.with_projection(mask);
        }
        // One batch for the file (its memory is the slice's anyway): no concatenation, and
        // one alignment to the table schema.
        let rows: i64 = builder.metadata().row_groups().iter().map(|g| g.num_rows()).sum();
        builder = builder.with_batch_size((rows as usize).clamp(1024, 1 << 22));
        let stream = builder.build().map_err(invalid)?;
        let file_schema = stream.schema().clone();
        let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(invalid)?;
        let rows = match batches.len() {
            1 => batches.into_iter().next().expect("one batch"),
            _ => concat_batches(&file_schema, &batches)
                .map_err(|e| Error::new(ErrorKind::Internal, "cannot concatenate batches").with_source(e))?,
        };
        schema::align_batch_with(&rows, &self.schema, &self.nulls)
    }
}
