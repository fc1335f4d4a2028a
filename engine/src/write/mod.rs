//! Writing tables: creating them, and the commit protocol of writers (bucketed log files under
//! non-blocking concurrency control).

pub mod blocks;
pub mod commit;
pub(crate) mod epochs;
pub mod heartbeat;
pub mod prepared;
pub mod rows;
pub mod schema;
pub mod storage_lock;
pub mod time;
pub mod table;
pub mod transaction;
#[cfg(test)]
mod evolution_tests;
#[cfg(test)]
mod truncate_tests;

pub use table::{create_table, create_table_locking, NewTable};
pub use commit::{Completed, PreparedCommit};
pub use blocks::{Change, PendingBlocks};
pub use transaction::{BaseFileRef, BaseRow, KeyToDelete, Transaction, WriteAction, WriterId};

use arrow::array::Array;
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;

use crate::error::{Error, ErrorKind, Result};

/// What a Parquet file written by this engine is for.
pub(crate) enum ParquetFile<'a> {
    /// The content of a PARQUET_DATA log block: never pruned by statistics, rewritten by
    /// compaction; written without dictionaries or statistics, whose per-value string
    /// interning and comparisons were a third of the write path in profiles (Snappy still
    /// shrinks repeated values), and, as base files, with the columns Snappy barely shrinks
    /// uncompressed: every merge of the slice decompresses them again. The exception: the
    /// chunk statistics of the integer ordering fields named, by which a read may see that no
    /// base row can win over the block's versions ([`crate::read::base_ordering::BaseOrdering`]).
    LogBlock(&'a [String]),
    /// A base file, with the footer's key/value metadata: dictionaries and statistics help
    /// every later scan.
    BaseFile(Vec<KeyValue>),
}

/// Rows as a complete Parquet file.
pub(crate) fn parquet_bytes(batch: &RecordBatch, purpose: ParquetFile) -> Result<Vec<u8>> {
    // Snappy: cheap to write and to read, and what Spark and Java readers expect to handle.
    let builder = WriterProperties::builder().set_compression(Compression::SNAPPY);
    let properties = match purpose {
        ParquetFile::LogBlock(ordering_fields) => {
            // (Of integers only: a read compares no other bounds.)
            let integers = ordering_fields.iter().filter(|field| {
                batch.schema_ref().field_with_name(field).is_ok_and(|f| crate::read::base_ordering::StoredBound::applies_to(f.data_type()))
            });
            let builder = integers.fold(builder.set_statistics_enabled(EnabledStatistics::None), |builder, field| {
                builder.set_column_statistics_enabled(ColumnPath::from(field.as_str()), EnabledStatistics::Chunk)
            });
            uncompressed_where_snappy_fails(batch, builder.set_dictionary_enabled(false))
        }
        ParquetFile::BaseFile(metadata) => {
            let builder = builder.set_data_page_row_count_limit(BASE_PAGE_ROWS).set_key_value_metadata((!metadata.is_empty()).then_some(metadata));
            base_file_columns(batch, builder)
        }
    }
    .build();
    let parquet_error = |e: parquet::errors::ParquetError| Error::new(ErrorKind::Internal, "cannot write Parquet").with_source(e);
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(properties)).map_err(parquet_error)?;
    writer.write(batch).map_err(parquet_error)?;
    writer.close().map_err(parquet_error)?;
    Ok(out)
}

/// Rows of a base file's data pages at most. A point query reads one page of each column,
/// decompressing it whole and skipping to its row (Parquet's default, 20,000 rows, made a
/// point query decompress and skip 20,480 rows of every column; 4,096 still put a fifth of it
/// in skipping). Scans measured the same with pages of 1,024 rows as with 4,096 (bench/README);
/// the page index they add is converted once per file and kept ([`crate::read::footers`]).
pub const BASE_PAGE_ROWS: usize = 1024;

/// Per-column choices for base files, whose record keys and ordering values every merge of
/// the slice decodes again:
/// - record keys are sorted (compaction writes them so), and each shares a prefix with the
///   one before: DELTA_BYTE_ARRAY stores them in a tenth of Snappy's size and decodes faster;
/// - columns of mostly distinct values (keys, sequence numbers, names, timestamps) have no
///   dictionary: it would hold about one entry per row until it overflows (1 MiB), and a
///   reader of any page of the column, a point query's one page say, decodes the whole
///   dictionary first;
/// - columns that Snappy barely shrinks are stored uncompressed
///   ([`uncompressed_where_snappy_fails`]).
fn base_file_columns(batch: &RecordBatch, mut builder: WriterPropertiesBuilder) -> WriterPropertiesBuilder {
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let path = ColumnPath::from(field.name().as_str());
        if field.name() == crate::read::schema::META_FIELDS[crate::read::schema::RECORD_KEY_COLUMN] {
            builder = builder.set_column_dictionary_enabled(path.clone(), false).set_column_encoding(path, Encoding::DELTA_BYTE_ARRAY);
            continue;
        }
        if mostly_distinct(column.as_ref()) {
            builder = builder.set_column_dictionary_enabled(path, false);
        }
    }
    uncompressed_where_snappy_fails(batch, builder)
}

/// Columns that Snappy barely shrinks (unique numbers and timestamps) stored uncompressed:
/// decompressing them costs every reader more than the bytes saved.
fn uncompressed_where_snappy_fails(batch: &RecordBatch, mut builder: WriterPropertiesBuilder) -> WriterPropertiesBuilder {
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        if snappy_ratio(column.as_ref()).is_some_and(|ratio| ratio < MIN_SNAPPY_RATIO) {
            builder = builder.set_column_compression(ColumnPath::from(field.name().as_str()), Compression::UNCOMPRESSED);
        }
    }
    builder
}

/// Whether more than half of a sample of the column's values (its first rows, at least a
/// thousand) are distinct.
fn mostly_distinct(column: &dyn Array) -> bool {
    const SAMPLE_ROWS: usize = 4096;
    if column.len() < 1024 || column.data_type().is_nested() {
        return false;
    }
    let sample = column.slice(0, column.len().min(SAMPLE_ROWS));
    let Ok(converter) = arrow::row::RowConverter::new(vec![arrow::row::SortField::new(sample.data_type().clone())]) else {
        return false;
    };
    let Ok(rows) = converter.convert_columns(&[sample.clone()]) else { return false };
    let distinct: std::collections::HashSet<arrow::row::Row<'_>> = rows.iter().collect();
    distinct.len() * 2 > sample.len()
}

/// The size reduction below which a fixed-width column is stored uncompressed (a quarter).
const MIN_SNAPPY_RATIO: f64 = 4.0 / 3.0;

/// How much Snappy shrinks a sample of a fixed-width column's values (`None` for other
/// types, which keep Snappy).
fn snappy_ratio(column: &dyn Array) -> Option<f64> {
    const SAMPLE_BYTES: usize = 64 * 1024;
    let width = column.data_type().primitive_width()?;
    let data = column.to_data();
    let values = data.buffers().first()?.as_slice();
    let start = (data.offset() * width).min(values.len());
    let sample = &values[start..(start + SAMPLE_BYTES).min(values.len())];
    if sample.len() < 1024 {
        return None;
    }
    let compressed = snap::raw::Encoder::new().compress_vec(sample).ok()?;
    Some(sample.len() as f64 / compressed.len().max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use std::sync::Arc;

    #[test]
    fn parquet_files_delta_encode_keys_and_compress_and_index_only_what_shrinks() {
        let n = 20_000i64;
        let schema = Schema::new(vec![
            Field::new("_hoodie_record_key", DataType::Utf8, true),
            Field::new("ts", DataType::Int64, true),
            Field::new("kind", DataType::Int64, true),
        ]);
        let mut keys: Vec<String> = (0..n).map(|i| format!("customer-{i:08}")).collect();
        keys.sort();
        // Unique, scattered values (an LCG) do not compress; a column of few values does.
        let ts: Int64Array = (0..n).map(|i| Some(i.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407))).collect();
        let kind: Int64Array = (0..n).map(|i| Some(i % 3)).collect();
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(StringArray::from(keys)), Arc::new(ts), Arc::new(kind)],
        )
        .unwrap();
        let bytes = parquet_bytes(&batch, ParquetFile::BaseFile(Vec::new())).unwrap();
        let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        let group = reader.metadata().row_group(0);
        let (key, ts, kind) = (group.column(0), group.column(1), group.column(2));
        assert!(key.encodings().any(|e| e == Encoding::DELTA_BYTE_ARRAY), "{:?}", key.encodings().collect::<Vec<_>>());
        assert!(key.compressed_size() < (n * 3) as i64, "sorted keys share prefixes: {} bytes", key.compressed_size());
        assert_eq!(ts.compression(), Compression::UNCOMPRESSED);
        assert_eq!(kind.compression(), Compression::SNAPPY);
        // Unique values have no dictionary; a column of few values does.
        assert!(!ts.encodings().any(|e| e == Encoding::RLE_DICTIONARY) && ts.dictionary_page_offset().is_none());
        assert!(kind.encodings().any(|e| e == Encoding::RLE_DICTIONARY));
        // Every column's data pages are small enough for a point query's one page.
        let options = parquet::file::serialized_reader::ReadOptionsBuilder::new().with_page_index().build();
        let indexed = SerializedFileReader::new_with_options(bytes::Bytes::from(parquet_bytes(&batch, ParquetFile::BaseFile(Vec::new())).unwrap()), options).unwrap();
        let offsets = indexed.metadata().offset_index().expect("a page index");
        for column in &offsets[0] {
            let starts: Vec<i64> = column.page_locations().iter().map(|p| p.first_row_index).chain([n]).collect();
            assert!(starts.len() > 4 && starts.windows(2).all(|w| w[1] - w[0] <= BASE_PAGE_ROWS as i64), "{starts:?}");
        }
        // Log blocks: no dictionaries, and the same choice of compression.
        let bytes = parquet_bytes(&batch, ParquetFile::LogBlock(&[])).unwrap();
        let reader = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        let group = reader.metadata().row_group(0);
        assert_eq!(group.column(1).compression(), Compression::UNCOMPRESSED);
        assert_eq!(group.column(2).compression(), Compression::SNAPPY);
        assert!((0..3).all(|c| group.column(c).dictionary_page_offset().is_none()));
    }
}
