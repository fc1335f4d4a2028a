//! Prepared marks (`.hoodie/.aux/pg_hudi/prepared/<instant>`): a write whose completion was
//! decided elsewhere (by a PostgreSQL transaction on one server) says so before that decision
//! is taken, with who decides. A rollback of failed writes on another server must not roll it
//! back, since it cannot know whether the decision was to commit; the deciding server finishes
//! or rolls it back. Java and other Hudi readers ignore `.hoodie/.aux/`.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;

pub const PREPARED_DIR: &str = ".hoodie/.aux/pg_hudi/prepared";

/// Who decides whether a prepared write commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedMark {
    /// The deciding server ([`crate::write::WriterId::node`]).
    pub node: u64,
    /// The deciding transaction on that server, in that server's own numbering (only it can
    /// tell what became of it).
    pub transaction: u64,
}

fn path(instant: &str) -> String {
    format!("{PREPARED_DIR}/{instant}")
}

/// Marks the write `instant` as prepared, to be decided by `mark`.
pub async fn mark(storage: &Storage, instant: &str, mark: &PreparedMark) -> Result<()> {
    let json = serde_json::to_vec(mark).map_err(|e| Error::new(ErrorKind::Internal, "cannot encode a prepared mark").with_source(e))?;
    storage.put(&path(instant), Bytes::from(json)).await
}

/// The prepared mark of the write `instant`, if it has one.
pub async fn read(storage: &Storage, instant: &str) -> Result<Option<PreparedMark>> {
    let Some(bytes) = storage.get_if_exists(&path(instant)).await? else { return Ok(None) };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::new(ErrorKind::Corrupt, format!("invalid prepared mark of write {instant}")).with_source(e))
}

/// The instants of the writes marked prepared now.
pub async fn marked(storage: &Storage) -> Result<Vec<String>> {
    Ok(storage.list_dir(PREPARED_DIR).await?.into_iter().map(|(name, _)| name).collect())
}

/// Removes the mark of a write that was completed or rolled back.
pub async fn clear(storage: &Storage, instant: &str) -> Result<()> {
    storage.delete(&path(instant)).await
}
