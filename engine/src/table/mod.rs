//! The table as a whole: its configuration in `.hoodie/hoodie.properties`.

pub mod bucket;
pub mod config;
pub mod files;
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
