//! Instant times and the table lock (hudi-format.md §2.1; DESIGN invariant 2). Every writer of a
//! table — in this process, other backends, other servers — takes instant and completion times
//! under one lock object in the table's own storage, created with create-if-absent and held
//! for a lease; a crashed holder's lease expires. Times are strictly increasing across all of
//! them: each is later than the last one issued, which is recorded next to the lock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;

/// The lock object, relative to the table's base path.
pub const LOCK_PATH: &str = ".hoodie/.locks/table.lock";
/// The last time issued under the lock.
pub const LAST_TIME_PATH: &str = ".hoodie/.locks/last_instant";

/// How writers take the lock.
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// How long a holder owns the lock before others may break it.
    pub lease: Duration,
    /// How long to keep trying before giving up.
    pub timeout: Duration,
    /// Bound on clock skew between servers: waited under the lock before taking a time, as
    /// Hudi's skew-adjusting time generator does, so that times follow real order too.
    pub max_clock_skew: Duration,
    /// Crash tests only: how long a commit waits, holding the lock, between taking its
    /// completion time and creating the completed instant.
    pub pause_before_completing: Duration,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            lease: Duration::from_secs(60),
            timeout: Duration::from_secs(120),
            max_clock_skew: Duration::ZERO,
            pause_before_completing: Duration::ZERO,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct LockContent {
    owner: String,
    expires_at_ms: u128,
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis()
}

/// Formats milliseconds since the epoch as a Hudi instant (`yyyyMMddHHmmssSSS`, UTC).
pub fn format_instant(epoch_ms: i64) -> String {
    let time = DateTime::<Utc>::from_timestamp_millis(epoch_ms).unwrap_or_default();
    time.format("%Y%m%d%H%M%S%3f").to_string()
}

/// Parses a 17-digit instant back to milliseconds since the epoch.
pub fn parse_instant(instant: &str) -> Option<i64> {
    let time = chrono::NaiveDateTime::parse_from_str(instant, "%Y%m%d%H%M%S%3f").ok()?;
    Some(time.and_utc().timestamp_millis())
}

/// The table lock, held until [`TableLock::release`].
pub struct TableLock<'a> {
    storage: &'a Storage,
    content: Bytes,
}

impl<'a> TableLock<'a> {
    /// Takes the lock for `owner`, breaking a lock whose lease expired.
    pub async fn acquire(storage: &'a Storage, owner: &str, options: &LockOptions) -> Result<TableLock<'a>> {
        let deadline = std::time::Instant::now() + options.timeout;
        let mut backoff = Duration::from_millis(2);
        loop {
            let content = LockContent { owner: owner.to_owned(), expires_at_ms: now_ms() + options.lease.as_millis() };
            let bytes = Bytes::from(serde_json::to_vec(&content).unwrap_or_default());
            if storage.put_if_absent(LOCK_PATH, bytes.clone()).await? {
                return Ok(TableLock { storage, content: bytes });
            }
            // Someone holds it: break it only when its lease has run out.
            match storage.get(LOCK_PATH).await {
                Ok(held) => {
                    let expired = serde_json::from_slice::<LockContent>(&held)
                        .map_or(true, |h| h.expires_at_ms < now_ms());
                    if expired && storage.get(LOCK_PATH).await.ok().as_ref() == Some(&held) {
                        storage.delete(LOCK_PATH).await?;
                        continue;
                    }
                }
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            if std::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Storage,
                    format!("timed out after {:?} waiting for the table lock {}/{LOCK_PATH}", options.timeout, storage.uri()),
                ));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(100));
        }
    }

    /// A new time, later than every time issued before under this lock.
    pub async fn next_time(&self, options: &LockOptions) -> Result<String> {
        if !options.max_clock_skew.is_zero() {
            tokio::time::sleep(options.max_clock_skew).await;
        }
        let last = match self.storage.get(LAST_TIME_PATH).await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).trim().parse::<i64>().ok(),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let now = now_ms() as i64;
        let time = last.map_or(now, |l| now.max(l + 1));
        self.storage.put(LAST_TIME_PATH, Bytes::from(time.to_string())).await?;
        Ok(format_instant(time))
    }

    /// Releases the lock (only if it is still ours).
    pub async fn release(self) -> Result<()> {
        if self.storage.get(LOCK_PATH).await.ok().as_ref() == Some(&self.content) {
            self.storage.delete(LOCK_PATH).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageUri;

    fn storage(name: &str) -> Storage {
        Storage::open(&StorageUri::parse(&format!("memory:///{name}")).unwrap(), &Default::default()).unwrap()
    }

    #[test]
    fn instants_format_and_parse() {
        assert_eq!(format_instant(0), "19700101000000000");
        assert_eq!(parse_instant("20261130120000123"), Some(1_796_040_000_123));
        assert_eq!(format_instant(1_796_040_000_123), "20261130120000123");
    }

    #[tokio::test]
    async fn times_strictly_increase_across_lock_holders() {
        let s = storage("time-increase");
        let options = LockOptions::default();
        let mut times = Vec::new();
        for i in 0..50 {
            let lock = TableLock::acquire(&s, &format!("w{i}"), &options).await.unwrap();
            times.push(lock.next_time(&options).await.unwrap());
            lock.release().await.unwrap();
        }
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    }

    #[tokio::test]
    async fn a_crashed_holders_lease_expires() {
        let s = storage("lease");
        let short = LockOptions { lease: Duration::from_millis(50), timeout: Duration::from_secs(5), ..Default::default() };
        let crashed = TableLock::acquire(&s, "crashed", &short).await.unwrap();
        std::mem::forget(crashed); // never released
        let started = std::time::Instant::now();
        let next = TableLock::acquire(&s, "next", &short).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(20));
        next.release().await.unwrap();

        // A live lock is not broken: the second writer times out.
        let held = TableLock::acquire(&s, "held", &LockOptions::default()).await.unwrap();
        let impatient = LockOptions { timeout: Duration::from_millis(100), ..Default::default() };
        let err = TableLock::acquire(&s, "impatient", &impatient).await.err().unwrap();
        assert!(err.to_string().contains("timed out"), "{err}");
        held.release().await.unwrap();
    }
}
