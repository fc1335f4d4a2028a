//! The service lease of a table: which process runs the table's services now, so that the
//! workers of two servers (or of two databases with foreign tables on one Hudi table) never
//! run them at once. Like the table lock, the lease is a sequence of epochs
//! (`.hoodie/.locks/services/<n>`, [`crate::write::epochs`]): the process whose epoch is the
//! latest holds the lease until it is released or its expiry passes. The holder renews it by
//! creating the next epoch itself. Each service also
//! protects itself (a compaction's heartbeat, a clean completing once, archival under the
//! table lock); the lease keeps servers from doing the same work twice and from racing.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::storage::Storage;
use crate::write::epochs::Epochs;
use crate::write::time::{now_ms, random_nonce};

/// The folder of the lease's epochs, relative to the table's base path.
pub const LEASE_DIR: &str = ".hoodie/.locks/services";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Epoch {
    owner: String,
    expires_at_ms: u128,
    nonce: u64,
}

const EPOCHS: Epochs = Epochs { dir: LEASE_DIR };

/// Who holds a table's service lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub owner: String,
    /// How long until the lease expires.
    pub expires_in: Duration,
}

/// A held service lease.
pub struct ServiceLease {
    storage: Storage,
    owner: String,
    epoch: u64,
    expires_at_ms: u128,
}

impl ServiceLease {
    /// Takes the lease of the table at `storage` for `owner` for `duration`, or renews it when
    /// `owner` holds it: `Err(holder)` when another owner holds an unexpired one.
    pub async fn take(storage: &Storage, owner: &str, duration: Duration) -> Result<std::result::Result<ServiceLease, Holder>> {
        let names = EPOCHS.list(storage).await?;
        if let Some((epoch, false)) = Epochs::latest(&names) {
            if let Some(held) = EPOCHS.read::<Epoch>(storage, &EPOCHS.name(epoch)).await? {
                let now = now_ms();
                if held.owner != owner && held.expires_at_ms > now {
                    let expires_in = Duration::from_millis((held.expires_at_ms - now) as u64);
                    return Ok(Err(Holder { owner: held.owner, expires_in }));
                }
            }
        }
        let expires_at_ms = now_ms() + duration.as_millis();
        let content = Epoch { owner: owner.to_owned(), expires_at_ms, nonce: random_nonce() };
        let bytes = Bytes::from(serde_json::to_vec(&content).unwrap_or_default());
        match EPOCHS.create_next(storage, &names, None, bytes).await? {
            Some(epoch) => Ok(Ok(ServiceLease { storage: storage.clone(), owner: owner.to_owned(), epoch, expires_at_ms })),
            // Another contender was first.
            None => Ok(Err(Holder { owner: String::new(), expires_in: duration })),
        }
    }

    /// How long until the lease expires (zero once it has).
    pub fn remaining(&self) -> Duration {
        Duration::from_millis(self.expires_at_ms.saturating_sub(now_ms()) as u64)
    }

    /// Renews the lease for `duration` more: `Err(holder)` when it expired and another took it.
    pub async fn renew(self, duration: Duration) -> Result<std::result::Result<ServiceLease, Holder>> {
        ServiceLease::take(&self.storage, &self.owner, duration).await
    }

    /// Gives the lease up for others to take at once.
    pub async fn release(self) -> Result<()> {
        EPOCHS.release(&self.storage, self.epoch, Bytes::from(serde_json::to_vec(&self.owner).unwrap_or_default())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageUri;

    #[tokio::test]
    async fn one_owner_at_a_time_until_release_or_expiry() {
        let storage = Storage::open(&StorageUri::parse("memory:///lease").unwrap(), &Default::default()).unwrap();
        let minute = Duration::from_secs(60);
        let a = ServiceLease::take(&storage, "a", minute).await.unwrap().ok().unwrap();
        let held = ServiceLease::take(&storage, "b", minute).await.unwrap().err().unwrap();
        assert_eq!(held.owner, "a");
        assert!(held.expires_in > Duration::from_secs(50));
        // The holder renews by taking it again.
        let a = a.renew(minute).await.unwrap().ok().unwrap();
        assert!(a.remaining() > Duration::from_secs(50));
        assert_eq!(a.epoch, 2);
        a.release().await.unwrap();
        let b = ServiceLease::take(&storage, "b", Duration::from_millis(1)).await.unwrap().ok().unwrap();
        assert_eq!(b.epoch, 3);
        tokio::time::sleep(Duration::from_millis(5)).await;
        // Expired: taken over without a release, and old epochs are cleaned up.
        let c = ServiceLease::take(&storage, "c", minute).await.unwrap().ok().unwrap();
        assert_eq!(c.epoch, 4);
        let names: Vec<String> = storage.list_dir(LEASE_DIR).await.unwrap().into_iter().map(|(n, _)| n).collect();
        assert!(names.iter().all(|n| !n.starts_with(&format!("{:020}", 1))), "{names:?}");
    }
}
