//! `hudi.create_table(table)`: writes the Hudi table a foreign table declares.

use std::ffi::CStr;

use arrow::datatypes::{Field, Schema};
use engine::read::schema::is_reader_column;
use engine::table::MergeMode;
use engine::write::{create_table_locking as create, NewTable};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::api::args::{hudi_table, RegClass};
use crate::datum;
use crate::error::{raise, OrReport};
use crate::fdw::table::ForeignHudiTable;
use crate::runtime::block_on;

fn list(value: Option<&String>) -> Vec<String> {
    value.map(|v| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect()).unwrap_or_default()
}

/// Creates the merge-on-read table (version 8, simple bucket index) that `table` declares
/// with its columns and the options `primary_key`, `ordering_field`, `partition_by` (columns
/// that are also in `primary_key`, so that a key has one row), `buckets`, `merge_mode` and
/// `metadata_table` (`on`: a metadata table lists its files, as Hudi 1.x writers make them);
/// returns its location. An existing table with the same keys,
/// partitioning, buckets and columns is accepted; a different one is an error. Writing a
/// table's `hoodie.properties` is for the foreign table's owner. A foreign table without the
/// option `services` gets `services 'auto'`: the background worker maintains the tables
/// pg_hudi makes (those of other engines only when a user says so).
#[pg_extern(volatile)]
fn create_table(table: Option<RegClass>) -> String {
    let table = hudi_table(table);
    let relid = table.oid();
    crate::services::require_owner(&table, "create its Hudi table");
    crate::fdw::table_state::forget_all();
    let foreign = ForeignHudiTable::for_function(relid);
    let name = table.name().to_owned();
    // SAFETY: the relation is open; its tuple descriptor lives as long as it.
    let fields: Vec<Field> = unsafe {
        let tupdesc = table.tuple_desc();
        tupdesc
            .iter()
            .filter(|attr| !attr.attisdropped)
            .filter_map(|attr| {
                let column = CStr::from_ptr(attr.attname.data.as_ptr()).to_string_lossy().into_owned();
                if is_reader_column(&column) {
                    return None;
                }
                let data_type = datum::stored_type(attr.atttypid, attr.atttypmod).unwrap_or_else(|why| {
                    raise(
                        PgSqlErrorCode::ERRCODE_FDW_INVALID_DATA_TYPE,
                        format!("column \"{column}\" of foreign table \"{name}\": {why}"),
                        None,
                    )
                });
                Some(Field::new(column, data_type, true))
            })
            .collect()
    };
    let options = &foreign.options;
    let record_key_fields = list(options.get("primary_key"));
    if record_key_fields.is_empty() {
        raise(
            PgSqlErrorCode::ERRCODE_FDW_DYNAMIC_PARAMETER_VALUE_NEEDED,
            format!("foreign table \"{name}\" needs the option primary_key to be created as a Hudi table"),
            None,
        );
    }
    let partition_fields = list(options.get("partition_by"));
    // PostgreSQL's rule for unique keys of partitioned tables: Hudi finds a key's row within
    // its partition only, so a key without the partition columns could hold a row in each.
    if let Some(outside) = partition_fields.iter().find(|p| !record_key_fields.contains(p)) {
        let with_partitions: Vec<&str> =
            record_key_fields.iter().chain(partition_fields.iter().filter(|p| !record_key_fields.contains(p))).map(String::as_str).collect();
        crate::error::raise_with_detail(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("the primary key of Hudi table \"{name}\" must include all its partition columns"),
            format!("primary_key lacks column \"{outside}\", which is in partition_by: a key is unique only within its partition."),
            format!("Use primary_key '{}'.", with_partitions.join(",")),
        );
    }
    let merge_mode = match options.get("merge_mode").map_or("event_time", String::as_str) {
        "commit_time" => MergeMode::CommitTimeOrdering,
        "partial_update" => MergeMode::PartialUpdate,
        _ => MergeMode::EventTimeOrdering,
    };
    let spec = NewTable {
        name: name.clone(),
        schema: Schema::new(fields),
        record_key_fields,
        ordering_field: options.get("ordering_field").cloned(),
        partition_fields,
        buckets: options.get("buckets").and_then(|b| b.parse().ok()).unwrap_or(16),
        merge_mode,
        metadata_table: options.get("metadata_table").is_some_and(|v| v == "on"),
    };
    block_on(create(&foreign.storage(), &spec, &crate::guc::lock_options())).or_report();
    if !options.contains_key("services") {
        // ALTER refuses a relation this session still has open.
        drop(table);
        let args = vec![pgrx::datum::DatumWithOid::from(relid)];
        let alter = Spi::get_one_with_args::<String>(
            "SELECT pg_catalog.format('ALTER FOREIGN TABLE %s OPTIONS (ADD services %L)', $1::pg_catalog.regclass, 'auto')",
            &args,
        );
        let alter = alter.ok().flatten().unwrap_or_else(|| crate::error::spi_failed("naming the foreign table", pgrx::spi::SpiError::InvalidPosition));
        Spi::run(&alter).unwrap_or_else(|e| crate::error::spi_failed("setting services 'auto'", e));
    }
    foreign.uri.to_string()
}
