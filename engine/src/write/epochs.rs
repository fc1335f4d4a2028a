//! Epochs in a table's storage: a sequence of objects `<dir>/<n>` (twenty digits) created with
//! create-if-absent, so that of all contenders for number `n` exactly one wins. The latest
//! epoch is its creator's claim until `<n>.released` exists or the claim's own terms (a lease
//! in its content) say it has lapsed; nothing is overwritten to take over. Both the table lock
//! ([`crate::write::time::TableLock`]) and the service lease
//! ([`crate::services::lease::ServiceLease`]) are epochs.

use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;

/// The epochs in one folder (relative to the table's base path).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Epochs {
    pub dir: &'static str,
}

impl Epochs {
    pub fn name(&self, epoch: u64) -> String {
        format!("{}/{epoch:020}", self.dir)
    }

    pub fn released_name(&self, epoch: u64) -> String {
        format!("{}.released", self.name(epoch))
    }

    /// The names in the folder.
    pub async fn list(&self, storage: &Storage) -> Result<Vec<(String, u64)>> {
        storage.list_dir(self.dir).await
    }

    /// The latest epoch of a listing of the folder, and whether it was released.
    pub fn latest(names: &[(String, u64)]) -> Option<(u64, bool)> {
        let number = |name: &str| name.parse::<u64>().ok();
        let latest = names.iter().filter_map(|(n, _)| number(n)).max()?;
        let released = names.iter().any(|(n, _)| n.strip_suffix(".released").and_then(number) == Some(latest));
        Some((latest, released))
    }

    /// The JSON content of `path` (an epoch or its release mark), or `None` when it is gone
    /// (cleaned up after a newer epoch).
    pub async fn read<T: DeserializeOwned>(&self, storage: &Storage, path: &str) -> Result<Option<T>> {
        let Some(bytes) = storage.get_if_exists(path).await? else { return Ok(None) };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::new(ErrorKind::Corrupt, format!("{}/{path} is not an epoch of {}", storage.uri(), self.dir)).with_source(e)
        })
    }

    /// Creates the epoch after the latest of `names` (the folder as listed before deciding to
    /// take it) with `content`: its number when this caller now holds it, `None` when another
    /// contender created it first. Epochs before the previous one are deleted, so a contender
    /// that listed long ago can create a number that was used and deleted since; the latest two
    /// always remain, so a newer epoch is then in sight, and the stale one is no claim.
    pub async fn create_next(&self, storage: &Storage, names: &[(String, u64)], content: Bytes) -> Result<Option<u64>> {
        let epoch = Self::latest(names).map_or(1, |(n, _)| n + 1);
        if !storage.put_if_absent(&self.name(epoch), content).await? {
            return Ok(None);
        }
        if Self::latest(&self.list(storage).await?).is_some_and(|(latest, _)| latest > epoch) {
            return Ok(None);
        }
        for (name, _) in names {
            let number = name.split('.').next().and_then(|n| n.parse::<u64>().ok());
            if number.is_some_and(|n| n + 1 < epoch) {
                storage.delete(&format!("{}/{name}", self.dir)).await?;
            }
        }
        Ok(Some(epoch))
    }

    /// Marks `epoch` released, with `content` (what the next holder needs to know).
    pub async fn release(&self, storage: &Storage, epoch: u64, content: Bytes) -> Result<()> {
        storage.put_if_absent(&self.released_name(epoch), content).await.map(|_| ())
    }
}
