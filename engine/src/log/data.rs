//! Contents of data and delete blocks (hudi-format.md §4.4–4.6) decoded into Arrow batches and
//! delete records. Avro records go through `arrow-avro`, deletes through `apache-avro`.

use std::collections::HashSet;
use std::io::Cursor as IoCursor;
use std::sync::Arc;

use arrow::array::AsArray;
use arrow::record_batch::RecordBatch;
use arrow_avro::reader::ReaderBuilder;
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowPredicateFn, ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowFilter, RowSelection};
use parquet::file::reader::ChunkReader;
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::PageIndexPolicy;

use crate::error::{Error, ErrorKind, Result};
use crate::log::block::{BlockType, LogBlock};
use crate::ordering::OrderingValue;
use crate::read::chunk_bytes::ChunkBytes;
use crate::read::filter::RecordKeys;
use crate::read::schema::{META_FIELDS, RECORD_KEY_COLUMN};

/// Rows per Arrow batch decoded from one Avro block.
const AVRO_BATCH_ROWS: usize = 8192;

fn corrupt(what: impl Into<String>) -> Error {
    Error::new(ErrorKind::Corrupt, what)
}

/// Runs a decoder of another crate on a block's bytes. Log blocks carry no checksum, and those
/// decoders trust more of damaged bytes than they should (the `parquet` crate indexes past a
/// buffer on some damaged data pages).
fn catching_panics<T>(decode: impl FnOnce() -> Result<T>) -> Result<T> {
    crate::error::corrupt_on_panic("undecodable block", decode)
}

fn read_i32(bytes: &[u8], pos: &mut usize) -> Result<i32> {
    let slice = bytes.get(*pos..*pos + 4).ok_or_else(|| corrupt("block content is truncated"))?;
    *pos += 4;
    Ok(i32::from_be_bytes(slice.try_into().expect("4 bytes")))
}

/// The records of an AVRO_DATA block: `int version, int count, count × (int length, datum)`,
/// decoded with the block's own writer schema.
pub fn decode_avro_data(block: &LogBlock) -> Result<Vec<RecordBatch>> {
    debug_assert_eq!(block.block_type, BlockType::AvroData);
    let schema = block.schema().ok_or_else(|| corrupt("data block without a SCHEMA header"))?;
    let bytes = &block.content[..];
    let mut pos = 0;
    let _version = read_i32(bytes, &mut pos)?;
    let count = usize::try_from(read_i32(bytes, &mut pos)?).map_err(|_| corrupt("negative record count"))?;
    // Each record takes at least its four length bytes: a greater count is damage, and must
    // not size the buffer below (five bytes a record).
    if count > (bytes.len() - pos) / 4 {
        return Err(corrupt(format!("record count {count} is more than the block's {} bytes can hold", bytes.len())));
    }

    // arrow-avro decodes framed datums; frame each record with a fixed schema id.
    const SCHEMA_ID: u32 = 1;
    let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
    store
        .set(Fingerprint::Id(SCHEMA_ID), AvroSchema::new(schema.to_owned()))
        .map_err(|e| corrupt("unusable Avro schema in data block").with_source(e))?;
    let mut decoder = ReaderBuilder::new()
        .with_writer_schema_store(store)
        .with_active_fingerprint(Fingerprint::Id(SCHEMA_ID))
        .with_batch_size(AVRO_BATCH_ROWS)
        .build_decoder()
        .map_err(|e| corrupt("unusable Avro schema in data block").with_source(e))?;

    let mut batches = Vec::new();
    let mut framed = Vec::with_capacity(bytes.len() + count * 5);
    for _ in 0..count {
        let length = usize::try_from(read_i32(bytes, &mut pos)?).map_err(|_| corrupt("negative record length"))?;
        let datum = bytes.get(pos..pos + length).ok_or_else(|| corrupt("record runs past the block"))?;
        pos += length;
        framed.push(0);
        framed.extend_from_slice(&SCHEMA_ID.to_be_bytes());
        framed.extend_from_slice(datum);
    }
    let mut offset = 0;
    while offset < framed.len() {
        let consumed = decoder
            .decode(&framed[offset..])
            .map_err(|e| corrupt("undecodable Avro record").with_source(e))?;
        offset += consumed;
        if decoder.batch_is_full() || consumed == 0 {
            match decoder.flush().map_err(|e| corrupt("undecodable Avro record").with_source(e))? {
                Some(batch) => batches.push(batch),
                None if consumed == 0 => return Err(corrupt("Avro record is truncated")),
                None => {}
            }
        }
    }
    if let Some(batch) = decoder.flush().map_err(|e| corrupt("undecodable Avro record").with_source(e))? {
        batches.push(batch);
    }
    Ok(batches)
}

/// The records of a PARQUET_DATA block: one complete Parquet file; only the `columns` named
/// (all when `None`); with `keys`, only the records with one of those record keys: their
/// keys are decoded first, and the other columns of those records alone (only the pages that
/// hold them, where the block has an offset index).
pub fn decode_parquet_data(block: &LogBlock, columns: Option<&HashSet<String>>, keys: Option<&Arc<RecordKeys>>) -> Result<Vec<RecordBatch>> {
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(block.content.clone(), options);
    let builder = builder.map_err(|e| corrupt("invalid Parquet in data block").with_source(e))?;
    read_parquet_data(builder, columns, keys, None)
}

/// [`decode_parquet_data`] of a block whose footer (`metadata`) is known and of whose content
/// the column chunks of `columns` were fetched (`chunks`, at their offsets in the content).
pub fn decode_parquet_columns(metadata: ArrowReaderMetadata, chunks: ChunkBytes, columns: Option<&HashSet<String>>) -> Result<Vec<RecordBatch>> {
    catching_panics(|| read_parquet_data(ParquetRecordBatchReaderBuilder::new_with_metadata(chunks, metadata), columns, None, None))
}

/// [`decode_parquet_columns`] of the records at `records` (ascending row indices) only, and
/// of those the ones with one of the record `keys`.
pub fn decode_parquet_records(
    metadata: ArrowReaderMetadata,
    chunks: ChunkBytes,
    columns: Option<&HashSet<String>>,
    keys: &Arc<RecordKeys>,
    records: &[u32],
) -> Result<Vec<RecordBatch>> {
    let rows = usize::try_from(metadata.metadata().file_metadata().num_rows()).map_err(|_| corrupt("negative row count"))?;
    if records.last().is_some_and(|&last| last as usize >= rows) {
        return Err(corrupt(format!("a data block of {rows} records has no record {}", records[records.len() - 1])));
    }
    let selection = RowSelection::from_consecutive_ranges(records.iter().map(|&r| r as usize..r as usize + 1), rows);
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(chunks, metadata);
    catching_panics(|| read_parquet_data(builder, columns, Some(keys), Some(selection)))
}

/// The byte ranges in a data block's content of the column chunks that
/// [`decode_parquet_columns`] reads for `columns` (`None`: the whole content).
pub fn parquet_column_ranges(metadata: &ArrowReaderMetadata, columns: Option<&HashSet<String>>, content_length: u64) -> Vec<std::ops::Range<u64>> {
    let Some(columns) = columns else { return vec![0..content_length] };
    let parquet = metadata.metadata();
    let schema = parquet.file_metadata().schema_descr();
    let leaves: Vec<usize> = (0..schema.num_columns()).filter(|&leaf| columns.contains(schema.get_column_root(leaf).name())).collect();
    let mut ranges = Vec::new();
    for group in parquet.row_groups() {
        for &leaf in &leaves {
            let (start, length) = group.column(leaf).byte_range();
            ranges.push(start..start + length);
        }
    }
    ranges
}

fn read_parquet_data<T: ChunkReader + 'static>(
    mut builder: ParquetRecordBatchReaderBuilder<T>,
    columns: Option<&HashSet<String>>,
    keys: Option<&Arc<RecordKeys>>,
    selection: Option<RowSelection>,
) -> Result<Vec<RecordBatch>> {
    if let Some(selection) = selection {
        builder = builder.with_row_selection(selection);
    }
    let key_column = builder.schema().index_of(META_FIELDS[RECORD_KEY_COLUMN]).ok();
    if let (Some(keys), Some(key_column)) = (keys, key_column) {
        let keys = keys.clone();
        let mask = ProjectionMask::roots(builder.parquet_schema(), [key_column]);
        let predicate = ArrowPredicateFn::new(mask, move |batch: RecordBatch| {
            let record_keys = batch.column(0).as_string_opt::<i32>().ok_or_else(|| {
                arrow::error::ArrowError::InvalidArgumentError("record keys are not strings".into())
            })?;
            Ok(keys.mask(record_keys))
        });
        builder = builder.with_row_filter(RowFilter::new(vec![Box::new(predicate)]));
    }
    if let Some(columns) = columns {
        let roots = builder.schema().fields().iter().enumerate().filter(|(_, f)| columns.contains(f.name())).map(|(i, _)| i);
        let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
        builder = builder.with_projection(mask);
    }
    let reader = builder.build().map_err(|e| corrupt("invalid Parquet in data block").with_source(e))?;
    reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| corrupt("invalid Parquet in data block").with_source(e))
}

/// One deleted key.
#[derive(Debug, Clone, PartialEq)]
pub struct DeleteRecord {
    pub record_key: String,
    pub partition_path: Option<String>,
    pub ordering: OrderingValue,
}

/// Avro schema of DELETE block content (`HoodieDeleteRecordList`), with Java's wrapper-typed
/// ordering values; branch order matters.
const DELETE_SCHEMA: &str = r#"{"type":"record","name":"HoodieDeleteRecordList","namespace":"org.apache.hudi.avro.model",
"fields":[{"name":"deleteRecordList","type":{"type":"array","items":{"type":"record","name":"HoodieDeleteRecord",
"fields":[{"name":"recordKey","type":["null","string"],"default":null},
{"name":"partitionPath","type":["null","string"],"default":null},
{"name":"orderingVal","type":["null",
{"type":"record","name":"BooleanWrapper","fields":[{"name":"value","type":"boolean"}]},
{"type":"record","name":"IntWrapper","fields":[{"name":"value","type":"int"}]},
{"type":"record","name":"LongWrapper","fields":[{"name":"value","type":"long"}]},
{"type":"record","name":"FloatWrapper","fields":[{"name":"value","type":"float"}]},
{"type":"record","name":"DoubleWrapper","fields":[{"name":"value","type":"double"}]},
{"type":"record","name":"BytesWrapper","fields":[{"name":"value","type":"bytes"}]},
{"type":"record","name":"StringWrapper","fields":[{"name":"value","type":"string"}]},
{"type":"record","name":"DateWrapper","fields":[{"name":"value","type":"int"}]},
{"type":"record","name":"DecimalWrapper","fields":[{"name":"value","type":"bytes"}]},
{"type":"record","name":"TimeMicrosWrapper","fields":[{"name":"value","type":"long"}]},
{"type":"record","name":"TimestampMicrosWrapper","fields":[{"name":"value","type":"long"}]}],"default":null}]}}}]}"#;

/// The `DecimalWrapper` scale (decimal(30,15)).
const DELETE_DECIMAL_SCALE: i8 = 15;

fn delete_schema() -> &'static apache_avro::Schema {
    static SCHEMA: std::sync::OnceLock<apache_avro::Schema> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| crate::avro::parse_schema(DELETE_SCHEMA).expect("valid built-in schema"))
}

fn ordering_from_wrapper(value: apache_avro::types::Value) -> OrderingValue {
    use apache_avro::types::Value as Avro;
    let (branch, inner) = match value {
        Avro::Union(branch, inner) => (branch, *inner),
        _ => return OrderingValue::Null,
    };
    let field = match inner {
        Avro::Record(mut fields) if !fields.is_empty() => fields.remove(0).1,
        _ => return OrderingValue::Null,
    };
    match (branch, field) {
        (1, Avro::Boolean(b)) => OrderingValue::Bool(b),
        (2 | 8, Avro::Int(i)) => OrderingValue::Int(i64::from(i)),
        (3 | 10 | 11, Avro::Long(l)) => OrderingValue::Int(l),
        (4, Avro::Float(f)) => OrderingValue::Float(f64::from(f)),
        (5, Avro::Double(d)) => OrderingValue::Float(d),
        (6, Avro::Bytes(b)) => OrderingValue::Bytes(b),
        (7, Avro::String(s)) => OrderingValue::String(s),
        (9, Avro::Bytes(b)) => match crate::avro::unscaled_decimal(&b) {
            Some(unscaled) => OrderingValue::Decimal(unscaled, DELETE_DECIMAL_SCALE),
            None => OrderingValue::Null,
        },
        _ => OrderingValue::Null,
    }
}

/// The keys of a DELETE block: `int version, int length, HoodieDeleteRecordList datum`.
pub fn decode_deletes(block: &LogBlock) -> Result<Vec<DeleteRecord>> {
    let bytes = &block.content[..];
    let mut pos = 0;
    let version = read_i32(bytes, &mut pos)?;
    if version < 3 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("delete block content version {version} (Java-serialised keys) is not supported"),
        ));
    }
    let length = usize::try_from(read_i32(bytes, &mut pos)?).map_err(|_| corrupt("negative length"))?;
    let payload = bytes.get(pos..pos + length).ok_or_else(|| corrupt("delete payload runs past the block"))?;
    let value = apache_avro::from_avro_datum(delete_schema(), &mut IoCursor::new(payload), None)
        .map_err(|e| corrupt("undecodable delete block").with_source(e))?;
    let apache_avro::types::Value::Record(fields) = value else {
        return Err(corrupt("delete block is not a record"));
    };
    let mut deletes = Vec::new();
    for (_, list) in fields {
        let apache_avro::types::Value::Array(items) = list else { continue };
        for item in items {
            let apache_avro::types::Value::Record(fields) = item else { continue };
            let mut record_key = None;
            let mut partition_path = None;
            let mut ordering = OrderingValue::Null;
            for (name, value) in fields {
                let text = |v: apache_avro::types::Value| match v {
                    apache_avro::types::Value::Union(_, inner) => match *inner {
                        apache_avro::types::Value::String(s) => Some(s),
                        _ => None,
                    },
                    _ => None,
                };
                match name.as_str() {
                    "recordKey" => record_key = text(value),
                    "partitionPath" => partition_path = text(value),
                    "orderingVal" => ordering = ordering_from_wrapper(value),
                    _ => {}
                }
            }
            let record_key = record_key.ok_or_else(|| corrupt("delete record without a record key"))?;
            deletes.push(DeleteRecord { record_key, partition_path, ordering });
        }
    }
    Ok(deletes)
}

/// Encodes delete records as DELETE block content (version 3), the inverse of
/// [`decode_deletes`] for the wrapper kinds a writer emits.
pub fn encode_deletes(records: &[DeleteRecord]) -> Result<Vec<u8>> {
    use apache_avro::types::Value as Avro;
    let wrapper = |ordering: &OrderingValue| -> Avro {
        let (branch, value) = match ordering {
            OrderingValue::Null => return Avro::Union(0, Box::new(Avro::Null)),
            OrderingValue::Bool(b) => (1, Avro::Boolean(*b)),
            OrderingValue::Int(i) => match i32::try_from(*i) {
                Ok(small) => (2, Avro::Int(small)),
                Err(_) => (3, Avro::Long(*i)),
            },
            OrderingValue::Float(f) => (5, Avro::Double(*f)),
            OrderingValue::Bytes(b) => (6, Avro::Bytes(b.clone())),
            OrderingValue::String(s) => (7, Avro::String(s.clone())),
            OrderingValue::Decimal(v, s) => {
                let rescaled = v.saturating_mul(10i128.pow((DELETE_DECIMAL_SCALE - s).max(0) as u32));
                (9, Avro::Bytes(rescaled.to_be_bytes().to_vec()))
            }
        };
        Avro::Union(branch, Box::new(Avro::Record(vec![("value".to_owned(), value)])))
    };
    let items = records
        .iter()
        .map(|r| {
            Avro::Record(vec![
                ("recordKey".to_owned(), Avro::Union(1, Box::new(Avro::String(r.record_key.clone())))),
                (
                    "partitionPath".to_owned(),
                    match &r.partition_path {
                        Some(p) => Avro::Union(1, Box::new(Avro::String(p.clone()))),
                        None => Avro::Union(0, Box::new(Avro::Null)),
                    },
                ),
                ("orderingVal".to_owned(), wrapper(&r.ordering)),
            ])
        })
        .collect();
    let datum = apache_avro::to_avro_datum(
        delete_schema(),
        Avro::Record(vec![("deleteRecordList".to_owned(), Avro::Array(items))]),
    )
    .map_err(|e| Error::new(ErrorKind::Internal, "cannot encode delete records").with_source(e))?;
    let mut out = Vec::with_capacity(8 + datum.len());
    out.extend_from_slice(&3i32.to_be_bytes());
    out.extend_from_slice(&(datum.len() as i32).to_be_bytes());
    out.extend_from_slice(&datum);
    Ok(out)
}

/// Decoded content of one block.
#[derive(Debug)]
pub enum BlockContent {
    Data(Vec<RecordBatch>),
    Deletes(Vec<DeleteRecord>),
}

/// Decodes a data or delete block; other block types have no records. Parquet data blocks
/// decode only the `columns` named (all when `None`), and with `keys` only the records of
/// those record keys (others may come back too: Avro blocks decode every field of every
/// record, and so do deletes).
pub fn decode_block(block: &LogBlock, columns: Option<&HashSet<String>>, keys: Option<&Arc<RecordKeys>>) -> Result<Option<BlockContent>> {
    Ok(match block.block_type {
        BlockType::AvroData => Some(BlockContent::Data(catching_panics(|| decode_avro_data(block))?)),
        BlockType::ParquetData => Some(BlockContent::Data(catching_panics(|| decode_parquet_data(block, columns, keys))?)),
        BlockType::Delete => Some(BlockContent::Deletes(catching_panics(|| decode_deletes(block))?)),
        BlockType::HFileData => {
            return Err(Error::new(ErrorKind::Unsupported, "HFile data blocks (metadata table) are not supported"))
        }
        BlockType::Command | BlockType::Corrupt | BlockType::CdcData => None,
    })
}

/// Convenience for tests and writers: a block with content built from `bytes`.
pub fn block_from(block_type: BlockType, header: std::collections::BTreeMap<i32, String>, bytes: Vec<u8>) -> LogBlock {
    LogBlock { block_type, header, content: Bytes::from(bytes), offset: 0, content_offset: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_delete_bytes_decode_to_an_int_wrapper_zero() {
        // hudi-format.md §4.6: array of 1, key, partition, IntWrapper(0), end of array.
        let key = "334e26e9-8355-45cc-97c6-c31daf0df330";
        let mut datum = vec![0x02, 0x02, (key.len() * 2) as u8];
        datum.extend_from_slice(key.as_bytes());
        datum.extend_from_slice(&[0x02, 0x18]);
        datum.extend_from_slice(b"city=chennai");
        datum.extend_from_slice(&[0x04, 0x00, 0x00]);
        let mut content = 3i32.to_be_bytes().to_vec();
        content.extend_from_slice(&(datum.len() as i32).to_be_bytes());
        content.extend_from_slice(&datum);
        let block = block_from(BlockType::Delete, Default::default(), content);
        let deletes = decode_deletes(&block).unwrap();
        assert_eq!(
            deletes,
            [DeleteRecord {
                record_key: key.into(),
                partition_path: Some("city=chennai".into()),
                ordering: OrderingValue::Int(0)
            }]
        );
        assert!(deletes[0].ordering.is_default());
    }

    #[test]
    fn deletes_round_trip_with_each_wrapper() {
        let records: Vec<DeleteRecord> = [
            OrderingValue::Null,
            OrderingValue::Int(7),
            OrderingValue::Int(1 << 40),
            OrderingValue::Float(1.5),
            OrderingValue::String("z".into()),
            OrderingValue::Decimal(-12345, 2),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, ordering)| DeleteRecord { record_key: format!("k{i}"), partition_path: None, ordering })
        .collect();
        let block = block_from(BlockType::Delete, Default::default(), encode_deletes(&records).unwrap());
        let decoded = decode_deletes(&block).unwrap();
        assert_eq!(decoded.len(), records.len());
        for (d, r) in decoded.iter().zip(&records) {
            assert_eq!(d.ordering.compare(&r.ordering), Some(std::cmp::Ordering::Equal), "{d:?} vs {r:?}");
        }
    }

    #[test]
    fn avro_block_decodes_to_arrow() {
        let schema_json = r#"{"type":"record","name":"r","fields":[
            {"name":"_hoodie_record_key","type":["null","string"]},{"name":"v","type":["long","null"]}]}"#;
        let schema = crate::avro::parse_schema(schema_json).unwrap();
        let mut content = 3i32.to_be_bytes().to_vec();
        content.extend_from_slice(&2i32.to_be_bytes());
        for (k, v) in [("a", 1i64), ("b", 2)] {
            let mut record = apache_avro::types::Record::new(&schema).unwrap();
            record.put("_hoodie_record_key", apache_avro::types::Value::Union(1, Box::new(k.into())));
            record.put("v", apache_avro::types::Value::Union(0, Box::new(v.into())));
            let datum = apache_avro::to_avro_datum(&schema, record).unwrap();
            content.extend_from_slice(&(datum.len() as i32).to_be_bytes());
            content.extend_from_slice(&datum);
        }
        let header = [(crate::log::block::header::SCHEMA, schema_json.to_owned())].into();
        let batches = decode_avro_data(&block_from(BlockType::AvroData, header, content)).unwrap();
        let total: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(total, 2);
        let v = batches[0].column_by_name("v").unwrap();
        assert_eq!(OrderingValue::from_array(v.as_ref(), 1), OrderingValue::Int(2));
    }

    /// The content of an AVRO_DATA block of `count` records of which only the framing is there.
    fn avro_content(count: i32) -> Vec<u8> {
        let mut content = 3i32.to_be_bytes().to_vec();
        content.extend_from_slice(&count.to_be_bytes());
        content
    }

    /// A record count the block cannot hold (each record takes at least its four length
    /// bytes) is refused before anything is sized by it: the buffer for the records was
    /// reserved as five bytes a record, 10 GiB for a count of 2^31 - 1.
    #[test]
    fn an_avro_record_count_past_the_block_is_corrupt() {
        let schema_json = r#"{"type":"record","name":"r","fields":[{"name":"v","type":"long"}]}"#;
        let header: std::collections::BTreeMap<i32, String> = [(crate::log::block::header::SCHEMA, schema_json.to_owned())].into();
        for count in [i32::MAX, 1 << 20, 1] {
            let err = decode_avro_data(&block_from(BlockType::AvroData, header.clone(), avro_content(count))).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupt);
            assert!(err.to_string().contains("record count"), "{count}: {err}");
        }
        assert!(decode_avro_data(&block_from(BlockType::AvroData, header, avro_content(0))).unwrap().is_empty());
    }

    /// A log file of an Avro data block, a delete block and a Parquet data block, truncated at
    /// every length and with bytes changed all over: reading and decoding its blocks returns
    /// blocks or Corrupt (Unsupported for a changed block type or version), and never panics
    /// (a changed byte in a Parquet data page once panicked the `parquet` crate).
    #[test]
    fn damaged_log_files_do_not_panic() {
        use crate::log::block::{encode_block, header, read_blocks};
        let schema_json = r#"{"type":"record","name":"r","fields":[
            {"name":"_hoodie_record_key","type":["null","string"]},{"name":"v","type":["long","null"]}]}"#;
        let schema = crate::avro::parse_schema(schema_json).unwrap();
        let mut avro = avro_content(2);
        for (k, v) in [("a", 1i64), ("b", 2)] {
            let mut record = apache_avro::types::Record::new(&schema).unwrap();
            record.put("_hoodie_record_key", apache_avro::types::Value::Union(1, Box::new(k.into())));
            record.put("v", apache_avro::types::Value::Union(0, Box::new(v.into())));
            let datum = apache_avro::to_avro_datum(&schema, record).unwrap();
            avro.extend_from_slice(&(datum.len() as i32).to_be_bytes());
            avro.extend_from_slice(&datum);
        }
        let block_header: std::collections::BTreeMap<i32, String> =
            [(header::INSTANT_TIME, "20250101000000000".to_owned()), (header::SCHEMA, schema_json.to_owned())].into();
        let deletes = encode_deletes(&[DeleteRecord { record_key: "a".into(), partition_path: None, ordering: OrderingValue::Int(1) }]).unwrap();
        let rows = RecordBatch::try_new(
            Arc::new(arrow::datatypes::Schema::new(vec![
                arrow::datatypes::Field::new("_hoodie_record_key", arrow::datatypes::DataType::Utf8, true),
                arrow::datatypes::Field::new("v", arrow::datatypes::DataType::Int64, true),
            ])),
            vec![Arc::new(arrow::array::StringArray::from(vec!["c"])), Arc::new(arrow::array::Int64Array::from(vec![3]))],
        )
        .unwrap();
        let parquet = crate::write::parquet_bytes(&rows, crate::write::ParquetFile::LogBlock(&[])).unwrap();
        let mut file = encode_block(BlockType::AvroData, &block_header, &avro);
        file.extend(encode_block(BlockType::Delete, &block_header, &deletes));
        file.extend(encode_block(BlockType::ParquetData, &block_header, &parquet));

        let mut damaged: Vec<Vec<u8>> = (0..file.len()).map(|n| file[..n].to_vec()).collect();
        for i in 0..file.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut copy = file.clone();
                copy[i] ^= flip;
                damaged.push(copy);
            }
        }
        for (i, bytes) in damaged.into_iter().enumerate() {
            let read = std::panic::catch_unwind(|| {
                for block in read_blocks(&Bytes::from(bytes)) {
                    if let Err(e) = decode_block(&block, None, None) {
                        assert!(matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::Unsupported), "damaged log file {i}: {e}");
                    }
                }
            });
            assert!(read.is_ok(), "damaged log file {i} panicked");
        }
    }
}
