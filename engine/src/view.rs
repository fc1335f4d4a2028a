//! The file system view: file groups and their file slices (hudi-format.md §7.1–7.3), built
//! by listing storage (tables without a metadata table, §9).

use std::collections::BTreeMap;

use crate::error::Result;
use crate::storage::Storage;
use crate::table::files::{BaseFile, DataFile, LogFile};
use crate::timeline::{ReadBound, Timeline};

/// One version of a file group: a base file (absent for a slice made only of logs) and the
/// log files written on top of it, in the order they merge ([`LogFile::merge_order`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileSlice {
    /// Partition path relative to the table (`""` when not partitioned).
    pub partition: String,
    pub file_id: String,
    /// Instant that keys this slice: the base file's instant, or the first log's.
    pub base_instant: String,
    pub base_file: Option<BaseFile>,
    pub log_files: Vec<LogFile>,
}

impl FileSlice {
    fn path_of(&self, name: &str) -> String {
        crate::table::files::path_in_partition(&self.partition, name)
    }

    /// Bytes of the slice's files: what a scan of it reads.
    pub fn size(&self) -> u64 {
        self.base_file.as_ref().map_or(0, |b| b.size) + self.log_files.iter().map(|l| l.size).sum::<u64>()
    }

    /// Path of the base file relative to the table.
    pub fn base_path(&self) -> Option<String> {
        self.base_file.as_ref().map(|b| self.path_of(&b.name))
    }

    /// Path of a log file of this slice relative to the table.
    pub fn log_path(&self, log: &LogFile) -> String {
        self.path_of(&log.name)
    }
}

/// In layout 1 a log file is named after its slice's base instant, so its blocks can only be
/// newer: it is needed unless that instant is already past a requested-time bound.
fn bound_allows_requested(bound: &ReadBound, instant: &str) -> bool {
    match bound {
        ReadBound::RequestedBy(t) => instant <= t.as_str(),
        ReadBound::Latest | ReadBound::CompletedBy(_) => true,
    }
}

#[derive(Debug, Default, Clone)]
struct FileGroupFiles {
    bases: Vec<BaseFile>,
    logs: Vec<LogFile>,
}

/// Every data file of the table, grouped by `(partition, file id)`.
#[derive(Debug, Clone)]
pub struct FileSystemView {
    groups: BTreeMap<(String, String), FileGroupFiles>,
}

impl FileSystemView {
    /// Lists the table's data files (everything outside `.hoodie/` that parses as one).
    pub async fn load(storage: &Storage) -> Result<FileSystemView> {
        let listing = storage.list_recursive("").await?;
        Ok(FileSystemView::from_listing(listing))
    }

    /// Builds the view from `(relative path, size)` pairs.
    pub fn from_listing(listing: impl IntoIterator<Item = (String, u64)>) -> FileSystemView {
        let mut view = FileSystemView { groups: BTreeMap::new() };
        // A listing names each file once: no need to look for it among those added before.
        view.add(listing, false);
        view
    }

    /// Adds the data files of `listing` (`(relative path, size)` pairs) that the view does not
    /// hold yet.
    pub fn extend(&mut self, listing: impl IntoIterator<Item = (String, u64)>) {
        self.add(listing, true)
    }

    fn add(&mut self, listing: impl IntoIterator<Item = (String, u64)>, skip_known: bool) {
        let groups = &mut self.groups;
        for (path, size) in listing {
            if path.starts_with(".hoodie/") || path == ".hoodie" {
                continue;
            }
            let (partition, name) = match path.rsplit_once('/') {
                Some((partition, name)) => (partition.to_owned(), name),
                None => (String::new(), path.as_str()),
            };
            match DataFile::parse(name, size) {
                Some(DataFile::Base(base)) => {
                    let group = groups.entry((partition, base.file_id.clone())).or_default();
                    if !skip_known || !group.bases.iter().any(|b| b.name == base.name) {
                        group.bases.push(base);
                    }
                }
                Some(DataFile::Log(log)) if !log.is_cdc => {
                    let group = groups.entry((partition, log.file_id.clone())).or_default();
                    if !skip_known || !group.logs.iter().any(|l| l.name == log.name) {
                        group.logs.push(log);
                    }
                }
                _ => {}
            }
        }
    }

    /// The listing this view is made of: `(relative path, size)` of every data file it has,
    /// from which [`Self::from_listing`] makes the same view.
    pub fn listing(&self) -> Vec<(String, u64)> {
        let mut listing = Vec::new();
        for ((partition, _), files) in &self.groups {
            let names = files.bases.iter().map(|b| (&b.name, b.size)).chain(files.logs.iter().map(|l| (&l.name, l.size)));
            listing.extend(names.map(|(name, size)| (crate::table::files::path_in_partition(partition, name), size)));
        }
        listing
    }

    /// `(partition, file id)` of every file group.
    pub fn file_groups(&self) -> impl Iterator<Item = (&str, &str)> {
        self.groups.keys().map(|(p, f)| (p.as_str(), f.as_str()))
    }

    /// Partition paths that hold data files.
    pub fn partitions(&self) -> Vec<&str> {
        let mut partitions: Vec<&str> = self.groups.keys().map(|(p, _)| p.as_str()).collect();
        partitions.dedup();
        partitions
    }

    /// The slice of every file group that a read within `bound` sees. Base files of pending or
    /// invisible instants and file groups replaced by a completed replacecommit are excluded;
    /// log files are attached by completion time in layout 2 and by the base instant in their
    /// name in layout 1 (whose blocks are filtered by instant when read).
    pub fn latest_slices(
        &self,
        timeline: &Timeline,
        bound: &ReadBound,
        replaced: &crate::timeline::metadata::ReplacedGroups,
    ) -> Vec<FileSlice> {
        self.groups
            .iter()
            .filter(|(group, _)| !replaced.contains_key(*group))
            .filter_map(|((partition, file_id), files)| {
                group_slices(partition, file_id, files, timeline, bound).into_values().next_back()
            })
            .collect()
    }

    /// Every slice of one file group that a read within `bound` sees, oldest first: the
    /// latest is what the read merges; the earlier ones are what compactions and rewrites
    /// left in storage (until a cleaner removes them).
    pub fn group_slices(&self, partition: &str, file_id: &str, timeline: &Timeline, bound: &ReadBound) -> Vec<FileSlice> {
        match self.groups.get(&(partition.to_owned(), file_id.to_owned())) {
            Some(files) => group_slices(partition, file_id, files, timeline, bound).into_values().collect(),
            None => Vec::new(),
        }
    }
}

/// The slices of one file group visible within `bound`, by the instant that keys them.
fn group_slices(
    partition: &str,
    file_id: &str,
    files: &FileGroupFiles,
    timeline: &Timeline,
    bound: &ReadBound,
) -> BTreeMap<String, FileSlice> {
    let new_slice = |base_instant: String, base_file: Option<BaseFile>| FileSlice {
        partition: partition.to_owned(),
        file_id: file_id.to_owned(),
        base_instant,
        base_file,
        log_files: Vec::new(),
    };
    let mut slices: BTreeMap<String, FileSlice> = BTreeMap::new();
    for base in &files.bases {
        if timeline.is_visible(&base.instant, bound) {
            slices.insert(base.instant.clone(), new_slice(base.instant.clone(), Some(base.clone())));
        }
    }
    // A log belongs to the slice of the latest base at or before its completion (layout 2)
    // or of the base instant in its name (layout 1); within a slice logs merge in Hudi's order.
    let mut logs: Vec<(&str, &LogFile)> = Vec::new();
    for log in &files.logs {
        if timeline.layout() >= 2 {
            if let Some(completed) = timeline.completion_time(&log.instant) {
                if timeline.is_visible(&log.instant, bound) {
                    logs.push((completed, log));
                }
            }
        } else if bound_allows_requested(bound, &log.instant) {
            // Layout 1 names logs after the slice's base instant; visibility is decided per
            // block by the instant in its header.
            logs.push((log.instant.as_str(), log));
        }
    }
    logs.sort_by(|a, b| (a.0, a.1.merge_order()).cmp(&(b.0, b.1.merge_order())));
    for (order_time, log) in logs {
        let key = if timeline.layout() >= 2 { order_time } else { log.instant.as_str() };
        let slice_key = slices.range(..=key.to_owned()).next_back().map(|(k, _)| k.clone());
        let slice_key = slice_key.unwrap_or_else(|| log.instant.clone());
        slices
            .entry(slice_key.clone())
            .or_insert_with(|| new_slice(slice_key, None))
            .log_files
            .push(log.clone());
    }
    for slice in slices.values_mut() {
        slice.log_files.sort_by(|a, b| a.merge_order().cmp(&b.merge_order()));
    }
    slices
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::InstantFile;

    fn timeline(layout: u32, names: &[&str]) -> Timeline {
        Timeline::from_files(layout, "t", names.iter().filter_map(|n| InstantFile::parse(n)))
    }

    #[test]
    fn files_added_to_a_view_join_their_slice_once() {
        let t = timeline(2, &["20251220210108078_20251220210109593.deltacommit", "20251220210128625_20251220210129197.deltacommit"]);
        let fg = "8aa68f7e-0000-0000-0000-000000000000-0";
        let first = (format!("p/.{fg}_20251220210108078.log.1_0-1-1"), 10);
        let second = (format!("p/.{fg}_20251220210128625.log.1_0-2-2"), 20);
        let mut view = FileSystemView::from_listing([first.clone()]);
        view.extend([first, second.clone(), second]);
        let latest = view.latest_slices(&t, &ReadBound::Latest, &Default::default());
        assert_eq!(latest.len(), 1);
        assert_eq!(latest[0].log_files.iter().map(|l| l.size).collect::<Vec<_>>(), [10, 20]);
    }

    #[test]
    fn a_log_completed_after_a_compaction_belongs_to_the_new_slice() {
        // hudi-format.md §7.2 worked example (v8_trips_8i3u1d), reduced to one file group.
        let t = timeline(2, &[
            "20251220210108078_20251220210109593.deltacommit",
            "20251220210128625_20251220210129197.deltacommit",
            "20251220210129235_20251220210129883.commit",
            "20251220210130911_20251220210131755.deltacommit",
            "20251220210130000.deltacommit.inflight",
        ]);
        let fg = "8aa68f7e-0000-0000-0000-000000000000-0";
        let view = FileSystemView::from_listing([
            (format!("city=x/{fg}_0-1-1_20251220210108078.parquet"), 1),
            (format!("city=x/.{fg}_20251220210128625.log.1_0-2-2"), 1),
            (format!("city=x/{fg}_2-1112-3192_20251220210129235.parquet"), 1),
            (format!("city=x/.{fg}_20251220210130911.log.1_0-1139-3316"), 1),
            (format!("city=x/.{fg}_20251220210130000.log.1_0-9-9"), 1),
            ("city=x/.hoodie_partition_metadata".to_owned(), 1),
            (".hoodie/hoodie.properties".to_owned(), 1),
        ]);
        let latest = view.latest_slices(&t, &ReadBound::Latest, &Default::default());
        assert_eq!(latest.len(), 1);
        let slice = &latest[0];
        assert_eq!(slice.base_instant, "20251220210129235");
        let logs: Vec<_> = slice.log_files.iter().map(|l| l.instant.as_str()).collect();
        assert_eq!(logs, ["20251220210130911"], "pending deltacommit's log is invisible");

        // As of before the compaction: the old slice with the log that completed before it.
        let old = view.latest_slices(&t, &ReadBound::RequestedBy("20251220210129000".into()), &Default::default());
        assert_eq!(old[0].base_instant, "20251220210108078");
        assert_eq!(old[0].log_files.len(), 1);
        assert_eq!(old[0].base_path().unwrap(), format!("city=x/{fg}_0-1-1_20251220210108078.parquet"));
    }

    #[test]
    fn logs_of_a_slice_merge_by_instant_whatever_order_they_completed_in() {
        // Writer A started first and completed last: its log still merges before B's, so B
        // wins ties (RFC-66, Java's LogFileComparator), as Spark reads the table.
        let (a, b) = ("20250101000000003", "20250101000000005");
        let t = timeline(2, &[
            "20250101000000001_20250101000000002.deltacommit",
            &format!("{a}_20250101000000009.deltacommit"),
            &format!("{b}_20250101000000006.deltacommit"),
        ]);
        let fg = "00000000-0000-0000-0000-000000000000-0";
        let view = FileSystemView::from_listing([
            (format!("{fg}_0-1-1_20250101000000001.parquet"), 1),
            (format!(".{fg}_{a}.log.2_0-1-1"), 1),
            (format!(".{fg}_{b}.log.1_0-2-2"), 1),
            (format!(".{fg}_{a}.log.1_0-1-1"), 1),
        ]);
        let latest = view.latest_slices(&t, &ReadBound::Latest, &Default::default());
        let logs: Vec<_> = latest[0].log_files.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(logs, [format!(".{fg}_{a}.log.1_0-1-1"), format!(".{fg}_{a}.log.2_0-1-1"), format!(".{fg}_{b}.log.1_0-2-2")]);
    }

    #[test]
    fn replaced_groups_and_uncommitted_bases_are_excluded() {
        let (i1, i2, i3) = ("20250101000000001", "20250101000000002", "20250101000000003");
        let t = timeline(1, &[&format!("{i1}.commit"), &format!("{i2}.replacecommit"), &format!("{i3}.commit.requested")]);
        let view = FileSystemView::from_listing([
            (format!("p/a-0_0-0-0_{i1}.parquet"), 1),
            (format!("p/b-0_0-0-0_{i2}.parquet"), 1),
            (format!("p/c-0_0-0-0_{i3}.parquet"), 1),
        ]);
        let replaced = [(("p".to_owned(), "a-0".to_owned()), "2".to_owned())].into();
        let latest = view.latest_slices(&t, &ReadBound::Latest, &replaced);
        let ids: Vec<_> = latest.iter().map(|s| s.file_id.as_str()).collect();
        assert_eq!(ids, ["b-0"]);
        assert_eq!(view.partitions(), ["p"]);
    }

    #[test]
    fn logs_written_during_a_pending_compaction_merge_onto_the_last_visible_base() {
        // hudi-format.md §7.3: a slice whose compaction is still pending is read as the
        // previous slice plus the logs that arrived since; the pending base file is invisible.
        let t = timeline(2, &[
            "20250101000000001_20250101000000002.deltacommit",
            "20250101000000003_20250101000000004.deltacommit",
            "20250101000000005.compaction.requested",
            "20250101000000006_20250101000000007.deltacommit",
        ]);
        let fg = "00000000-0000-0000-0000-000000000000-0";
        let view = FileSystemView::from_listing([
            (format!("{fg}_0-1-1_20250101000000001.parquet"), 1),
            (format!(".{fg}_20250101000000003.log.1_0-1-1"), 1),
            (format!("{fg}_0-2-2_20250101000000005.parquet"), 1), // compaction output, not committed
            (format!(".{fg}_20250101000000006.log.1_0-3-3"), 1),
        ]);
        let latest = view.latest_slices(&t, &ReadBound::Latest, &Default::default());
        assert_eq!(latest.len(), 1);
        assert_eq!(latest[0].base_instant, "20250101000000001");
        let logs: Vec<_> = latest[0].log_files.iter().map(|l| l.instant.as_str()).collect();
        assert_eq!(logs, ["20250101000000003", "20250101000000006"]);
    }
}
