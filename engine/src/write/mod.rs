//! Writing tables: creating them, and the commit protocol of writers (bucketed log files under
//! non-blocking concurrency control).

pub mod commit;
pub mod heartbeat;
pub mod schema;
pub mod time;
pub mod table;
pub mod transaction;

pub use table::{create_table, NewTable};
pub use transaction::{KeyToDelete, Transaction, WriterId};

use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::error::{Error, ErrorKind, Result};

/// Rows as a complete Parquet file: the content of a PARQUET_DATA log block, or a base file
/// (with its footer's key/value metadata).
pub(crate) fn parquet_bytes(batch: &arrow::record_batch::RecordBatch, metadata: Vec<KeyValue>) -> Result<Vec<u8>> {
    // Snappy: cheap to write and to read, and what Spark and Java readers expect to handle.
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_key_value_metadata((!metadata.is_empty()).then_some(metadata))
        .build();
    let parquet_error = |e: parquet::errors::ParquetError| Error::new(ErrorKind::Internal, "cannot write Parquet").with_source(e);
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).map_err(parquet_error)?;
    writer.write(batch).map_err(parquet_error)?;
    writer.close().map_err(parquet_error)?;
    Ok(out)
}
