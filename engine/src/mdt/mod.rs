//! A table's metadata table (`.hoodie/metadata`, Hudi 1.x): itself a merge-on-read table whose
//! partitions index the data table — `files` lists its data files ([`files`]), stored as HFiles
//! ([`hfile`]) — and that this engine keeps in step with its writes ([`writer`]).

pub mod column_stats;
pub mod files;
pub mod hfile;
mod hfile_write;
mod partition;
pub mod writer;
