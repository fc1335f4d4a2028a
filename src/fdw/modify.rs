//! INSERT and COPY into Hudi foreign tables: rows become upserts by record key, buffered per
//! table and written as log files of the bucket file groups (xact.rs commits them).

use std::ffi::CStr;

use engine::read::schema::META_FIELDS;
use engine::write::{Transaction, WriterId};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::datum::{self, PgKind, RowBuffer};
use crate::error::{raise, OrReport};
use crate::fdw::table::ForeignHudiTable;
use crate::runtime::block_on;
use crate::xact::{self, OpenWrite, FLUSH_ROWS};

/// Only INSERT (and COPY) for now: UPDATE and DELETE are refused by PostgreSQL itself.
#[pg_guard]
pub unsafe extern "C-unwind" fn is_foreign_rel_updatable(_relation: pg_sys::Relation) -> i32 {
    1 << pg_sys::CmdType::CMD_INSERT
}

/// Where each attribute's values go: the index of the table's data column, with the kind of
/// the attribute's values (`None` for dropped and meta columns, which writes fill themselves).
#[derive(Clone)]
struct Targets(Vec<Option<(usize, PgKind)>>);

unsafe fn targets(relation: pg_sys::Relation, data_schema: &arrow::datatypes::Schema, name: &str) -> Targets {
    let tupdesc = (*relation).rd_att;
    let attributes = (*tupdesc).attrs.as_slice((*tupdesc).natts as usize);
    Targets(
        attributes
            .iter()
            .map(|attr| {
                let column = CStr::from_ptr(attr.attname.data.as_ptr()).to_string_lossy().into_owned();
                if attr.attisdropped || META_FIELDS.contains(&column.as_str()) || column == "_hoodie_operation" {
                    return None;
                }
                let index = data_schema
                    .index_of(&column)
                    .ok()
                    .or_else(|| data_schema.fields().iter().position(|f| f.name().eq_ignore_ascii_case(&column)))
                    .unwrap_or_else(|| {
                        raise(
                            PgSqlErrorCode::ERRCODE_FDW_COLUMN_NAME_NOT_FOUND,
                            format!("column \"{column}\" of foreign table \"{name}\" does not exist in the Hudi table"),
                            None,
                        )
                    });
                let field = data_schema.field(index);
                let kind = PgKind::from_type_oid(attr.atttypid).filter(|k| datum::writable(*k, field.data_type()));
                let Some(kind) = kind else {
                    raise(
                        PgSqlErrorCode::ERRCODE_FDW_INVALID_DATA_TYPE,
                        format!(
                            "column \"{column}\" of foreign table \"{name}\" cannot be written to Hudi field \"{}\" of type {}",
                            field.name(),
                            field.data_type()
                        ),
                        None,
                    )
                };
                Some((index, kind))
            })
            .collect(),
    )
}

fn writer_id() -> WriterId {
    // SAFETY: plain reads of backend globals.
    unsafe { WriterId { node: pg_sys::GetSystemIdentifier() % 1_000_000_000, process: pg_sys::MyProcPid as u32 } }
}

unsafe fn begin(rinfo: *mut pg_sys::ResultRelInfo) {
    if pg_sys::GetCurrentTransactionNestLevel() > 1 {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "writes to Hudi tables inside subtransactions (SAVEPOINT, exception blocks) are not supported",
            Some("Write outside the savepoint or exception block.".into()),
        );
    }
    let relation = (*rinfo).ri_RelationDesc;
    let relid = (*relation).rd_id;
    let table = ForeignHudiTable::of_relation(relid);
    let name = CStr::from_ptr(pg_sys::get_rel_name(relid)).to_string_lossy().into_owned();
    xact::with_open_write(
        relid,
        || {
            let storage = table.storage();
            let config = block_on(engine::table::load_config(&storage)).or_report();
            let transaction = block_on(Transaction::begin(storage, config, writer_id(), Default::default())).or_report();
            let buffer = RowBuffer::new(transaction.data_schema().clone());
            OpenWrite { transaction, buffer }
        },
        |write| {
            let targets = targets(relation, write.transaction.data_schema(), &name);
            (*rinfo).ri_FdwState = Box::into_raw(Box::new(targets)) as *mut std::ffi::c_void;
        },
    );
}

#[pg_guard]
pub unsafe extern "C-unwind" fn begin_foreign_modify(
    _mtstate: *mut pg_sys::ModifyTableState,
    rinfo: *mut pg_sys::ResultRelInfo,
    _fdw_private: *mut pg_sys::List,
    _subplan_index: i32,
    eflags: i32,
) {
    if eflags & pg_sys::EXEC_FLAG_EXPLAIN_ONLY as i32 == 0 {
        begin(rinfo);
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn begin_foreign_insert(_mtstate: *mut pg_sys::ModifyTableState, rinfo: *mut pg_sys::ResultRelInfo) {
    begin(rinfo);
}

#[pg_guard]
pub unsafe extern "C-unwind" fn exec_foreign_insert(
    _estate: *mut pg_sys::EState,
    rinfo: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    _plan_slot: *mut pg_sys::TupleTableSlot,
) -> *mut pg_sys::TupleTableSlot {
    let targets = &*((*rinfo).ri_FdwState as *const Targets);
    pg_sys::slot_getallattrs(slot);
    let natts = (*(*slot).tts_tupleDescriptor).natts as usize;
    let values = std::slice::from_raw_parts((*slot).tts_values, natts);
    let nulls = std::slice::from_raw_parts((*slot).tts_isnull, natts);
    let relid = (*(*rinfo).ri_RelationDesc).rd_id;
    xact::with_open_write(
        relid,
        || unreachable!("begun in BeginForeignModify"),
        |write| {
            let columns = write.transaction.data_schema().fields().len();
            let mut row: Vec<Option<(pg_sys::Datum, PgKind)>> = vec![None; columns];
            for (i, target) in targets.0.iter().enumerate() {
                if let Some((index, kind)) = target {
                    if !nulls[i] {
                        row[*index] = Some((values[i], *kind));
                    }
                }
            }
            write.buffer.push(&row).unwrap_or_else(|why| raise(PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE, why, None));
            if write.buffer.len() >= FLUSH_ROWS {
                write.flush().or_report();
            }
        },
    );
    slot
}

#[pg_guard]
pub unsafe extern "C-unwind" fn end_foreign_modify(_estate: *mut pg_sys::EState, rinfo: *mut pg_sys::ResultRelInfo) {
    let targets = (*rinfo).ri_FdwState as *mut Targets;
    if !targets.is_null() {
        drop(Box::from_raw(targets));
        (*rinfo).ri_FdwState = std::ptr::null_mut();
    }
}
