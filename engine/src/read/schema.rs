//! The table's Arrow schema: the five meta fields, then the data fields of the Avro writer
//! schema; and the alignment of batches decoded from files of older or differently typed
//! writers (Spark's Parquet, Avro log blocks) to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::array::{make_array, new_null_array, ArrayDataBuilder, ArrayRef};
use arrow::buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use arrow_avro::reader::ReaderBuilder;
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};

use crate::error::{Error, ErrorKind, Result};

/// The meta fields every Hudi record carries, in order (hudi-format.md §5).
pub const META_FIELDS: [&str; 5] = [
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
];

/// Index of `_hoodie_commit_time` in a table schema.
pub const COMMIT_TIME_COLUMN: usize = 0;

/// Index of `_hoodie_record_key` in a table schema.
pub const RECORD_KEY_COLUMN: usize = 2;

/// Index of `_hoodie_partition_path` in a table schema.
pub const PARTITION_PATH_COLUMN: usize = 3;

/// Index of `_hoodie_file_name` in a table schema.
pub const FILE_NAME_COLUMN: usize = 4;

/// Converts an Avro record schema (JSON) to Arrow, as `arrow-avro` decodes it.
pub fn arrow_schema_of_avro(avro_json: &str) -> Result<SchemaRef> {
    let invalid = |e: arrow::error::ArrowError| {
        Error::new(ErrorKind::Corrupt, "the table's Avro schema cannot be used").with_source(e)
    };
    let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
    store.set(Fingerprint::Id(0), AvroSchema::new(avro_json.to_owned())).map_err(invalid)?;
    let decoder = ReaderBuilder::new()
        .with_writer_schema_store(store)
        .with_active_fingerprint(Fingerprint::Id(0))
        .build_decoder()
        .map_err(invalid)?;
    Ok(decoder.schema())
}

/// Whether `name` is a column that readers fill rather than a data field of the table: a meta
/// field, or `_hoodie_operation` of incremental reads.
pub fn is_reader_column(name: &str) -> bool {
    META_FIELDS.contains(&name) || name == crate::read::OPERATION_COLUMN
}

/// The table schema: meta fields (nullable strings) first when the table populates them, then
/// `data`'s fields without any meta field it may already contain.
pub fn table_schema(data: &Schema, with_meta_fields: bool) -> SchemaRef {
    let mut fields: Vec<Field> = if with_meta_fields {
        META_FIELDS.iter().map(|n| Field::new(*n, DataType::Utf8, true)).collect()
    } else {
        Vec::new()
    };
    fields.extend(
        data.fields()
            .iter()
            .filter(|f| !META_FIELDS.contains(&f.name().as_str()))
            .map(|f| f.as_ref().clone().with_nullable(true).with_metadata(Default::default())),
    );
    Arc::new(Schema::new(fields))
}

/// NULL columns of any length. Those of flat types (numbers, times, booleans, strings and
/// binaries) are views of zeroed bytes the whole process shares; the others are sliced from
/// the longest made of their type. Aligning many batches to a wide schema then allocates and
/// zeroes nothing per batch, nor per process that starts reading (a parallel worker).
#[derive(Debug, Default, Clone)]
pub struct NullColumns {
    cache: Arc<Mutex<NullArrays>>,
}

#[derive(Debug, Default)]
struct NullArrays {
    /// The longest made of each type that is not flat.
    longest: HashMap<DataType, ArrayRef>,
    /// Those handed out, by type and length: the slices of a table's files (and their log
    /// blocks), read again, ask for the same lengths.
    made: HashMap<(DataType, usize), ArrayRef>,
}

/// How many handed-out NULL columns are kept for the next ask (each shares the zeroed bytes,
/// or the longest's buffers).
const KEPT_NULL_COLUMNS: usize = 1024;

impl NullColumns {
    /// A column of `len` NULLs of `data_type`.
    pub fn get(&self, data_type: &DataType, len: usize) -> ArrayRef {
        let mut cache = self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = (data_type.clone(), len);
        if let Some(made) = cache.made.get(&key) {
            return made.clone();
        }
        let made = flat_nulls(data_type, len).unwrap_or_else(|| {
            let nulls = cache.longest.entry(data_type.clone()).or_insert_with(|| new_null_array(data_type, 0));
            if nulls.len() < len {
                // Grown by at least half again: a table's slices come in many lengths.
                *nulls = new_null_array(data_type, len.max(nulls.len() * 3 / 2));
            }
            nulls.slice(0, len)
        });
        if cache.made.len() >= KEPT_NULL_COLUMNS {
            cache.made.clear();
        }
        cache.made.insert(key, made.clone());
        made
    }
}

/// Zeroed bytes that NULL columns of flat types read: all their validity bits, offsets, views
/// and values are zeros.
static ZEROS: Mutex<Option<Buffer>> = Mutex::new(None);

/// The first `len` bytes of [`ZEROS`], mapped again (twice as many) when they are fewer.
fn zeros(len: usize) -> Buffer {
    let mut zeros = ZEROS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let have = zeros.as_ref().map_or(0, Buffer::len);
    if have < len {
        let size = len.max(have * 2).max(ZERO_PAGES_FIRST);
        *zeros = Some(ZeroPages::map(size).unwrap_or_else(|| MutableBuffer::from_len_zeroed(size).into()));
    }
    zeros.as_ref().map(|z| z.slice_with_length(0, len)).unwrap_or_default()
}

/// The first mapping of zero pages: room for the NULL columns of batches of millions of rows,
/// in address space only.
const ZERO_PAGES_FIRST: usize = 64 << 20;

/// A read-only anonymous mapping: every page reads as zeros, the kernel's one zero page, so
/// it takes no memory and is never written. (Zeroed heap memory is written, page after page,
/// by each process that starts reading, such as every parallel worker.)
struct ZeroPages {
    address: usize,
    len: usize,
}

impl ZeroPages {
    /// `len` zero bytes as a buffer, `None` when the mapping fails.
    fn map(len: usize) -> Option<Buffer> {
        // SAFETY: a new private mapping, read-only, owned by the returned buffer.
        unsafe {
            let start = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if start == libc::MAP_FAILED {
                return None;
            }
            let owner = Arc::new(ZeroPages { address: start as usize, len });
            Some(Buffer::from_custom_allocation(std::ptr::NonNull::new(start as *mut u8)?, len, owner))
        }
    }
}

impl Drop for ZeroPages {
    fn drop(&mut self) {
        // SAFETY: the mapping this owns, which no buffer reads any more.
        unsafe { libc::munmap(self.address as *mut libc::c_void, self.len) };
    }
}

/// `len` NULLs of `data_type` over [`ZEROS`], when the type is flat.
fn flat_nulls(data_type: &DataType, len: usize) -> Option<ArrayRef> {
    use DataType as D;
    let empty = Buffer::from(MutableBuffer::new(0));
    let buffers = match data_type {
        D::Null => return Some(new_null_array(data_type, len)),
        D::Boolean => vec![zeros(len.div_ceil(8))],
        D::Utf8 | D::Binary => vec![zeros((len + 1) * 4), empty],
        D::LargeUtf8 | D::LargeBinary => vec![zeros((len + 1) * 8), empty],
        D::Utf8View | D::BinaryView => vec![zeros(len * 16)],
        D::FixedSizeBinary(width) => vec![zeros(len * usize::try_from(*width).ok()?)],
        d => vec![zeros(len * d.primitive_width()?)],
    };
    // SAFETY: `len` zero bits are `len` NULLs.
    let validity = unsafe { NullBuffer::new_unchecked(BooleanBuffer::new(zeros(len.div_ceil(8)), 0, len), len) };
    let data = ArrayDataBuilder::new(data_type.clone()).len(len).nulls(Some(validity)).buffers(buffers);
    // SAFETY: the buffers have the lengths the type asks for `len` values, and zeros are valid
    // offsets (every value empty), views (empty, inline) and values.
    Some(make_array(unsafe { data.build_unchecked() }))
}

/// Re-shapes `batch` to `target`: columns by name, cast to the target type, missing ones null.
pub fn align_batch(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch> {
    align_batch_with(batch, target, &NullColumns::default())
}

/// [`align_batch`], with missing columns taken from `nulls`.
pub fn align_batch_with(batch: &RecordBatch, target: &SchemaRef, nulls: &NullColumns) -> Result<RecordBatch> {
    let rows = batch.num_rows();
    let options = CastOptions { safe: false, ..Default::default() };
    let columns = target
        .fields()
        .iter()
        .map(|field| -> Result<ArrayRef> {
            match batch.column_by_name(field.name()) {
                Some(column) if column.data_type() == field.data_type() => Ok(column.clone()),
                Some(column) => cast_with_options(column, field.data_type(), &options).map_err(|e| {
                    Error::new(
                        ErrorKind::Corrupt,
                        format!(
                            "column {} of type {} cannot be read as {}",
                            field.name(),
                            column.data_type(),
                            field.data_type()
                        ),
                    )
                    .with_source(e)
                }),
                None => Ok(nulls.get(field.data_type(), rows)),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new_with_options(target.clone(), columns, &RecordBatchOptions::new().with_row_count(Some(rows)))
        .map_err(|e| Error::new(ErrorKind::Internal, "cannot assemble aligned batch").with_source(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::TimeUnit;

    #[test]
    fn null_columns_of_any_length_are_valid_and_all_null() {
        let nulls = NullColumns::default();
        let types = [
            DataType::Utf8,
            DataType::Int32,
            DataType::Decimal128(12, 2),
            DataType::Boolean,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
            DataType::LargeUtf8,
            DataType::Utf8View,
            DataType::FixedSizeBinary(3),
            DataType::Decimal256(40, 3),
            DataType::Date32,
        ];
        // Growing, equal and shorter lengths: shorter ones reuse the longest allocation.
        for len in [100, 1000, 1000, 37, 0, 999, 70_001] {
            for data_type in &types {
                let column = nulls.get(data_type, len);
                assert_eq!((column.len(), column.null_count(), column.data_type()), (len, len, data_type));
                assert_eq!(column.logical_null_count(), len);
                column.to_data().validate_full().unwrap();
            }
        }
    }
}
