//! `IMPORT FOREIGN SCHEMA`: one foreign table per Hudi table found under the server's base
//! URI (or a sub-path of it named by the remote schema), with the meta columns first and the
//! data columns typed from the table's schema.

use std::ffi::{CStr, CString};

use engine::read::schema::META_FIELDS;
use engine::read::TableReader;
use engine::storage::{Storage, StorageUri};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::datum;
use crate::error::OrReport;
use crate::fdw::table::options_of;
use crate::runtime::block_on;

/// The remote schema name that means "everything under the base URI".
pub const ROOT_SCHEMA: &str = "root";

/// `name` quoted as an SQL identifier where it needs quotes.
///
/// # Safety
/// Calls PostgreSQL's `quote_identifier`: on the main thread.
pub(crate) unsafe fn quote_ident(name: &str) -> String {
    let c = CString::new(name).unwrap_or_default();
    CStr::from_ptr(pg_sys::quote_identifier(c.as_ptr())).to_string_lossy().into_owned()
}

fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn wanted(stmt: &pg_sys::ImportForeignSchemaStmt, name: &str) -> bool {
    // SAFETY: table_list is a List of RangeVar for LIMIT TO / EXCEPT.
    let listed = unsafe {
        let list = stmt.table_list;
        let mut found = false;
        if !list.is_null() {
            for i in 0..(*list).length {
                let rv = (*(*list).elements.offset(i as isize)).ptr_value as *mut pg_sys::RangeVar;
                found |= CStr::from_ptr((*rv).relname).to_string_lossy() == name;
            }
        }
        found
    };
    match stmt.list_type {
        pg_sys::ImportForeignSchemaType::FDW_IMPORT_SCHEMA_LIMIT_TO => listed,
        pg_sys::ImportForeignSchemaType::FDW_IMPORT_SCHEMA_EXCEPT => !listed,
        _ => true,
    }
}

/// The options `hudi.create_table` declares a table with, for a table pg_hudi created (those of
/// other engines get none: their writers maintain them): its key, ordering, partitioning,
/// buckets and merge mode, and `services 'auto'`, so that the worker maintains it as it does
/// the table it was created from.
fn created_here_options(config: &engine::table::TableConfig) -> Vec<(&'static str, String)> {
    if !config.created_here() {
        return Vec::new();
    }
    let mut options = vec![("primary_key", config.record_key_fields.join(","))];
    if let [ordering] = config.ordering_fields.as_slice() {
        options.push(("ordering_field", ordering.clone()));
    }
    if !config.partition_fields.is_empty() {
        options.push(("partition_by", config.partition_fields.join(",")));
    }
    if let Some(buckets) = config.properties.get("hoodie.bucket.index.num.buckets") {
        options.push(("buckets", buckets.to_owned()));
    }
    let merge_mode = match config.merge_mode {
        engine::table::MergeMode::CommitTimeOrdering => Some("commit_time"),
        engine::table::MergeMode::PartialUpdate => Some("partial_update"),
        engine::table::MergeMode::EventTimeOrdering => Some("event_time"),
        engine::table::MergeMode::Custom => None,
    };
    options.extend(merge_mode.map(|mode| ("merge_mode", mode.to_owned())));
    options.push(("services", "auto".to_owned()));
    options
}

#[pg_guard]
pub unsafe extern "C-unwind" fn import_foreign_schema(
    stmt: *mut pg_sys::ImportForeignSchemaStmt,
    server_oid: pg_sys::Oid,
) -> *mut pg_sys::List {
    let server = pg_sys::GetForeignServer(server_oid);
    let server_name = CStr::from_ptr((*server).servername).to_string_lossy().into_owned();
    let base = StorageUri::parse(options_of((*server).options).get("base_uri").map_or("", String::as_str)).or_report();
    let remote = CStr::from_ptr((*stmt).remote_schema).to_string_lossy().into_owned();
    let local = CStr::from_ptr((*stmt).local_schema).to_string_lossy().into_owned();
    let prefix = if remote == ROOT_SCHEMA { String::new() } else { remote.trim_matches('/').to_owned() };
    let search = base.resolve(&prefix).or_report();
    crate::fdw::options::check_location_access(&search);
    let settings = crate::fdw::table::store_settings(pg_sys::GetUserId(), server_oid, &search);
    let storage = Storage::open(&search, &settings).or_report();

    let tables = block_on(engine::table::find_tables(&storage)).or_report();
    let leaf = |dir: &str| -> String {
        let name = dir.rsplit('/').next().filter(|n| !n.is_empty());
        name.unwrap_or_else(|| search.as_str().rsplit('/').next().unwrap_or("hudi_table")).to_owned()
    };
    let mut commands: *mut pg_sys::List = std::ptr::null_mut();
    if tables.is_empty() {
        let hint = format!(
            "IMPORT FOREIGN SCHEMA {ROOT_SCHEMA} FROM SERVER {} imports every table under the server's base_uri; another remote schema names a directory below it.",
            quote_ident(&server_name)
        );
        pgrx::pg_sys::panic::ErrorReport::new(PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION, format!("no Hudi table found under {search}"), "pg_hudi")
            .set_hint(hint)
            .report(PgLogLevel::NOTICE);
    }
    for dir in &tables {
        // A table is named after its directory; when two share that name, after its whole
        // path below the search root (`/` as `__`).
        let mut name = leaf(dir);
        if tables.iter().filter(|other| leaf(other) == name).count() > 1 {
            name = dir.replace('/', "__");
        }
        let name = name.as_str();
        if !wanted(&*stmt, name) {
            continue;
        }
        let table_uri = search.resolve(dir).or_report();
        let reader = block_on(TableReader::open(Storage::open(&table_uri, &settings).or_report())).or_report();
        let mut columns: Vec<String> =
            META_FIELDS.iter().map(|f| format!("{} text", quote_ident(f))).collect();
        for field in reader.schema().fields() {
            if META_FIELDS.contains(&field.name().as_str()) {
                continue;
            }
            columns.push(format!("{} {}", quote_ident(field.name()), datum::declared_type(field.data_type())));
        }
        let path = [prefix.as_str(), dir.as_str()].iter().filter(|p| !p.is_empty()).copied().collect::<Vec<_>>().join("/");
        let options: Vec<String> =
            std::iter::once(("path", path)).chain(created_here_options(reader.config())).map(|(k, v)| format!("{k} {}", quote_literal(&v))).collect();
        let command = format!(
            "CREATE FOREIGN TABLE {}.{} ({}) SERVER {} OPTIONS ({})",
            quote_ident(&local),
            quote_ident(name),
            columns.join(", "),
            quote_ident(&server_name),
            options.join(", ")
        );
        let command = CString::new(command).unwrap_or_default();
        commands = pg_sys::lappend(commands, pg_sys::pstrdup(command.as_ptr()) as *mut std::ffi::c_void);
    }
    commands
}
