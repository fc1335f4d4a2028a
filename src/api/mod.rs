//! SQL functions in schema `hudi`.

pub mod create;
pub mod tables;

use pgrx::prelude::*;

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
