//! Consumer positions published in the table's storage, so that cleaners on every server keep
//! what the consumers of every server still read. Each server (and database) writes the
//! positions of its consumers of the table to `.hoodie/.aux/consumers/<publisher>.json`,
//! replacing its previous list; a cleaner reads them all. A list is at most a round of its
//! worker behind the positions it was taken from, and an older position holds more back.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;

/// The folder of the published lists, relative to the table's base path.
pub const CONSUMERS_DIR: &str = ".hoodie/.aux/consumers";

/// One consumer's position: the completion time (or `""`, the start) after which it reads
/// changes next, and when it last consumed (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerPosition {
    pub consumer: String,
    pub position: String,
    pub consumed_at_ms: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Published {
    publisher: String,
    positions: Vec<ConsumerPosition>,
}

fn path(publisher: &str) -> String {
    format!("{CONSUMERS_DIR}/{publisher}.json")
}

/// Replaces the list of `publisher` (a name of letters, digits, `-` and `_`) with `positions`;
/// an empty list removes it.
pub async fn publish(storage: &Storage, publisher: &str, positions: Vec<ConsumerPosition>) -> Result<()> {
    if publisher.is_empty() || !publisher.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(Error::new(ErrorKind::InvalidArgument, format!("invalid consumer list name {publisher:?}")));
    }
    if positions.is_empty() {
        return storage.delete(&path(publisher)).await;
    }
    let body = Published { publisher: publisher.to_owned(), positions };
    let json = serde_json::to_vec_pretty(&body).map_err(|e| Error::new(ErrorKind::Internal, "cannot encode consumer positions").with_source(e))?;
    storage.put(&path(publisher), Bytes::from(json)).await
}

/// The list `publisher` published last (empty when none).
pub async fn published_by(storage: &Storage, publisher: &str) -> Result<Vec<ConsumerPosition>> {
    match storage.get_if_exists(&path(publisher)).await? {
        Some(bytes) => Ok(decode(storage, publisher, &bytes)?.positions),
        None => Ok(Vec::new()),
    }
}

fn decode(storage: &Storage, publisher: &str, bytes: &[u8]) -> Result<Published> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::new(ErrorKind::Corrupt, format!("{}/{} is not a list of consumer positions", storage.uri(), path(publisher))).with_source(e)
    })
}

/// Every published position, of every publisher but `except` (whose own are known to the
/// caller first-hand).
pub async fn published(storage: &Storage, except: &str) -> Result<Vec<ConsumerPosition>> {
    let mut out = Vec::new();
    for (name, _) in storage.list_dir(CONSUMERS_DIR).await? {
        let Some(publisher) = name.strip_suffix(".json") else { continue };
        if publisher == except {
            continue;
        }
        out.extend(published_by(storage, publisher).await?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageUri;

    #[tokio::test]
    async fn lists_replace_each_other_per_publisher() {
        let storage = Storage::open(&StorageUri::parse("memory:///consumers").unwrap(), &Default::default()).unwrap();
        let at = |c: &str, p: &str| ConsumerPosition { consumer: c.into(), position: p.into(), consumed_at_ms: 1 };
        publish(&storage, "a-1", vec![at("etl", "20260101000000001")]).await.unwrap();
        publish(&storage, "b-1", vec![at("etl", "20260101000000005"), at("ml", "")]).await.unwrap();
        publish(&storage, "a-1", vec![at("etl", "20260101000000009")]).await.unwrap();
        let mut seen = published(&storage, "").await.unwrap();
        seen.sort_by(|x, y| x.position.cmp(&y.position));
        assert_eq!(seen, [at("ml", ""), at("etl", "20260101000000005"), at("etl", "20260101000000009")]);
        assert_eq!(published(&storage, "b-1").await.unwrap(), [at("etl", "20260101000000009")]);
        assert_eq!(published_by(&storage, "a-1").await.unwrap(), [at("etl", "20260101000000009")]);
        publish(&storage, "b-1", vec![]).await.unwrap();
        assert_eq!(published(&storage, "a-1").await.unwrap(), []);
        assert!(publish(&storage, "../x", vec![]).await.is_err());
    }
}
