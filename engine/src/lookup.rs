//! Key-value storage for the lookup cache: a RocksDB database on local disk. The cache proper
//! (unique and secondary indexes, bulk load, incremental refresh) is built on this store.

use std::path::Path;

use crate::error::{Error, ErrorKind, Result};

/// One RocksDB database, opened read-write.
pub struct KvStore {
    db: rocksdb::DB,
}

fn rocks_error<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(rocksdb::Error) -> Error + 'a {
    move |e| {
        Error::new(ErrorKind::Storage, format!("{action} lookup store {}", path.display()))
            .with_source(e)
    }
}

impl KvStore {
    /// Opens (creating if absent) the database in `dir`.
    pub fn open(dir: &Path) -> Result<KvStore> {
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        let db = rocksdb::DB::open(&options, dir).map_err(rocks_error("opening", dir))?;
        Ok(KvStore { db })
    }

    /// Writes all pairs atomically (one write batch).
    pub fn put_all<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<()> {
        let mut batch = rocksdb::WriteBatch::default();
        for (key, value) in pairs {
            batch.put(key, value);
        }
        self.db.write(batch).map_err(rocks_error("writing", self.db.path()))
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.get(key).map_err(rocks_error("reading", self.db.path()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_written_values_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = KvStore::open(dir.path()).unwrap();
            store.put_all([(b"k1".as_slice(), b"v1".as_slice()), (b"k2", b"v2")]).unwrap();
        }
        let store = KvStore::open(dir.path()).unwrap();
        assert_eq!(store.get(b"k1").unwrap().as_deref(), Some(b"v1".as_slice()));
        assert_eq!(store.get(b"k3").unwrap(), None);
    }
}
