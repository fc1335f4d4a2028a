//! The rows of `hudi.write_buffer` as bytes: each chunk holds Avro records that name their
//! schema by id ([`engine::write::rows::RowEncoder`]), and `hudi.buffer_schemas` holds the
//! schemas. A writer registers a schema the first time its backend writes rows of it (in the
//! writing transaction, so a chunk never commits without its schema); a flush or a read of the
//! buffer looks up the schemas its chunks name, kept for the life of the process (an id is a
//! hash of the schema's bytes: it never names another schema).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use engine::write::rows::{Chunk, RowEncoder};
use engine::write::Change;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;

use crate::error::OrReport;
use crate::role::as_pg_hudi;

/// How many schemas' encoders a backend keeps (a table's shape and its earlier ones).
const ENCODERS: usize = 16;

thread_local! {
    static ENCODERS_KEPT: RefCell<Vec<Arc<RowEncoder>>> = const { RefCell::new(Vec::new()) };
    /// Schemas this backend registered in transactions that committed.
    static REGISTERED: RefCell<HashSet<i64>> = RefCell::new(HashSet::new());
    /// Schemas registered by the current transaction.
    static REGISTERING: RefCell<Vec<i64>> = const { RefCell::new(Vec::new()) };
    /// Schemas read from `hudi.buffer_schemas`, by id.
    static KNOWN: RefCell<HashMap<u64, SchemaRef>> = RefCell::new(HashMap::new());
}

/// The encoder of rows of `schema`, kept or made.
fn encoder_of(schema: &Schema) -> Arc<RowEncoder> {
    let kept = ENCODERS_KEPT.with(|e| e.borrow().iter().find(|e| e.encodes(schema)).cloned());
    if let Some(encoder) = kept {
        return encoder;
    }
    let encoder = Arc::new(RowEncoder::new(schema).or_report());
    ENCODERS_KEPT.with(|e| {
        let mut kept = e.borrow_mut();
        if kept.len() == ENCODERS {
            kept.remove(0);
        }
        kept.push(encoder.clone());
    });
    encoder
}

/// `rows` as a chunk's bytes, their schema registered in this transaction if need be.
pub(super) fn encode(rows: &RecordBatch) -> Vec<u8> {
    // COMMIT and ABORT tell what this transaction registered ([`committed`], [`forget`]).
    crate::xact::register_callbacks();
    let encoder = encoder_of(&rows.schema());
    let id = encoder.schema_id();
    let known = REGISTERED.with(|r| r.borrow().contains(&id)) || REGISTERING.with(|r| r.borrow().contains(&id));
    if !known {
        let args: Vec<DatumWithOid> = vec![id.into(), encoder.schema_bytes().into()];
        let same = as_pg_hudi(|| {
            Spi::connect_mut(|client| {
                client
                    .update("INSERT INTO hudi.buffer_schemas (id, schema) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING", None, &args)
                    .and_then(|_| client.select("SELECT schema OPERATOR(pg_catalog.=) $2 FROM hudi.buffer_schemas WHERE id OPERATOR(pg_catalog.=) $1", None, &args)?.first().get_one::<bool>())
                    .unwrap_or_else(|e| crate::error::spi_failed("the write buffer", e))
            })
        });
        // Another schema under this id would decode these rows in its columns.
        if same != Some(true) {
            crate::error::raise(
                pgrx::PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                format!("another schema is registered in hudi.buffer_schemas under this table's schema id {id}"),
                None,
            );
        }
        REGISTERING.with(|r| r.borrow_mut().push(id));
    }
    encoder.encode(rows).or_report()
}

/// COMMIT: what this transaction registered is there for the backend's later ones.
pub(crate) fn committed() {
    let registered = REGISTERING.with(|r| std::mem::take(&mut *r.borrow_mut()));
    REGISTERED.with(|r| r.borrow_mut().extend(registered));
}

/// ABORT: what this transaction registered went with it.
pub(crate) fn forget() {
    REGISTERING.with(|r| r.borrow_mut().clear());
}

/// The rows of `chunks` (change, row count, bytes, as read from the buffer) in order, each
/// run of one change and schema one batch.
pub(super) fn decode(chunks: &[Chunk<'_>]) -> Vec<(Change, RecordBatch)> {
    let mut wanted: Vec<i64> = Vec::new();
    for (_, _, bytes) in chunks {
        if let Some(id) = engine::write::rows::chunk_schema_id(bytes).or_report() {
            if !KNOWN.with(|k| k.borrow().contains_key(&id)) && !wanted.contains(&(id as i64)) {
                wanted.push(id as i64);
            }
        }
    }
    if !wanted.is_empty() {
        let args: Vec<DatumWithOid> = vec![wanted.into()];
        let found: Vec<(i64, Vec<u8>)> = as_pg_hudi(|| {
            Spi::connect(|client| {
                client
                    .select("SELECT id, schema FROM hudi.buffer_schemas WHERE id OPERATOR(pg_catalog.=) ANY ($1)", None, &args)
                    .unwrap_or_else(|e| crate::error::spi_failed("the write buffer", e))
                    .filter_map(|row| Some((row.get::<i64>(1).ok()??, row.get::<Vec<u8>>(2).ok()??)))
                    .collect()
            })
        });
        for (id, bytes) in found {
            let schema = engine::write::rows::schema_from_bytes(&bytes).or_report();
            KNOWN.with(|k| k.borrow_mut().insert(id as u64, schema));
        }
    }
    KNOWN.with(|k| engine::write::rows::decode_chunks(chunks, &k.borrow())).or_report()
}
