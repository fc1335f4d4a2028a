//! Table services: compaction and rollback of failed writes (cleaning and archival come next).

pub mod compaction;
pub mod rollback;
