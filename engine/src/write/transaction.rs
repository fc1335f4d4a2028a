//! One write transaction (one deltacommit) under non-blocking concurrency control (Hudi RFC-66,
//! hudi-format.md §11): requested and inflight instants at the start, log files of the bucket
//! file groups named with this writer's instant and write token while it runs, and the
//! completed `<instant>_<completion>.deltacommit`, created atomically under the table lock, at
//! commit. Writers never touch each other's files, so they never conflict.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::ordering::OrderingValue;
use crate::read::schema::table_schema;
use crate::storage::Storage;
use crate::table::bucket::MAX_BUCKETS;
use crate::table::TableConfig;
use crate::write::blocks::{BlockEncoder, Change, EncodedBlocks, PendingBlocks};
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

/// What a transaction completes as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteAction {
    /// Log files of the bucket file groups.
    DeltaCommit,
    /// A truncate: an empty base file in every file group, which starts a new file slice at
    /// the instant (and log files written after it in the same transaction).
    ReplaceCommit,
}

impl WriteAction {
    /// The timeline action.
    pub fn name(self) -> &'static str {
        match self {
            WriteAction::DeltaCommit => "deltacommit",
            WriteAction::ReplaceCommit => "replacecommit",
        }
    }
}

/// The operation type of a truncate's replacecommit: Spark's for `INSERT OVERWRITE TABLE`
/// (replacing the whole table, here with no rows).
const TRUNCATE_OPERATION: &str = "INSERT_OVERWRITE_TABLE";

/// An empty base file a truncate wrote.
#[derive(Debug)]
struct EmptyBase {
    partition: String,
    file_id: String,
    name: String,
    size: u64,
}

/// An open write transaction.
pub struct Transaction {
    action: WriteAction,
    /// [`Self::change_schema`] was called.
    schema_changed: bool,
    /// A truncate's empty base files.
    bases: Vec<EmptyBase>,
    storage: Storage,
    config: TableConfig,
    writer: WriterId,
    lock_options: LockOptions,
    avro_schema: String,
    /// The instant, schemas and keys, shared with the threads that encode log blocks.
    encoder: Arc<BlockEncoder>,
    /// This transaction's write token: unique per writer process and transaction.
    token: String,
    /// How many log files the transaction has written.
    sequence: u64,
    groups: BTreeMap<(String, String), GroupWrites>,
    new_partitions: Vec<String>,
    /// When this transaction last refreshed its heartbeat itself.
    last_beat: std::time::Instant,
}

/// The least time between two heartbeats a transaction sends as it writes: far below any
/// expiry, and a statement writing many log files does not double its requests.
const BEAT_GAP: std::time::Duration = std::time::Duration::from_secs(1);

impl Transaction {
    /// Starts a deltacommit: takes an instant under the table lock and writes the requested
    /// and inflight timeline files.
    pub async fn begin(storage: Storage, config: TableConfig, writer: WriterId, lock_options: LockOptions) -> Result<Transaction> {
        Self::start(storage, config, writer, lock_options, WriteAction::DeltaCommit, None).await
    }

    /// [`Self::begin`] writing records of `avro_schema`: the table's schema as its latest commit
    /// records it (after schema changes, no longer its create schema). A writer must write with
    /// it: the schema its commit records is the table's from then on.
    pub async fn begin_in_schema(storage: Storage, config: TableConfig, writer: WriterId, lock_options: LockOptions, avro_schema: String) -> Result<Transaction> {
        Self::start(storage, config, writer, lock_options, WriteAction::DeltaCommit, Some(avro_schema)).await
    }

    /// Makes `avro_schema` the table's schema from this commit on (Hudi's schema evolution on
    /// write: the commit records it, and readers read every older file in it). Only before the
    /// transaction wrote anything: later rows are written in it. A commit that writes nothing
    /// else is Hudi's `ALTER_SCHEMA` operation.
    pub fn change_schema(&mut self, avro_schema: String) -> Result<()> {
        if self.sequence > 0 || !self.groups.is_empty() || !self.bases.is_empty() {
            return Err(Error::new(ErrorKind::Unsupported, "the schema of a table cannot change after rows were written in the same transaction")
                .with_hint("Commit the writes first, then change the table."));
        }
        self.encoder = Arc::new(encoder(&self.config, &avro_schema, self.encoder.instant.clone(), self.encoder.buckets)?);
        self.avro_schema = avro_schema;
        self.schema_changed = true;
        Ok(())
    }

    /// Starts a truncate of the table: a replacecommit that writes an empty base file in every
    /// file group, so that every file slice starts anew at its instant. Readers attach a log
    /// file to the slice of the latest base at or before its completion time: the rows of
    /// writes completed before the instant are gone, those of writes completing after it
    /// (this transaction's later ones, other writers') stay. No file group is replaced, so
    /// writers, which write each bucket's one fixed file group under NBCC, lose nothing.
    ///
    /// Two rules keep rows from coming back: the replacecommit is requested under the table
    /// lock that issues its instant, so a compaction scheduled later sees it pending and waits
    /// (its base would be newer and hold the old rows); and a truncate starts only when no
    /// other write is committing (has a prepared mark), while writes that update rows check for
    /// truncates after marking ([`Self::truncated_since`]). Either the truncate sees the mark
    /// (it starts over with a later instant, once that write completed) or the write sees the
    /// truncate (it must not commit rows it read before). A write still committing after
    /// `lock_options.timeout` makes this an `InUse` error.
    pub async fn begin_truncate(
        storage: Storage,
        config: TableConfig,
        writer: WriterId,
        lock_options: LockOptions,
        avro_schema: Option<String>,
    ) -> Result<Transaction> {
        let deadline = std::time::Instant::now() + lock_options.timeout;
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            let action = WriteAction::ReplaceCommit;
            let mut transaction = Self::start(storage.clone(), config.clone(), writer.clone(), lock_options.clone(), action, avro_schema.clone()).await?;
            let committing = transaction.writes_committing().await?;
            if committing.is_empty() {
                transaction.write_empty_bases().await?;
                return Ok(transaction);
            }
            transaction.abort().await?;
            if std::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::InUse,
                    format!("the truncate waited {:?} for writes that are committing: {}", lock_options.timeout, committing.join(", ")),
                )
                .with_hint("A server that prepared these writes must complete them (see hudi.pending_commits there); try again later."));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(200));
        }
    }

    /// The other writes of the table marked prepared (committing) and still pending.
    async fn writes_committing(&self) -> Result<Vec<String>> {
        let marked = crate::write::prepared::marked(&self.storage).await?;
        if marked.iter().all(|m| *m == self.encoder.instant) {
            return Ok(Vec::new());
        }
        let timeline = crate::timeline::Timeline::load(&self.storage, &self.config).await?;
        let pending: std::collections::HashSet<&str> = timeline.pending_writes().map(|i| i.timestamp.as_str()).collect();
        Ok(marked.into_iter().filter(|m| *m != self.encoder.instant && pending.contains(m.as_str())).collect())
    }

    /// Writes an empty base file at this instant in every file group of the table.
    async fn write_empty_bases(&mut self) -> Result<()> {
        let view = crate::view::FileSystemView::load(&self.storage).await?;
        let empty = RecordBatch::new_empty(self.encoder.record_schema.clone());
        let bytes = Bytes::from(crate::write::parquet_bytes(&empty, crate::write::ParquetFile::BaseFile(Vec::new()))?);
        let groups: Vec<(String, String)> = view.file_groups().map(|(p, f)| (p.to_owned(), f.to_owned())).collect();
        for (partition, file_id) in groups {
            let name = format!("{file_id}_{}_{}.parquet", self.token, self.encoder.instant);
            self.storage.put(&crate::table::files::path_in_partition(&partition, &name), bytes.clone()).await?;
            self.bases.push(EmptyBase { partition, file_id, name, size: bytes.len() as u64 });
            if self.last_beat.elapsed() >= BEAT_GAP {
                crate::write::heartbeat::beat(&self.storage, &self.encoder.instant).await?;
                self.last_beat = std::time::Instant::now();
            }
        }
        Ok(())
    }

    /// A truncate of the table that this write did not see: a replacecommit pending, or
    /// completed after this write's instant (other than this one). A write that updates rows it
    /// read checks this after its prepared mark is written, and must not commit if there is
    /// one: its rows would outlive the truncate.
    pub async fn truncated_since(&self) -> Result<Option<String>> {
        let timeline = crate::timeline::Timeline::load(&self.storage, &self.config).await?;
        let truncate = timeline.replacecommits_since(&self.encoder.instant).next().map(|i| i.timestamp.clone());
        Ok(truncate)
    }

    async fn start(
        storage: Storage,
        config: TableConfig,
        writer: WriterId,
        lock_options: LockOptions,
        action: WriteAction,
        avro_schema: Option<String>,
    ) -> Result<Transaction> {
        let avro_schema = match avro_schema.or_else(|| config.create_schema.clone()) {
            Some(schema) => schema,
            None => return Err(Error::new(ErrorKind::Corrupt, "the table has no create schema to write with")),
        };
        let buckets = bucket_count(&config)?;
        let dir = &config.timeline_dir;
        let name = action.name();
        let write_pending = async |instant: &str| {
            let (requested, operation) = match action {
                WriteAction::DeltaCommit => (Bytes::new(), "UPSERT"),
                WriteAction::ReplaceCommit => (Bytes::from(crate::write::commit::requested_replace_avro(TRUNCATE_OPERATION)?), TRUNCATE_OPERATION),
            };
            storage.put_if_absent(&format!("{dir}/{instant}.{name}.requested"), requested).await?;
            let planned = CommitMetadata { operation_type: operation.into(), ..Default::default() };
            storage.put(&format!("{dir}/{instant}.{name}.inflight"), Bytes::from(planned.to_avro()?)).await
        };
        // A truncate is requested under the lock that issued its instant: a compaction
        // scheduled after it (under the lock) must see it pending.
        let instant = TableLock::hold(&storage, &writer.owner(), &lock_options, async |lock| {
            let instant = lock.next_time(&lock_options).await?;
            if action == WriteAction::ReplaceCommit {
                write_pending(&instant).await?;
            }
            Ok(instant)
        })
        .await?;
        if action == WriteAction::DeltaCommit {
            write_pending(&instant).await?;
        }
        crate::write::heartbeat::beat(&storage, &instant).await?;
        let token = writer.token(next_transaction_number());
        let encoder = Arc::new(encoder(&config, &avro_schema, instant, buckets)?);
        Ok(Transaction {
            action,
            schema_changed: false,
            bases: Vec::new(),
            storage,
            avro_schema,
            config,
            writer,
            lock_options,
            encoder,
            token,
            sequence: 0,
            last_beat: std::time::Instant::now(),
            groups: BTreeMap::new(),
            new_partitions: Vec::new(),
        })
    }

    pub fn instant(&self) -> &str {
        &self.encoder.instant
    }

    /// Where the table being written lives.
    /// The data files this transaction has written so far, as `(path relative to the table,
    /// size)` pairs.
    pub fn written_files(&self) -> Vec<(String, u64)> {
        let logs = self.groups.iter().flat_map(|((partition, _), group)| {
            group.files.iter().map(move |(name, size)| (crate::table::files::path_in_partition(partition, name), *size))
        });
        let bases = self.bases.iter().map(|b| (crate::table::files::path_in_partition(&b.partition, &b.name), b.size));
        bases.chain(logs).collect()
    }

    /// The schema this transaction makes the table's ([`Self::change_schema`]), if it does.
    pub fn changed_schema(&self) -> Option<&str> {
        self.schema_changed.then_some(self.avro_schema.as_str())
    }

    /// What this transaction completes as.
    pub fn action(&self) -> WriteAction {
        self.action
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
        &self.encoder.data_schema
    }

    /// Log files of one file group within a transaction are numbered 1, 2, ...: readers apply
    /// them in that order.
    fn next_log_name(&mut self, partition: &str, file_id: &str) -> String {
        self.sequence += 1;
        let version = self.groups.get(&(partition.to_owned(), file_id.to_owned())).map_or(0, |g| g.files.len()) + 1;
        format!(".{file_id}_{}.log.{version}_{}", self.encoder.instant, self.token)
    }

    async fn write_log(&mut self, partition: &str, file_id: &str, block: Vec<u8>, upserts: i64, deletes: i64) -> Result<()> {
        let name = self.next_log_name(partition, file_id);
        let path = crate::table::files::path_in_partition(partition, &name);
        let size = block.len() as u64;
        self.storage.put(&path, Bytes::from(block)).await?;
        if self.last_beat.elapsed() >= BEAT_GAP {
            crate::write::heartbeat::beat(&self.storage, &self.encoder.instant).await?;
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

    /// Writes encoded log blocks, each as a new log file of its file group. Blocks are
    /// numbered when encoding starts: they must be written before the next encoding starts.
    pub async fn write_blocks(&mut self, pending: PendingBlocks) -> Result<()> {
        self.write_encoded(pending.blocks().await?).await
    }

    async fn write_encoded(&mut self, encoded: EncodedBlocks) -> Result<()> {
        if encoded.first_sequence != self.sequence {
            return Err(Error::new(ErrorKind::Internal, "log blocks were encoded before the ones ahead of them were written"));
        }
        for block in encoded.blocks {
            self.write_log(&block.partition, &block.file_id, block.bytes, block.upserts, block.deletes).await?;
        }
        Ok(())
    }

    /// Starts encoding `change` of `rows` (the data columns of [`Self::data_schema`], by
    /// name) on a helper thread, while the caller goes on: one Parquet data block (upserts) or
    /// delete block per touched file group; [`Self::write_blocks`] writes them. `positions`
    /// says where rows of an UPDATE or DELETE were read (as for
    /// [`Self::upsert_with_positions`]).
    pub fn encode(&self, change: Change, rows: RecordBatch, positions: Vec<Option<BaseRow>>) -> PendingBlocks {
        self.encoder.start(change, rows, positions, self.sequence)
    }

    /// The partition path and record key each of `rows` (data columns by name) is written
    /// with: what identifies a row in a Hudi table.
    pub fn keys_of(&self, rows: &RecordBatch) -> Result<Vec<(String, String)>> {
        self.encoder.keys_of(rows)
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
        let encoded = self.encoder.encode(Change::Upsert, rows, positions, self.sequence)?;
        self.write_encoded(encoded).await
    }

    /// Deletes keys: one delete block per touched file group, in a new log file.
    pub async fn delete(&mut self, keys: Vec<KeyToDelete>) -> Result<()> {
        let blocks = self.encoder.deletes(keys.into_iter().map(|key| (key, None)).collect())?;
        self.write_encoded(EncodedBlocks { first_sequence: self.sequence, blocks }).await
    }

    /// Deletes the rows' keys (their key and partition columns identify them) regardless of
    /// ordering values, as SQL DELETE does in Hudi.
    pub async fn delete_rows(&mut self, rows: &RecordBatch) -> Result<()> {
        self.delete_rows_with_positions(rows, &[]).await
    }

    /// [`Self::delete_rows`] of rows read from the table, with where each was read (as for
    /// [`Self::upsert_with_positions`]).
    pub async fn delete_rows_with_positions(&mut self, rows: &RecordBatch, positions: &[Option<BaseRow>]) -> Result<()> {
        let encoded = self.encoder.encode(Change::Delete, rows, positions, self.sequence)?;
        self.write_encoded(encoded).await
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
            let text = format!("#partition metadata\ncommitTime={}\npartitionDepth={depth}\n", self.encoder.instant);
            self.storage.put_if_absent(&format!("{partition}/.hoodie_partition_metadata"), Bytes::from(text)).await?;
        }
        let mut metadata = CommitMetadata { operation_type: "UPSERT".into(), ..Default::default() };
        metadata.extra_metadata.insert("schema".into(), self.avro_schema.clone());
        if self.schema_changed && self.groups.is_empty() {
            metadata.operation_type = "ALTER_SCHEMA".into();
        }
        if self.action == WriteAction::ReplaceCommit {
            metadata.operation_type = TRUNCATE_OPERATION.into();
            // Nothing replaced: every file group goes on, from a new (empty) slice.
            metadata.replaced_file_ids = Some(BTreeMap::new());
        }
        for base in &self.bases {
            metadata.partition_to_write_stats.entry(base.partition.clone()).or_default().push(WriteStat {
                file_id: Some(base.file_id.clone()),
                path: Some(crate::table::files::path_in_partition(&base.partition, &base.name)),
                prev_commit: Some("null".into()),
                num_writes: Some(0),
                num_deletes: Some(0),
                num_update_writes: Some(0),
                num_inserts: Some(0),
                total_write_bytes: Some(base.size as i64),
                total_write_errors: Some(0),
                partition_path: Some(base.partition.clone()),
                file_size_in_bytes: Some(base.size as i64),
                base_file: Some(base.name.clone()),
                ..Default::default()
            });
        }
        for ((partition, file_id), group) in &self.groups {
            let stats = metadata.partition_to_write_stats.entry(partition.clone()).or_default();
            for (i, (name, size)) in group.files.iter().enumerate() {
                let path = crate::table::files::path_in_partition(partition, name);
                let first = i == 0;
                stats.push(WriteStat {
                    file_id: Some(file_id.clone()),
                    path: Some(path),
                    prev_commit: Some(self.encoder.instant.clone()),
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
            instant: self.encoder.instant.clone(),
            metadata: Bytes::from(metadata.to_avro()?),
        })
    }

    /// Abandons the transaction: deletes its data files and its pending instant.
    pub async fn abort(self) -> Result<()> {
        for (path, _) in self.written_files() {
            self.storage.delete(&path).await?;
        }
        let (dir, action) = (&self.config.timeline_dir, self.action.name());
        self.storage.delete(&format!("{dir}/{}.{action}.inflight", self.encoder.instant)).await?;
        self.storage.delete(&format!("{dir}/{}.{action}.requested", self.encoder.instant)).await?;
        crate::write::prepared::clear(&self.storage, &self.encoder.instant).await?;
        crate::write::heartbeat::stop(&self.storage, &self.encoder.instant).await
    }
}

/// The bucket count of a table this engine may write, checked before anything is written: a
/// bucket index table needs a count from 1 to [`MAX_BUCKETS`] and record key fields to hash.
/// A table without a count does not use the bucket index (Unsupported); a count that is no
/// such number, or no key fields, is a damaged `hoodie.properties` (Corrupt: Hudi's own
/// writers fail on them too, dividing by zero or hashing no key).
pub(crate) fn bucket_count(config: &TableConfig) -> Result<u32> {
    const NUM_BUCKETS: &str = "hoodie.bucket.index.num.buckets";
    let corrupt = |why: String| {
        Error::new(ErrorKind::Corrupt, format!("the table's hoodie.properties is damaged: {why}"))
            .with_hint("restore .hoodie/hoodie.properties from .hoodie/hoodie.properties.backup or a copy")
    };
    let Some(text) = config.properties.get(NUM_BUCKETS) else {
        return Err(Error::new(ErrorKind::Unsupported, "only tables with the simple bucket index can be written"));
    };
    let buckets = match text.trim().parse::<u32>() {
        Ok(n @ 1..=MAX_BUCKETS) => n,
        _ => return Err(corrupt(format!("{NUM_BUCKETS} is \"{}\", not a number of buckets from 1 to {MAX_BUCKETS}", text.escape_debug()))),
    };
    if config.record_key_fields.is_empty() {
        return Err(corrupt(format!("{} names no record key field for the bucket index to hash", crate::table::config::keys::RECORD_KEY_FIELDS)));
    }
    Ok(buckets)
}

/// The block encoder of a transaction at `instant` writing records of `avro_schema` (the data
/// columns, without meta fields).
pub(crate) fn encoder(config: &TableConfig, avro_schema: &str, instant: String, buckets: u32) -> Result<BlockEncoder> {
    let data_schema = crate::read::schema::arrow_schema_of_avro(avro_schema)?;
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
    Ok(BlockEncoder {
        record_key_fields: config.record_key_fields.clone(),
        partition_fields: config.partition_fields.clone(),
        record_schema: table_schema(&data_schema, true),
        data_schema,
        avro_with_meta: with_meta_fields(avro_schema)?,
        ordering_fields: config.ordering_fields.clone(),
        buckets,
        instant,
    })
}

/// A process-wide counter of transactions and compactions: part of write tokens.
pub(crate) fn next_transaction_number() -> u64 {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::config::keys;
    use crate::table::{Properties, PROPERTIES_FILE};
    use crate::write::table::TestTable;

    /// A table of two committed rows whose `hoodie.properties` then had `key` set to `value`,
    /// and its configuration as loaded from that file.
    async fn damaged(key: &str, value: &str) -> (TestTable, TableConfig) {
        let table = TestTable::new(2).await;
        table.upsert(vec![1, 2], "a").await;
        let mut properties = table.config.properties.clone();
        properties.set(key, value);
        table.storage.put(PROPERTIES_FILE, Bytes::from(properties.to_text(&[]))).await.unwrap();
        let config = crate::table::load_config(&table.storage).await.unwrap();
        (table, config)
    }

    /// A bucket count that is no positive number, or a bucket-index table without record key
    /// fields, is a damaged table: writing it is refused with Corrupt before any instant is
    /// taken (it used to panic encoding the rows: a bucket of none, a key of no fields), and
    /// the table still reads.
    #[tokio::test]
    async fn damaged_bucket_and_key_configs_refuse_writes_and_still_read() {
        for (key, value) in [
            ("hoodie.bucket.index.num.buckets", "0"),
            ("hoodie.bucket.index.num.buckets", "-4"),
            ("hoodie.bucket.index.num.buckets", "four"),
            ("hoodie.bucket.index.num.buckets", ""),
            ("hoodie.bucket.index.num.buckets", "100000000"),
            (keys::RECORD_KEY_FIELDS, ""),
            (keys::RECORD_KEY_FIELDS, " , "),
        ] {
            let (table, config) = damaged(key, value).await;
            let timeline_before = table.storage.list_dir(&config.timeline_dir).await.unwrap();
            let writer = crate::write::WriterId { node: 1, process: 1 };
            let rows = RecordBatch::try_new(
                Arc::new(table.schema.clone()),
                vec![Arc::new(arrow::array::Int64Array::from(vec![3])), Arc::new(arrow::array::StringArray::from(vec!["b"]))],
            )
            .unwrap();
            let written = match Transaction::begin(table.storage.clone(), config.clone(), writer, Default::default()).await {
                Ok(mut tx) => tx.upsert(&rows).await,
                Err(e) => Err(e),
            };
            let err = written.expect_err(&format!("{key}={value:?} is written"));
            assert_eq!(err.kind(), ErrorKind::Corrupt, "{key}={value:?}: {err}");
            assert!(err.to_string().contains(key), "{key}={value:?}: the error names the property: {err}");
            assert_eq!(table.storage.list_dir(&config.timeline_dir).await.unwrap(), timeline_before, "{key}={value:?}: no instant taken");

            let reader = crate::read::TableReader::open(table.storage.clone()).await.unwrap();
            let rows: usize = reader.read_snapshot(None).await.unwrap().iter().map(RecordBatch::num_rows).sum();
            assert_eq!(rows, 2, "{key}={value:?}: the table reads");
            // Reads prune by bucket only with a count that can be right.
            let expected = if key == keys::RECORD_KEY_FIELDS { Some(2) } else { None };
            assert_eq!(reader.bucket_count(), expected, "{key}={value:?}");
        }
    }

    /// A table with no bucket count is not one this engine writes: Unsupported, as before.
    #[tokio::test]
    async fn a_table_without_a_bucket_count_is_unsupported() {
        let table = TestTable::new(2).await;
        let mut config = table.config.clone();
        let mut properties = Properties::new();
        for (k, v) in config.properties.iter().filter(|(k, _)| *k != "hoodie.bucket.index.num.buckets") {
            properties.set(k, v);
        }
        config.properties = properties;
        let writer = crate::write::WriterId { node: 1, process: 1 };
        let err = Transaction::begin(table.storage.clone(), config, writer, Default::default()).await.map(|_| ()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    }
}
