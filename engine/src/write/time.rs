//! Instant times and the table lock (hudi-format.md §2.1; DESIGN invariant 2). Every writer of a
//! table — in this process, other backends, other servers — takes instant and completion times
//! under one lock in the table's own storage. Times are strictly increasing across all of them.
//!
//! The lock is a sequence of epochs, `.hoodie/.locks/epochs/<n>`, each created with
//! create-if-absent: the one writer whose create of epoch `n + 1` succeeds holds the lock. It
//! holds it until it writes `<n>.released` or its lease runs out; nothing is ever deleted or
//! overwritten to take the lock, so writers that break one expired lease at the same moment
//! race on one create, and exactly one wins. A holder that stalled past its lease learns it
//! has lost the lock before it issues a time or completes an instant ([`TableLock::check`]),
//! and issues nothing after that. Each epoch records a floor: every time issued before it is
//! at most the floor (the last time of a released epoch, or the lease end of an expired one,
//! whose holder issued nothing later), and the holder issues times above it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;
use crate::write::epochs::Epochs;
use crate::write::storage_lock::{StorageLock, StorageLockSettings};

/// The folder of the lock's epochs, relative to the table's base path.
pub const LOCK_DIR: &str = ".hoodie/.locks/epochs";
/// Where earlier versions of this engine recorded the last time issued.
const LEGACY_LAST_TIME_PATH: &str = ".hoodie/.locks/last_instant";

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
    /// Hudi's storage-based lock, taken too when the table's other writers (Spark, Flink) use
    /// it ([`crate::write::storage_lock`]): before this engine's, by every holder.
    pub storage_lock: StorageLockUse,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            lease: Duration::from_secs(60),
            timeout: Duration::from_secs(120),
            max_clock_skew: Duration::ZERO,
            pause_before_completing: Duration::ZERO,
            storage_lock: StorageLockUse::Off,
        }
    }
}

impl LockOptions {
    /// A holder acts only while at least this much of its lease is left, so that what it
    /// starts finishes before others may break the lease.
    fn margin(&self) -> u128 {
        (self.lease.as_millis() / 4).max(1)
    }
}

/// When a writer takes Hudi's storage-based lock too (`hudi.storage_lock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageLockUse {
    Off,
    /// Where a writer took it before (its lock object exists): Spark or Flink writers of the
    /// table are configured with it.
    IfInUse(StorageLockSettings),
    /// Always, creating its lock object (before the table's other writers first take it).
    Always(StorageLockSettings),
}

/// The content of an epoch.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Epoch {
    owner: String,
    expires_at_ms: u128,
    /// Every time issued before this epoch is at most this (ms since the epoch).
    floor_ms: i64,
    /// Random, so that no two contenders ever write the same content: a create that meets
    /// its own bytes counts as its own ([`Storage::put_if_absent`]), and two servers cloned
    /// from one backup share a system identifier, containers their process ids.
    #[serde(default)]
    nonce: u64,
}

/// A random number, from the standard library's per-process random hash keys.
pub(crate) fn random_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(now_ms());
    hasher.finish()
}

pub(crate) fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis()
}

/// Formats milliseconds since the epoch as a Hudi instant (`yyyyMMddHHmmssSSS`, UTC).
pub fn format_instant(epoch_ms: i64) -> String {
    let time = DateTime::<Utc>::from_timestamp_millis(epoch_ms).unwrap_or_default();
    time.format("%Y%m%d%H%M%S%3f").to_string()
}

/// The last time an instant can name: 9999-12-31 23:59:59.999 UTC.
const MAX_TIME_MS: i64 = 253_402_300_799_999;

/// Parses a 17-digit instant back to milliseconds since the epoch.
pub fn parse_instant(instant: &str) -> Option<i64> {
    let time = chrono::NaiveDateTime::parse_from_str(instant, "%Y%m%d%H%M%S%3f").ok()?;
    Some(time.and_utc().timestamp_millis())
}

/// The table lock's epochs.
const EPOCHS: Epochs = Epochs { dir: LOCK_DIR };

/// The table lock: one epoch, held until [`TableLock::release`] or until its lease runs out.
/// Take it through [`TableLock::hold`], which releases it on every path.
pub struct TableLock<'a> {
    storage: &'a Storage,
    epoch: u64,
    expires_at_ms: u128,
    margin_ms: u128,
    /// The last time issued in this epoch, or the epoch's floor.
    last_ms: std::cell::Cell<i64>,
    /// Hudi's storage-based lock, held with this one ([`LockOptions::storage_lock`]).
    hudi: Option<StorageLock>,
}

impl<'a> TableLock<'a> {
    /// Runs `body` holding the lock for `owner`, and releases the lock whatever `body`
    /// returns. A future dropped midway leaves the lock to its lease; callers that answer
    /// cancels by dropping futures wait while [`holding_a_lock`].
    pub async fn hold<T>(
        storage: &'a Storage,
        owner: &str,
        options: &LockOptions,
        body: impl AsyncFnOnce(&TableLock<'a>) -> Result<T>,
    ) -> Result<T> {
        let hudi = match options.storage_lock {
            StorageLockUse::Off => None,
            StorageLockUse::IfInUse(settings) => StorageLock::acquire(storage, settings, options.timeout, false).await?,
            StorageLockUse::Always(settings) => StorageLock::acquire(storage, settings, options.timeout, true).await?,
        };
        let lock = match TableLock::acquire(storage, owner, options).await {
            Ok(mut lock) => {
                lock.hudi = hudi;
                lock
            }
            Err(e) => {
                if let Some(hudi) = hudi {
                    // Best effort: its lease runs out otherwise.
                    let _ = hudi.release().await;
                }
                return Err(e);
            }
        };
        let result = body(&lock).await;
        let released = lock.release().await;
        let value = result?;
        released?;
        Ok(value)
    }

    /// Takes the lock for `owner`: creates the epoch after the latest one once that one is
    /// released or its lease has run out.
    async fn acquire(storage: &'a Storage, owner: &str, options: &LockOptions) -> Result<TableLock<'a>> {
        let deadline = std::time::Instant::now() + options.timeout;
        let mut backoff = Duration::from_millis(1);
        loop {
            match Self::try_acquire(storage, owner, options).await? {
                Some(lock) => return Ok(lock),
                None if std::time::Instant::now() >= deadline => {
                    return Err(Error::new(
                        ErrorKind::Storage,
                        format!("timed out after {:?} waiting for the table lock {}/{LOCK_DIR}", options.timeout, storage.uri()),
                    ));
                }
                None => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
            }
        }
    }

    /// One attempt: the lock, or `None` when it is held or another writer took it first.
    async fn try_acquire(storage: &'a Storage, owner: &str, options: &LockOptions) -> Result<Option<TableLock<'a>>> {
        let names = EPOCHS.list(storage).await?;
        let mut latest = None;
        let floor_ms = match Epochs::latest(&names) {
            None => match storage.get_if_exists(LEGACY_LAST_TIME_PATH).await? {
                Some(bytes) => String::from_utf8_lossy(&bytes).trim().parse::<i64>().unwrap_or(0),
                None => 0,
            },
            Some((epoch, released)) => {
                let Some(bytes) = storage.get_if_exists(&EPOCHS.name(epoch)).await? else { return Ok(None) };
                let held: Epoch = EPOCHS.parse(storage, &EPOCHS.name(epoch), &bytes)?;
                latest = Some(bytes);
                if released {
                    match EPOCHS.read::<i64>(storage, &EPOCHS.released_name(epoch)).await? {
                        Some(last) => last.max(held.floor_ms),
                        None => return Ok(None),
                    }
                } else if held.expires_at_ms.saturating_add(options.max_clock_skew.as_millis()) < now_ms() {
                    // Its holder issued nothing after its lease ended (by its own clock, which
                    // may be behind ours by the allowed skew).
                    i64::try_from(held.expires_at_ms).unwrap_or(i64::MAX).max(held.floor_ms)
                } else {
                    return Ok(None);
                }
            }
        };
        // Times come from clocks: a floor past the last instant there can be is a damaged (or
        // foreign) epoch, and times above it could not be issued, nor counted up to.
        if floor_ms > MAX_TIME_MS {
            return Err(Error::new(
                ErrorKind::Corrupt,
                format!("the table lock {}/{LOCK_DIR} records a time past the year 9999 ({floor_ms} ms)", storage.uri()),
            ));
        }
        let expires_at_ms = now_ms() + options.lease.as_millis();
        let content = Epoch { owner: owner.to_owned(), expires_at_ms, floor_ms, nonce: random_nonce() };
        let bytes = Bytes::from(serde_json::to_vec(&content).unwrap_or_default());
        let Some(epoch) = EPOCHS.create_next(storage, &names, latest, bytes).await? else { return Ok(None) };
        HELD.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Some(TableLock { storage, epoch, expires_at_ms, margin_ms: options.margin(), last_ms: std::cell::Cell::new(floor_ms), hudi: None }))
    }

    /// Fails unless this holder still holds the lock with enough lease left to act: called
    /// before every time it issues and every instant it completes.
    pub async fn check(&self) -> Result<()> {
        let lost = |why: &str| {
            Err(Error::new(
                ErrorKind::InUse,
                format!("lost the table lock {}/{LOCK_DIR} (epoch {}): {why}", self.storage.uri(), self.epoch),
            ))
        };
        if now_ms() + self.margin_ms > self.expires_at_ms {
            return lost("its lease ran out");
        }
        if let Some(hudi) = &self.hudi {
            hudi.check(Duration::from_millis(self.margin_ms as u64)).await?;
        }
        match Epochs::latest(&EPOCHS.list(self.storage).await?) {
            Some((latest, _)) if latest > self.epoch => lost("another writer took it after the lease ran out"),
            _ => Ok(()),
        }
    }

    /// A new time, later than every time issued before under this lock.
    pub async fn next_time(&self, options: &LockOptions) -> Result<String> {
        if !options.max_clock_skew.is_zero() {
            tokio::time::sleep(options.max_clock_skew).await;
        }
        self.check().await?;
        let time = (now_ms() as i64).max(self.last_ms.get() + 1);
        self.last_ms.set(time);
        Ok(format_instant(time))
    }

    /// Releases the lock, recording the last time issued for the next holder. Writing the
    /// mark after the lease ran out is harmless: it holds the last time this holder issued,
    /// and once a later epoch exists nobody reads it.
    async fn release(mut self) -> Result<()> {
        let last = Bytes::from(self.last_ms.get().to_string());
        let released = EPOCHS.release(self.storage, self.epoch, last).await;
        if let Some(hudi) = self.hudi.take() {
            hudi.release().await?;
        }
        released
    }
}

impl Drop for TableLock<'_> {
    fn drop(&mut self) {
        HELD.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// How many table locks this process holds now.
static HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether this process holds a table lock now. A caller that would drop a future on a cancel
/// waits while this is true: a dropped holder cannot release its lock (it would be left to
/// its lease), nor stop a storage write already on its way, which could land after a later
/// holder's completion time.
pub fn holding_a_lock() -> bool {
    HELD.load(std::sync::atomic::Ordering::SeqCst) > 0 || crate::write::storage_lock::holding()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageUri;

    fn storage(name: &str) -> Storage {
        Storage::open(&StorageUri::parse(&format!("memory:///{name}")).unwrap(), &Default::default()).unwrap()
    }

    /// With `hudi.storage_lock`, the table lock is held inside Hudi's storage-based lock: where
    /// the table's writers use it (its object exists) or always; a writer holding it (a Java
    /// one) keeps this engine's writers out until it releases it or its lease lapses.
    #[tokio::test]
    async fn hudis_storage_lock_is_held_with_the_table_lock_where_it_is_in_use() {
        use crate::write::storage_lock::LOCK_OBJECT;
        let s = storage(&format!("hudi-storage-lock-{}", random_nonce()));
        let settings = StorageLockSettings::default();
        let if_in_use = LockOptions { storage_lock: StorageLockUse::IfInUse(settings), timeout: Duration::from_millis(300), ..Default::default() };
        let object = |s: Storage| async move { s.get_if_exists(LOCK_OBJECT).await.unwrap().map(|b| serde_json::from_slice::<serde_json::Value>(&b).unwrap()) };
        TableLock::hold(&s, "w", &if_in_use, async |_| Ok(())).await.unwrap();
        assert_eq!(object(s.clone()).await, None, "not used by the table's writers: not created");
        let always = LockOptions { storage_lock: StorageLockUse::Always(settings), ..if_in_use.clone() };
        let inside = TableLock::hold(&s, "w", &always, async |lock| {
            lock.check().await?;
            Ok(object(s.clone()).await.unwrap())
        })
        .await
        .unwrap();
        assert_eq!(inside["expired"], false);
        let after = object(s.clone()).await.unwrap();
        assert_eq!((after["expired"].clone(), after["owner"].clone()), (serde_json::Value::Bool(true), inside["owner"].clone()));
        // A Java writer holds it: this engine's writers wait, then give up.
        let java = |valid_until: u128| Bytes::from(format!(r#"{{"expired":false,"validUntil":{valid_until},"owner":"java"}}"#));
        s.put(LOCK_OBJECT, java(now_ms() + 60_000)).await.unwrap();
        let waited = TableLock::hold(&s, "w", &if_in_use, async |_| Ok(())).await.unwrap_err();
        assert!(waited.to_string().contains("storage-based lock"), "{waited}");
        assert_eq!(EPOCHS.list(&s).await.unwrap().len(), 4, "the table lock was not taken meanwhile");
        s.put(LOCK_OBJECT, java(now_ms() - 1_000)).await.unwrap();
        TableLock::hold(&s, "w", &if_in_use, async |_| Ok(())).await.unwrap();
        assert_ne!(object(s.clone()).await.unwrap()["owner"], "java");
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

    /// Lock epochs with numbers or times no writer issues (a damaged or foreign file) are an
    /// error, or a lock never free; not an arithmetic overflow (a panic in debug builds, a
    /// wrapped time in release builds).
    #[tokio::test]
    async fn damaged_epochs_are_errors_not_overflows() {
        let epoch = |expires: &str, floor: &str| Bytes::from(format!(r#"{{"owner":"x","expires_at_ms":{expires},"floor_ms":{floor}}}"#));
        let options = LockOptions { timeout: Duration::from_millis(100), max_clock_skew: Duration::from_millis(1), ..Default::default() };

        // A lease that never ends: the lock is never free.
        let s = storage("damaged-lease");
        s.put(&EPOCHS.name(1), epoch(&u128::MAX.to_string(), "0")).await.unwrap();
        let err = TableLock::acquire(&s, "w", &options).await.err().unwrap();
        assert!(err.to_string().contains("timed out"), "{err}");

        // A last time past any instant (year 9999): later times cannot be issued.
        let s = storage("damaged-release");
        s.put(&EPOCHS.name(1), epoch("0", "0")).await.unwrap();
        s.put(&EPOCHS.released_name(1), Bytes::from(i64::MAX.to_string())).await.unwrap();
        let err = TableLock::hold(&s, "w", &options, async |lock| lock.next_time(&options).await).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");

        let s = storage("damaged-floor");
        s.put(&EPOCHS.name(1), epoch("0", &i64::MAX.to_string())).await.unwrap();
        let err = TableLock::hold(&s, "w", &options, async |lock| lock.next_time(&options).await).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");

        // The last epoch number there is: no next one.
        let s = storage("damaged-number");
        s.put(&EPOCHS.name(u64::MAX), epoch("0", "0")).await.unwrap();
        s.put(&EPOCHS.released_name(u64::MAX), Bytes::from("0")).await.unwrap();
        let err = TableLock::acquire(&s, "w", &options).await.err().unwrap();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    }

    #[tokio::test]
    async fn a_held_lock_is_counted_while_it_is_held() {
        let s = storage("held");
        let options = LockOptions::default();
        TableLock::hold(&s, "one", &options, async |_| {
            assert!(holding_a_lock());
            Ok(())
        })
        .await
        .unwrap();
    }
}
