//! The table as a whole: its configuration in `.hoodie/hoodie.properties`.

pub mod bucket;
pub mod config;
pub mod files;
pub mod keygen;
pub mod properties;

pub use config::{MergeMode, TableConfig, TableType, TimelineTimezone};
pub use properties::Properties;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;

/// Where the table configuration lives, relative to the base path.
pub const PROPERTIES_FILE: &str = ".hoodie/hoodie.properties";

/// Reads and validates the configuration of the table at `storage`'s location.
pub async fn load_config(storage: &Storage) -> Result<TableConfig> {
    let file = format!("{}/{PROPERTIES_FILE}", storage.uri());
    let bytes = storage.get(PROPERTIES_FILE).await.map_err(|e| match e.kind() {
        ErrorKind::NotFound => Error::new(
            ErrorKind::NotFound,
            format!("no Hudi table at {}: {PROPERTIES_FILE} does not exist", storage.uri()),
        ),
        _ => e,
    })?;
    // Java reads the file as ISO 8859-1 and writes everything above `~` as `\uXXXX`, except
    // in comments, where characters up to U+00FF are single bytes. UTF-8 first, for files
    // edited by hand; bytes that are not UTF-8 are read as Java reads them.
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => std::borrow::Cow::Owned(bytes.iter().map(|&b| char::from(b)).collect()),
    };
    TableConfig::from_properties(Properties::parse(&text), &file)
}

/// Directories below `storage` (relative paths, sorted; `""` for `storage` itself) that hold a
/// Hudi table, i.e. a `.hoodie/hoodie.properties`; metadata tables nested inside `.hoodie/`
/// are not counted.
pub async fn find_tables(storage: &Storage) -> Result<Vec<String>> {
    let mut tables = std::collections::BTreeSet::new();
    for (path, _) in storage.list_recursive("").await? {
        let Some(dir) = path.strip_suffix(PROPERTIES_FILE) else { continue };
        let dir = dir.trim_end_matches('/');
        if !dir.split('/').any(|part| part == ".hoodie") {
            tables.insert(dir.to_owned());
        }
    }
    Ok(tables.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageUri;

    /// Java reads `hoodie.properties` as ISO 8859-1 (`Properties.load(InputStream)`), and its
    /// `store` writes characters up to U+00FF in comments as single bytes: such a file is not
    /// UTF-8 but is a table all the same.
    #[tokio::test]
    async fn loads_properties_with_latin1_bytes_as_java_does() {
        let storage = Storage::open(&StorageUri::parse("memory:///latin1").unwrap(), &Default::default()).unwrap();
        let mut text = b"#Ge\xe4ndert\n".to_vec();
        text.extend_from_slice(b"hoodie.table.name=t\nhoodie.table.type=MERGE_ON_READ\nhoodie.table.version=8\n");
        storage.put(PROPERTIES_FILE, bytes::Bytes::from(text)).await.unwrap();
        assert_eq!(load_config(&storage).await.unwrap().name, "t");
    }

    #[tokio::test]
    async fn finds_tables_but_not_metadata_tables() {
        let storage = Storage::open(&StorageUri::parse("memory:///find-tables").unwrap(), &Default::default()).unwrap();
        for path in [
            "a/.hoodie/hoodie.properties",
            "a/.hoodie/metadata/.hoodie/hoodie.properties",
            "b/c/.hoodie/hoodie.properties",
            "b/c/p=1/x.parquet",
            "d/hoodie.properties",
        ] {
            storage.put(path, bytes::Bytes::new()).await.unwrap();
        }
        assert_eq!(find_tables(&storage).await.unwrap(), ["a", "b/c"]);
    }
}
