//! pg_hudi: PostgreSQL as an engine on Apache Hudi merge-on-read tables.
//!
//! This crate is the thin PostgreSQL side: the foreign-data wrapper, SQL functions, transaction
//! glue and the background worker. Everything about the Hudi format lives in the `engine` crate.

use pgrx::prelude::*;

mod activity;
mod api;
mod buffer;
mod datum;
mod error;
mod fdw;
mod guc;
mod intents;
mod locks;
mod role;
mod runtime;
mod services;
mod spi;
mod stream;
mod subscription;
mod worker;
mod writer;
mod xact;

::pgrx::pg_module_magic!();

/// The schema of the helpers that views and `hudi.consume` call, out of the user's way: pgrx
/// creates it for the functions declared `schema = "hudi_internal"`; sql/comments.sql lets every
/// role use it (each helper checks the caller's privileges, as the `hudi.*` functions do).
#[pg_schema]
mod hudi_internal {
    use pgrx::prelude::*;

    /// The row trigger of a table `hudi.mirror` mirrors ([`crate::buffer::mirror`]).
    #[pg_trigger]
    fn mirror_row<'a>(trigger: &'a PgTrigger<'a>) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgTriggerError> {
        crate::buffer::mirror::row_trigger(trigger);
        Ok(None)
    }

    /// The TRUNCATE trigger of a table `hudi.mirror` mirrors.
    #[pg_trigger]
    fn mirror_truncate<'a>(trigger: &'a PgTrigger<'a>) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgTriggerError> {
        crate::buffer::mirror::truncate_trigger(trigger);
        Ok(None)
    }
}

// The wrapper itself: hand-written SQL, created after the validator function it names.
extension_sql_file!("../sql/fdw.sql", name = "fdw", requires = [fdw::options::hudi_fdw_validator]);
extension_sql_file!(
    "../sql/consume.sql",
    name = "consume",
    requires = [
        "fdw",
        api::tables::latest_commit,
        api::consumers::claim_consumer_position,
        api::consumers::advance_consumer_position,
        api::consumers::consumer_position,
        api::consumers::wait_for_commit
    ]
);
extension_sql_file!("../sql/commit_intents.sql", name = "commit_intents", requires = ["fdw"]);
extension_sql_file!("../sql/buffer.sql", name = "buffer", requires = ["fdw"]);
extension_sql_file!("../sql/subscriptions.sql", name = "subscriptions", requires = ["fdw", api::lookup::lookup_cache_lag]);
extension_sql_file!("../sql/services.sql", name = "services", requires = ["fdw", hudi_internal]);
extension_sql_file!("../sql/lookup.sql", name = "lookup", requires = ["services", api::lookup::lookup_cache_bytes, api::lookup::lookup_cache_progress, api::lookup::lookup_cache_position, api::lookup::lookup_cache_lag]);
extension_sql_file!("../sql/comments.sql", name = "comments", finalize);

/// Library load: GUCs always; the background worker only when loaded at server start.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    error::keep_panic_backtraces_in_the_server_log();
    guc::register();
    fdw::on_conflict::install();
    fdw::alter::install();
    // SAFETY: a plain global set by the postmaster while it loads preload libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        worker::register();
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn version_names_the_table_versions() {
        let version = Spi::get_one::<String>("SELECT hudi.version()").unwrap().unwrap();
        assert!(version.starts_with(&format!("pg_hudi {}", env!("CARGO_PKG_VERSION"))), "{version}");
        assert!(version.contains("reads Hudi table versions 6, 8, 9"), "{version}");
        assert!(version.contains("writes 8"), "{version}");
    }

    #[pg_test]
    fn server_keeps_a_valid_base_uri() {
        Spi::run("CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 's3://bucket/lake')")
            .unwrap();
        let options = Spi::get_one::<Vec<String>>("SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'lake'")
            .unwrap()
            .unwrap();
        assert_eq!(options, ["base_uri=s3://bucket/lake"]);
    }

    #[pg_test]
    #[should_panic(expected = "invalid option \"bogus\" for a hudi_fdw server; valid options: base_uri")]
    fn unknown_server_option_is_rejected_with_the_valid_ones() {
        Spi::run("CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw OPTIONS (base_uri 'memory:///x', bogus '1')")
            .unwrap();
    }

    #[pg_test]
    #[should_panic(expected = "hudi_fdw servers need the option base_uri")]
    fn server_without_base_uri_is_rejected() {
        Spi::run("CREATE SERVER lake FOREIGN DATA WRAPPER hudi_fdw").unwrap();
    }

    /// The backend's runtime drives engine I/O, and engine errors arrive as PostgreSQL errors.
    #[pg_test]
    #[should_panic(expected = "object not found")]
    fn runtime_drives_engine_io_and_errors_become_ereports() {
        use engine::storage::{Storage, StorageUri};
        let uri = StorageUri::parse("memory:///pg-test").unwrap();
        let storage = Storage::open(&uri, &Default::default()).unwrap();
        crate::runtime::block_on(storage.put("a", bytes_of("hello"))).unwrap();
        let read = crate::runtime::block_on(storage.get("a")).unwrap();
        assert_eq!(&read[..], b"hello");
        let missing = crate::runtime::block_on(storage.get("b"));
        crate::error::OrReport::or_report(missing);
    }

    fn bytes_of(s: &'static str) -> engine::storage::Bytes {
        engine::storage::Bytes::from_static(s.as_bytes())
    }

    /// A panic for the test below: what a bug in the extension would do.
    #[pg_extern]
    fn panics_like_a_bug() {
        let empty: Vec<i32> = Vec::new();
        let _ = empty[std::hint::black_box(3)];
    }

    /// A panic becomes an ERROR with a one-line message and no backtrace for the client (the
    /// server runs these tests with RUST_BACKTRACE=1, which used to put ~190 lines in DETAIL).
    #[pg_test]
    fn a_panic_is_a_plain_error_without_a_backtrace() {
        let caught = PgTryBuilder::new(|| {
            Spi::run("SELECT tests.panics_like_a_bug()").unwrap();
            None
        })
        .catch_others(|e| match e {
            pgrx::pg_sys::panic::CaughtError::PostgresError(report)
            | pgrx::pg_sys::panic::CaughtError::ErrorReport(report)
            | pgrx::pg_sys::panic::CaughtError::RustPanic { ereport: report, .. } => Some(report),
        })
        .execute()
        .expect("the panic is an error");
        assert_eq!(caught.sql_error_code(), PgSqlErrorCode::ERRCODE_INTERNAL_ERROR);
        assert!(caught.message().contains("index out of bounds"), "{}", caught.message());
        assert_eq!(caught.message().lines().count(), 1, "{}", caught.message());
        let detail = caught.detail().unwrap_or_default();
        assert!(!detail.contains("backtrace") && !detail.contains("rust_begin_unwind") && detail.lines().count() <= 1, "{detail}");
    }

    #[pg_test]
    fn background_worker_runs_with_its_backend_type() {
        // The postmaster starts the worker asynchronously; give it a moment.
        let mut seen = 0;
        for _ in 0..100 {
            seen = Spi::get_one::<i64>(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_hudi launcher'",
            )
            .unwrap()
            .unwrap();
            if seen > 0 {
                break;
            }
            Spi::run("SELECT pg_sleep(0.1)").unwrap();
        }
        assert_eq!(seen, 1);
    }

    /// Scans build `numeric` values themselves: byte for byte what `numeric_in` makes of the
    /// same decimal text, for seeded random values of every scale the fast path takes.
    #[pg_test]
    fn numerics_are_built_as_numeric_in_builds_them() {
        use std::sync::Arc;
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let column_type = crate::datum::ColumnType::from_type_oid(pg_sys::NUMERICOID).unwrap();
        for scale in 0..=34i8 {
            let mut values: Vec<i128> = vec![0, 1, -1, 10i128.pow(37), -(10i128.pow(38) - 1), 10i128.pow(scale as u32)];
            for _ in 0..300 {
                let digits = 1 + next() % 38;
                let magnitude = ((next() as u128) << 64 | next() as u128) % 10u128.pow(digits as u32);
                // Trailing and leading zero digits, where the format strips them.
                let magnitude = if next() % 4 == 0 { magnitude / 10_000 * 10_000 } else { magnitude };
                values.push(if next() % 2 == 0 { magnitude as i128 } else { -(magnitude as i128) });
            }
            let array: arrow::array::ArrayRef = Arc::new(
                arrow::array::Decimal128Array::from(values.clone()).with_precision_and_scale(38, scale).unwrap(),
            );
            let mut reader = crate::datum::ColumnReader::new(column_type, &array);
            assert!(matches!(reader, crate::datum::ColumnReader::Numeric(..)));
            for (row, &value) in values.iter().enumerate() {
                let built = reader.datum(row).unwrap().unwrap();
                let text = crate::datum::decimal_text(value, scale);
                let expected = Spi::get_one::<pgrx::AnyNumeric>(&format!("SELECT '{text}'::numeric")).unwrap().unwrap();
                // SAFETY: both are plain numeric varlenas with 4-byte headers.
                unsafe {
                    let expected = pg_sys::pg_detoast_datum_packed(pgrx::IntoDatum::into_datum(expected).unwrap().cast_mut_ptr());
                    let expected = pg_sys::pg_detoast_datum(expected);
                    let size = pgrx::varsize_any(expected);
                    let a = std::slice::from_raw_parts(built.cast_mut_ptr::<u8>(), pgrx::varsize_any(built.cast_mut_ptr()));
                    let b = std::slice::from_raw_parts(expected as *const u8, size);
                    assert_eq!(a, b, "{text} at scale {scale}");
                }
            }
        }
    }
}

/// Hooks for `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_hudi'"]
    }
}
