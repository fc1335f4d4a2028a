//! The ordering values of the base-file rows that log blocks name by position, read without
//! decoding the base file's ordering column.
//!
//! A snapshot read of a slice whose log blocks carry record positions compares each log
//! version with the base row it names, by the ordering field, and needs no other base row's
//! value. After an update of a tenth of the keys every page holds some of those rows, and
//! parquet-rs decodes a column faster whole than by a row selection of every tenth row
//! (bench/README.md): so the rows' values are read where a page stores them. A PLAIN page of
//! a fixed-width type without NULLs holds its row `i`'s value at `i × width` of its values.
//! A chunk with pages stored otherwise is decoded whole, as the column would have been.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{make_array, Array, ArrayData, ArrayRef, Int64Array, UInt64Array};
use arrow::buffer::MutableBuffer;
use arrow::compute::{cast_with_options, concat, take, CastOptions};
use arrow::datatypes::DataType;
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use parquet::basic::{ColumnOrder, ConvertedType, Encoding, LogicalType, SortOrder, Type as PhysicalType};
use parquet::column::page::{Page, PageReader};
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use crate::read::chunk_bytes::ChunkBytes;
use parquet::file::serialized_reader::SerializedPageReader;
use parquet::file::statistics::Statistics;

use crate::error::{Error, ErrorKind, Result};
use crate::log::{BlockType, LogBlock};
use crate::read::corrupt_file;

/// The ordering values of the base rows that log versions name, as a merge by position reads
/// them.
#[derive(Debug)]
pub enum BaseOrdering {
    /// Read from the fetched chunks.
    Chunks(OrderingChunks),
    /// Not fetched: no base row's value is greater than this one, and no log version's is
    /// less (Parquet statistics, [`StoredBound`]). Every comparison of a base row with a later
    /// version then goes as it would with the row's own value (the later version wins: a base
    /// version is never the newer one), so the bound stands in for each row's value.
    AtMost(i64),
}

impl BaseOrdering {
    /// The values of the file rows `positions` (sorted, distinct, within the file), in order.
    pub(crate) fn values_at(&self, positions: &[u64]) -> Result<ArrayRef> {
        match self {
            BaseOrdering::Chunks(chunks) => chunks.values_at(positions),
            BaseOrdering::AtMost(bound) => Ok(Arc::new(Int64Array::from_value(*bound, positions.len()))),
        }
    }
}

/// An extreme of an integer column's values (integers, dates, timestamps) from Parquet
/// statistics, with how the column stores them: two bounds compare only
/// if both files store the field alike.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredBound {
    pub value: i64,
    stored_as: (PhysicalType, Option<LogicalType>, ConvertedType),
}

impl StoredBound {
    /// Whether ordering values of the table type `data_type` may be bounded: integers, dates
    /// and timestamps, which a merge compares as the integers stored.
    pub(crate) fn applies_to(data_type: &DataType) -> bool {
        matches!(data_type, DataType::Int32 | DataType::Int64 | DataType::Date32 | DataType::Timestamp(..))
    }

    /// The least (`greatest == false`) or greatest value of the top-level `field` over the row
    /// groups of the file of `metadata`, from their statistics; `None` unless every row group
    /// with values states it exactly, for a column of signed integers. With `no_nulls`, also
    /// `None` when a row group has NULLs or does not say (a NULL orders before every value).
    fn of_file(metadata: &ParquetMetaData, field: &str, greatest: bool, no_nulls: bool) -> Option<StoredBound> {
        let schema = metadata.file_metadata().schema_descr();
        let leaf = (0..schema.num_columns()).find(|&c| schema.column(c).path().parts() == [field])?;
        let column = schema.column(leaf);
        let stored_as = (column.physical_type(), column.logical_type_ref().cloned(), column.converted_type());
        let signed = ColumnOrder::sort_order_for_type(stored_as.1.as_ref(), stored_as.2, stored_as.0) == SortOrder::SIGNED;
        if column.max_rep_level() > 0 || !signed {
            return None;
        }
        let mut bound: Option<i64> = None;
        for group in metadata.row_groups() {
            let statistics = group.column(leaf).statistics()?;
            let nulls = statistics.null_count_opt();
            if no_nulls && nulls != Some(0) {
                return None;
            }
            if group.num_rows() == 0 || nulls == Some(group.num_rows() as u64) {
                continue;
            }
            if !(statistics.min_is_exact() && statistics.max_is_exact()) {
                return None;
            }
            let value = match (statistics, greatest) {
                (Statistics::Int32(s), false) => i64::from(*s.min_opt()?),
                (Statistics::Int32(s), true) => i64::from(*s.max_opt()?),
                (Statistics::Int64(s), false) => *s.min_opt()?,
                (Statistics::Int64(s), true) => *s.max_opt()?,
                _ => return None,
            };
            bound = Some(bound.map_or(value, |b| if greatest { b.max(value) } else { b.min(value) }));
        }
        Some(StoredBound { value: bound?, stored_as })
    }

    /// The least value of `field` among the versions of the visible data `blocks`: `None`
    /// unless each is a Parquet data block whose statistics state it without NULLs (a delete
    /// block's ordering values are in its records, and a NULL is less than any value).
    pub(crate) fn least_in_blocks(blocks: &[(String, String, LogBlock)], field: &str) -> Option<StoredBound> {
        let mut least: Option<StoredBound> = None;
        for (_, _, block) in blocks {
            if block.block_type != BlockType::ParquetData {
                return None;
            }
            let metadata = ParquetMetaDataReader::new().parse_and_finish(&block.content).ok()?;
            let Some(bound) = StoredBound::of_file(&metadata, field, false, true) else { return None };
            match &least {
                Some(l) if l.stored_as != bound.stored_as => return None,
                Some(l) if l.value <= bound.value => {}
                _ => least = Some(bound),
            }
        }
        least
    }

    /// [`BaseOrdering::AtMost`] for a base file (of `metadata`) whose greatest value of `field`
    /// is no greater than `self`, the least of the later versions' values.
    pub(crate) fn base_at_most(&self, metadata: &ParquetMetaData, field: &str) -> Option<BaseOrdering> {
        let greatest = StoredBound::of_file(metadata, field, true, false)?;
        (greatest.stored_as == self.stored_as && greatest.value <= self.value).then_some(BaseOrdering::AtMost(greatest.value))
    }
}

/// Where a base file stores the ordering field: what to fetch for [`OrderingChunks`].
pub(crate) struct OrderingPlan {
    leaf: usize,
    /// The field in the file's Arrow schema (the root column a decoding pass would project).
    pub root: usize,
    /// Each row group's chunk of the field, in the file.
    pub ranges: Vec<Range<u64>>,
}

/// The ordering field's column chunks of a base file's row groups, fetched but not decoded.
pub struct OrderingChunks {
    /// `storage URI/path`, for errors.
    location: String,
    metadata: ArrowReaderMetadata,
    /// The field's leaf column in the file, and its field in the file's Arrow schema.
    leaf: usize,
    root: usize,
    /// The field's type in the table schema: the type of the values read.
    data_type: DataType,
    /// The chunks in row order, each of the row group `row_group` holding the file's rows `rows`.
    chunks: Vec<Chunk>,
}

struct Chunk {
    row_group: usize,
    rows: Range<u64>,
    /// The chunk's bytes, from the file offset `start`.
    start: u64,
    bytes: Bytes,
}

impl std::fmt::Debug for OrderingChunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderingChunks").field("location", &self.location).field("chunks", &self.chunks.len()).finish()
    }
}

impl OrderingChunks {
    /// Where the file stores the top-level `field`; `None` when it has no such column or its
    /// footer shows a dictionary-encoded chunk (its values cannot be read in place: the column
    /// is decoded with the others).
    pub(crate) fn plan(metadata: &ArrowReaderMetadata, field: &str) -> Option<OrderingPlan> {
        let root = metadata.schema().index_of(field).ok()?;
        let schema = metadata.parquet_schema();
        let leaf = (0..schema.num_columns()).find(|&c| schema.column(c).path().parts() == [field])?;
        let dictionary = |e: Encoding| matches!(e, Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY);
        let row_groups = metadata.metadata().row_groups();
        if schema.column(leaf).max_rep_level() > 0 || row_groups.iter().any(|g| g.column(leaf).encodings().any(dictionary)) {
            return None;
        }
        let ranges = row_groups
            .iter()
            .map(|g| {
                let (start, len) = g.column(leaf).byte_range();
                start..start + len
            })
            .collect();
        Some(OrderingPlan { leaf, root, ranges })
    }

    /// The chunks of `plan`, `fetched`: the values are of table type `data_type`.
    pub(crate) fn of_fetched(location: &str, metadata: &ArrowReaderMetadata, plan: OrderingPlan, data_type: &DataType, fetched: Vec<Bytes>) -> OrderingChunks {
        let row_groups = metadata.metadata().row_groups();
        let mut first_row = 0u64;
        let chunks = fetched
            .into_iter()
            .zip(plan.ranges)
            .enumerate()
            .map(|(row_group, (bytes, range))| {
                let rows = first_row..first_row + row_groups[row_group].num_rows().max(0) as u64;
                first_row = rows.end;
                Chunk { row_group, rows, start: range.start, bytes }
            })
            .collect();
        let (leaf, root) = (plan.leaf, plan.root);
        OrderingChunks { location: location.to_owned(), metadata: metadata.clone(), leaf, root, data_type: data_type.clone(), chunks }
    }

    /// The values of the file rows `positions` (sorted, distinct, within the file), in order.
    pub(crate) fn values_at(&self, positions: &[u64]) -> Result<ArrayRef> {
        match self.read_in_place(positions)? {
            Some(values) => Ok(values),
            None => self.decode_at(positions),
        }
    }

    /// [`Self::values_at`] read from the pages where they are stored; `None` when a page is
    /// not a PLAIN page of fixed-width values without NULLs, or the type is not one whose
    /// stored values are its Arrow values.
    fn read_in_place(&self, positions: &[u64]) -> Result<Option<ArrayRef>> {
        let Some(width) = self.stored_width() else { return Ok(None) };
        let mut values = MutableBuffer::new(positions.len() * width);
        let mut rest = positions;
        for chunk in &self.chunks {
            let within = rest.partition_point(|&p| p < chunk.rows.end);
            let (here, later) = rest.split_at(within);
            rest = later;
            if !here.is_empty() && !self.read_chunk_in_place(chunk, here, width, &mut values)? {
                return Ok(None);
            }
        }
        if !rest.is_empty() {
            return Err(Error::new(ErrorKind::Internal, format!("position {} is past the rows of {}", rest[0], self.location)));
        }
        let data = ArrayData::builder(self.data_type.clone()).len(positions.len()).add_buffer(values.into());
        let data = data.build().map_err(|e| Error::new(ErrorKind::Internal, "cannot assemble ordering values").with_source(e))?;
        Ok(Some(make_array(data)))
    }

    /// The byte width of a stored value, when the file stores the table type's values as they
    /// are in Arrow (the same type in the file's Arrow schema, and a physical type of its width).
    fn stored_width(&self) -> Option<usize> {
        let file_type = self.metadata.schema().field(self.root).data_type();
        let physical = self.metadata.parquet_schema().column(self.leaf).physical_type();
        if *file_type != self.data_type {
            return None;
        }
        match (physical, file_type) {
            (PhysicalType::INT32, DataType::Int32 | DataType::Date32) | (PhysicalType::FLOAT, DataType::Float32) => Some(4),
            (PhysicalType::INT64, DataType::Int64 | DataType::Timestamp(..)) | (PhysicalType::DOUBLE, DataType::Float64) => Some(8),
            _ => None,
        }
    }

    /// Appends the values of `chunk`'s rows `positions` to `values`; `false` when a page they
    /// are in is not stored so that they can be read in place.
    fn read_chunk_in_place(&self, chunk: &Chunk, positions: &[u64], width: usize, values: &mut MutableBuffer) -> Result<bool> {
        let invalid = |e| corrupt_file(&self.location, e);
        let column = self.metadata.metadata().row_group(chunk.row_group).column(self.leaf);
        let has_levels = self.metadata.parquet_schema().column(self.leaf).max_def_level() > 0;
        let input = Arc::new(ChunkBytes(vec![(chunk.start, chunk.bytes.clone())]));
        let total = (chunk.rows.end - chunk.rows.start) as usize;
        let mut pages = SerializedPageReader::new(input, column, total, None).map_err(invalid)?;
        let mut page_start = chunk.rows.start;
        let mut next = 0;
        while next < positions.len() {
            let Some(page) = pages.get_next_page().map_err(invalid)? else { return Ok(false) };
            // Where the page's values start, and its rows (a flat column: a level per row).
            let (buf, values_at, rows) = match &page {
                Page::DataPage { buf, num_values, encoding: Encoding::PLAIN, .. } => {
                    // Version 1: the definition levels come first, after their 4-byte length.
                    let levels = match (has_levels, buf.get(..4)) {
                        (false, _) => 0,
                        (true, Some(length)) => 4 + u32::from_le_bytes(length.try_into().expect("4 bytes")) as usize,
                        (true, None) => return Ok(false),
                    };
                    (buf, levels, *num_values as usize)
                }
                Page::DataPageV2 { buf, num_rows, num_nulls: 0, encoding: Encoding::PLAIN, def_levels_byte_len, rep_levels_byte_len, .. } => {
                    (buf, (*def_levels_byte_len + *rep_levels_byte_len) as usize, *num_rows as usize)
                }
                _ => return Ok(false),
            };
            // PLAIN values of a fixed width fill the page exactly when no row is NULL.
            if buf.len().checked_sub(values_at) != Some(rows * width) {
                return Ok(false);
            }
            let page_end = page_start + rows as u64;
            let in_page = positions[next..].partition_point(|&p| p < page_end);
            let page = &buf[values_at..];
            let rows_here = positions[next..next + in_page].iter().map(|&p| (p - page_start) as usize);
            match width {
                4 => rows_here.for_each(|row| values.push(u32::from_le_bytes(page[row * 4..row * 4 + 4].try_into().expect("4 bytes")))),
                _ => rows_here.for_each(|row| values.push(u64::from_le_bytes(page[row * 8..row * 8 + 8].try_into().expect("8 bytes")))),
            }
            next += in_page;
            page_start = page_end;
        }
        Ok(true)
    }

    /// [`Self::values_at`] by decoding the chunks.
    fn decode_at(&self, positions: &[u64]) -> Result<ArrayRef> {
        let input = ChunkBytes(self.chunks.iter().map(|c| (c.start, c.bytes.clone())).collect());
        let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(input, self.metadata.clone());
        let mask = ProjectionMask::roots(builder.parquet_schema(), [self.root]);
        let groups = self.chunks.iter().map(|c| c.row_group).collect();
        let reader = builder.with_row_groups(groups).with_projection(mask).build().map_err(|e| corrupt_file(&self.location, e))?;
        let columns = reader.map(|batch| batch.map(|b| b.column(0).clone())).collect::<std::result::Result<Vec<_>, _>>();
        let columns = columns.map_err(|e| corrupt_file(&self.location, e))?;
        let internal = |e| Error::new(ErrorKind::Internal, "cannot select ordering values").with_source(e);
        let column = concat(&columns.iter().map(|c| c.as_ref()).collect::<Vec<_>>()).map_err(internal)?;
        // The decoded rows are the chunks' rows, one after another.
        let mut offset = 0u64;
        let mut index = Vec::with_capacity(positions.len());
        let mut rest = positions;
        for chunk in &self.chunks {
            let within = rest.partition_point(|&p| p < chunk.rows.end);
            index.extend(rest[..within].iter().map(|p| p - chunk.rows.start + offset));
            rest = &rest[within..];
            offset += chunk.rows.end - chunk.rows.start;
        }
        let values = take(&column, &UInt64Array::from(index), None).map_err(internal)?;
        if values.data_type() == &self.data_type {
            return Ok(values);
        }
        cast_with_options(&values, &self.data_type, &CastOptions { safe: false, ..Default::default() }).map_err(|e| {
            Error::new(ErrorKind::Corrupt, format!("the ordering field of {} cannot be read as {}", self.location, self.data_type)).with_source(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Date32Array, Float64Array, Int32Array, Int64Array, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{Field, Schema};
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::arrow_reader::ArrowReaderOptions;
    use parquet::arrow::ArrowWriter;
    use parquet::basic::Compression;
    use parquet::file::properties::{WriterProperties, WriterVersion};

    /// A file of `column` (as field "o") and another column, written with `properties`.
    fn file(column: ArrayRef, nullable: bool, properties: WriterProperties) -> Bytes {
        let rows = column.len();
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("o", column.data_type().clone(), nullable),
        ]));
        let keys = Arc::new(Int64Array::from_iter_values(0..rows as i64));
        let batch = RecordBatch::try_new(schema.clone(), vec![keys, column]).unwrap();
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        Bytes::from(bytes)
    }

    /// Small pages and row groups, so that positions span many of each; values stored with
    /// `encoding`, or a dictionary when `None`.
    fn properties(version: WriterVersion, compression: Compression, encoding: Option<Encoding>) -> WriterProperties {
        let builder = match encoding {
            Some(encoding) => WriterProperties::builder().set_dictionary_enabled(false).set_encoding(encoding),
            None => WriterProperties::builder().set_dictionary_enabled(true),
        };
        builder
            .set_writer_version(version)
            .set_compression(compression)
            .set_write_batch_size(37)
            .set_data_page_row_count_limit(37)
            .set_max_row_group_size(500)
            .build()
    }

    /// The chunks of field "o" of `file`, as [`OrderingChunks::fetch`] would fetch them;
    /// `None` where it would not.
    fn chunks(file: &Bytes) -> Option<OrderingChunks> {
        let metadata = ArrowReaderMetadata::load(file, ArrowReaderOptions::new()).unwrap();
        let plan = OrderingChunks::plan(&metadata, "o")?;
        let fetched = plan.ranges.iter().map(|r| file.slice(r.start as usize..r.end as usize)).collect();
        let data_type = metadata.schema().field(plan.root).data_type().clone();
        Some(OrderingChunks::of_fetched("test.parquet", &metadata, plan, &data_type, fetched))
    }

    /// Seeded sets of sorted, distinct positions below `rows`: none, all, the ends, and
    /// random ones of several densities.
    fn position_sets(rows: u64, seed: u64) -> Vec<Vec<u64>> {
        let mut state = seed;
        let mut next = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            state >> 33
        };
        let mut sets = vec![vec![], (0..rows).collect(), vec![0, rows - 1]];
        for every in [2, 10, 100] {
            sets.push((0..rows).filter(|_| next() % every == 0).collect());
        }
        sets
    }

    const PLAIN: Option<Encoding> = Some(Encoding::PLAIN);

    #[test]
    fn values_read_in_place_or_decoded_are_the_column_at_the_positions() {
        let rows = 1800;
        let int64 = || Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i * 7 - 900))) as ArrayRef;
        let utc = TimestampMicrosecondArray::from_iter_values((0..rows).map(|i| 1_700_000_000_000_000 + i * 1_000_003));
        let cases: Vec<(&str, ArrayRef, bool, WriterProperties, bool)> = vec![
            ("int64, v1, uncompressed", int64(), true, properties(WriterVersion::PARQUET_1_0, Compression::UNCOMPRESSED, PLAIN), true),
            ("int64, v2, snappy", int64(), true, properties(WriterVersion::PARQUET_2_0, Compression::SNAPPY, PLAIN), true),
            ("int64, required", int64(), false, properties(WriterVersion::PARQUET_1_0, Compression::SNAPPY, PLAIN), true),
            ("timestamp", Arc::new(utc.with_timezone("UTC")), true, properties(WriterVersion::PARQUET_1_0, Compression::UNCOMPRESSED, PLAIN), true),
            ("int32", Arc::new(Int32Array::from_iter_values((0..rows as i32).rev())), true, properties(WriterVersion::PARQUET_2_0, Compression::UNCOMPRESSED, PLAIN), true),
            ("date32", Arc::new(Date32Array::from_iter_values((0..rows as i32).map(|d| d % 400))), true, properties(WriterVersion::PARQUET_1_0, Compression::UNCOMPRESSED, PLAIN), true),
            ("float64", Arc::new(Float64Array::from_iter_values((0..rows).map(|i| i as f64 / 3.0 - 17.5))), true, properties(WriterVersion::PARQUET_1_0, Compression::UNCOMPRESSED, PLAIN), true),
            // NULLs in some pages: not stored in place, decoded.
            ("int64 with NULLs", Arc::new(Int64Array::from_iter((0..rows).map(|i| (i % 301 != 5).then_some(i)))), true, properties(WriterVersion::PARQUET_1_0, Compression::UNCOMPRESSED, PLAIN), false),
            ("int64 with NULLs, v2", Arc::new(Int64Array::from_iter((0..rows).map(|i| (i % 301 != 5).then_some(i)))), true, properties(WriterVersion::PARQUET_2_0, Compression::UNCOMPRESSED, PLAIN), false),
            // Another encoding: decoded.
            ("int64, delta", int64(), true, properties(WriterVersion::PARQUET_2_0, Compression::UNCOMPRESSED, Some(Encoding::DELTA_BINARY_PACKED)), false),
            // Variable width: decoded.
            ("text", Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("v{i}")))), true, properties(WriterVersion::PARQUET_1_0, Compression::UNCOMPRESSED, PLAIN), false),
        ];
        for (seed, (name, column, nullable, properties, in_place)) in cases.into_iter().enumerate() {
            let file = file(column.clone(), nullable, properties);
            let chunks = chunks(&file).unwrap_or_else(|| panic!("{name}: chunks fetched"));
            assert!(chunks.chunks.len() > 3, "{name}: several row groups");
            for positions in position_sets(rows as u64, seed as u64) {
                let expected = take(&column, &UInt64Array::from(positions.clone()), None).unwrap();
                let read = chunks.read_in_place(&positions).unwrap();
                if !positions.is_empty() {
                    assert_eq!(read.is_some(), in_place, "{name}: read in place, {} positions (seed {seed})", positions.len());
                }
                if let Some(read) = read {
                    assert_eq!(read.as_ref(), expected.as_ref(), "{name}: in place, {} positions (seed {seed})", positions.len());
                }
                assert_eq!(chunks.decode_at(&positions).unwrap().as_ref(), expected.as_ref(), "{name}: decoded (seed {seed})");
                assert_eq!(chunks.values_at(&positions).unwrap().as_ref(), expected.as_ref(), "{name} (seed {seed})");
            }
        }
    }

    #[test]
    fn dictionary_encoded_chunks_are_not_fetched_apart() {
        let column = Arc::new(Int64Array::from_iter_values((0..1000).map(|i| i % 10))) as ArrayRef;
        let file = file(column, true, properties(WriterVersion::PARQUET_1_0, Compression::UNCOMPRESSED, None));
        assert!(chunks(&file).is_none());
    }

    #[test]
    fn a_position_past_the_rows_is_an_error() {
        let column = Arc::new(Int64Array::from_iter_values(0..100)) as ArrayRef;
        let file = file(column, true, properties(WriterVersion::PARQUET_1_0, Compression::UNCOMPRESSED, PLAIN));
        let error = chunks(&file).unwrap().values_at(&[5, 100]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Internal, "{error}");
    }

    fn block(file: Bytes) -> (String, String, LogBlock) {
        let block = crate::log::data::block_from(BlockType::ParquetData, Default::default(), file.to_vec());
        ("log".into(), "1".into(), block)
    }

    fn footer(file: &Bytes) -> ParquetMetaData {
        ParquetMetaDataReader::new().parse_and_finish(file).unwrap()
    }

    /// The bound stands in for the base rows' values exactly when the base file's greatest
    /// value is at most the log versions' least (ties included: the later version wins them),
    /// the blocks have no NULLs, and both store the field alike.
    #[test]
    fn base_values_are_bounded_by_statistics_only_when_no_base_row_can_win() {
        let plain = || properties(WriterVersion::PARQUET_2_0, Compression::UNCOMPRESSED, Some(Encoding::PLAIN));
        let longs = |values: Vec<Option<i64>>| file(Arc::new(Int64Array::from(values)), true, plain());
        // Base values 0..=999 (and a NULL, which orders before every value) over two row groups.
        let base = footer(&longs((0..1000).map(Some).chain([None]).collect()));
        let logs = |values: &[Vec<i64>]| -> Vec<(String, String, LogBlock)> {
            values.iter().map(|v| block(longs(v.iter().copied().map(Some).collect()))).collect()
        };
        let bound = |blocks: &[(String, String, LogBlock)]| StoredBound::least_in_blocks(blocks, "o");
        let at_most = |blocks: &[(String, String, LogBlock)]| bound(blocks).and_then(|b| b.base_at_most(&base, "o"));

        assert_eq!(bound(&logs(&[vec![1500, 999, 2000], vec![1200]])).map(|b| b.value), Some(999));
        assert!(matches!(at_most(&logs(&[vec![1500, 999, 2000], vec![1200]])), Some(BaseOrdering::AtMost(999))));
        // One version below the base file's greatest value: the base rows' own values decide.
        assert!(at_most(&logs(&[vec![1500], vec![998, 2000]])).is_none());
        // A NULL among the versions: a base row's value would beat it.
        assert!(bound(&[block(longs(vec![Some(2000), None]))]).is_none());
        // Stored otherwise (32-bit integers): not compared.
        let ints = file(Arc::new(Int32Array::from(vec![5000, 6000])), false, plain());
        assert!(at_most(&[block(ints)]).is_none());
        // A delete block's ordering values are in its records.
        let delete = crate::log::data::block_from(BlockType::Delete, Default::default(), Vec::new());
        assert!(bound(&[logs(&[vec![2000]]).remove(0), ("log".into(), "1".into(), delete)]).is_none());
        // Without statistics nothing is known.
        let bare = WriterProperties::builder().set_statistics_enabled(parquet::file::properties::EnabledStatistics::None).build();
        assert!(bound(&[block(file(Arc::new(Int64Array::from(vec![2000])), false, bare))]).is_none());
        // The bound reads as the values of the rows asked for.
        let values = BaseOrdering::AtMost(999).values_at(&[3, 7, 9]).unwrap();
        assert_eq!(values.as_ref(), &Int64Array::from(vec![999, 999, 999]) as &dyn Array);
    }
}
