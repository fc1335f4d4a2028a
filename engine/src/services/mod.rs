//! Table services: compaction, cleaning and rollback of failed writes (archival comes next).

pub mod archive;
pub mod clean;
pub mod compaction;
pub mod consumers;
pub mod lease;
pub mod rollback;
