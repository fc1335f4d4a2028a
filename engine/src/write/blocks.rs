//! Log blocks of a write transaction: rows split by file group and encoded as Hudi log blocks
//! (Parquet data blocks for upserts, delete blocks for deletes). Encoding is CPU work on memory
//! it owns, so a flush can be encoded on a helper thread ([`BlockEncoder::start`]) while the
//! caller goes on buffering the next rows; the caller keeps the I/O
//! ([`crate::write::Transaction::write_blocks`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;

use crate::error::{Error, ErrorKind, Result};
use crate::log::block::{encode_block, header, BlockType};
use crate::log::data::encode_deletes;
use crate::log::DeleteRecord;
use crate::ordering::OrderingValue;
use crate::table::bucket::{bucket_of_key, file_id_of_bucket};
use crate::write::transaction::{BaseRow, KeyToDelete};

/// What a batch of buffered rows changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The rows are upserted (INSERT, UPDATE).
    Upsert,
    /// The rows' keys are deleted, whatever their ordering values (SQL DELETE).
    Delete,
}

/// One encoded log block, for one file group.
pub(crate) struct EncodedBlock {
    pub partition: String,
    pub file_id: String,
    pub bytes: Vec<u8>,
    pub upserts: i64,
    pub deletes: i64,
}

/// The blocks of one batch of rows, in the order they must be written.
pub(crate) struct EncodedBlocks {
    /// The transaction's log file count when encoding began: block `i` numbers its records'
    /// `_hoodie_commit_seqno` after log file `first_sequence + i`.
    pub first_sequence: u64,
    pub blocks: Vec<EncodedBlock>,
}

/// Log blocks being encoded, on a helper thread or done.
pub struct PendingBlocks(crate::threads::Answer<EncodedBlocks>);

impl PendingBlocks {
    /// The encoded blocks, once done (or why encoding failed).
    pub(crate) async fn blocks(self) -> Result<EncodedBlocks> {
        self.0.get().await
    }
}

/// What encoding a transaction's log blocks needs: shared with helper threads.
pub(crate) struct BlockEncoder {
    pub record_key_fields: Vec<String>,
    pub partition_fields: Vec<String>,
    /// Data columns, as the table stores them.
    pub data_schema: SchemaRef,
    /// Meta fields and data columns: the rows of log blocks.
    pub record_schema: SchemaRef,
    pub avro_with_meta: String,
    /// The ordering fields, whose least value each block states (see [`ParquetFile::LogBlock`]).
    pub ordering_fields: Vec<String>,
    pub buckets: u32,
    pub instant: String,
}

fn internal(what: &str) -> impl FnOnce(arrow::error::ArrowError) -> Error + '_ {
    move |e| Error::new(ErrorKind::Internal, what.to_owned()).with_source(e)
}

impl BlockEncoder {
    /// Starts encoding `change` of `rows` (each read at `positions[i]`, if known) on a helper
    /// thread, numbered after log file `first_sequence`.
    pub fn start(self: &Arc<Self>, change: Change, rows: RecordBatch, positions: Vec<Option<BaseRow>>, first_sequence: u64) -> PendingBlocks {
        let encoder = self.clone();
        PendingBlocks(crate::threads::on_helper("encoding log blocks", move || {
            encoder.encode(change, &rows, &positions, first_sequence)
        }))
    }

    /// Encodes `change` of `rows` here (as [`Self::start`]).
    pub fn encode(&self, change: Change, rows: &RecordBatch, positions: &[Option<BaseRow>], first_sequence: u64) -> Result<EncodedBlocks> {
        let data = crate::read::schema::align_batch(rows, &self.data_schema)
            .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.detail()))?;
        let blocks = match change {
            Change::Upsert => self.upserts(&data, positions, first_sequence)?,
            Change::Delete => {
                let keys = self.record_keys(&data)?;
                let partitions = self.partition_paths(&data)?;
                let deletes = partitions
                    .into_iter()
                    .enumerate()
                    .map(|(row, p)| ((keys.value(row).to_owned(), p, OrderingValue::Int(0)), positions.get(row).cloned().flatten()))
                    .collect();
                self.deletes(deletes)?
            }
        };
        Ok(EncodedBlocks { first_sequence, blocks })
    }

    /// The partition path and record key of each of `rows` (data columns by name), as an
    /// upsert of them would write them.
    pub fn keys_of(&self, rows: &RecordBatch) -> Result<Vec<(String, String)>> {
        let data = crate::read::schema::align_batch(rows, &self.data_schema)
            .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.detail()))?;
        let keys = self.record_keys(&data)?;
        let partitions = self.partition_paths(&data)?;
        Ok(partitions.into_iter().enumerate().map(|(row, p)| (p, keys.value(row).to_owned())).collect())
    }

    /// The record key of each row: the value of a single key field, or `f1:v1,f2:v2` for
    /// composite keys (where a part may be NULL or empty, not every part). A NULL key is an
    /// error naming the row.
    fn record_keys(&self, batch: &RecordBatch) -> Result<StringArray> {
        let fields = &self.record_key_fields;
        let columns = text_columns(batch, fields, "key")?;
        let keys = crate::table::keygen::record_keys(fields, &columns, crate::table::keygen::KeyFormat::written_for(fields.len()))?;
        if let Some(row) = (0..keys.len()).find(|&row| keys.is_null(row)) {
            let message = match fields.as_slice() {
                [field] => format!("row {} has a NULL value in key column {field}", row + 1),
                _ => format!("row {} has no value in any of its key columns ({})", row + 1, fields.join(", ")),
            };
            return Err(Error::new(ErrorKind::InvalidArgument, message));
        }
        Ok(keys)
    }

    /// The hive-style partition path of each row.
    fn partition_paths(&self, batch: &RecordBatch) -> Result<Vec<String>> {
        let fields = &self.partition_fields;
        let columns = text_columns(batch, fields, "partition")?;
        Ok((0..batch.num_rows())
            .map(|row| {
                fields
                    .iter()
                    .zip(&columns)
                    .map(|(field, column)| {
                        let value = if column.is_null(row) || column.as_string::<i32>().value(row).is_empty() {
                            crate::table::keygen::DEFAULT_PARTITION
                        } else {
                            column.as_string::<i32>().value(row)
                        };
                        format!("{field}={value}")
                    })
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect())
    }

    fn block_header(&self) -> BTreeMap<i32, String> {
        [(header::INSTANT_TIME, self.instant.clone()), (header::SCHEMA, self.avro_with_meta.clone())].into()
    }

    /// The header of a block of `partition`/`file_id` holding `records`, each read at
    /// `read_at(record)`. When every record was read from a base file they are first put in
    /// position order, and the header names their positions if they qualify
    /// ([`positions_header`]).
    fn positioned_block_header<T>(
        &self,
        partition: &str,
        file_id: &str,
        records: &mut [T],
        read_at: impl Fn(&T) -> Option<&BaseRow>,
    ) -> BTreeMap<i32, String> {
        if records.iter().all(|r| read_at(r).is_some()) {
            records.sort_by_key(|r| read_at(r).map(|p| p.position));
        }
        let mut block_header = self.block_header();
        block_header.extend(positions_header(partition, file_id, records.iter().map(&read_at)).into_iter().flatten());
        block_header
    }

    /// One Parquet data block per touched file group, of the rows of `data` (aligned to
    /// [`Self::data_schema`]) that fall into it, in input order (position order when all were
    /// read from the group's base file).
    fn upserts(&self, data: &RecordBatch, positions: &[Option<BaseRow>], first_sequence: u64) -> Result<Vec<EncodedBlock>> {
        let position_of = |row: u32| positions.get(row as usize).and_then(Option::as_ref);
        let keys = self.record_keys(data)?;
        let partitions = self.partition_paths(data)?;
        // Rows of each (partition, bucket), in input order, without a string copy per row; only
        // the buckets rows fall in (a table may have up to MAX_BUCKETS). Hashed, then put in
        // (partition, bucket) order once: a B-tree looked up per row compared the partition
        // strings a dozen times a row (a tenth of a flush's CPU).
        let mut groups: std::collections::HashMap<(&str, u32), Vec<u32>> = std::collections::HashMap::new();
        for (row, partition) in partitions.iter().enumerate() {
            let bucket = bucket_of_key(keys.value(row), self.buckets);
            groups.entry((partition.as_str(), bucket)).or_default().push(row as u32);
        }
        let mut groups: Vec<((&str, u32), Vec<u32>)> = groups.into_iter().collect();
        groups.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut blocks = Vec::new();
        for (i, ((partition, bucket), rows)) in groups.into_iter().enumerate() {
            let file_id = file_id_of_bucket(bucket);
            let mut rows: Vec<(u32, Option<&BaseRow>)> = rows.into_iter().map(|r| (r, position_of(r))).collect();
            let block_header = self.positioned_block_header(partition, &file_id, &mut rows, |(_, at)| *at);
            let rows: Vec<u32> = rows.into_iter().map(|(row, _)| row).collect();
            let indices = UInt32Array::from_iter_values(rows.iter().copied());
            let part = take_record_batch(data, &indices).map_err(internal("cannot split rows by bucket"))?;
            let n = rows.len();
            let meta: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(vec![self.instant.as_str(); n])),
                Arc::new(sequence_numbers(&self.instant, bucket, (first_sequence + i as u64) * 1_000_000, n)),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|&r| keys.value(r as usize)))),
                Arc::new(StringArray::from(vec![partition; n])),
                Arc::new(StringArray::from(vec![file_id.as_str(); n])),
            ];
            let columns: Vec<ArrayRef> = meta.into_iter().chain(part.columns().iter().cloned()).collect();
            let records = RecordBatch::try_new(self.record_schema.clone(), columns).map_err(internal("cannot assemble records"))?;
            let parquet = crate::write::parquet_bytes(&records, crate::write::ParquetFile::LogBlock(&self.ordering_fields))?;
            let bytes = encode_block(BlockType::ParquetData, &block_header, &parquet);
            blocks.push(EncodedBlock { partition: partition.to_owned(), file_id, bytes, upserts: n as i64, deletes: 0 });
        }
        Ok(blocks)
    }

    /// One delete block per touched file group, of `keys`, each with where it was read.
    pub fn deletes(&self, keys: Vec<(KeyToDelete, Option<BaseRow>)>) -> Result<Vec<EncodedBlock>> {
        let mut groups: BTreeMap<(String, u32), Vec<(DeleteRecord, Option<BaseRow>)>> = BTreeMap::new();
        for ((record_key, partition, ordering), position) in keys {
            let bucket = bucket_of_key(&record_key, self.buckets);
            let record = DeleteRecord { record_key, partition_path: Some(partition.clone()), ordering };
            groups.entry((partition, bucket)).or_default().push((record, position));
        }
        let mut blocks = Vec::new();
        for ((partition, bucket), mut records) in groups {
            let file_id = file_id_of_bucket(bucket);
            let block_header = self.positioned_block_header(&partition, &file_id, &mut records, |(_, p)| p.as_ref());
            let records: Vec<DeleteRecord> = records.into_iter().map(|(record, _)| record).collect();
            let deletes = records.len() as i64;
            let bytes = encode_block(BlockType::Delete, &block_header, &encode_deletes(&records)?);
            blocks.push(EncodedBlock { partition, file_id, bytes, upserts: 0, deletes });
        }
        Ok(blocks)
    }
}

/// The positions header of a block of `partition`/`file_id` whose records were read at
/// `rows` (in block order): present when every record was read from that file group's
/// same base file, at ascending and distinct positions (hudi-format.md §4.3, keys 5 and 8).
fn positions_header<'r>(partition: &str, file_id: &str, mut rows: impl Iterator<Item = Option<&'r BaseRow>>) -> Option<[(i32, String); 2]> {
    let first = rows.next()??;
    let base = &first.base;
    if base.partition != partition || base.file_id != file_id {
        return None;
    }
    let mut positions = vec![first.position];
    for row in rows {
        let row = row?;
        if row.base != *base {
            return None;
        }
        positions.push(row.position);
    }
    let encoded = crate::log::positions::encode_positions(&positions)?;
    Some([(header::RECORD_POSITIONS, encoded), (header::BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS, base.instant.clone())])
}

/// The `fields` of `batch` as text columns (what keys and partition paths are made of).
pub(crate) fn text_columns(batch: &RecordBatch, fields: &[String], what: &str) -> Result<Vec<ArrayRef>> {
    fields
        .iter()
        .map(|f| {
            let column = batch.column_by_name(f).ok_or_else(|| {
                Error::new(ErrorKind::InvalidArgument, format!("rows lack the {what} column {f}"))
            })?;
            let cannot = |e| Error::new(ErrorKind::Internal, "cannot format key values").with_source(e);
            match column.data_type() {
                // A timestamp as its stored integer, as Hudi's key generators write one (unless
                // told to write the JVM's local text of it): a key or partition Spark writes
                // for the same row is the same text. (Arrow's text of a zoned timestamp needs a
                // zone database, and was refused.)
                DataType::Timestamp(..) => arrow::compute::cast(&arrow::compute::cast(column, &DataType::Int64).map_err(cannot)?, &DataType::Utf8).map_err(cannot),
                _ => arrow::compute::cast(column, &DataType::Utf8).map_err(cannot),
            }
        })
        .collect()
}

/// `_hoodie_commit_seqno` values `<instant>_<bucket>_<n>`, built without a string per row.
fn sequence_numbers(instant: &str, bucket: u32, first: u64, count: usize) -> StringArray {
    use std::fmt::Write;
    let mut builder = arrow::array::StringBuilder::with_capacity(count, count * (instant.len() + 12));
    for i in 0..count as u64 {
        let _ = write!(builder, "{instant}_{bucket}_{}", first + i);
        builder.append_value("");
    }
    builder.finish()
}
