//! One write transaction (one deltacommit) under non-blocking concurrency control (Hudi RFC-66,
//! hudi-format.md §11): requested and inflight instants at the start, log files of the bucket
//! file groups named with this writer's instant and write token while it runs, and the
//! completed `<instant>_<completion>.deltacommit`, created atomically under the table lock, at
//! commit. Writers never touch each other's files, so they never conflict.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::log::block::{encode_block, header, BlockType};
use crate::log::data::encode_deletes;
use crate::log::DeleteRecord;
use crate::ordering::OrderingValue;
use crate::read::schema::table_schema;
use crate::storage::Storage;
use crate::table::bucket::{bucket_of_key, file_id_of_bucket};
use crate::table::TableConfig;
use crate::write::commit::{CommitMetadata, PreparedCommit, WriteStat};
use crate::write::schema::with_meta_fields;
use crate::write::time::{LockOptions, TableLock};

/// Who writes: parts of the write token (`<a>-<b>-<c>`, digits as Java expects), unique per
/// writer process across servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterId {
    /// Identifies the server (e.g. derived from PostgreSQL's system identifier).
    pub node: u64,
    /// Identifies the process on that server (e.g. the backend pid).
    pub process: u32,
}

impl WriterId {
    /// A write token for this writer's `sequence`-th file or transaction.
    pub(crate) fn token(&self, sequence: u64) -> String {
        format!("{}-{}-{}", self.node, self.process, sequence)
    }

    /// Who holds the table lock, in the lock object.
    pub fn owner(&self) -> String {
        format!("{}:{}", self.node, self.process)
    }
}

/// Log files written to one file group by this transaction.
#[derive(Debug, Default)]
struct GroupWrites {
    files: Vec<(String, u64)>,
    inserts_or_updates: i64,
    deletes: i64,
    bytes: i64,
}

/// A key to delete, with its partition and ordering value.
pub type KeyToDelete = (String, String, OrderingValue);

/// A file slice's base file, which record positions refer to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BaseFileRef {
    pub partition: String,
    pub file_id: String,
    /// The instant that wrote the base file.
    pub instant: String,
}

/// Where an updated or deleted row was read: its row in a base file (what a snapshot read
/// returns in [`crate::read::ROW_POSITION_COLUMN`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseRow {
    pub base: Arc<BaseFileRef>,
    pub position: u64,
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

/// An open write transaction.
pub struct Transaction {
    storage: Storage,
    config: TableConfig,
    writer: WriterId,
    lock_options: LockOptions,
    /// Data columns, as the table stores them.
    data_schema: SchemaRef,
    /// Meta fields and data columns: the rows of log blocks.
    record_schema: SchemaRef,
    avro_schema: String,
    avro_with_meta: String,
    buckets: u32,
    instant: String,
    /// This transaction's write token: unique per writer process and transaction.
    token: String,
    sequence: u64,
    groups: BTreeMap<(String, String), GroupWrites>,
    new_partitions: Vec<String>,
    /// When this transaction last refreshed its heartbeat itself.
    last_beat: std::time::Instant,
}

/// The least time between two heartbeats a transaction sends as it writes: far below any
/// expiry, and a statement writing many log files does not double its requests.
const BEAT_GAP: std::time::Duration = std::time::Duration::from_secs(1);

fn internal(what: &str) -> impl FnOnce(arrow::error::ArrowError) -> Error + '_ {
    move |e| Error::new(ErrorKind::Internal, what.to_owned()).with_source(e)
}

impl Transaction {
    /// Starts a deltacommit: takes an instant under the table lock and writes the requested
    /// and inflight timeline files.
    pub async fn begin(storage: Storage, config: TableConfig, writer: WriterId, lock_options: LockOptions) -> Result<Transaction> {
        let avro_schema = config.create_schema.clone().ok_or_else(|| {
            Error::new(ErrorKind::Corrupt, "the table has no create schema to write with")
        })?;
        let data_schema = crate::read::schema::arrow_schema_of_avro(&avro_schema)?;
        // Timestamps are tagged "UTC", as Hudi's own Avro-to-Arrow conversion names them.
        let data_schema = Arc::new(Schema::new(
            data_schema
                .fields()
                .iter()
                .map(|f| {
                    let field = f.as_ref().clone().with_metadata(Default::default());
                    match f.data_type() {
                        DataType::Timestamp(unit, Some(_)) => field.with_data_type(DataType::Timestamp(*unit, Some("UTC".into()))),
                        _ => field,
                    }
                })
                .collect::<Vec<_>>(),
        ));
        let record_schema = table_schema(&data_schema, true);
        let buckets = config
            .properties
            .get("hoodie.bucket.index.num.buckets")
            .and_then(|b| b.trim().parse().ok())
            .ok_or_else(|| Error::new(ErrorKind::Unsupported, "only tables with the simple bucket index can be written"))?;
        let instant = TableLock::hold(&storage, &writer.owner(), &lock_options, async |lock| lock.next_time(&lock_options).await).await?;
        let dir = &config.timeline_dir;
        storage.put_if_absent(&format!("{dir}/{instant}.deltacommit.requested"), Bytes::new()).await?;
        let planned = CommitMetadata { operation_type: "UPSERT".into(), ..Default::default() };
        storage.put(&format!("{dir}/{instant}.deltacommit.inflight"), Bytes::from(planned.to_avro()?)).await?;
        crate::write::heartbeat::beat(&storage, &instant).await?;
        let token = writer.token(next_transaction_number());
        Ok(Transaction {
            storage,
            avro_with_meta: with_meta_fields(&avro_schema)?,
            avro_schema,
            config,
            writer,
            lock_options,
            data_schema,
            record_schema,
            buckets,
            token,
            instant,
            sequence: 0,
            last_beat: std::time::Instant::now(),
            groups: BTreeMap::new(),
            new_partitions: Vec::new(),
        })
    }

    pub fn instant(&self) -> &str {
        &self.instant
    }

    /// Where the table being written lives.
    /// The data files this transaction has written so far, as `(path relative to the table,
    /// size)` pairs.
    pub fn written_files(&self) -> Vec<(String, u64)> {
        let files = self.groups.iter().flat_map(|((partition, _), group)| {
            group.files.iter().map(move |(name, size)| (crate::table::files::path_in_partition(partition, name), *size))
        });
        files.collect()
    }

    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The configuration of the table being written.
    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    /// The data columns rows must have, in order.
    pub fn data_schema(&self) -> &SchemaRef {
        &self.data_schema
    }

    /// The record key of each row: the value of a single key field, or `f1:v1,f2:v2` for
    /// composite keys. A NULL key is an error naming the row.
    fn record_keys(&self, batch: &RecordBatch) -> Result<StringArray> {
        let fields = &self.config.record_key_fields;
        let columns = text_columns(batch, fields, "key")?;
        if columns.iter().any(|c| c.null_count() > 0) {
            for row in 0..batch.num_rows() {
                if let Some((field, _)) = fields.iter().zip(&columns).find(|(_, c)| c.is_null(row)) {
                    return Err(Error::new(
                        ErrorKind::InvalidArgument,
                        format!("row {} has a NULL value in key column {field}", row + 1),
                    ));
                }
            }
        }
        if let [single] = columns.as_slice() {
            return Ok(single.as_string::<i32>().clone());
        }
        use std::fmt::Write;
        let mut keys = arrow::array::StringBuilder::with_capacity(batch.num_rows(), batch.num_rows() * 16 * fields.len());
        for row in 0..batch.num_rows() {
            for (i, (field, column)) in fields.iter().zip(&columns).enumerate() {
                let value = column.as_string::<i32>().value(row);
                let value = if value.is_empty() { "__empty__" } else { value };
                let _ = write!(keys, "{}{field}:{value}", if i > 0 { "," } else { "" });
            }
            keys.append_value("");
        }
        Ok(keys.finish())
    }

    /// The hive-style partition path of each row.
    fn partition_paths(&self, batch: &RecordBatch) -> Result<Vec<String>> {
        let fields = &self.config.partition_fields;
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

    /// Log files of one file group within a transaction are numbered 1, 2, ...: readers apply
    /// them in that order.
    fn next_log_name(&mut self, partition: &str, file_id: &str) -> String {
        self.sequence += 1;
        let version = self.groups.get(&(partition.to_owned(), file_id.to_owned())).map_or(0, |g| g.files.len()) + 1;
        format!(".{file_id}_{}.log.{version}_{}", self.instant, self.token)
    }

    async fn write_log(&mut self, partition: &str, file_id: &str, block: Vec<u8>, upserts: i64, deletes: i64) -> Result<()> {
        let name = self.next_log_name(partition, file_id);
        let path = crate::table::files::path_in_partition(partition, &name);
        let size = block.len() as u64;
        self.storage.put(&path, Bytes::from(block)).await?;
        if self.last_beat.elapsed() >= BEAT_GAP {
            crate::write::heartbeat::beat(&self.storage, &self.instant).await?;
            self.last_beat = std::time::Instant::now();
        }
        if !self.groups.keys().any(|(p, _)| p == partition) && !self.new_partitions.iter().any(|p| p == partition) {
            self.new_partitions.push(partition.to_owned());
        }
        let group = self.groups.entry((partition.to_owned(), file_id.to_owned())).or_default();
        group.files.push((name, size));
        group.inserts_or_updates += upserts;
        group.deletes += deletes;
        group.bytes += size as i64;
        Ok(())
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

    /// Upserts `rows` (the data columns of [`Self::data_schema`], by name): one Parquet data
    /// block per touched file group, in a new log file.
    pub async fn upsert(&mut self, rows: &RecordBatch) -> Result<()> {
        self.upsert_with_positions(rows, &[]).await
    }

    /// [`Self::upsert`] of rows read from the table (an UPDATE), with where each row was read
    /// (`positions[i]` for row `i`; missing or `None` when not from a base file). A block
    /// whose rows were all read from its file group's base file carries their positions, and
    /// its records are in position order, so that readers match them to the base file's rows
    /// without comparing keys.
    pub async fn upsert_with_positions(&mut self, rows: &RecordBatch, positions: &[Option<BaseRow>]) -> Result<()> {
        let position_of = |row: u32| positions.get(row as usize).and_then(Option::as_ref);
        let data = crate::read::schema::align_batch(rows, &self.data_schema)
            .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.detail()))?;
        let keys = self.record_keys(&data)?;
        let partitions = self.partition_paths(&data)?;
        // Rows of each (partition, bucket), in input order, without a string copy per row.
        let mut groups: BTreeMap<&str, Vec<Vec<u32>>> = BTreeMap::new();
        let buckets = self.buckets as usize;
        for (row, partition) in partitions.iter().enumerate() {
            let bucket = bucket_of_key(keys.value(row), self.buckets) as usize;
            groups.entry(partition.as_str()).or_insert_with(|| vec![Vec::new(); buckets])[bucket].push(row as u32);
        }
        let groups: Vec<((String, u32), Vec<u32>)> = groups
            .into_iter()
            .flat_map(|(partition, by_bucket)| {
                by_bucket
                    .into_iter()
                    .enumerate()
                    .filter(|(_, rows)| !rows.is_empty())
                    .map(move |(bucket, rows)| ((partition.to_owned(), bucket as u32), rows))
            })
            .collect();
        for ((partition, bucket), rows) in groups {
            let file_id = file_id_of_bucket(bucket);
            let mut rows: Vec<(u32, Option<&BaseRow>)> = rows.into_iter().map(|r| (r, position_of(r))).collect();
            let block_header = self.positioned_block_header(&partition, &file_id, &mut rows, |(_, at)| *at);
            let rows: Vec<u32> = rows.into_iter().map(|(row, _)| row).collect();
            let indices = UInt32Array::from_iter_values(rows.iter().copied());
            let part = take_record_batch(&data, &indices).map_err(internal("cannot split rows by bucket"))?;
            let n = rows.len();
            let seq_base = self.sequence;
            let meta: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(vec![self.instant.as_str(); n])),
                Arc::new(sequence_numbers(&self.instant, bucket, seq_base * 1_000_000, n)),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|&r| keys.value(r as usize)))),
                Arc::new(StringArray::from(vec![partition.as_str(); n])),
                Arc::new(StringArray::from(vec![file_id.as_str(); n])),
            ];
            let columns: Vec<ArrayRef> = meta.into_iter().chain(part.columns().iter().cloned()).collect();
            let records = RecordBatch::try_new(self.record_schema.clone(), columns).map_err(internal("cannot assemble records"))?;
            let parquet = crate::write::parquet_bytes(&records, crate::write::ParquetFile::LogBlock)?;
            let block = encode_block(BlockType::ParquetData, &block_header, &parquet);
            self.write_log(&partition, &file_id, block, n as i64, 0).await?;
        }
        Ok(())
    }

    /// Deletes keys: one delete block per touched file group, in a new log file.
    pub async fn delete(&mut self, keys: Vec<KeyToDelete>) -> Result<()> {
        self.delete_at(keys.into_iter().map(|key| (key, None)).collect()).await
    }

    /// Deletes keys, each with where it was read (as for [`Self::upsert_with_positions`]).
    async fn delete_at(&mut self, keys: Vec<(KeyToDelete, Option<BaseRow>)>) -> Result<()> {
        let mut groups: BTreeMap<(String, u32), Vec<(DeleteRecord, Option<BaseRow>)>> = BTreeMap::new();
        for ((record_key, partition, ordering), position) in keys {
            let bucket = bucket_of_key(&record_key, self.buckets);
            let record = DeleteRecord { record_key, partition_path: Some(partition.clone()), ordering };
            groups.entry((partition, bucket)).or_default().push((record, position));
        }
        for ((partition, bucket), mut records) in groups {
            let file_id = file_id_of_bucket(bucket);
            let block_header = self.positioned_block_header(&partition, &file_id, &mut records, |(_, p)| p.as_ref());
            let records: Vec<DeleteRecord> = records.into_iter().map(|(record, _)| record).collect();
            let n = records.len() as i64;
            let block = encode_block(BlockType::Delete, &block_header, &encode_deletes(&records)?);
            self.write_log(&partition, &file_id, block, 0, n).await?;
        }
        Ok(())
    }

    /// Deletes the rows' keys (their key and partition columns identify them) regardless of
    /// ordering values, as SQL DELETE does in Hudi.
    pub async fn delete_rows(&mut self, rows: &RecordBatch) -> Result<()> {
        self.delete_rows_with_positions(rows, &[]).await
    }

    /// [`Self::delete_rows`] of rows read from the table, with where each was read (as for
    /// [`Self::upsert_with_positions`]).
    pub async fn delete_rows_with_positions(&mut self, rows: &RecordBatch, positions: &[Option<BaseRow>]) -> Result<()> {
        let data = crate::read::schema::align_batch(rows, &self.data_schema)
            .map_err(|e| Error::new(ErrorKind::InvalidArgument, e.detail()))?;
        let keys = self.record_keys(&data)?;
        let partitions = self.partition_paths(&data)?;
        let deletes = partitions
            .into_iter()
            .enumerate()
            .map(|(row, p)| ((keys.value(row).to_owned(), p, OrderingValue::Int(0)), positions.get(row).cloned().flatten()))
            .collect();
        self.delete_at(deletes).await
    }

    /// Completes the deltacommit at once ([`Self::prepare`], then [`PreparedCommit::complete`]).
    /// Returns the completion time.
    pub async fn commit(self) -> Result<String> {
        let prepared = self.prepare().await?;
        Ok(prepared.complete(&self.storage, &self.writer.owner(), &self.lock_options).await?.completion)
    }

    /// Everything the deltacommit's completion needs, written or computed now: the partition
    /// metadata of new partitions, and the commit metadata. Nothing becomes visible; the write
    /// stays open and can still be aborted.
    pub async fn prepare(&self) -> Result<PreparedCommit> {
        for partition in &self.new_partitions {
            if partition.is_empty() {
                continue;
            }
            let depth = partition.split('/').count();
            let text = format!("#partition metadata\ncommitTime={}\npartitionDepth={depth}\n", self.instant);
            self.storage.put_if_absent(&format!("{partition}/.hoodie_partition_metadata"), Bytes::from(text)).await?;
        }
        let mut metadata = CommitMetadata { operation_type: "UPSERT".into(), ..Default::default() };
        metadata.extra_metadata.insert("schema".into(), self.avro_schema.clone());
        for ((partition, file_id), group) in &self.groups {
            let stats = metadata.partition_to_write_stats.entry(partition.clone()).or_default();
            for (i, (name, size)) in group.files.iter().enumerate() {
                let path = crate::table::files::path_in_partition(partition, name);
                let first = i == 0;
                stats.push(WriteStat {
                    file_id: Some(file_id.clone()),
                    path: Some(path),
                    prev_commit: Some(self.instant.clone()),
                    num_writes: Some(if first { group.inserts_or_updates } else { 0 }),
                    num_deletes: Some(if first { group.deletes } else { 0 }),
                    num_update_writes: Some(if first { group.inserts_or_updates } else { 0 }),
                    num_inserts: Some(0),
                    total_write_bytes: Some(*size as i64),
                    total_write_errors: Some(0),
                    partition_path: Some(partition.clone()),
                    file_size_in_bytes: Some(*size as i64),
                    log_version: Some(i as i32 + 1),
                    log_offset: Some(0),
                    base_file: Some(String::new()),
                    log_files: Some(vec![name.clone()]),
                    ..Default::default()
                });
            }
        }
        Ok(PreparedCommit {
            timeline_dir: self.config.timeline_dir.clone(),
            instant: self.instant.clone(),
            metadata: Bytes::from(metadata.to_avro()?),
        })
    }

    /// Abandons the transaction: deletes its log files and its pending instant.
    pub async fn abort(self) -> Result<()> {
        for ((partition, _), group) in &self.groups {
            for (name, _) in &group.files {
                let path = crate::table::files::path_in_partition(partition, name);
                self.storage.delete(&path).await?;
            }
        }
        let dir = &self.config.timeline_dir;
        self.storage.delete(&format!("{dir}/{}.deltacommit.inflight", self.instant)).await?;
        self.storage.delete(&format!("{dir}/{}.deltacommit.requested", self.instant)).await?;
        crate::write::prepared::clear(&self.storage, &self.instant).await?;
        crate::write::heartbeat::stop(&self.storage, &self.instant).await
    }
}

/// The `fields` of `batch` as text columns (what keys and partition paths are made of).
fn text_columns(batch: &RecordBatch, fields: &[String], what: &str) -> Result<Vec<ArrayRef>> {
    fields
        .iter()
        .map(|f| {
            let column = batch.column_by_name(f).ok_or_else(|| {
                Error::new(ErrorKind::InvalidArgument, format!("rows lack the {what} column {f}"))
            })?;
            arrow::compute::cast(column, &DataType::Utf8).map_err(internal("cannot format key values"))
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

/// A process-wide counter of transactions and compactions: part of write tokens.
pub(crate) fn next_transaction_number() -> u64 {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
