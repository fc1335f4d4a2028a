//! The pg_hudi table engine: the Apache Hudi on-disk format (hudi-format.md), read and written
//! on any `object_store`. Plain Rust; it knows nothing of PostgreSQL.

mod avro;
pub mod error;
pub mod log;
pub mod lookup;
pub mod mdt;
pub mod ordering;
pub mod read;
pub mod services;
pub mod storage;
pub mod table;
pub mod threads;
pub mod timeline;
pub mod view;
pub mod write;

pub use error::{Error, ErrorKind, Result};

/// Hudi table versions this engine reads (6 = Hudi 0.14/0.15, 8 = 1.0, 9 = 1.1).
pub const READ_TABLE_VERSIONS: &[u32] = &[6, 8, 9];

/// The table version this engine writes (timeline layout 2 with completion times).
pub const WRITE_TABLE_VERSION: u32 = 8;
