//! The CPU half of reading one file slice. [`crate::read::TableReader::fetch_slice`] does the
//! I/O (the base file's column chunks, the visible log blocks) and returns a [`SliceRead`];
//! [`SliceRead::run`] decodes and merges it without any I/O, so it may run on a helper thread
//! while the caller consumes the rows of the previous slice (see [`crate::read::prefetch`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, StringArray, UInt64Array};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReader;

use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::log::{decode_block, BlockContent, LogBlock};
use crate::read::merge::{merge, DeletedKey, Merged, MergeOutput, MergeRule, MergeSource};
use crate::read::schema::{self, NullColumns};
use crate::read::{OPERATION_COLUMN, ROW_POSITION_COLUMN};
use crate::timeline::WritesInRange;

/// What a slice read returns.
#[derive(Debug)]
pub(crate) enum SliceOutput {
    /// The merged rows.
    Snapshot,
    /// The rows changed by the commits whose requested instants are `instants`, with
    /// `_hoodie_operation` (`changes_schema`), and `D` rows when `with_deletes`.
    Changes { instants: WritesInRange, with_deletes: bool, changes_schema: SchemaRef, start: Option<RangeStart> },
}

/// What a change read needs beyond the slice when the slice's base file was written inside
/// the range, by a compaction or a rewrite: that base file folded away the versions before
/// it, so whether a key was alive at the start of the range, and when a key was deleted,
/// come from the file group's earlier slices.
pub(crate) struct RangeStart {
    /// The group's slice as of the range start, read for its record keys and partition paths
    /// (`None` when the group did not exist then).
    pub state: Option<Box<SliceRead>>,
    /// Delete blocks written inside the range into the group's slices from that one up to
    /// this one: `(file path, instant, block)`, in the order written.
    pub deletes: Vec<(String, String, LogBlock)>,
    /// The instant of this slice's base file: when a key was dropped by rewriting a base
    /// file rather than by a delete block, the rewrite is its delete.
    pub rewritten_by: String,
}

impl std::fmt::Debug for RangeStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangeStart")
            .field("state", &self.state)
            .field("deletes", &self.deletes.len())
            .field("rewritten_by", &self.rewritten_by)
            .finish()
    }
}

/// A [`RangeStart`], decoded.
struct StartState {
    /// The keys alive at the range start, with their partition paths.
    alive: HashMap<String, Option<String>>,
    /// The last delete inside the range of each key the earlier slices' delete blocks name.
    deletes: HashMap<String, DeletedKey>,
    rewritten_by: String,
}

impl RangeStart {
    fn run(self) -> Result<StartState> {
        let mut alive = HashMap::new();
        if let Some(rows) = self.state.map(|state| state.run()).transpose()?.flatten() {
            let keys = string_column(&rows, schema::RECORD_KEY_COLUMN)?;
            let partitions = string_column(&rows, schema::PARTITION_PATH_COLUMN)?;
            for row in 0..rows.num_rows() {
                let partition = partitions.is_valid(row).then(|| partitions.value(row).to_owned());
                alive.insert(keys.value(row).to_owned(), partition);
            }
        }
        let mut deletes = HashMap::new();
        for (path, instant, block) in self.deletes {
            let context = || format!("reading block at {} of {path}", block.offset);
            if let Some(BlockContent::Deletes(records)) = decode_block(&block, None).context(context)? {
                for record in records {
                    let deleted = DeletedKey {
                        record_key: record.record_key.clone(),
                        partition_path: record.partition_path,
                        instant: instant.clone(),
                        alive_before_range: true,
                    };
                    deletes.insert(record.record_key, deleted);
                }
            }
        }
        Ok(StartState { alive, deletes, rewritten_by: self.rewritten_by })
    }
}

impl StartState {
    /// Compares the keys of the merged slice with those alive at the range start: sets
    /// `merged.alive_before_range`, and returns the keys alive at the start and not at the end
    /// (sorted), each with its last delete inside the range.
    fn compare(&self, merged: &mut Merged) -> Result<Vec<DeletedKey>> {
        let alive_at_end: HashSet<&str> = match &merged.rows {
            Some(rows) => {
                let keys = string_column(rows, schema::RECORD_KEY_COLUMN)?;
                merged.alive_before_range = keys.iter().map(|k| k.is_some_and(|k| self.alive.contains_key(k))).collect();
                keys.iter().flatten().collect()
            }
            None => HashSet::new(),
        };
        let mut deleted_here: HashMap<String, DeletedKey> = merged.deleted.drain(..).map(|d| (d.record_key.clone(), d)).collect();
        let mut gone: Vec<(&String, &Option<String>)> =
            self.alive.iter().filter(|(key, _)| !alive_at_end.contains(key.as_str())).collect();
        gone.sort();
        let deleted = gone.into_iter().map(|(key, partition)| {
            let rewritten = || DeletedKey {
                record_key: key.clone(),
                partition_path: partition.clone(),
                instant: self.rewritten_by.clone(),
                alive_before_range: true,
            };
            deleted_here.remove(key).or_else(|| self.deletes.get(key).cloned()).unwrap_or_else(rewritten)
        });
        Ok(deleted.collect())
    }
}

/// A slice's base file, fetched: one reader per row group kept, all its bytes in memory.
pub(crate) struct FetchedBase {
    /// `storage URI/path`, for errors.
    pub location: String,
    pub row_groups: Vec<ParquetRecordBatchReader>,
    /// The file position of the first row of each of `row_groups`.
    pub first_rows: Vec<u64>,
}

/// One file slice's read with everything it needs in memory. Memory: the fetched column
/// chunks and blocks, then the decoded slice, then its merged rows.
pub struct SliceRead {
    pub(crate) base: Option<FetchedBase>,
    /// Whether the rows need merging (log blocks, or a change read); otherwise the base
    /// file's rows are the result.
    pub(crate) merging: bool,
    /// Visible data and delete blocks, in the order written: `(file path, instant, block)`.
    pub(crate) blocks: Vec<(String, String, LogBlock)>,
    /// The base file's instant when every block carries record positions for it: then the
    /// merge matches by position.
    pub(crate) positions_of: Option<String>,
    /// Whether snapshot rows come with [`ROW_POSITION_COLUMN`].
    pub(crate) row_positions: bool,
    pub(crate) schema: SchemaRef,
    pub(crate) nulls: NullColumns,
    /// The columns to decode (`None`: all).
    pub(crate) needed: Option<HashSet<String>>,
    /// The columns to assemble from merged versions (`None`: all).
    pub(crate) output: Option<HashSet<usize>>,
    pub(crate) rule: MergeRule,
    pub(crate) kind: SliceOutput,
}

impl std::fmt::Debug for SliceRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SliceRead")
            .field("base", &self.base.as_ref().map(|b| &b.location))
            .field("blocks", &self.blocks.len())
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl SliceRead {
    /// Decodes and merges the slice: its rows, or `None` when it has none.
    pub fn run(mut self) -> Result<Option<RecordBatch>> {
        let start = match &mut self.kind {
            SliceOutput::Changes { start, .. } => start.take().map(RangeStart::run).transpose()?,
            SliceOutput::Snapshot => None,
        };
        let merged = self.merge()?;
        match &self.kind {
            SliceOutput::Snapshot if self.row_positions => merged.rows.map(|rows| with_positions(rows, merged.base_positions)).transpose(),
            SliceOutput::Snapshot => Ok(merged.rows),
            SliceOutput::Changes { instants, with_deletes, changes_schema, .. } => {
                changes(merged, start, instants, *with_deletes, changes_schema)
            }
        }
    }

    /// Decodes the fetched base file and blocks (consuming them) and merges them.
    fn merge(&mut self) -> Result<Merged> {
        let base = match self.base.take() {
            Some(base) => Some(decode_base(base, &self.schema, &self.nulls, self.row_positions && !self.merging)?),
            None => None,
        };
        if !self.merging {
            let (rows, base_positions) = base.map_or((None, None), |(rows, positions)| (Some(rows), positions));
            return Ok(Merged { rows: rows.filter(|b| b.num_rows() > 0), base_positions, ..Default::default() });
        }
        let mut sources: Vec<MergeSource> = base.map(|(rows, _)| MergeSource::Base(rows)).into_iter().collect();
        for (path, instant, block) in std::mem::take(&mut self.blocks) {
            let context = || format!("reading block at {} of {path}", block.offset);
            let mut positions = match &self.positions_of {
                Some(base_instant) => block.record_positions(base_instant).context(context)?,
                None => None,
            };
            match decode_block(&block, self.needed.as_ref()).context(context)? {
                Some(BlockContent::Data(batches)) => {
                    let records: usize = batches.iter().map(RecordBatch::num_rows).sum();
                    if positions.as_ref().is_some_and(|p| p.len() != records) {
                        let error = Error::new(ErrorKind::Corrupt, format!("a data block of {records} records has another number of positions"));
                        return Err(error.context(context()));
                    }
                    for batch in batches {
                        // A block may decode into several batches: each takes its rows' positions.
                        let batch_positions = positions.as_mut().map(|p| p.drain(..batch.num_rows()).collect());
                        let rows = schema::align_batch_with(&batch, &self.schema, &self.nulls)?;
                        sources.push(MergeSource::Data { rows, positions: batch_positions });
                    }
                }
                Some(BlockContent::Deletes(records)) => sources.push(MergeSource::Deletes { records, instant, positions }),
                None => {}
            }
        }
        let change_range = match &self.kind {
            SliceOutput::Changes { instants, .. } => Some(instants),
            SliceOutput::Snapshot => None,
        };
        let output = MergeOutput {
            columns: self.output.as_ref().map(|o| (o, &self.nulls)),
            base_positions: self.row_positions,
        };
        merge(&self.schema, sources, self.rule, change_range, output)
    }
}

/// Decodes a fetched base file into one batch aligned to `schema` (one batch for the file:
/// its memory is the slice's anyway, and the merge walks it in one pass); with `positions`,
/// also each row's position in the file.
fn decode_base(base: FetchedBase, schema: &SchemaRef, nulls: &NullColumns, positions: bool) -> Result<(RecordBatch, Option<UInt64Array>)> {
    let invalid = |e: arrow::error::ArrowError| {
        Error::new(ErrorKind::Corrupt, format!("invalid Parquet file {}", base.location)).with_source(e)
    };
    let mut batches = Vec::new();
    let mut file_schema = None;
    let mut row_positions: Vec<u64> = Vec::new();
    for (row_group, first_row) in base.row_groups.into_iter().zip(base.first_rows) {
        file_schema.get_or_insert_with(|| arrow::record_batch::RecordBatchReader::schema(&row_group));
        let mut next = first_row;
        for batch in row_group {
            let batch = batch.map_err(invalid)?;
            if positions {
                row_positions.extend(next..next + batch.num_rows() as u64);
                next += batch.num_rows() as u64;
            }
            batches.push(batch);
        }
    }
    let rows = match (batches.len(), file_schema) {
        (1, _) => batches.pop().expect("one batch"),
        (_, Some(file_schema)) => concat_batches(&file_schema, &batches).map_err(invalid)?,
        (_, None) => RecordBatch::new_empty(schema.clone()),
    };
    Ok((schema::align_batch_with(&rows, schema, nulls)?, positions.then(|| UInt64Array::from(row_positions))))
}

/// `rows` with [`ROW_POSITION_COLUMN`] after the table's columns.
fn with_positions(rows: RecordBatch, positions: Option<UInt64Array>) -> Result<RecordBatch> {
    let positions = positions.unwrap_or_else(|| UInt64Array::from(vec![None; rows.num_rows()]));
    let mut fields: Vec<Arc<Field>> = rows.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(ROW_POSITION_COLUMN, DataType::UInt64, true)));
    let mut columns = rows.columns().to_vec();
    columns.push(Arc::new(positions));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::new(ErrorKind::Internal, "cannot add row positions").with_source(e))
}

/// The rows of a change read from a merge with change tracking: each key's latest version in
/// the range, `I` if the key did not exist before the range and `U` if it did; with
/// `with_deletes`, also a `D` row (key and partition path only) for each key the range
/// deleted. Whether a key existed before the range is what the slice's versions show, or,
/// with a `start`, whether it was alive at the range start; then a key the range deleted is
/// one alive at the start and not at the end.
fn changes(
    mut merged: Merged,
    start: Option<StartState>,
    instants: &WritesInRange,
    with_deletes: bool,
    changes_schema: &SchemaRef,
) -> Result<Option<RecordBatch>> {
    let mut parts = Vec::new();
    let deleted = match &start {
        Some(start) => start.compare(&mut merged)?,
        None => merged.deleted.drain(..).filter(|d| d.alive_before_range).collect(),
    };
    if let Some(rows) = &merged.rows {
        let commit_times = string_column(rows, schema::COMMIT_TIME_COLUMN)?;
        let keep: BooleanArray = (0..rows.num_rows())
            .map(|i| Some(commit_times.is_valid(i) && instants.contains(commit_times.value(i))))
            .collect();
        let operations: StringArray =
            merged.alive_before_range.iter().map(|&alive| Some(if alive { "U" } else { "I" })).collect();
        let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
        columns.push(Arc::new(operations));
        let with_operation = RecordBatch::try_new(changes_schema.clone(), columns)
            .map_err(|e| Error::new(ErrorKind::Internal, "cannot assemble changes").with_source(e))?;
        let changed = filter_record_batch(&with_operation, &keep)
            .map_err(|e| Error::new(ErrorKind::Internal, "cannot filter changes").with_source(e))?;
        if changed.num_rows() > 0 {
            parts.push(changed);
        }
    }
    if with_deletes && !deleted.is_empty() {
        parts.push(delete_rows(&deleted, changes_schema)?);
    }
    match parts.len() {
        0 => Ok(None),
        1 => Ok(parts.pop()),
        _ => concat_batches(changes_schema, &parts)
            .map(Some)
            .map_err(|e| Error::new(ErrorKind::Internal, "cannot concatenate changes").with_source(e)),
    }
}

/// A meta column of `rows` as strings.
fn string_column(rows: &RecordBatch, column: usize) -> Result<&StringArray> {
    rows.column(column)
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| Error::new(ErrorKind::Internal, format!("{} is not a string column", rows.schema().field(column).name())))
}

/// `D` rows: commit time, record key and partition path of each deleted key.
fn delete_rows(deleted: &[DeletedKey], changes_schema: &SchemaRef) -> Result<RecordBatch> {
    let n = deleted.len();
    let columns: Vec<ArrayRef> = changes_schema
        .fields()
        .iter()
        .map(|field| -> ArrayRef {
            let strings = |values: Vec<Option<&str>>| Arc::new(StringArray::from(values)) as ArrayRef;
            match field.name().as_str() {
                "_hoodie_commit_time" => strings(deleted.iter().map(|d| Some(d.instant.as_str())).collect()),
                "_hoodie_record_key" => strings(deleted.iter().map(|d| Some(d.record_key.as_str())).collect()),
                "_hoodie_partition_path" => strings(deleted.iter().map(|d| d.partition_path.as_deref()).collect()),
                OPERATION_COLUMN => strings(vec![Some("D"); n]),
                _ => new_null_array(field.data_type(), n),
            }
        })
        .collect();
    RecordBatch::try_new(changes_schema.clone(), columns)
        .map_err(|e| Error::new(ErrorKind::Internal, "cannot assemble delete rows").with_source(e))
}
