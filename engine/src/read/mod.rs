//! Reading tables: snapshot queries (latest or as of an instant) over file slices, one slice at
//! a time. Memory is bounded by one file slice: its base file's rows plus its log records.

pub mod merge;
pub mod schema;

use std::collections::HashSet;

use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::log::{decode_block, read_blocks, BlockContent, BlockType};
use crate::read::merge::{merge, MergeRule, MergeSource};
use crate::storage::Storage;
use crate::table::{self, TableConfig};
use crate::timeline::{metadata, Timeline};
use crate::view::{FileSlice, FileSystemView};

/// An instant after every real one: "no upper bound".
pub const END_OF_TIME: &str = "99999999999999999";

/// A table opened for reading: its configuration, timeline, files and schema, loaded once.
#[derive(Debug, Clone)]
pub struct TableReader {
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    view: FileSystemView,
    schema: SchemaRef,
}

impl TableReader {
    /// Loads everything a read needs from the table at `storage`.
    pub async fn open(storage: Storage) -> Result<TableReader> {
        let config = table::load_config(&storage).await?;
        let timeline = Timeline::load(&storage, &config).await?;
        let view = FileSystemView::load(&storage).await?;
        let avro = match metadata::latest_schema(&storage, &timeline, END_OF_TIME).await? {
            Some(schema) => schema,
            None => config.create_schema.clone().ok_or_else(|| {
                Error::new(ErrorKind::Corrupt, "the table has neither a create schema nor a commit schema")
            })?,
        };
        let schema = schema::table_schema(&*schema::arrow_schema_of_avro(&avro)?, config.populate_meta_fields);
        Ok(TableReader { storage, config, timeline, view, schema })
    }

    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// Meta fields first (when the table populates them), then the data columns of the latest
    /// schema.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The instant a snapshot read without `as_of` sees.
    pub fn latest_instant(&self) -> Option<&str> {
        self.timeline.latest_completed_write().map(|i| i.timestamp.as_str())
    }

    /// The file slices a snapshot as of `as_of` (requested instant, inclusive; latest when
    /// `None`) reads.
    pub async fn snapshot_slices(&self, as_of: Option<&str>) -> Result<Vec<FileSlice>> {
        let as_of = as_of.unwrap_or(END_OF_TIME);
        let replaced: HashSet<(String, String)> =
            metadata::replaced_file_groups(&self.storage, &self.timeline, as_of).await?;
        Ok(self.view.latest_slices(&self.timeline, as_of, &replaced))
    }

    /// All rows of the snapshot as of `as_of`. Convenient for small tables and tests; large
    /// scans read [`Self::snapshot_slices`] one [`Self::read_slice`] at a time.
    pub async fn read_snapshot(&self, as_of: Option<&str>) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        for slice in self.snapshot_slices(as_of).await? {
            if let Some(batch) = self.read_slice(&slice, as_of).await? {
                out.push(batch);
            }
        }
        Ok(out)
    }

    /// The merged rows of one file slice as of `as_of`: the base file, then every log block
    /// written by a completed instant at or before `as_of` and not rolled back.
    pub async fn read_slice(&self, slice: &FileSlice, as_of: Option<&str>) -> Result<Option<RecordBatch>> {
        let as_of = as_of.unwrap_or(END_OF_TIME);
        let mut sources = Vec::new();
        if let Some(path) = slice.base_path() {
            let base = self.read_parquet(&path).await?;
            sources.push(MergeSource::Data(base));
        }
        if slice.log_files.is_empty() {
            return Ok(sources.into_iter().next().and_then(|s| match s {
                MergeSource::Data(batch) if batch.num_rows() > 0 => Some(batch),
                _ => None,
            }));
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
        let rolled_back: HashSet<String> =
            blocks.iter().filter_map(|(_, b)| b.rollback_target().map(str::to_owned)).collect();
        for (path, block) in blocks {
            if matches!(block.block_type, BlockType::Corrupt | BlockType::Command) {
                continue;
            }
            let Some(instant) = block.instant() else { continue };
            if instant > as_of || !self.timeline.is_completed(instant) || rolled_back.contains(instant) {
                continue;
            }
            let content = decode_block(&block).context(|| format!("reading block at {} of {path}", block.offset))?;
            match content {
                Some(BlockContent::Data(batches)) => {
                    for batch in batches {
                        sources.push(MergeSource::Data(schema::align_batch(&batch, &self.schema)?));
                    }
                }
                Some(BlockContent::Deletes(deletes)) => sources.push(MergeSource::Deletes(deletes)),
                None => {}
            }
        }
        let ordering_column =
            self.config.ordering_fields.first().and_then(|f| self.schema.index_of(f).ok());
        merge(&self.schema, sources, ordering_column, MergeRule { mode: self.config.merge_mode })
    }

    async fn read_parquet(&self, path: &str) -> Result<RecordBatch> {
        let bytes = self.storage.get(path).await?;
        let invalid = |e: parquet::errors::ParquetError| {
            Error::new(ErrorKind::Corrupt, format!("invalid Parquet file {}/{path}", self.storage.uri())).with_source(e)
        };
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).and_then(|b| b.build()).map_err(invalid)?;
        let mut batches = Vec::new();
        for batch in reader {
            let batch = batch.map_err(|e| invalid(e.into()))?;
            batches.push(schema::align_batch(&batch, &self.schema)?);
        }
        concat_batches(&self.schema, &batches)
            .map_err(|e| Error::new(ErrorKind::Internal, "cannot concatenate batches").with_source(e))
    }
}
