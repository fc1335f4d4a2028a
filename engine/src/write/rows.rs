//! Rows as bytes, to keep outside the lake until they are written to it: a writer that
//! buffers rows (PostgreSQL's write buffer, `write_mode 'buffered'`) stores each batch as one
//! Arrow IPC stream, which keeps the batch's own schema, so a batch buffered before a schema
//! change is written in the new schema by name ([`crate::read::schema::align_batch`]).

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow::ipc::MetadataVersion;
use arrow::record_batch::RecordBatch;

use arrow::datatypes::SchemaRef;

use crate::error::{Error, ErrorKind, Result};
use crate::table::TableConfig;
use crate::write::blocks::BlockEncoder;
use crate::write::Change;

/// What a writer that buffers rows needs to know of a table without beginning a transaction:
/// the data columns rows are written in, and how a row's key and partition are made.
pub struct TableRows {
    encoder: BlockEncoder,
}

impl TableRows {
    /// The rows of the table of `config` written in `avro_schema` (its latest schema).
    pub fn new(config: &TableConfig, avro_schema: &str) -> Result<TableRows> {
        let buckets = crate::write::transaction::bucket_count(config)?;
        Ok(TableRows { encoder: crate::write::transaction::encoder(config, avro_schema, String::new(), buckets)? })
    }

    /// The data columns.
    pub fn data_schema(&self) -> &SchemaRef {
        &self.encoder.data_schema
    }

    /// The partition path and record key of each of `rows` (as [`crate::write::Transaction::keys_of`]).
    pub fn keys_of(&self, rows: &RecordBatch) -> Result<Vec<(String, String)>> {
        self.encoder.keys_of(rows)
    }
}

/// `changes` with each run of batches of the same change and schema made one batch: one log
/// block per file group for the run instead of one per batch (a flush of many small
/// transactions writes one log file per file group).
pub fn coalesce(changes: Vec<(Change, RecordBatch)>) -> Result<Vec<(Change, RecordBatch)>> {
    let mut out: Vec<(Change, Vec<RecordBatch>)> = Vec::new();
    for (change, rows) in changes.into_iter().filter(|(_, rows)| rows.num_rows() > 0) {
        match out.last_mut() {
            Some((last, batches)) if *last == change && batches[0].schema() == rows.schema() => batches.push(rows),
            _ => out.push((change, vec![rows])),
        }
    }
    out.into_iter()
        .map(|(change, batches)| {
            let rows = arrow::compute::concat_batches(&batches[0].schema(), &batches)
                .map_err(|e| Error::new(ErrorKind::Internal, "cannot join buffered rows").with_source(e))?;
            Ok((change, rows))
        })
        .collect()
}

/// `rows` as one Arrow IPC stream.
pub fn to_bytes(rows: &RecordBatch) -> Result<Vec<u8>> {
    let failed = |e: arrow::error::ArrowError| Error::new(ErrorKind::Internal, "cannot encode buffered rows").with_source(e);
    // 8-byte alignment (the format's least) rather than the writer's default of 64: a small
    // transaction's chunk has a few buffers per column, and 64-byte padding made a one-row
    // chunk of ten columns 2.7 KB — past PostgreSQL's TOAST threshold, so every COMMIT paid for
    // compressing it (pglz: 12% of a buffered pgbench run's CPU).
    let options = IpcWriteOptions::try_new(8, false, MetadataVersion::V5).map_err(failed)?;
    let mut writer = StreamWriter::try_new_with_options(Vec::new(), &rows.schema(), options).map_err(failed)?;
    writer.write(rows).map_err(failed)?;
    writer.into_inner().map_err(failed)
}

/// The rows of `bytes` ([`to_bytes`]); bytes that are not such a stream are corrupt.
pub fn from_bytes(bytes: &[u8]) -> Result<RecordBatch> {
    let corrupt = |e: arrow::error::ArrowError| Error::new(ErrorKind::Corrupt, "buffered rows are damaged").with_source(e);
    let reader = StreamReader::try_new(std::io::Cursor::new(bytes), None).map_err(corrupt)?;
    let schema = reader.schema();
    let batches = reader.collect::<std::result::Result<Vec<_>, _>>().map_err(corrupt)?;
    arrow::compute::concat_batches(&schema, &batches).map_err(corrupt)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn rows_come_back_as_they_went_in() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)]));
        let rows = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2])), Arc::new(StringArray::from(vec![Some("a"), None]))]).unwrap();
        assert_eq!(from_bytes(&to_bytes(&rows).unwrap()).unwrap(), rows);
        let empty = RecordBatch::new_empty(rows.schema());
        assert_eq!(from_bytes(&to_bytes(&empty).unwrap()).unwrap().num_rows(), 0);
        let damaged = &to_bytes(&rows).unwrap()[..20];
        assert_eq!(from_bytes(damaged).unwrap_err().kind(), ErrorKind::Corrupt);
    }

    /// A small transaction's chunk stays under PostgreSQL's TOAST threshold (about 2 KB for a
    /// row of `hudi.write_buffer`), which would have it compressed at every commit.
    #[test]
    fn a_one_row_chunk_of_ten_columns_is_small() {
        use arrow::array::{BooleanArray, Date32Array, Float64Array, Int32Array, TimestampMicrosecondArray};
        use arrow::datatypes::TimeUnit;
        let types = [
            DataType::Int64,
            DataType::Utf8,
            DataType::Utf8,
            DataType::Float64,
            DataType::Int32,
            DataType::Float64,
            DataType::Boolean,
            DataType::Date32,
            DataType::Utf8,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ];
        let fields: Vec<Field> = types.iter().enumerate().map(|(i, t)| Field::new(format!("column_{i}"), t.clone(), true)).collect();
        let columns: Vec<arrow::array::ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![1])),
            Arc::new(StringArray::from(vec!["name"])),
            Arc::new(StringArray::from(vec!["amsterdam"])),
            Arc::new(Float64Array::from(vec![1.5])),
            Arc::new(Int32Array::from(vec![1])),
            Arc::new(Float64Array::from(vec![0.5])),
            Arc::new(BooleanArray::from(vec![true])),
            Arc::new(Date32Array::from(vec![20_454])),
            Arc::new(StringArray::from(vec!["x"])),
            Arc::new(TimestampMicrosecondArray::from(vec![1_767_225_600_000_000]).with_timezone("UTC")),
        ];
        let rows = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let bytes = to_bytes(&rows).unwrap();
        assert!(bytes.len() < 1500, "{} bytes", bytes.len());
        assert_eq!(from_bytes(&bytes).unwrap(), rows);
    }
}
