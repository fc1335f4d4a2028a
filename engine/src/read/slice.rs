//! The CPU half of reading one file slice. [`crate::read::TableReader::fetch_slice`] does the
//! I/O (the base file's column chunks, the visible log blocks) and returns a [`SliceRead`];
//! [`SliceRead::run`] decodes and merges it without any I/O, so it may run on a helper thread
//! while the caller consumes the rows of the previous slice (see [`crate::read::prefetch`]).

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, BooleanArray, StringArray, UInt64Array};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReader};

use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::log::data::{decode_parquet_columns, decode_parquet_records};
use crate::log::{decode_block, BlockContent, LogBlock};
use crate::read::base_ordering::BaseOrdering;
use crate::read::filter::RecordKeys;
use crate::read::merge::{assemble, merge, DeletedKey, Merged, MergeOutcome, MergeOutput, MergeRule, MergeSource};
use crate::read::chunk_bytes::ChunkBytes;
use crate::read::merge_cache::{self, MergeKey};
use crate::read::schema::{self, NullColumns};
use crate::read::{OPERATION_COLUMN, ROW_POSITION_COLUMN};
use crate::table::{keygen, TableConfig};
use crate::timeline::WritesInRange;

/// What a slice read returns.
#[derive(Debug)]
pub(crate) enum SliceOutput {
    /// The merged rows.
    Snapshot,
    /// The rows changed by the commits whose requested instants are `instants`, with
    /// `_hoodie_operation` (`changes_schema`), and `D` rows when `with_deletes` is the table's
    /// configuration (which tells how to read key and partition fields back for them).
    /// `changes_in_blocks`: the slice's base file was completed before the range, so that
    /// every change is in the blocks the range wrote, and only their keys need merging.
    Changes {
        instants: WritesInRange,
        with_deletes: Option<Arc<TableConfig>>,
        changes_schema: SchemaRef,
        start: Option<RangeStart>,
        changes_in_blocks: bool,
    },
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
            if let Some(BlockContent::Deletes(records)) = decode_block(&block, None, None).context(context)? {
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
    /// The file positions of the rows the readers return, in their order.
    pub rows: Vec<Range<u64>>,
    /// Whether the rows are those of the read's record keys already.
    pub keys_matched: bool,
    /// The ordering values of the rows the logs name by position, when they are not decoded
    /// with the other columns (then NULL in the rows): read in place from the field's chunks,
    /// or known from statistics not to matter.
    pub ordering: Option<BaseOrdering>,
}

impl FetchedBase {
    /// Whether the readers return every row of the file, so that a row's index is its position.
    fn is_whole_file(&self) -> bool {
        match self.rows.as_slice() {
            [] => true,
            [only] => only.start == 0,
            _ => false,
        }
    }

    /// The file position of each row the readers return.
    fn positions(&self) -> UInt64Array {
        UInt64Array::from_iter_values(self.rows.iter().flat_map(|r| r.clone()))
    }
}

/// Per log block, the footer and fetched column chunks of a Parquet data block (`None`: a
/// delete block).
pub(crate) type FetchedColumns = Vec<Option<(ArrowReaderMetadata, ChunkBytes)>>;

/// Per block of a read of a few record keys ([`crate::read::TableReader`]'s `keyed_blocks`):
/// of a Parquet data block, its footer, the needed column chunks and the indices of the
/// records that may have the keys; `None` for a block with its content, decoded whole.
pub(crate) type FetchedRecords = Vec<Option<(ArrowReaderMetadata, ChunkBytes, Vec<u32>)>>;

/// What a slice's merge does with the kept merge outcomes ([`crate::read::merge_cache`]).
#[derive(Debug)]
pub(crate) enum KeptMerge {
    /// Neither reuses nor keeps one (a change read, a read of some record keys).
    No,
    /// Assembles the rows by this outcome instead of merging; with, per block, the footer and
    /// needed column chunks of a Parquet data block when the blocks came without content.
    Reuse(Arc<MergeOutcome>, Option<FetchedColumns>),
    /// Merges, and keeps the outcome under this key.
    Keep(MergeKey),
}

/// A slice's rows in parts ([`SliceRead::run_parts`]): batches, each with the mask of its rows
/// that belong (`None`: all).
pub type RowParts = Vec<(RecordBatch, Option<BooleanArray>)>;

/// One file slice's read with everything it needs in memory. Memory: the fetched column
/// chunks and blocks, then the decoded slice, then its merged rows.
pub struct SliceRead {
    pub(crate) base: Option<FetchedBase>,
    /// Whether the rows need merging (log blocks, or a change read); otherwise the base
    /// file's rows are the result.
    pub(crate) merging: bool,
    pub(crate) kept_merge: KeptMerge,
    /// Visible data and delete blocks, in the order written: `(file path, instant, block)`.
    pub(crate) blocks: Vec<(String, String, LogBlock)>,
    /// Of a read of some record keys, per block, the records to decode (see [`FetchedRecords`]).
    pub(crate) keyed_records: Option<FetchedRecords>,
    /// The base file's instant when every block carries record positions for it: then the
    /// merge matches by position.
    pub(crate) positions_of: Option<String>,
    /// The only record keys to read (see [`crate::read::filter::ScanFilter::record_keys`]):
    /// the base rows and log versions of other keys are dropped before merging.
    pub(crate) record_keys: Option<Arc<RecordKeys>>,
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
        let merged = self.merge(false)?;
        match &self.kind {
            SliceOutput::Snapshot if self.row_positions => merged.rows.map(|rows| with_positions(rows, merged.base_positions)).transpose(),
            SliceOutput::Snapshot => Ok(merged.rows),
            SliceOutput::Changes { instants, with_deletes, changes_schema, .. } => {
                changes(merged, start, instants, with_deletes.as_deref(), changes_schema)
            }
        }
    }

    /// [`Self::run`] as parts: batches, each with the mask of its rows that belong to the
    /// result (`None`: all), so that a consumer that can skip rows by a mask (an aggregate) is
    /// spared copying the base rows that stand. Their order is not the rows' order.
    pub fn run_parts(mut self) -> Result<RowParts> {
        if !matches!(self.kind, SliceOutput::Snapshot) || self.row_positions {
            return Ok(self.run()?.into_iter().map(|rows| (rows, None)).collect());
        }
        let merged = self.merge(true)?;
        let standing = merged.standing.into_iter().map(|(rows, mask)| (rows, Some(mask)));
        Ok(standing.chain(merged.rows.map(|rows| (rows, None))).collect())
    }

    /// Decodes the fetched base file and blocks (consuming them) and merges them; `unassembled`
    /// as [`MergeOutput::unassembled`].
    fn merge(&mut self, unassembled: bool) -> Result<Merged> {
        // The base rows' file positions, when rows are asked for with them and a row's index
        // in the decoded base is not its position.
        let mut base_positions = None;
        let mut base_ordering = None;
        let base = match self.base.take() {
            Some(mut base) => {
                base_ordering = base.ordering.take();
                let positions = (self.row_positions && (!self.merging || !base.is_whole_file() || self.record_keys.is_some())).then(|| base.positions());
                let keys_matched = base.keys_matched;
                let rows = decode_base(base, &self.schema, &self.nulls)?;
                let (rows, positions) = if keys_matched { (rows, positions) } else { self.of_record_keys(rows, positions)? };
                base_positions = positions;
                Some(rows)
            }
            None => None,
        };
        if !self.merging {
            return Ok(Merged { rows: base.filter(|b| b.num_rows() > 0), base_positions, ..Default::default() });
        }
        let mut merged = self.merge_with_logs(base, base_ordering, unassembled)?;
        // The merge names base rows by their index in the decoded base.
        if let (Some(file_positions), Some(indices)) = (base_positions, &merged.base_positions) {
            let positions = arrow::compute::take(&file_positions, indices, None)
                .map_err(|e| Error::new(ErrorKind::Internal, "cannot map base rows to file positions").with_source(e))?;
            merged.base_positions = Some(positions.as_primitive::<arrow::datatypes::UInt64Type>().clone());
        }
        Ok(merged)
    }

    /// `rows` (and their `positions`) of the keys [`Self::record_keys`] names only.
    fn of_record_keys(&self, rows: RecordBatch, positions: Option<UInt64Array>) -> Result<(RecordBatch, Option<UInt64Array>)> {
        let Some(keys) = &self.record_keys else { return Ok((rows, positions)) };
        let mask = keys.mask(string_column(&rows, schema::RECORD_KEY_COLUMN)?);
        let internal = |e| Error::new(ErrorKind::Internal, "cannot select rows by record key").with_source(e);
        let rows = filter_record_batch(&rows, &mask).map_err(internal)?;
        let positions = positions.map(|p| arrow::compute::filter(&p, &mask).map(|p| p.as_primitive::<arrow::datatypes::UInt64Type>().clone()));
        Ok((rows, positions.transpose().map_err(internal)?))
    }

    /// Merges the decoded base rows with the log blocks (consuming them); with the base's
    /// `ordering`, the base rows' ordering values are read for the rows the blocks name.
    fn merge_with_logs(&mut self, base: Option<RecordBatch>, ordering: Option<BaseOrdering>, unassembled: bool) -> Result<Merged> {
        let kept_merge = std::mem::replace(&mut self.kept_merge, KeptMerge::No);
        let blocks = std::mem::take(&mut self.blocks);
        let mut keyed_records = self.keyed_records.take().map(Vec::into_iter);
        let output = MergeOutput {
            columns: self.output.as_ref().map(|o| (o, &self.nulls)),
            base_positions: self.row_positions,
            outcome: matches!(kept_merge, KeptMerge::Keep(_)),
            unassembled,
        };
        let keep_as = match kept_merge {
            KeptMerge::Reuse(outcome, fetched) => return self.reassemble(base, blocks, &outcome, fetched, output),
            KeptMerge::Keep(key) => Some(key),
            KeptMerge::No => None,
        };
        let base = base.map(|rows| match ordering {
            Some(ordering) => MergeSource::BaseAtPositions { rows, ordering: Arc::new(ordering) },
            None => MergeSource::Base(rows),
        });
        let mut sources: Vec<MergeSource> = base.into_iter().collect();
        for (path, instant, block) in blocks {
            let context = || format!("reading block at {} of {path}", block.offset);
            let mut positions = match &self.positions_of {
                Some(base_instant) => block.record_positions(base_instant).context(context)?,
                None => None,
            };
            let content = match (keyed_records.as_mut().and_then(Iterator::next).flatten(), &self.record_keys) {
                (Some((footer, chunks, records)), Some(keys)) => {
                    Some(BlockContent::Data(decode_parquet_records(footer, chunks, self.needed.as_ref(), keys, &records).context(context)?))
                }
                _ => decode_block(&block, self.needed.as_ref(), self.record_keys.as_ref()).context(context)?,
            };
            match content {
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
                        let (rows, _) = self.of_record_keys(rows, None)?;
                        sources.push(MergeSource::Data { rows, positions: batch_positions });
                    }
                }
                Some(BlockContent::Deletes(mut records)) => {
                    if let Some(keys) = &self.record_keys {
                        records.retain(|record| keys.contains(&record.record_key));
                    }
                    sources.push(MergeSource::Deletes { records, instant, positions })
                }
                None => {}
            }
        }
        let change_range = match &self.kind {
            SliceOutput::Changes { instants, .. } => Some(instants),
            SliceOutput::Snapshot => None,
        };
        let mut merged = merge(&self.schema, sources, self.rule, change_range, output)?;
        if let (Some(key), Some(outcome)) = (keep_as, merged.outcome.take()) {
            merge_cache::put(key, outcome);
        }
        Ok(merged)
    }

    /// The rows of the base rows and the `blocks`' versions assembled by a kept `outcome` of
    /// their merge; `fetched`, when the blocks came without content: per
    /// block, the footer and needed column chunks of a Parquet data block.
    fn reassemble(
        &self,
        base: Option<RecordBatch>,
        blocks: Vec<(String, String, LogBlock)>,
        outcome: &MergeOutcome,
        fetched: Option<FetchedColumns>,
        output: MergeOutput,
    ) -> Result<Merged> {
        let mut batches: Vec<RecordBatch> = base.into_iter().collect();
        let mut fetched = fetched.map(Vec::into_iter);
        for (path, _, block) in blocks {
            let context = || format!("reading block at {} of {path}", block.offset);
            let decoded = match fetched.as_mut().and_then(Iterator::next) {
                Some(Some((footer, chunks))) => Some(decode_parquet_columns(footer, chunks, self.needed.as_ref()).context(context)?),
                Some(None) => None,
                None => match decode_block(&block, self.needed.as_ref(), None).context(context)? {
                    Some(BlockContent::Data(decoded)) => Some(decoded),
                    _ => None,
                },
            };
            for batch in decoded.into_iter().flatten() {
                batches.push(schema::align_batch_with(&batch, &self.schema, &self.nulls)?);
            }
        }
        assemble(&self.schema, &batches, outcome, output)
    }
}

/// Decodes a fetched base file into one batch aligned to `schema` (one batch for the file:
/// its memory is the slice's anyway, and the merge walks it in one pass).
fn decode_base(base: FetchedBase, schema: &SchemaRef, nulls: &NullColumns) -> Result<RecordBatch> {
    let invalid = |e: arrow::error::ArrowError| crate::read::corrupt_file(&base.location, e);
    let mut batches = Vec::new();
    let mut file_schema = None;
    for row_group in base.row_groups {
        file_schema.get_or_insert_with(|| arrow::record_batch::RecordBatchReader::schema(&row_group));
        for batch in row_group {
            batches.push(batch.map_err(invalid)?);
        }
    }
    let rows = match (batches.len(), file_schema) {
        (1, _) => batches.pop().expect("one batch"),
        (_, Some(file_schema)) => concat_batches(&file_schema, &batches).map_err(invalid)?,
        (_, None) => RecordBatch::new_empty(schema.clone()),
    };
    schema::align_batch_with(&rows, schema, nulls)
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
/// `with_deletes`, also a `D` row (key and partition fields only) for each key the range
/// deleted. Whether a key existed before the range is what the slice's versions show, or,
/// with a `start`, whether it was alive at the range start; then a key the range deleted is
/// one alive at the start and not at the end.
fn changes(
    mut merged: Merged,
    start: Option<StartState>,
    instants: &WritesInRange,
    with_deletes: Option<&TableConfig>,
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
    if let Some(config) = with_deletes.filter(|_| !deleted.is_empty()) {
        parts.push(delete_rows(&deleted, config, changes_schema)?);
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

/// `D` rows: commit time, record key and partition path of each deleted key, and the key and
/// partition fields that the table's key generator lets be read back from those
/// ([`keygen::key_field_values`]); the other columns are NULL.
fn delete_rows(deleted: &[DeletedKey], config: &TableConfig, changes_schema: &SchemaRef) -> Result<RecordBatch> {
    let n = deleted.len();
    let strings = |values: Vec<Option<&str>>| Arc::new(StringArray::from(values)) as ArrayRef;
    let fields: Vec<_> =
        deleted.iter().map(|d| keygen::key_field_values(config, &d.record_key, d.partition_path.as_deref())).collect();
    let columns = changes_schema
        .fields()
        .iter()
        .map(|field| -> Result<ArrayRef> {
            Ok(match field.name().as_str() {
                "_hoodie_commit_time" => strings(deleted.iter().map(|d| Some(d.instant.as_str())).collect()),
                "_hoodie_record_key" => strings(deleted.iter().map(|d| Some(d.record_key.as_str())).collect()),
                "_hoodie_partition_path" => strings(deleted.iter().map(|d| d.partition_path.as_deref()).collect()),
                OPERATION_COLUMN => strings(vec![Some("D"); n]),
                name if fields.iter().any(|f| f.contains_key(name)) => {
                    let texts = strings(fields.iter().map(|f| f.get(name).and_then(Option::as_deref)).collect());
                    // A text that is not a value of the column's type (a key Spark wrote in
                    // another form) stays unknown rather than failing the read.
                    let options = arrow::compute::CastOptions { safe: true, ..Default::default() };
                    arrow::compute::cast_with_options(&texts, field.data_type(), &options).map_err(|e| {
                        Error::new(ErrorKind::Internal, format!("cannot read {name} back from record keys")).with_source(e)
                    })?
                }
                _ => new_null_array(field.data_type(), n),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new(changes_schema.clone(), columns)
        .map_err(|e| Error::new(ErrorKind::Internal, "cannot assemble delete rows").with_source(e))
}
