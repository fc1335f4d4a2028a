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
        self.parse(storage, path, &bytes).map(Some)
    }

    /// An epoch's (or release mark's) JSON content `bytes`, read from `path`.
    pub fn parse<T: DeserializeOwned>(&self, storage: &Storage, path: &str, bytes: &[u8]) -> Result<T> {
        serde_json::from_slice(bytes).map_err(|e| {
            Error::new(ErrorKind::Corrupt, format!("{}/{path} is not an epoch of {}", storage.uri(), self.dir)).with_source(e)
        })
    }

    /// Creates the epoch after the latest of `names` (the folder as listed before deciding to
    /// take it) with `content`: its number when this caller now holds it, `None` when another
    /// contender created it first. `latest` is the latest epoch's content as the caller read
    /// it, if it did.
    ///
    /// Epochs before the previous one are deleted, so a contender that listed long ago can
    /// create a number that was used and deleted since. Such a create is no claim, and two
    /// checks tell it: a listing shows a newer epoch, or the epoch before it is gone or not
    /// the one the caller saw (a stale contender may have created that number again). The
    /// listing alone is not enough: one that runs while newer epochs are created and the
    /// latest two deleted may show none of them (entries created during a listing may be
    /// missed, and entries deleted during it are).
    pub async fn create_next(&self, storage: &Storage, names: &[(String, u64)], latest: Option<Bytes>, content: Bytes) -> Result<Option<u64>> {
        let previous = Self::latest(names).map(|(n, _)| n);
        let seen = match (previous, latest) {
            (Some(previous), None) => match storage.get_if_exists(&self.name(previous)).await? {
                Some(bytes) => Some(bytes),
                None => return Ok(None),
            },
            (_, latest) => latest,
        };
        let epoch = match previous {
            None => 1,
            Some(n) => n.checked_add(1).ok_or_else(|| {
                Error::new(ErrorKind::Corrupt, format!("{}/{} has an epoch numbered {n}, the last there can be", storage.uri(), self.dir))
            })?,
        };
        if !storage.put_if_absent(&self.name(epoch), content).await? {
            return Ok(None);
        }
        let overtaken = Self::latest(&self.list(storage).await?).is_some_and(|(latest, _)| latest > epoch);
        let stale = match previous {
            Some(previous) => storage.get_if_exists(&self.name(previous)).await? != seen,
            None => false,
        };
        if overtaken || stale {
            // A number used before: removed, so that no listing that misses the newer epochs
            // takes it for the latest (and waits for its lease).
            // (Best effort: left behind, it is below the latest epoch for every full listing.)
            let _ = storage.delete(&self.name(epoch)).await;
            return Ok(None);
        }
        for (name, _) in names {
            let number = name.split('.').next().and_then(|n| n.parse::<u64>().ok());
            if number.is_some_and(|n| n < epoch.saturating_sub(1)) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageUri;

    const EPOCHS: Epochs = Epochs { dir: "epochs" };

    fn storage() -> Storage {
        let dir = tempfile::tempdir().unwrap().keep();
        Storage::open(&StorageUri::parse(&format!("file://{}", dir.display())).unwrap(), &Default::default()).unwrap()
    }

    /// Takes the next epoch as a contender that lists first, and releases it.
    async fn take_and_release(storage: &Storage, content: &str) -> u64 {
        let names = EPOCHS.list(storage).await.unwrap();
        let epoch = EPOCHS.create_next(storage, &names, None, Bytes::from(content.to_owned())).await.unwrap().unwrap();
        EPOCHS.release(storage, epoch, Bytes::from_static(b"0")).await.unwrap();
        epoch
    }

    fn numbers(names: &[(String, u64)]) -> Vec<String> {
        let mut names: Vec<String> = names.iter().map(|(n, _)| n.trim_start_matches('0').to_owned()).collect();
        names.sort();
        names
    }

    /// A contender that listed long ago would create a number that was used and deleted since:
    /// the epoch it saw as the latest is gone, so it does not.
    #[tokio::test]
    async fn a_stale_contender_does_not_take_a_reused_number() {
        let storage = storage();
        take_and_release(&storage, "a").await;
        let stale = EPOCHS.list(&storage).await.unwrap();
        for content in ["b", "c", "d"] {
            take_and_release(&storage, content).await;
        }
        // Epochs 1 and 2 were deleted when 3 and 4 were created.
        assert_eq!(EPOCHS.create_next(&storage, &stale, None, Bytes::from_static(b"late")).await.unwrap(), None);
        assert_eq!(numbers(&EPOCHS.list(&storage).await.unwrap()), ["3", "3.released", "4", "4.released"]);
    }

    /// The same for a contender that read the latest epoch before it was deleted, when its
    /// listing after the create misses the newer epochs (as one that runs while they are
    /// created and the latest two deleted can; here they are gone for good): the create
    /// succeeds, but the epoch it saw is gone, so the number is not its, and its object is
    /// removed again.
    #[tokio::test]
    async fn a_stale_contender_that_sees_no_newer_epoch_still_does_not_take_it() {
        let storage = storage();
        take_and_release(&storage, "a").await;
        let stale = EPOCHS.list(&storage).await.unwrap();
        let seen = storage.get(&EPOCHS.name(1)).await.unwrap();
        for content in ["b", "c", "d"] {
            take_and_release(&storage, content).await;
        }
        for (name, _) in EPOCHS.list(&storage).await.unwrap() {
            storage.delete(&format!("epochs/{name}")).await.unwrap();
        }
        assert_eq!(EPOCHS.create_next(&storage, &stale, Some(seen.clone()), Bytes::from_static(b"late")).await.unwrap(), None);
        // Nor when another stale contender created the epoch it saw again.
        storage.put_if_absent(&EPOCHS.name(1), Bytes::from_static(b"other")).await.unwrap();
        assert_eq!(EPOCHS.create_next(&storage, &stale, Some(seen), Bytes::from_static(b"late")).await.unwrap(), None);
        assert_eq!(numbers(&EPOCHS.list(&storage).await.unwrap()), ["1"]);
        // A contender that lists now takes the next number.
        assert_eq!(take_and_release(&storage, "e").await, 2);
    }
}
