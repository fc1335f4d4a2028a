//! Writer heartbeats (`.hoodie/.heartbeat/<instant>`): an open write refreshes its file while
//! it works; a pending instant whose heartbeat is older than the expiry belongs to a writer
//! that died, and may be rolled back.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::error::{ErrorKind, Result};
use crate::storage::Storage;

pub const HEARTBEAT_DIR: &str = ".hoodie/.heartbeat";

fn path(instant: &str) -> String {
    format!("{HEARTBEAT_DIR}/{instant}")
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as i64
}

/// Records that the writer of `instant` is alive now.
pub async fn beat(storage: &Storage, instant: &str) -> Result<()> {
    storage.put(&path(instant), Bytes::from(now_ms().to_string())).await
}

/// Removes the heartbeat of a finished write.
pub async fn stop(storage: &Storage, instant: &str) -> Result<()> {
    storage.delete(&path(instant)).await
}

/// Whether the writer of `instant` has not been heard of for `expiry`: by its heartbeat, or
/// without one by the instant's own time.
pub async fn expired(storage: &Storage, instant: &str, expiry: Duration) -> Result<bool> {
    let last = match storage.get(&path(instant)).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().parse::<i64>().ok(),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let last = last.or_else(|| crate::write::time::parse_instant(instant)).unwrap_or(0);
    Ok(now_ms() - last > expiry.as_millis() as i64)
}
