//! SQL functions in schema `hudi`.

pub mod archive;
pub mod clean;
pub mod compaction;
pub mod create;
pub mod lookup;
pub mod tables;

use pgrx::prelude::*;
use pgrx::{PgRelation, PgSqlErrorCode};

/// The storage of the Hudi table behind `table`, for a table service that will `to` it: like
/// VACUUM, services that rewrite and delete a table's files are for its owner.
pub(crate) fn service_target(table: &PgRelation, to: &str) -> engine::storage::Storage {
    require_owner(table, to);
    // What the service changes is read anew, also later in the same statement.
    crate::fdw::table_state::forget_all();
    crate::fdw::table::ForeignHudiTable::for_function(table.oid()).storage()
}

/// Raises 42501 unless the current role owns `table` (or is a superuser), naming what it wanted
/// `to` do.
pub(crate) fn require_owner(table: &PgRelation, to: &str) {
    // SAFETY: catalog lookup on the main thread for an open relation.
    let owner = unsafe { pg_sys::pg_class_ownercheck(table.oid(), pg_sys::GetUserId()) };
    if !owner {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("must be owner of foreign table \"{}\" to {to}", table.name()),
            None,
        );
    }
}

/// `hudi.version()`: the extension version and the Hudi table versions it reads and writes.
#[pg_extern(immutable, parallel_safe)]
fn version() -> String {
    let read: Vec<String> = engine::READ_TABLE_VERSIONS.iter().map(u32::to_string).collect();
    format!(
        "pg_hudi {} (reads Hudi table versions {}; writes {})",
        env!("CARGO_PKG_VERSION"),
        read.join(", "),
        engine::WRITE_TABLE_VERSION
    )
}

/// `hudi.table_properties(location)`: the `hoodie.properties` of the Hudi table at `location`
/// (a URI as in `base_uri`), unescaped and checksum-verified, one row per key.
#[pg_extern(volatile, parallel_safe)]
fn table_properties(
    location: &str,
) -> TableIterator<'static, (name!(key, String), name!(value, String))> {
    use crate::error::OrReport;
    use engine::storage::{Storage, StorageUri};

    let uri = StorageUri::parse(location).or_report();
    crate::fdw::options::check_location_access(&uri);
    let storage = Storage::open(&uri, &Default::default()).or_report();
    let config = crate::runtime::block_on(engine::table::load_config(&storage)).or_report();
    let rows: Vec<(String, String)> =
        config.properties.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    TableIterator::new(rows)
}
