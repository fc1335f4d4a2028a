//! Names of data files (hudi-format.md §3): base files `<fileId>_<token>_<instant>.<ext>` and log
//! files `.<fileId>_<instant>.log.<version>_<token>[.cdc]`. Anything else in a partition
//! directory (partition metadata, `.DS_Store`, ...) is not a data file.

/// The path of file `name` of `partition`, relative to the table (`""` is the table's root).
pub fn path_in_partition(partition: &str, name: &str) -> String {
    if partition.is_empty() {
        name.to_owned()
    } else {
        format!("{partition}/{name}")
    }
}

/// A base (Parquet) file of a file group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BaseFile {
    pub file_id: String,
    pub write_token: String,
    /// Requested instant of the commit that wrote it.
    pub instant: String,
    /// File name, without the partition path.
    pub name: String,
    pub size: u64,
}

/// A log file of a file group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogFile {
    pub file_id: String,
    /// v6: the base instant of the slice; v8+: the requested instant of the writing deltacommit.
    pub instant: String,
    pub version: u32,
    pub write_token: String,
    pub is_cdc: bool,
    pub name: String,
    pub size: u64,
}

/// What a file name in a partition directory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataFile {
    Base(BaseFile),
    Log(LogFile),
}

const BASE_EXTENSIONS: &[&str] = &["parquet", "hfile", "orc", "lance"];

fn is_instant(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn is_write_token(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

impl DataFile {
    /// Parses a file name (no directories); `None` when it is not a Hudi data file.
    pub fn parse(name: &str, size: u64) -> Option<DataFile> {
        if let Some(rest) = name.strip_prefix('.') {
            return LogFile::parse(rest, name, size).map(DataFile::Log);
        }
        let (stem, ext) = name.rsplit_once('.')?;
        if !BASE_EXTENSIONS.contains(&ext) {
            return None;
        }
        let mut parts = stem.split('_');
        let (file_id, token, instant) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || file_id.is_empty() || !is_write_token(token) || !is_instant(instant) {
            return None;
        }
        Some(DataFile::Base(BaseFile {
            file_id: file_id.to_owned(),
            write_token: token.to_owned(),
            instant: instant.to_owned(),
            name: name.to_owned(),
            size,
        }))
    }
}

impl LogFile {
    fn parse(rest: &str, name: &str, size: u64) -> Option<LogFile> {
        let (rest, is_cdc) = match rest.strip_suffix(".cdc") {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let (file_id, rest) = rest.split_once('_')?;
        let (instant, rest) = rest.split_once(".log.")?;
        let (version, token) = rest.split_once('_')?;
        if file_id.is_empty() || !is_instant(instant) || !is_write_token(token) {
            return None;
        }
        Some(LogFile {
            file_id: file_id.to_owned(),
            instant: instant.to_owned(),
            version: version.parse().ok()?,
            write_token: token.to_owned(),
            is_cdc,
            name: name.to_owned(),
            size,
        })
    }

    /// Hudi's order of the log files of a file slice (RFC-66 "order by delta_commit_time,
    /// version_number, write_token"; Java's `HoodieLogFile.LogFileComparator`): by the instant
    /// in the name, then version, then write token. Versions of a record merge in this order,
    /// so on equal ordering values the later one here wins, whichever write completed first.
    pub fn merge_order(&self) -> (&str, u32, &str) {
        (&self.instant, self.version, &self.write_token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_base_and_log_names_from_the_fixtures() {
        let base = DataFile::parse(
            "036ded81-9ed4-479f-bcea-7145dfa0079b-0_1-1112-3191_20251220210129235.parquet",
            10,
        );
        let Some(DataFile::Base(b)) = base else { panic!("{base:?}") };
        assert_eq!(b.file_id, "036ded81-9ed4-479f-bcea-7145dfa0079b-0");
        assert_eq!((b.write_token.as_str(), b.instant.as_str()), ("1-1112-3191", "20251220210129235"));

        let log = DataFile::parse(".0712b9f9-d2d5-4cae-bcf4-8fd7146af503-0_20250126040823628.log.2_1-0-1", 5);
        let Some(DataFile::Log(l)) = log else { panic!("{log:?}") };
        assert_eq!(l.file_id, "0712b9f9-d2d5-4cae-bcf4-8fd7146af503-0");
        assert_eq!((l.instant.as_str(), l.version, l.write_token.as_str()), ("20250126040823628", 2, "1-0-1"));
        assert!(!l.is_cdc);
    }

    #[test]
    fn other_files_are_not_data_files() {
        for name in [".hoodie_partition_metadata", ".DS_Store", "README.parquet", "a_b_c.txt", "x_1-2-3_2025.csv"] {
            assert_eq!(DataFile::parse(name, 0), None, "{name}");
        }
    }
}
