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
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::error::{Error, ErrorKind, Result};

/// What a Parquet file written by this engine is for.
pub(crate) enum ParquetFile {
    /// The content of a PARQUET_DATA log block: never pruned by statistics, rewritten by
    /// compaction; written without dictionaries or statistics, whose per-value string
    /// interning and comparisons were a third of the write path in profiles (Snappy still
    /// shrinks repeated values).
    LogBlock,
    /// A base file, with the footer's key/value metadata: dictionaries and statistics help
    /// every later scan.
    BaseFile(Vec<KeyValue>),
}

/// Rows as a complete Parquet file.
pub(crate) fn parquet_bytes(batch: &arrow::record_batch::RecordBatch, purpose: ParquetFile) -> Result<Vec<u8>> {
    // Snappy: cheap to write and to read, and what Spark and Java readers expect to handle.
    let builder = WriterProperties::builder().set_compression(Compression::SNAPPY);
    let properties = match purpose {
        ParquetFile::LogBlock => builder.set_dictionary_enabled(false).set_statistics_enabled(EnabledStatistics::None),
        ParquetFile::BaseFile(metadata) => builder.set_key_value_metadata((!metadata.is_empty()).then_some(metadata)),
    }
    .build();
    let parquet_error = |e: parquet::errors::ParquetError| Error::new(ErrorKind::Internal, "cannot write Parquet").with_source(e);
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).map_err(parquet_error)?;
    writer.write(batch).map_err(parquet_error)?;
    writer.close().map_err(parquet_error)?;
    Ok(out)
}
