//! Table services: rollback of failed writes (compaction, cleaning and archival come next).

pub mod rollback;
