//! Table services: compaction, cleaning, archival and rollback of failed writes.

pub mod archive;
pub mod clean;
pub mod compaction;
pub mod consumers;
pub mod lease;
pub mod progress;
pub mod rollback;
#[cfg(test)]
mod replaced_tests;
