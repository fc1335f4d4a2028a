//! SQL functions in schema `hudi`.

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
