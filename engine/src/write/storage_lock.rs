//! Hudi's storage-based lock (`StorageBasedLockProvider`, Hudi 1.1), taken so that this engine
//! and Spark or Flink writers configured with it exclude each other when they generate instants
//! and complete them. Facts from Hudi's Java source (`StorageBasedLockProvider`,
//! `StorageLockClient`, `StorageLockData`, `LockProviderHeartbeatManager`):
//!
//! - one object per table, `.hoodie/.locks/table_lock.json`, holding the JSON
//!   `{"expired":bool,"validUntil":<epoch ms>,"owner":"<uuid>"}`, never deleted;
//! - it is free when absent, `expired`, or more than 500 ms past `validUntil` by the reader's
//!   clock; a holder takes it with a conditional write on what it read (create-only when absent,
//!   else on the ETag or generation read), so of two contenders one wins and one gets 412;
//! - the holder renews `validUntil` (now + validity) every renewal interval with a write
//!   conditional on its own last version, and releases by writing `expired: true` the same
//!   way; a 412 on renewal means another writer took the lock (the lease had lapsed): this
//!   engine then refuses to act under it ([`StorageLock::check`]), where Java only logs.
//!
//! Java supports it on `s3://` and `gs://` only; object_store's local and in-memory stores
//! take the same conditional writes, so it works (and is tested) on them too.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::{Storage, Versioned};
use crate::write::time::now_ms;

/// Where the lock object is, relative to the table.
pub const LOCK_OBJECT: &str = ".hoodie/.locks/table_lock.json";
/// How far past `validUntil` another writer's clock may be before the lock counts as free.
const CLOCK_DRIFT_MS: u128 = 500;
/// How often a contender looks again while the lock is held (Java pauses a second; a shorter
/// pause costs a GET each time and finds short gaps between other holders).
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// `hoodie.write.lock.storage.*`: how long a lease lasts and how often the holder renews it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StorageLockSettings {
    /// `validity.timeout.secs` (default 300 s).
    pub validity: Duration,
    /// `renew.interval.secs` (default 30 s).
    pub renew: Duration,
}

impl Default for StorageLockSettings {
    fn default() -> Self {
        StorageLockSettings { validity: Duration::from_secs(300), renew: Duration::from_secs(30) }
    }
}

impl StorageLockSettings {
    /// Hudi's rules: a validity of at least ten seconds and of ten renewal intervals, a
    /// renewal interval of at least a second.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.renew < Duration::from_secs(1) {
            return Err("the renewal interval must be at least a second".into());
        }
        if self.validity < Duration::from_secs(10) || self.validity < self.renew * 10 {
            return Err("the validity must be at least ten seconds and ten renewal intervals".into());
        }
        Ok(())
    }
}

/// The lock object's content, as Java's Jackson writes it (field order included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LockData {
    expired: bool,
    #[serde(rename = "validUntil")]
    valid_until: u128,
    owner: String,
}

impl LockData {
    fn is_free(&self, now: u128) -> bool {
        self.expired || now > self.valid_until + CLOCK_DRIFT_MS
    }

    fn bytes(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("a lock serializes"))
    }
}

/// A random owner id, new for each acquisition as Java's are.
fn new_owner() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn damaged(storage: &Storage, e: serde_json::Error) -> Error {
    Error::new(ErrorKind::Corrupt, format!("the lock object {}/{LOCK_OBJECT} is not Hudi's lock", storage.uri()))
        .with_source(e)
        .with_hint("Java writers are blocked by it too; remove the object once no writer runs.")
}

/// What the holder knows of the object it wrote last.
struct Held {
    data: LockData,
    version: Versioned,
    /// Another writer took the lock (a renewal met a 412), or it was released.
    lost: Option<&'static str>,
}

/// What one attempt to take the lock came to.
pub enum Attempt {
    Held(StorageLock),
    /// Another writer holds it, or took it first.
    Busy,
    /// There is no lock object (and none was to be created): no writer of the table uses it.
    Unused,
}

impl Attempt {
    /// The lock, when the attempt took it.
    pub fn held(self) -> Option<StorageLock> {
        match self {
            Attempt::Held(lock) => Some(lock),
            _ => None,
        }
    }
}

/// Hudi's storage-based lock of one table, held until [`Self::release`]; renewed meanwhile.
pub struct StorageLock {
    storage: Storage,
    held: Arc<tokio::sync::Mutex<Held>>,
    renewer: tokio::task::JoinHandle<()>,
}

impl StorageLock {
    /// Takes the lock of the table at `storage`, trying again every [`RETRY_PAUSE`] until `timeout`;
    /// where no writer ever took it (there is no lock object), only with `create` — else
    /// `None`: the table's writers do not use it.
    pub async fn acquire(storage: &Storage, settings: StorageLockSettings, timeout: Duration, create: bool) -> Result<Option<StorageLock>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match Self::try_acquire(storage, settings, create).await? {
                Attempt::Held(lock) => return Ok(Some(lock)),
                Attempt::Unused => return Ok(None),
                Attempt::Busy => {}
            }
            if std::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Storage,
                    format!("timed out after {timeout:?} waiting for Hudi's storage-based lock {}/{LOCK_OBJECT}", storage.uri()),
                )
                .with_hint("Another writer (Spark, Flink or pg_hudi) holds it; it is free once released or past its validUntil."));
            }
            tokio::time::sleep(RETRY_PAUSE.min(deadline.saturating_duration_since(std::time::Instant::now()))).await;
        }
    }

    /// One attempt to take the lock (creating the lock object only with `create`).
    pub async fn try_acquire(storage: &Storage, settings: StorageLockSettings, create: bool) -> Result<Attempt> {
        let current = storage.get_versioned(LOCK_OBJECT).await?;
        let now = now_ms();
        let previous = match current {
            Some((bytes, version)) => {
                let data: LockData = serde_json::from_slice(&bytes).map_err(|e| damaged(storage, e))?;
                if !data.is_free(now) {
                    return Ok(Attempt::Busy);
                }
                Some(version)
            }
            None if create => None,
            None => return Ok(Attempt::Unused),
        };
        let data = LockData { expired: false, valid_until: now + settings.validity.as_millis(), owner: new_owner() };
        let Some(version) = storage.put_versioned(LOCK_OBJECT, data.bytes(), previous.as_ref()).await? else {
            return Ok(Attempt::Busy);
        };
        let held = Arc::new(tokio::sync::Mutex::new(Held { data, version, lost: None }));
        let renewer = tokio::spawn(renew(storage.clone(), settings, held.clone()));
        HELD.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Attempt::Held(StorageLock { storage: storage.clone(), held, renewer }))
    }

    /// Fails unless the lock is still this holder's with `margin` of its lease left.
    pub async fn check(&self, margin: Duration) -> Result<()> {
        let held = self.held.lock().await;
        let lost = |why: &str| {
            Err(Error::new(ErrorKind::InUse, format!("Hudi's storage-based lock of {} is no longer held: {why}", self.storage.uri())))
        };
        if let Some(why) = held.lost {
            return lost(why);
        }
        if now_ms() + margin.as_millis() > held.data.valid_until {
            return lost("its lease ran out");
        }
        Ok(())
    }

    /// The owner id written in the lock object.
    pub async fn owner(&self) -> String {
        self.held.lock().await.data.owner.clone()
    }

    /// Releases the lock: stops renewing it and writes it expired (conditional on this
    /// holder's last version; a 412 means another writer has it already).
    pub async fn release(self) -> Result<()> {
        let mut held = self.held.lock().await;
        self.renewer.abort();
        if held.lost.is_some() {
            return Ok(());
        }
        held.lost = Some("it was released");
        let data = LockData { expired: true, ..held.data.clone() };
        self.storage.put_versioned(LOCK_OBJECT, data.bytes(), Some(&held.version)).await?;
        Ok(())
    }
}

impl Drop for StorageLock {
    fn drop(&mut self) {
        // Not released (a dropped future): the lease runs out on its own.
        self.renewer.abort();
        HELD.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// How many of these locks this process holds now.
static HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether this process holds one now (see [`crate::write::time::holding_a_lock`]).
pub(crate) fn holding() -> bool {
    HELD.load(std::sync::atomic::Ordering::SeqCst) > 0
}

/// Renews the lease every `settings.renew` until the lock is lost or released.
async fn renew(storage: Storage, settings: StorageLockSettings, held: Arc<tokio::sync::Mutex<Held>>) {
    loop {
        tokio::time::sleep(settings.renew).await;
        let mut held = held.lock().await;
        if held.lost.is_some() {
            return;
        }
        let data = LockData { valid_until: now_ms() + settings.validity.as_millis(), ..held.data.clone() };
        match storage.put_versioned(LOCK_OBJECT, data.bytes(), Some(&held.version)).await {
            Ok(Some(version)) => {
                held.data = data;
                held.version = version;
            }
            Ok(None) => {
                held.lost = Some("another writer took it after a renewal failed");
                return;
            }
            // A store error: tried again at the next interval, as Java does.
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageUri;
    use crate::write::time::random_nonce;

    fn memory(name: &str) -> Storage {
        let uri = StorageUri::parse(&format!("memory:///storage-lock-tests/{name}-{}", random_nonce())).unwrap();
        Storage::open(&uri, &Default::default()).unwrap()
    }

    async fn object(storage: &Storage) -> serde_json::Value {
        serde_json::from_slice(&storage.get(LOCK_OBJECT).await.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn the_lock_object_is_hudis_and_one_writer_holds_it_at_a_time() {
        let storage = memory("basics");
        let settings = StorageLockSettings::default();
        // Where no writer ever took it, it is taken only when asked to create it.
        assert!(matches!(StorageLock::try_acquire(&storage, settings, false).await.unwrap(), Attempt::Unused));
        assert!(storage.get_if_exists(LOCK_OBJECT).await.unwrap().is_none());
        let lock = StorageLock::try_acquire(&storage, settings, true).await.unwrap().held().expect("free");
        let held = object(&storage).await;
        let text = String::from_utf8(storage.get(LOCK_OBJECT).await.unwrap().to_vec()).unwrap();
        assert!(text.starts_with(r#"{"expired":false,"validUntil":"#), "{text}");
        let until = held["validUntil"].as_u64().unwrap() as u128;
        assert!(until.abs_diff(now_ms() + 300_000) < 5_000);
        let owner = held["owner"].as_str().unwrap().to_owned();
        assert_eq!(owner, lock.owner().await);
        assert!(owner.len() == 36 && owner.chars().filter(|c| *c == '-').count() == 4 && owner.as_bytes()[14] == b'4', "{owner}");
        assert!(StorageLock::try_acquire(&storage, settings, true).await.unwrap().held().is_none(), "held");
        lock.check(Duration::from_secs(1)).await.unwrap();
        lock.release().await.unwrap();
        let released = object(&storage).await;
        assert_eq!((released["expired"].as_bool(), released["validUntil"].as_u64()), (Some(true), held["validUntil"].as_u64()));
        let next = StorageLock::try_acquire(&storage, settings, true).await.unwrap().held().expect("released");
        assert_ne!(next.owner().await, owner, "a new owner per acquisition");
        next.release().await.unwrap();
    }

    #[tokio::test]
    async fn a_lapsed_lease_is_taken_over_after_the_drift_allowance_and_its_holder_knows() {
        let storage = memory("lapsed");
        let settings = StorageLockSettings::default();
        let write = |valid_until: u128, owner: &str| LockData { expired: false, valid_until, owner: owner.to_owned() }.bytes();
        // Within 500 ms past validUntil the lock is still held; beyond, it is free.
        storage.put(LOCK_OBJECT, write(now_ms() - 200, "java-writer")).await.unwrap();
        assert!(StorageLock::try_acquire(&storage, settings, true).await.unwrap().held().is_none());
        storage.put(LOCK_OBJECT, write(now_ms() - 2_000, "java-writer")).await.unwrap();
        let lock = StorageLock::try_acquire(&storage, settings, true).await.unwrap().held().expect("lapsed");
        lock.release().await.unwrap();

        // The holder renews its lease; when another writer took the lock meanwhile (after the
        // lease lapsed), the next renewal meets a 412 and the holder stops acting under it.
        let quick = StorageLockSettings { validity: Duration::from_secs(10), renew: Duration::from_secs(1) };
        assert!(quick.validate().is_ok() && StorageLockSettings { validity: Duration::from_secs(9), ..quick }.validate().is_err());
        let held = StorageLock::try_acquire(&storage, quick, true).await.unwrap().held().unwrap();
        let first = object(&storage).await["validUntil"].as_u64().unwrap();
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        assert!(object(&storage).await["validUntil"].as_u64().unwrap() > first, "renewed");
        held.check(Duration::ZERO).await.unwrap();
        storage.put(LOCK_OBJECT, write(now_ms() + 60_000, "java-writer")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(held.check(Duration::ZERO).await.unwrap_err().kind(), ErrorKind::InUse);
        held.release().await.unwrap();
        assert_eq!(object(&storage).await["owner"], "java-writer", "a lost lock is not released over its new holder");

        // A lock object that is not Hudi's is damage, not a free lock.
        storage.put(LOCK_OBJECT, Bytes::from_static(br#"{"invalidField":123}"#)).await.unwrap();
        assert_eq!(StorageLock::try_acquire(&storage, settings, true).await.map(|_| ()).unwrap_err().kind(), ErrorKind::Corrupt);
    }
}
