//! SQL functions in schema `hudi`.

pub mod archive;
pub mod args;
pub mod clean;
pub mod compaction;
pub mod consumers;
pub mod create;
pub mod lookup;
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
/// (a URI as in `base_uri`), unescaped and checksum-verified, one row per key. The location
/// must lie below the `base_uri` of a `hudi_fdw` server the role has USAGE on (and, on
/// `file://`, be one it may use); the store is opened with the role's user mapping of it. A
/// superuser may name any location.
#[pg_extern(volatile, parallel_safe)]
fn table_properties(location: Option<&str>) -> TableIterator<'static, (name!(key, String), name!(value, String))> {
    use crate::error::OrReport;
    use engine::storage::{Storage, StorageUri};

    let uri = StorageUri::parse(args::name(location, "location")).or_report();
    crate::fdw::options::check_location_access(&uri);
    // SAFETY: catalog lookups on the main thread.
    let settings = match usable_server_holding(&uri) {
        Some(server) => unsafe { crate::fdw::table::store_settings(pg_sys::GetUserId(), server, &uri) },
        // A superuser may read any location (with no credentials but the defaults).
        None if unsafe { pg_sys::superuser() } => Default::default(),
        None => crate::error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("permission denied for location \"{uri}\""),
            Some("The location must lie below the base_uri of a hudi_fdw server you have USAGE on.".into()),
        ),
    };
    engine::storage::local::set_creation_mode(crate::guc::file_mode());
    let storage = Storage::open(&uri, &settings).or_report();
    let config = crate::runtime::block_on(engine::table::load_config(&storage)).or_report();
    let rows: Vec<(String, String)> = config.properties.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    TableIterator::new(rows)
}

/// A `hudi_fdw` server the current role has USAGE on whose `base_uri` holds `uri`.
fn usable_server_holding(uri: &engine::storage::StorageUri) -> Option<pg_sys::Oid> {
    let servers: Vec<(pg_sys::Oid, Vec<String>)> = crate::role::pinned_search_path(|| {
        Spi::connect(|client| {
            client
                .select(
                    "SELECT s.oid, s.srvoptions FROM pg_catalog.pg_foreign_server s \
                     JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid OPERATOR(pg_catalog.=) s.srvfdw \
                     WHERE w.fdwname OPERATOR(pg_catalog.=) 'hudi_fdw' AND pg_catalog.has_server_privilege(s.oid, 'USAGE') \
                     ORDER BY s.oid",
                    None,
                    &[],
                )
                .unwrap_or_else(|e| crate::error::spi_failed("listing servers", e))
                .filter_map(|row| Some((row.get::<pg_sys::Oid>(1).ok()??, row.get::<Vec<String>>(2).ok()??)))
                .collect()
        })
    });
    servers.into_iter().find_map(|(oid, options)| {
        let base = options.iter().find_map(|o| o.strip_prefix("base_uri="))?;
        engine::storage::StorageUri::parse(base).ok().filter(|base| uri.is_within(base)).map(|_| oid)
    })
}
