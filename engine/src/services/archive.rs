//! Archival: the oldest completed actions move from the active timeline into the LSM history
//! (hudi-services-format.md §2), so that the timeline every read lists stays short. Under the
//! table lock, the chosen actions' rows are published to the history first, then their
//! pending files and then their completed files are deleted (oldest first), then the history
//! merges its files. An archival that stopped midway is redone by the next: the history keeps
//! an action once, and active files already deleted stay deleted.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::services::progress;
use crate::storage::Storage;
use crate::table::TableConfig;
use crate::timeline::history::{ArchivedInstant, History};
use crate::timeline::{metadata, Instant, InstantFile, ReadBound, State, Timeline};
use crate::view::FileSystemView;
use crate::write::time::{LockOptions, TableLock};
use crate::write::transaction::WriterId;

/// How many completed commits the active timeline keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveOptions {
    /// Archival leaves at least this many (`hoodie.keep.min.commits`).
    pub min_commits: usize,
    /// Archival starts once there are more than this many (`hoodie.keep.max.commits`).
    pub max_commits: usize,
    /// Starts it earlier, once there are more than this many (the worker's rounds come a while
    /// apart, and the commits in between should not take the timeline past `max_commits`).
    pub start_above: Option<usize>,
    /// Deltacommits kept after the latest compaction until the next one, so that compaction
    /// can still be scheduled by commit count (`hoodie.compact.inline.max.delta.commits`).
    pub compaction_delta_commits: usize,
}

impl Default for ArchiveOptions {
    fn default() -> Self {
        ArchiveOptions {
            min_commits: 20,
            max_commits: 30,
            start_above: None,
            compaction_delta_commits: crate::services::compaction::DEFAULT_DELTA_COMMITS,
        }
    }
}

/// What one archival did, and why the active timeline stays above its maximum, when it does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchiveOutcome {
    /// What moved to the history (`None`: nothing may go).
    pub archived: Option<Archived>,
    /// What holds archival back while the active timeline keeps more than `max_commits`.
    pub held_back: Option<String>,
}

/// What one archival moved to the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archived {
    /// Actions archived (commits, cleans and rollbacks).
    pub actions: usize,
    /// Of those, commits (writes and compactions).
    pub commits: usize,
    /// Requested times of the oldest and newest action archived.
    pub first: String,
    pub last: String,
    /// Timeline files deleted.
    pub files_deleted: usize,
}

/// What, besides the commit counts, bounds an archival: no commit at or after the earliest of
/// these is archived.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Limits {
    /// The earliest commit whose files a latest file slice holds: readers that read only the
    /// active timeline (hudi-rs) drop files of archived instants (§2.10 rule 7).
    latest_slices_from: Option<String>,
    /// The earliest commit to retain of the cleans: what is older may have been cleaned, and
    /// what is newer is still needed by time travel and change reads (§2.7 (f)).
    retained_by_clean: Option<String>,
    /// The metadata table's latest compaction, when the table has a metadata table (empty when
    /// it has none yet): Java reads the metadata table's log blocks of a data instant only while
    /// the instant is on the active timeline, so it archives only what a compaction folded into
    /// the metadata table's base file.
    metadata_table_compacted: Option<String>,
}

/// What archival may not pass, at an instant (archival stops before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    PendingAction,
    CompactionCount,
    UncleanedReplacecommit,
    Savepoint,
    LatestSlices,
    CleanRetention,
    MetadataTableCompaction,
}

impl Bound {
    /// Why archival stops there, for people.
    fn reason(self, at: &str) -> String {
        match self {
            Bound::PendingAction => format!("{at} and the pending action after it (a write still open, or a service not finished)"),
            Bound::CompactionCount => format!("the deltacommits from {at} on, which the next compaction by commit count counts"),
            Bound::UncleanedReplacecommit => format!("replacecommit {at}, whose replaced file groups no clean has removed yet"),
            Bound::Savepoint => format!("savepoint {at}"),
            Bound::LatestSlices => format!(
                "the latest file slices, which hold files of commits from {at} on (a file group whose logs wait for \
                 compaction, or that nobody wrote since; readers of the active timeline alone drop files of archived commits)"
            ),
            Bound::CleanRetention => format!("the latest clean's earliest commit to retain, {at}"),
            Bound::MetadataTableCompaction if at.is_empty() => "every commit: the metadata table has no compaction yet".to_owned(),
            Bound::MetadataTableCompaction => format!("the metadata table's latest compaction, {at}"),
        }
    }
}

/// Where archival must stop (hudi-services-format.md §2.7), each at an instant:
///  (a) the latest commit before the earliest pending action of any kind (a failed write is
///      rolled back, its files deleted, before archival may pass it),
///  (b) the deltacommits a compaction by commit count still needs,
///  (c) the first replacecommit whose replaced file groups a clean may not have removed,
///  (d) the first savepoint,
///  and the [`Limits`].
fn bounds<'t>(timeline: &'t Timeline, commits: &[&'t Instant], options: &ArchiveOptions, limits: &'t Limits) -> Vec<(&'t str, Bound)> {
    let mut bounds: Vec<(&str, Bound)> = Vec::new();
    if let Some(pending) = timeline.instants().iter().find(|i| !i.is_completed()) {
        let before = commits.iter().rev().find(|c| c.timestamp < pending.timestamp);
        bounds.push((before.map_or(&pending.timestamp, |c| &c.timestamp), Bound::PendingAction));
    }
    if options.compaction_delta_commits > 0 {
        let compacted = commits.iter().rposition(|c| c.requested_action == "compaction");
        let deltas: Vec<&&Instant> = commits.iter().skip(compacted.map_or(0, |c| c + 1)).filter(|c| c.action == "deltacommit").collect();
        let bound = match compacted {
            Some(c) if deltas.len() < options.compaction_delta_commits => Some(commits[c].timestamp.as_str()),
            Some(_) => Some(deltas[deltas.len() - options.compaction_delta_commits].timestamp.as_str()),
            None => deltas.first().map(|d| d.timestamp.as_str()),
        };
        bounds.extend(bound.map(|b| (b, Bound::CompactionCount)));
    }
    let replaced_cleaned_before = limits.retained_by_clean.as_deref().unwrap_or("");
    if let Some(replace) = commits.iter().find(|c| c.action == "replacecommit" && c.timestamp.as_str() >= replaced_cleaned_before) {
        bounds.push((&replace.timestamp, Bound::UncleanedReplacecommit));
    }
    if let Some(savepoint) = timeline.instants().iter().find(|i| i.action == "savepoint") {
        bounds.push((&savepoint.timestamp, Bound::Savepoint));
    }
    bounds.extend(limits.latest_slices_from.as_deref().map(|b| (b, Bound::LatestSlices)));
    bounds.extend(limits.retained_by_clean.as_deref().map(|b| (b, Bound::CleanRetention)));
    bounds.extend(limits.metadata_table_compacted.as_deref().map(|b| (b, Bound::MetadataTableCompaction)));
    bounds
}

/// The commits to archive, oldest first: the oldest completed ones beyond `min_commits` once
/// there are more than `max_commits` (or `start_above`), all before the nearest of the [`bounds`] (returned too).
fn chosen_commits<'t>(timeline: &'t Timeline, options: &ArchiveOptions, limits: &'t Limits) -> (Vec<&'t Instant>, Option<(&'t str, Bound)>) {
    let commits: Vec<&Instant> = timeline.completed_writes().collect();
    if commits.len() <= options.start_above.unwrap_or(options.max_commits).max(options.min_commits) {
        return (Vec::new(), None);
    }
    let boundary = bounds(timeline, &commits, options, limits).into_iter().min_by(|a, b| a.0.cmp(b.0));
    let archivable = commits.len() - options.min_commits;
    let chosen = commits.into_iter().take_while(|c| boundary.is_none_or(|(b, _)| c.timestamp.as_str() < b)).take(archivable).collect();
    (chosen, boundary)
}

/// The actions to archive, oldest first (hudi-services-format.md §2.7): the
/// [`chosen_commits`], then the completed cleans and rollbacks older than the last of them.
fn choose<'t>(timeline: &'t Timeline, options: &ArchiveOptions, limits: &'t Limits) -> Vec<&'t Instant> {
    let (chosen, _) = chosen_commits(timeline, options, limits);
    let Some(last) = chosen.last() else { return Vec::new() };
    let services = timeline
        .instants()
        .iter()
        .filter(|i| i.is_completed() && matches!(i.action.as_str(), "clean" | "rollback") && i.timestamp < last.timestamp);
    let mut out: Vec<&Instant> = chosen.iter().copied().chain(services).collect();
    out.sort_by(|a, b| a.timestamp.cmp(&b.timestamp));
    out
}

/// Why the active timeline stays above `max_commits` after archiving what [`choose`] lets go,
/// when it does: the bound archival stopped at.
fn held_back(timeline: &Timeline, options: &ArchiveOptions, limits: &Limits) -> Option<String> {
    let (chosen, boundary) = chosen_commits(timeline, options, limits);
    let kept = timeline.completed_writes().count() - chosen.len();
    let (at, bound) = boundary.filter(|_| kept > options.max_commits)?;
    Some(format!(
        "the active timeline keeps {kept} commits, more than archive_max_instants ({}): archival stops before {}",
        options.max_commits,
        bound.reason(at)
    ))
}

/// The history row of `instant` (§2.3): the bytes of its completed file and of its plan.
async fn history_row(storage: &Storage, config: &TableConfig, instant: &Instant, files: &[InstantFile]) -> Result<ArchivedInstant> {
    let dir = &config.timeline_dir;
    let read = async |state: State| -> Result<Option<Bytes>> {
        match files.iter().find(|f| f.state == state) {
            Some(file) => Ok(Some(storage.get(&format!("{dir}/{}", file.file_name)).await?).filter(|b| !b.is_empty())),
            None => Ok(None),
        }
    };
    let metadata = read(State::Completed).await?;
    let plan = match instant.requested_action.as_str() {
        "compaction" | "logcompaction" | "clean" => read(State::Requested).await?,
        "replacecommit" | "clustering" => read(State::Inflight).await?.or(read(State::Requested).await?),
        _ => None,
    };
    let completion = instant.completion.clone().ok_or_else(|| {
        Error::new(ErrorKind::Internal, format!("archiving {}, which has no completion time", instant.timestamp))
    })?;
    Ok(ArchivedInstant { timestamp: instant.timestamp.clone(), completion, action: instant.action.clone(), metadata, plan })
}

/// The earliest instant whose files a latest file slice holds.
async fn latest_slices_from(storage: &Storage, timeline: &Timeline) -> Result<Option<String>> {
    let view = FileSystemView::load(storage).await?;
    let replaced = metadata::replaced_file_groups(storage, timeline, &ReadBound::Latest).await?;
    let slices = view.latest_slices(timeline, &ReadBound::Latest, &replaced);
    let instants = slices.iter().flat_map(|s| std::iter::once(s.base_instant.as_str()).chain(s.log_files.iter().map(|l| l.instant.as_str())));
    Ok(instants.min().map(str::to_owned))
}

/// Archives what `options` let go (`None` when nothing may go). Everything happens under the
/// table lock, as Hudi's archiver does: a history merge deletes the files no manifest lists,
/// and a commit completing meanwhile would not be in the chosen set's bounds.
pub async fn archive(storage: &Storage, writer: &WriterId, lock_options: &LockOptions, options: &ArchiveOptions) -> Result<ArchiveOutcome> {
    let config = crate::table::load_config(storage).await?;
    if config.timeline_layout < 2 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("archival is implemented for table version 8 and later; {} is version {}", storage.uri(), config.version),
        ));
    }
    let dir = config.timeline_dir.clone();
    TableLock::hold(storage, &writer.owner(), lock_options, async |lock| {
        let listing = storage.list_dir(&dir).await?;
        let timeline = Timeline::from_listing(&config, &listing);
        // Below the maximum, or stopped by the timeline alone, nothing goes: no need to list
        // the table's files.
        if choose(&timeline, options, &Limits::default()).is_empty() {
            return Ok(ArchiveOutcome { archived: None, held_back: held_back(&timeline, options, &Limits::default()) });
        }
        let limits = Limits {
            latest_slices_from: latest_slices_from(storage, &timeline).await?,
            retained_by_clean: metadata::retained_by_clean(storage, &timeline).await?.map(|(_, earliest)| earliest),
            metadata_table_compacted: match config.lists_files_in_metadata_table() {
                true => Some(crate::mdt::writer::latest_compaction(storage).await?.unwrap_or_default()),
                false => None,
            },
        };
        let chosen = choose(&timeline, options, &limits);
        let held_back = held_back(&timeline, options, &limits);
        if chosen.is_empty() {
            return Ok(ArchiveOutcome { archived: None, held_back });
        }
        let mut files: BTreeMap<&str, Vec<InstantFile>> = BTreeMap::new();
        for file in listing.iter().filter_map(|(name, _)| InstantFile::parse(name)) {
            if let Some(instant) = chosen.iter().find(|i| i.timestamp == file.timestamp) {
                files.entry(&instant.timestamp).or_default().push(file);
            }
        }
        let mut rows = Vec::with_capacity(chosen.len());
        progress::phase("writing the history", chosen.len(), "instants");
        for instant in &chosen {
            rows.push(history_row(storage, &config, instant, files.get(instant.timestamp.as_str()).map_or(&[], Vec::as_slice)).await?);
            progress::advance(0);
        }
        lock.check().await?;
        let history = History::of(storage, &config);
        history.append(&rows).await?;
        if !lock_options.pause_before_completing.is_zero() {
            // Crash tests: published to the history, still in the active timeline.
            tokio::time::sleep(lock_options.pause_before_completing).await;
        }
        // Pending files first: a completed file deleted before them would show the action
        // pending again (HUDI-7207); then the completed ones, oldest first, so that the active
        // timeline never has a hole.
        let all: Vec<&InstantFile> = files.values().flatten().collect();
        let (completed, pending): (Vec<&InstantFile>, Vec<&InstantFile>) = all.into_iter().partition(|f| f.state == State::Completed);
        lock.check().await?;
        progress::phase("removing archived instants from the active timeline", pending.len() + completed.len(), "files");
        for file in pending.iter().chain(&completed) {
            storage.delete(&format!("{dir}/{}", file.file_name)).await?;
            progress::advance(0);
        }
        lock.check().await?;
        history.compact_and_clean().await?;
        let commits: BTreeSet<&str> = timeline.completed_writes().map(|i| i.timestamp.as_str()).collect();
        let archived = Archived {
            actions: chosen.len(),
            commits: chosen.iter().filter(|i| commits.contains(i.timestamp.as_str())).count(),
            first: chosen[0].timestamp.clone(),
            last: chosen[chosen.len() - 1].timestamp.clone(),
            files_deleted: pending.len() + completed.len(),
        };
        Ok(ArchiveOutcome { archived: Some(archived), held_back })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeline of `n` deltacommits requested at 10, 20, ... (completed 5 later), with a
    /// compaction at each multiple of `compact_every`, plus `extra` names.
    fn timeline(n: u64, compact_every: u64, extra: &[String]) -> Timeline {
        let t = |i: u64| format!("{:017}", 20260101000000000u64 + i);
        let mut names = Vec::new();
        for i in 1..=n {
            let action = if compact_every > 0 && i % compact_every == 0 { "commit" } else { "deltacommit" };
            if action == "commit" {
                names.push(format!("{}.compaction.requested", t(i * 10)));
            }
            names.push(format!("{}_{}.{action}", t(i * 10), t(i * 10 + 5)));
        }
        names.extend(extra.iter().cloned());
        Timeline::from_files(2, ".hoodie/timeline", names.iter().filter_map(|n| InstantFile::parse(n)))
    }

    fn stamps(chosen: &[&Instant]) -> Vec<u64> {
        chosen.iter().map(|i| i.timestamp.parse::<u64>().unwrap() - 20260101000000000).collect()
    }

    const NO_COMPACTION_RULE: ArchiveOptions = ArchiveOptions { min_commits: 3, max_commits: 5, start_above: None, compaction_delta_commits: 0 };

    #[test]
    fn archives_down_to_the_minimum_once_past_the_maximum() {
        let none = Limits::default();
        assert!(choose(&timeline(5, 0, &[]), &NO_COMPACTION_RULE, &none).is_empty(), "not more than the maximum");
        assert_eq!(stamps(&choose(&timeline(6, 0, &[]), &NO_COMPACTION_RULE, &none)), [10, 20, 30]);
        let earlier = ArchiveOptions { start_above: Some(4), ..NO_COMPACTION_RULE };
        assert_eq!(stamps(&choose(&timeline(5, 0, &[]), &earlier, &none)), [10, 20], "started early, down to the minimum");
        // Cleans and rollbacks older than the last commit archived go along; newer ones stay.
        let extra = ["20260101000000025_20260101000000026.clean".to_owned(), "20260101000000045_20260101000000046.rollback".to_owned()];
        assert_eq!(stamps(&choose(&timeline(6, 0, &extra), &NO_COMPACTION_RULE, &none)), [10, 20, 25, 30]);
    }

    #[test]
    fn stops_before_pending_actions_savepoints_replacecommits_and_the_limits() {
        let none = Limits::default();
        // The commit before a pending action stays too (Java's rule).
        let pending = ["20260101000000035.deltacommit.inflight".to_owned()];
        assert_eq!(stamps(&choose(&timeline(6, 0, &pending), &NO_COMPACTION_RULE, &none)), [10, 20]);
        let pending_clean = ["20260101000000025.clean.requested".to_owned()];
        assert_eq!(stamps(&choose(&timeline(6, 0, &pending_clean), &NO_COMPACTION_RULE, &none)), [10]);
        let savepoint = ["20260101000000022_20260101000000023.savepoint".to_owned()];
        assert_eq!(stamps(&choose(&timeline(6, 0, &savepoint), &NO_COMPACTION_RULE, &none)), [10, 20]);
        let replace = ["20260101000000015_20260101000000016.replacecommit".to_owned()];
        assert_eq!(stamps(&choose(&timeline(6, 0, &replace), &NO_COMPACTION_RULE, &none)), [10]);
        // Once a clean retains from after it, the replacecommit's replaced files are gone.
        let cleaned = Limits { retained_by_clean: Some("20260101000000030".into()), ..none.clone() };
        assert_eq!(stamps(&choose(&timeline(6, 0, &replace), &NO_COMPACTION_RULE, &cleaned)), [10, 15, 20]);
        let latest = Limits { latest_slices_from: Some("20260101000000020".into()), ..none.clone() };
        assert_eq!(stamps(&choose(&timeline(6, 0, &[]), &NO_COMPACTION_RULE, &latest)), [10]);
        // Held back: 5 commits kept, and the maximum is 5; with 7, 6 stay and the reason is told.
        assert_eq!(held_back(&timeline(6, 0, &[]), &NO_COMPACTION_RULE, &latest), None);
        let why = held_back(&timeline(7, 0, &[]), &NO_COMPACTION_RULE, &latest).unwrap();
        assert!(why.starts_with("the active timeline keeps 6 commits, more than archive_max_instants (5)"), "{why}");
        assert!(why.contains("latest file slices, which hold files of commits from 20260101000000020 on"), "{why}");
        let early_savepoint = ["20260101000000012_20260101000000013.savepoint".to_owned()];
        let why = held_back(&timeline(7, 0, &early_savepoint), &NO_COMPACTION_RULE, &none).unwrap();
        assert!(why.ends_with("savepoint 20260101000000012"), "{why}");
        assert_eq!(held_back(&timeline(7, 0, &[]), &NO_COMPACTION_RULE, &none), None, "archived down to the minimum");
        let first_pending = ["20260101000000015.deltacommit.inflight".to_owned()];
        assert!(choose(&timeline(7, 0, &first_pending), &NO_COMPACTION_RULE, &none).is_empty());
        let why = held_back(&timeline(7, 0, &first_pending), &NO_COMPACTION_RULE, &none).unwrap();
        assert!(why.contains("keeps 7 commits") && why.ends_with("before 20260101000000010 and the pending action after it (a write still open, or a service not finished)"), "{why}");
    }

    #[test]
    fn keeps_the_deltacommits_the_next_compaction_counts() {
        let options = ArchiveOptions { min_commits: 1, max_commits: 2, start_above: None, compaction_delta_commits: 2 };
        let none = Limits::default();
        assert!(choose(&timeline(8, 0, &[]), &options, &none).is_empty(), "never compacted: all deltacommits count");
        // The latest compaction (100) has fewer deltacommits after it than the next one needs.
        assert_eq!(stamps(&choose(&timeline(10, 5, &[]), &options, &none)), [10, 20, 30, 40, 50, 60, 70, 80, 90]);
        // Four deltacommits after the compaction at 50: the second newest bounds.
        assert_eq!(stamps(&choose(&timeline(9, 5, &[]), &options, &none)), [10, 20, 30, 40, 50, 60, 70]);
    }
}
