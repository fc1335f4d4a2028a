//! Rows as bytes, to keep outside the lake until they are written to it: a writer that
//! buffers rows (PostgreSQL's write buffer, `write_mode 'buffered'`) stores each batch as one
//! chunk of Avro single-object frames ([`RowEncoder`]) naming the batch's own schema, kept
//! apart by its id, so a batch buffered before a schema change is written in the new schema by
//! name ([`crate::read::schema::align_batch`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use arrow_avro::reader::ReaderBuilder;
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, FingerprintStrategy, SchemaStore};
use arrow_avro::writer::format::AvroSoeFormat;
use arrow_avro::writer::{AvroStreamWriter, WriterBuilder};

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

/// `schema` as bytes: an Arrow IPC stream of no rows (how the write buffer keeps the schemas
/// of its chunks, [`RowEncoder::schema_bytes`]).
pub fn schema_to_bytes(schema: &SchemaRef) -> Result<Vec<u8>> {
    let failed = |e: arrow::error::ArrowError| Error::new(ErrorKind::Internal, "cannot encode a schema").with_source(e);
    let mut writer = StreamWriter::try_new(Vec::new(), schema).map_err(failed)?;
    writer.finish().map_err(failed)?;
    writer.into_inner().map_err(failed)
}

/// The schema of `bytes` ([`schema_to_bytes`]); bytes that are not such a stream are corrupt.
pub fn schema_from_bytes(bytes: &[u8]) -> Result<SchemaRef> {
    let corrupt = |e: arrow::error::ArrowError| Error::new(ErrorKind::Corrupt, "a buffered schema is damaged").with_source(e);
    Ok(StreamReader::try_new(std::io::Cursor::new(bytes), None).map_err(corrupt)?.schema())
}

/// `schema` without metadata (of the schema and its fields): what a chunk's schema is
/// identified by.
fn plain(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(schema.fields().iter().map(|f| f.as_ref().clone().with_metadata(Default::default())).collect::<Vec<_>>()))
}

/// The id of a chunk schema: the first 8 bytes of the SHA-256 of its bytes — stable across
/// processes and versions, and not one a role can make another table's schema have by choosing
/// its own table's names (as with a plain hash it could, to have that table's rows decoded in
/// its schema). The writer also checks the registered schema is its own.
fn schema_id(bytes: &[u8]) -> u64 {
    use sha2::Digest;
    u64::from_be_bytes(sha2::Sha256::digest(bytes)[..8].try_into().expect("8 bytes"))
}

/// The bytes an Avro stream writer writes, shared with its owner (the writer keeps its sink).
#[derive(Clone, Default)]
struct SharedBytes(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for SharedBytes {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Encodes batches of one schema as chunks: each row an Avro single-object frame (`0x00`, the
/// schema's 8-byte id, the Avro binary record). A one-row transaction of ten columns is about
/// 100 bytes, where an Arrow IPC stream of it (with its schema) was 1.4 KB — written to the WAL
/// at every COMMIT, and decoded one stream at a time by every flush and read of the buffer. The
/// schema is kept apart, by its id ([`Self::schema_bytes`]); a flush decodes a run of chunks as
/// one Avro stream into one batch ([`decode_chunks`]).
pub struct RowEncoder {
    schema: SchemaRef,
    id: u64,
    schema_bytes: Vec<u8>,
    writer: Mutex<(AvroStreamWriter<SharedBytes>, SharedBytes)>,
}

impl RowEncoder {
    /// An encoder of batches with the columns of `schema`.
    pub fn new(schema: &Schema) -> Result<RowEncoder> {
        let schema = plain(schema);
        let schema_bytes = schema_to_bytes(&schema)?;
        let id = schema_id(&schema_bytes);
        let sink = SharedBytes::default();
        let writer = WriterBuilder::new(schema.as_ref().clone())
            .with_fingerprint_strategy(FingerprintStrategy::Id64(id))
            .build::<_, AvroSoeFormat>(sink.clone())
            .map_err(|e| Error::new(ErrorKind::Unsupported, "these columns cannot be buffered").with_source(e))?;
        Ok(RowEncoder { schema, id, schema_bytes, writer: Mutex::new((writer, sink)) })
    }

    /// The id of the schema the chunks name.
    pub fn schema_id(&self) -> i64 {
        self.id as i64
    }

    /// The schema, as [`schema_from_bytes`] reads it back.
    pub fn schema_bytes(&self) -> &[u8] {
        &self.schema_bytes
    }

    /// Whether batches of `schema` are what this encoder encodes.
    pub fn encodes(&self, schema: &Schema) -> bool {
        self.schema.fields().len() == schema.fields().len()
            && self.schema.fields().iter().zip(schema.fields()).all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type() && a.is_nullable() == b.is_nullable())
    }

    /// `rows` (of this encoder's schema) as one chunk; no bytes for no rows.
    pub fn encode(&self, rows: &RecordBatch) -> Result<Vec<u8>> {
        let failed = |e: arrow::error::ArrowError| Error::new(ErrorKind::Internal, "cannot encode buffered rows").with_source(e);
        let rows = RecordBatch::try_new_with_options(self.schema.clone(), rows.columns().to_vec(), &RecordBatchOptions::new().with_row_count(Some(rows.num_rows())))
            .map_err(failed)?;
        let mut guard = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let (writer, sink) = &mut *guard;
        // Taken whatever happens: a failed write must not leave bytes for the next chunk.
        let written = writer.write(&rows);
        let bytes = std::mem::take(&mut *sink.0.lock().unwrap_or_else(|p| p.into_inner()));
        written.map_err(failed)?;
        Ok(bytes)
    }
}

/// The schema id a chunk's rows are in, `None` for a chunk of no rows.
pub fn chunk_schema_id(chunk: &[u8]) -> Result<Option<u64>> {
    match chunk {
        [] => Ok(None),
        [0, id @ ..] if id.len() >= 8 => Ok(Some(u64::from_be_bytes(id[..8].try_into().expect("8 bytes")))),
        _ => Err(Error::new(ErrorKind::Corrupt, "buffered rows are damaged: a chunk does not begin with a schema id")),
    }
}

/// One chunk of buffered rows: its change, how many rows it holds, and its bytes (from
/// [`RowEncoder::encode`]).
pub type Chunk<'a> = (Change, usize, &'a [u8]);

/// The rows of `chunks` in order, with each run of chunks of the same change and schema decoded
/// as one batch; `schemas` has the schema of every id the chunks name ([`chunk_schema_id`]).
/// Bytes that are not such chunks, or hold another number of rows, are corrupt.
pub fn decode_chunks(chunks: &[Chunk<'_>], schemas: &HashMap<u64, SchemaRef>) -> Result<Vec<(Change, RecordBatch)>> {
    let mut runs: Vec<(Change, u64, usize, Vec<&[u8]>)> = Vec::new();
    for &(change, rows, chunk) in chunks {
        let Some(id) = chunk_schema_id(chunk)? else {
            if rows > 0 {
                return Err(Error::new(ErrorKind::Corrupt, "buffered rows are damaged: a chunk of rows is empty"));
            }
            continue;
        };
        match runs.last_mut() {
            Some((c, i, count, run)) if *c == change && *i == id => {
                *count += rows;
                run.push(chunk);
            }
            _ => runs.push((change, id, rows, vec![chunk])),
        }
    }
    let mut out = Vec::with_capacity(runs.len());
    for (change, id, count, run) in runs {
        let schema = schemas
            .get(&id)
            .ok_or_else(|| Error::new(ErrorKind::Corrupt, format!("buffered rows name a schema that is not known ({id:016x})")))?;
        let rows = crate::error::corrupt_on_panic("buffered rows are damaged", || decode_run(schema, id, &run))?;
        if rows.num_rows() != count {
            return Err(Error::new(ErrorKind::Corrupt, format!("buffered rows are damaged: {} rows where {count} were written", rows.num_rows())));
        }
        out.push((change, rows));
    }
    Ok(out)
}

/// The rows of `run`, chunks of the schema `schema` (id `id`), as one batch of that schema.
fn decode_run(schema: &SchemaRef, id: u64, run: &[&[u8]]) -> Result<RecordBatch> {
    let corrupt = |e: arrow::error::ArrowError| Error::new(ErrorKind::Corrupt, "buffered rows are damaged").with_source(e);
    let avro = AvroSchema::try_from(schema.as_ref()).map_err(corrupt)?;
    let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id64);
    store.set(Fingerprint::Id64(id), avro).map_err(corrupt)?;
    let mut decoder = ReaderBuilder::new()
        .with_writer_schema_store(store)
        .with_active_fingerprint(Fingerprint::Id64(id))
        .with_batch_size(DECODED_BATCH_ROWS)
        .build_decoder()
        .map_err(corrupt)?;
    let mut batches = Vec::new();
    for chunk in run {
        let mut offset = 0;
        while offset < chunk.len() {
            let consumed = decoder.decode(&chunk[offset..]).map_err(corrupt)?;
            offset += consumed;
            if decoder.batch_is_full() || consumed == 0 {
                match decoder.flush().map_err(corrupt)? {
                    Some(batch) => batches.push(batch),
                    None if consumed == 0 => return Err(Error::new(ErrorKind::Corrupt, "buffered rows are damaged: a chunk is truncated")),
                    None => {}
                }
            }
        }
    }
    batches.extend(decoder.flush().map_err(corrupt)?);
    // Avro's types, read back as the columns were written (a time zone's name, for one).
    let batches = batches.iter().map(|b| crate::read::schema::align_batch(b, schema)).collect::<Result<Vec<_>>>()?;
    arrow::compute::concat_batches(schema, &batches).map_err(corrupt)
}

/// Rows per batch the Avro decoder fills before a run's batches are joined.
const DECODED_BATCH_ROWS: usize = 65_536;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use apache_avro::types::Value as Avro;
    use arrow::array::{Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    /// A table schema of every kind of Avro field a Hudi table has, each nullable.
    const WIDE: &str = r#"{"type":"record","name":"wide","fields":[
        {"name":"i","type":["null","int"]},
        {"name":"l","type":["null","long"]},
        {"name":"f","type":["null","float"]},
        {"name":"d","type":["null","double"]},
        {"name":"b","type":["null","boolean"]},
        {"name":"s","type":["null","string"]},
        {"name":"y","type":["null","bytes"]},
        {"name":"day","type":["null",{"type":"int","logicalType":"date"}]},
        {"name":"tm","type":["null",{"type":"long","logicalType":"timestamp-millis"}]},
        {"name":"tu","type":["null",{"type":"long","logicalType":"timestamp-micros"}]},
        {"name":"lt","type":["null",{"type":"long","logicalType":"local-timestamp-micros"}]},
        {"name":"dec","type":["null",{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}]},
        {"name":"fx","type":["null",{"type":"fixed","name":"four","size":4}]},
        {"name":"dfx","type":["null",{"type":"fixed","name":"wide_decimal","size":16,"logicalType":"decimal","precision":38,"scale":10}]},
        {"name":"list","type":["null",{"type":"array","items":["null","long"]}]},
        {"name":"map","type":["null",{"type":"map","values":["null","string"]}]},
        {"name":"rec","type":["null",{"type":"record","name":"inner","fields":[{"name":"a","type":["null","int"]},{"name":"z","type":["null","string"]}]}]},
        {"name":"req","type":"long"}
    ]}"#;

    /// Rows of [`WIDE`]: `n` records with values and nulls, written by `apache-avro` and read
    /// by `arrow-avro`, as the engine reads a table's Avro records.
    fn wide_rows(n: usize) -> RecordBatch {
        let schema = crate::avro::parse_schema(WIDE).unwrap();
        let some = |v: Avro| Avro::Union(1, Box::new(v));
        let mut framed = Vec::new();
        for r in 0..n as i64 {
            let null = || Avro::Union(0, Box::new(Avro::Null));
            let value = |v: Avro| if r % 3 == 2 { null() } else { some(v) };
            let record = Avro::Record(vec![
                ("i".into(), value(Avro::Int(r as i32 - 7))),
                ("l".into(), value(Avro::Long(r * 1_000_000_007))),
                ("f".into(), value(Avro::Float(r as f32 / 3.0))),
                ("d".into(), value(Avro::Double(-(r as f64) / 7.0))),
                ("b".into(), value(Avro::Boolean(r % 2 == 0))),
                ("s".into(), value(Avro::String(format!("row {r} ünïcode")))),
                ("y".into(), value(Avro::Bytes(vec![r as u8, 0, 255]))),
                ("day".into(), value(Avro::Date(20_000 + r as i32))),
                ("tm".into(), value(Avro::TimestampMillis(1_700_000_000_000 + r))),
                ("tu".into(), value(Avro::TimestampMicros(1_700_000_000_000_000 + r))),
                ("lt".into(), value(Avro::LocalTimestampMicros(-r))),
                ("dec".into(), value(Avro::Decimal(apache_avro::Decimal::from((r * 12345 - 99).to_be_bytes().to_vec())))),
                ("fx".into(), value(Avro::Fixed(4, vec![1, 2, 3, r as u8]))),
                ("dfx".into(), value(Avro::Decimal(apache_avro::Decimal::from(((r as i128) << 70).to_be_bytes().to_vec())))),
                ("list".into(), value(Avro::Array(vec![some(Avro::Long(r)), Avro::Union(0, Box::new(Avro::Null))]))),
                ("map".into(), value(Avro::Map([("k".to_owned(), some(Avro::String(r.to_string())))].into()))),
                ("rec".into(), value(Avro::Record(vec![("a".into(), some(Avro::Int(r as i32))), ("z".into(), Avro::Union(0, Box::new(Avro::Null)))]))),
                ("req".into(), Avro::Long(r)),
            ]);
            framed.push(0u8);
            framed.extend_from_slice(&1u32.to_be_bytes());
            framed.extend(apache_avro::to_avro_datum(&schema, record).unwrap());
        }
        let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
        store.set(Fingerprint::Id(1), AvroSchema::new(WIDE.to_owned())).unwrap();
        let mut decoder = ReaderBuilder::new().with_writer_schema_store(store).with_active_fingerprint(Fingerprint::Id(1)).build_decoder().unwrap();
        assert_eq!(decoder.decode(&framed).unwrap(), framed.len());
        let rows = decoder.flush().unwrap().unwrap_or_else(|| RecordBatch::new_empty(decoder.schema()));
        // Timestamps tagged "UTC", as a table's data columns are (write::transaction::encoder).
        let fields: Vec<Field> = rows
            .schema()
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Timestamp(unit, Some(_)) => f.as_ref().clone().with_data_type(DataType::Timestamp(*unit, Some("UTC".into()))),
                _ => f.as_ref().clone(),
            })
            .collect();
        let columns = rows.columns().iter().zip(&fields).map(|(c, f)| arrow::compute::cast(c, f.data_type()).unwrap()).collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    fn schemas_of(encoders: &[&RowEncoder]) -> HashMap<u64, SchemaRef> {
        encoders.iter().map(|e| (e.schema_id() as u64, schema_from_bytes(e.schema_bytes()).unwrap())).collect()
    }

    #[test]
    fn rows_of_every_kind_of_column_come_back_as_they_went_in() {
        let rows = wide_rows(7);
        let encoder = RowEncoder::new(&rows.schema()).unwrap();
        let schemas = schemas_of(&[&encoder]);
        // Chunks of one row each, and of several: one batch for the run, in order.
        let chunks: Vec<Vec<u8>> = (0..rows.num_rows()).map(|r| encoder.encode(&rows.slice(r, 1)).unwrap()).collect();
        let all: Vec<Chunk> = chunks.iter().map(|c| (Change::Upsert, 1, c.as_slice())).collect();
        let decoded = decode_chunks(&all, &schemas).unwrap();
        assert_eq!(decoded.len(), 1);
        assert_eq!(decoded[0].1, RecordBatch::try_new(plain(&rows.schema()), rows.columns().to_vec()).unwrap());
        let whole = encoder.encode(&rows).unwrap();
        assert_eq!(decode_chunks(&[(Change::Delete, 7, &whole)], &schemas).unwrap()[0].1.num_rows(), 7);
    }

    #[test]
    fn runs_split_where_the_change_or_the_schema_does() {
        let one = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("name", DataType::Utf8, true)]));
        let two = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let rows_one = RecordBatch::try_new(one.clone(), vec![Arc::new(Int64Array::from(vec![1, 2])), Arc::new(StringArray::from(vec![Some("a"), None]))]).unwrap();
        let rows_two = RecordBatch::try_new(two.clone(), vec![Arc::new(Int64Array::from(vec![3]))]).unwrap();
        let (first, second) = (RowEncoder::new(&one).unwrap(), RowEncoder::new(&two).unwrap());
        assert_ne!(first.schema_id(), second.schema_id());
        let chunks = [
            (Change::Upsert, 2, first.encode(&rows_one).unwrap()),
            (Change::Upsert, 0, first.encode(&RecordBatch::new_empty(one.clone())).unwrap()),
            (Change::Upsert, 2, first.encode(&rows_one).unwrap()),
            (Change::Delete, 1, first.encode(&rows_one.slice(0, 1)).unwrap()),
            (Change::Delete, 1, second.encode(&rows_two).unwrap()),
            (Change::Upsert, 1, second.encode(&rows_two).unwrap()),
        ];
        assert!(chunks[1].2.is_empty(), "no rows, no bytes");
        let chunks: Vec<Chunk> = chunks.iter().map(|(c, n, b)| (*c, *n, b.as_slice())).collect();
        let decoded = decode_chunks(&chunks, &schemas_of(&[&first, &second])).unwrap();
        let shape: Vec<(Change, usize, usize)> = decoded.iter().map(|(c, r)| (*c, r.num_rows(), r.num_columns())).collect();
        assert_eq!(shape, [(Change::Upsert, 4, 2), (Change::Delete, 1, 2), (Change::Delete, 1, 1), (Change::Upsert, 1, 1)]);
        assert_eq!(decoded[0].1.column(1).null_count(), 2);
        // A schema not given, and damaged bytes, are errors of damage, not panics.
        let unknown = decode_chunks(&chunks, &schemas_of(&[&first])).unwrap_err();
        assert_eq!(unknown.kind(), ErrorKind::Corrupt);
        let whole = first.encode(&rows_one).unwrap();
        for damaged in [&whole[..whole.len() - 1], &whole[..5], &[7u8, 1, 2][..], &whole[..9], &[][..]] {
            let error = decode_chunks(&[(Change::Upsert, 2, damaged)], &schemas_of(&[&first])).map(|_| ()).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Corrupt, "{damaged:?}");
        }
        let mut garbage = whole.clone();
        garbage[9..].iter_mut().for_each(|b| *b = 0xff);
        assert!(decode_chunks(&[(Change::Upsert, 2, &garbage)], &schemas_of(&[&first])).is_err());
    }

    /// A one-row transaction's chunk is what the write buffer writes to the WAL at every
    /// COMMIT of a small transaction: an Arrow IPC stream of it was 1.4 KB.
    #[test]
    fn a_one_row_chunk_is_about_the_size_of_its_values() {
        let rows = wide_rows(1);
        let encoder = RowEncoder::new(&rows.schema()).unwrap();
        let bytes = encoder.encode(&rows).unwrap();
        assert!(bytes.len() < 200, "{} bytes", bytes.len());
        // The schema's id is the same in another process: it is a hash of the schema's bytes.
        assert_eq!(RowEncoder::new(&rows.schema()).unwrap().schema_id(), encoder.schema_id());
        assert_eq!(schema_from_bytes(encoder.schema_bytes()).unwrap(), plain(&rows.schema()));
    }
}
