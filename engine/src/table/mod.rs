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
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| Error::new(ErrorKind::Corrupt, format!("{file} is not UTF-8")).with_source(e))?;
    TableConfig::from_properties(Properties::parse(text), &file)
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
