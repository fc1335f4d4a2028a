//! The timeline: which actions were requested, are in flight, or completed, and when they
//! completed (hudi-format.md §2). Layout 1 (table v6) keeps instants flat in `.hoodie/` and
//! records no completion time; layout 2 (v8, v9) keeps them in `.hoodie/timeline/` and names
//! completed instants `<requested>_<completion>.<action>`.

pub mod history;
pub mod instant;
pub mod metadata;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

pub use history::{ArchivedCompletion, ArchivedCompletions};
pub use instant::{InstantFile, State};

use crate::error::Result;
use crate::storage::Storage;
use crate::table::TableConfig;

/// One action on the timeline in its most advanced state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instant {
    /// Requested instant time.
    pub timestamp: String,
    /// The action, as completed (`commit` for a finished compaction) or as pending.
    pub action: String,
    /// The action as requested (`compaction`, `clustering`, or the same as `action`).
    pub requested_action: String,
    pub state: State,
    /// Completion time: from the file name in layout 2; `None` in layout 1 and when pending.
    pub completion: Option<String>,
    /// Timeline file of the most advanced state.
    pub file_name: String,
}

impl Instant {
    pub fn is_completed(&self) -> bool {
        self.state == State::Completed
    }

    /// Completed actions that write data files readers must see.
    pub fn is_completed_write(&self) -> bool {
        self.is_completed() && matches!(self.action.as_str(), "commit" | "deltacommit" | "replacecommit")
    }
}

/// Which completed instants a read sees.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReadBound {
    /// Everything completed so far.
    Latest,
    /// Instants requested at or before this time: time travel (`as_of`), inclusive.
    RequestedBy(String),
    /// Instants that completed at or before this time: the end of an incremental range on a
    /// layout-2 table (in layout 1, where no completion time exists, the requested time).
    CompletedBy(String),
}

/// The writes whose rows an incremental range returns, by requested instant time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WritesInRange {
    /// Completed writes of the active timeline.
    active: HashSet<String>,
    /// When the range reaches back before the active timeline: the archived writes in it.
    archived: Option<ArchivedWrites>,
}

/// Archived writes in a range that the LSM history does not list (layout 1, whose archive is
/// not read, and tables archived before their history began): those requested before the
/// active timeline's first write, after `after` and up to `until`. Requested times stand in
/// for their completion times (exact in layout 1). Writes the history lists are decided by
/// their completion times, in [`WritesInRange::active`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct ArchivedWrites {
    after: Option<String>,
    until: Option<String>,
    before: String,
    listed: Arc<ArchivedCompletions>,
}

impl WritesInRange {
    /// Whether the write requested at `instant` is in the range.
    pub fn contains(&self, instant: &str) -> bool {
        self.active.contains(instant)
            || self.archived.as_ref().is_some_and(|a| {
                instant < a.before.as_str()
                    && !a.listed.contains_key(instant)
                    && a.after.as_deref().is_none_or(|s| instant > s)
                    && a.until.as_deref().is_none_or(|e| instant <= e)
            })
    }

    /// Whether the range holds no write at all.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty() && self.archived.is_none()
    }
}

impl<S: Into<String>> FromIterator<S> for WritesInRange {
    /// Exactly these active writes.
    fn from_iter<I: IntoIterator<Item = S>>(instants: I) -> WritesInRange {
        WritesInRange { active: instants.into_iter().map(Into::into).collect(), archived: None }
    }
}

/// Actions of the write timeline, as requested: those whose files readers see.
fn is_write_action(action: &str) -> bool {
    matches!(action, "commit" | "deltacommit" | "replacecommit" | "compaction" | "clustering" | "logcompaction")
}

/// Actions that writers (not table services) request, which a rollback of failed writes
/// takes when their writer goes silent. In layout 1 a `replacecommit` may be a clustering.
pub fn is_writer_action(layout: u32, action: &str) -> bool {
    action == "deltacommit" || (layout >= 2 && action == "replacecommit")
}

/// The completion time given to decided writes ([`Timeline::with_decided_writes`]): later than
/// any real one.
pub const DECIDED_COMPLETION: &str = "99999999999999999";

/// All instants of a table, ordered by requested time.
#[derive(Debug, Clone)]
pub struct Timeline {
    layout: u32,
    dir: String,
    instants: Vec<Instant>,
    by_timestamp: BTreeMap<String, usize>,
    /// Completion times of archived actions, from the LSM history ([`Timeline::with_archived`]).
    archived: Arc<ArchivedCompletions>,
}

impl Timeline {
    /// Lists and parses the timeline directory of the table at `storage`.
    pub async fn load(storage: &Storage, config: &TableConfig) -> Result<Timeline> {
        Ok(Timeline::from_listing(config, &storage.list_dir(&config.timeline_dir).await?))
    }

    /// The timeline of the timeline directory's `(name, size)` listing.
    pub fn from_listing(config: &TableConfig, listing: &[(String, u64)]) -> Timeline {
        let parsed = listing.iter().filter_map(|(name, _)| InstantFile::parse(name));
        Timeline::from_files(config.timeline_layout, &config.timeline_dir, parsed)
    }

    /// Builds a timeline from parsed file names (any order).
    pub fn from_files(layout: u32, dir: &str, files: impl IntoIterator<Item = InstantFile>) -> Timeline {
        let mut grouped: BTreeMap<String, Vec<InstantFile>> = BTreeMap::new();
        for file in files {
            grouped.entry(file.timestamp.clone()).or_default().push(file);
        }
        let mut instants = Vec::with_capacity(grouped.len());
        for (timestamp, mut files) in grouped {
            files.sort_by_key(|f| f.state);
            let requested_action = files[0].action.clone();
            let Some(latest) = files.pop() else { continue };
            instants.push(Instant {
                timestamp,
                action: latest.action,
                requested_action,
                state: latest.state,
                completion: latest.completion,
                file_name: latest.file_name,
            });
        }
        let by_timestamp =
            instants.iter().enumerate().map(|(i, instant)| (instant.timestamp.clone(), i)).collect();
        Timeline { layout, dir: dir.to_owned(), instants, by_timestamp, archived: Default::default() }
    }

    /// This timeline with the completion times of the actions archived to the LSM history.
    pub fn with_archived(mut self, archived: Arc<ArchivedCompletions>) -> Timeline {
        self.archived = archived;
        self
    }

    /// The archived actions known from the LSM history.
    pub fn archived(&self) -> &Arc<ArchivedCompletions> {
        &self.archived
    }

    /// The first instant of the write timeline (writes and compactions, in any state): what
    /// is older was archived.
    pub fn first_write(&self) -> Option<&Instant> {
        self.instants.iter().find(|i| is_write_action(&i.requested_action))
    }

    pub fn layout(&self) -> u32 {
        self.layout
    }

    /// Directory of the timeline files, relative to the table's base path.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    pub fn instants(&self) -> &[Instant] {
        &self.instants
    }

    pub fn get(&self, timestamp: &str) -> Option<&Instant> {
        self.by_timestamp.get(timestamp).map(|&i| &self.instants[i])
    }

    pub fn is_completed(&self, timestamp: &str) -> bool {
        self.get(timestamp).is_some_and(Instant::is_completed)
    }

    /// Whether `timestamp` is older than the first write of this (active) timeline: archival
    /// moved it out, and only completed actions are archived (Java's
    /// `containsOrBeforeTimelineStarts` on the commits and compactions). Data files of such
    /// instants are committed.
    pub fn is_archived(&self, timestamp: &str) -> bool {
        self.first_write().is_some_and(|first| timestamp < first.timestamp.as_str())
    }

    /// When the action requested at `timestamp` completed, for ordering and slicing: the
    /// completion time in layout 2, the requested time itself in layout 1 (which orders
    /// actions by requested time). For archived actions, the time the LSM history records,
    /// or, for those it does not list, the requested time. `None` while pending or unknown.
    pub fn completion_time<'a>(&'a self, timestamp: &'a str) -> Option<&'a str> {
        if self.is_archived(timestamp) {
            return Some(self.archived.get(timestamp).map_or(timestamp, |a| a.completion.as_str()));
        }
        let instant = self.get(timestamp).filter(|i| i.is_completed())?;
        Some(instant.completion.as_deref().unwrap_or(&instant.timestamp))
    }

    /// Whether the action requested at `timestamp` is completed and inside `bound`.
    pub fn is_visible(&self, timestamp: &str, bound: &ReadBound) -> bool {
        let Some(completed) = self.completion_time(timestamp) else { return false };
        match bound {
            ReadBound::Latest => true,
            ReadBound::RequestedBy(t) => timestamp <= t.as_str(),
            ReadBound::CompletedBy(t) => completed <= t.as_str(),
        }
    }

    /// The completed writes whose completion time (layout 2) or requested time (layout 1)
    /// lies in `(start, end]`; `None` bounds are open.
    pub fn writes_in_range(&self, start: Option<&str>, end: Option<&str>) -> WritesInRange {
        let in_range = |t: &str| start.is_none_or(|s| t > s) && end.is_none_or(|e| t <= e);
        let active = self.completed_writes().filter(|i| in_range(i.completion.as_deref().unwrap_or(&i.timestamp))).map(|i| &i.timestamp);
        let listed = self.archived.iter().filter(|(_, a)| is_write_action(&a.action) && in_range(&a.completion)).map(|(t, _)| t);
        let active = active.chain(listed).cloned().collect();
        let archived = self.first_write().filter(|first| start.is_none_or(|s| s < first.timestamp.as_str())).map(|first| ArchivedWrites {
            after: start.map(str::to_owned),
            until: end.map(str::to_owned),
            before: first.timestamp.clone(),
            listed: self.archived.clone(),
        });
        WritesInRange { active, archived }
    }

    /// Completed writes (commit, deltacommit, replacecommit), by requested time.
    pub fn completed_writes(&self) -> impl DoubleEndedIterator<Item = &Instant> {
        self.instants.iter().filter(|i| i.is_completed_write())
    }

    /// The completion time (layout 2; the instant in layout 1) of the write that completed
    /// last: the end of an incremental range that catches up completely, and what consumer
    /// positions hold.
    pub fn latest_completion(&self) -> Option<&str> {
        self.completed_writes().filter_map(|i| self.completion_time(&i.timestamp)).max()
    }

    /// The completed writes whose completion time (layout 2; the instant in layout 1) lies in
    /// `(start, end]` (`None`: from the first).
    pub fn completed_writes_between<'a>(&'a self, start: Option<&'a str>, end: &'a str) -> impl Iterator<Item = &'a Instant> + 'a {
        self.completed_writes()
            .filter(move |i| self.completion_time(&i.timestamp).is_some_and(|c| start.is_none_or(|s| c > s) && c <= end))
    }

    /// The latest completed write: what a snapshot read sees by default.
    pub fn latest_completed_write(&self) -> Option<&Instant> {
        self.completed_writes().next_back()
    }

    /// Treats the pending writes `instants` as completed after everything else: what a read
    /// sees of writes that are decided but not yet completed in storage (the reader's own open
    /// transaction, or one its server committed). Their logs join the latest slices.
    /// Instants that are not pending writes ([`Self::pending_writes`]) are left as they are.
    pub fn with_decided_writes<'a>(&mut self, instants: impl IntoIterator<Item = &'a str>) {
        let layout = self.layout;
        for timestamp in instants {
            if let Some(&i) = self.by_timestamp.get(timestamp) {
                let instant = &mut self.instants[i];
                if !instant.is_completed() && is_writer_action(layout, &instant.requested_action) {
                    instant.state = State::Completed;
                    instant.action = instant.requested_action.clone();
                    instant.completion = Some(DECIDED_COMPLETION.into());
                }
            }
        }
    }

    /// Adds the deltacommit `timestamp`, completed after everything else, whose files exist
    /// only in the reader's memory: rows a writer buffered outside the lake
    /// ([`crate::read::TableReader::with_buffered`]). `timestamp` must be later than every
    /// instant of the timeline.
    pub(crate) fn with_buffered_write(&mut self, timestamp: &str) {
        debug_assert!(self.instants.last().is_none_or(|last| last.timestamp.as_str() < timestamp));
        self.by_timestamp.insert(timestamp.to_owned(), self.instants.len());
        self.instants.push(Instant {
            timestamp: timestamp.to_owned(),
            action: "deltacommit".into(),
            requested_action: "deltacommit".into(),
            state: State::Completed,
            completion: Some(DECIDED_COMPLETION.into()),
            file_name: String::new(),
        });
    }

    /// The pending writes (requested or in flight) by requested time: deltacommits, and in
    /// layout 2 replacecommits (a truncate's, or an insert overwrite's; clusterings are
    /// requested as `clustering` there).
    pub fn pending_writes(&self) -> impl Iterator<Item = &Instant> {
        self.instants.iter().filter(|i| !i.is_completed() && is_writer_action(self.layout, &i.requested_action))
    }

    /// Replacecommits pending, or completed after `after` (a truncate that a write beginning at
    /// `after` did not see).
    pub fn replacecommits_since<'a>(&'a self, after: &'a str) -> impl Iterator<Item = &'a Instant> {
        self.instants.iter().filter(move |i| {
            i.requested_action == "replacecommit" && i.timestamp != after && i.completion.as_deref().is_none_or(|c| c > after)
        })
    }

    /// Compactions requested or in flight, by requested time.
    pub fn pending_compactions(&self) -> impl Iterator<Item = &Instant> {
        self.instants.iter().filter(|i| !i.is_completed() && i.requested_action == "compaction")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(names: &[&str]) -> Timeline {
        Timeline::from_files(2, ".hoodie/timeline", names.iter().filter_map(|n| InstantFile::parse(n)))
    }

    #[test]
    fn merges_states_and_maps_compaction_to_commit() {
        let t = timeline(&[
            "20251220210129235.compaction.requested",
            "20251220210129235.compaction.inflight",
            "20251220210129235_20251220210129883.commit",
            "20251220210130911.deltacommit.requested",
            "20251220210130911.deltacommit.inflight",
            "20251220210123755_20251220210124336.deltacommit",
            "20251220210123755.deltacommit.requested",
        ]);
        assert_eq!(t.instants().len(), 3);
        let compaction = t.get("20251220210129235").unwrap();
        assert_eq!((compaction.action.as_str(), compaction.requested_action.as_str()), ("commit", "compaction"));
        assert_eq!(t.completion_time("20251220210129235"), Some("20251220210129883"));
        assert!(!t.is_completed("20251220210130911"));
        assert_eq!(t.completion_time("20251220210130911"), None);
        assert_eq!(t.latest_completed_write().unwrap().timestamp, "20251220210129235");
        assert_eq!(t.pending_compactions().count(), 0);
    }

    #[test]
    fn layout_1_orders_by_requested_time() {
        let t = Timeline::from_files(
            1,
            ".hoodie",
            ["20250126040823628.deltacommit", "20250126040936578.rollback.requested"]
                .iter()
                .filter_map(|n| InstantFile::parse(n)),
        );
        assert_eq!(t.completion_time("20250126040823628"), Some("20250126040823628"));
        assert!(!t.is_completed("20250126040936578"));
    }

    #[test]
    fn decided_writes_complete_after_everything_else() {
        let mut t = timeline(&[
            "20250101000000010_20250101000000020.deltacommit",
            "20250101000000015.deltacommit.inflight",
            "20250101000000016.deltacommit.requested",
            "20250101000000018.compaction.requested",
        ]);
        t.with_decided_writes(["20250101000000015", "20250101000000018", "20250101000000099"]);
        assert!(t.is_completed("20250101000000015"));
        assert_eq!(t.completion_time("20250101000000015"), Some(DECIDED_COMPLETION));
        assert!(!t.is_completed("20250101000000016"), "not named");
        assert!(!t.is_completed("20250101000000018"), "not a write");
        assert!(t.get("20250101000000099").is_none());
        let pending: Vec<_> = t.pending_writes().map(|i| i.timestamp.as_str()).collect();
        assert_eq!(pending, ["20250101000000016"]);
    }

    #[test]
    fn instants_before_the_active_timeline_are_archived_writes() {
        let t = timeline(&[
            "20250101000000050_20250101000000060.deltacommit",
            "20250101000000070.deltacommit.inflight",
        ]);
        // Older than every active instant: archived, visible, and completed at its request.
        assert!(t.is_archived("20250101000000010") && !t.is_archived("20250101000000055"));
        assert_eq!(t.completion_time("20250101000000010"), Some("20250101000000010"));
        assert!(t.is_visible("20250101000000010", &ReadBound::CompletedBy("20250101000000020".into())));
        assert!(!t.is_visible("20250101000000055", &ReadBound::Latest), "unknown, not archived");
        assert!(!t.is_visible("20250101000000070", &ReadBound::Latest), "pending");

        let (archived, active) = ("20250101000000010", "20250101000000050");
        let all = t.writes_in_range(None, None);
        assert!(all.contains(archived) && all.contains(active) && !all.contains("20250101000000070"));
        // A start inside the archive takes the archived writes after it.
        let from = |start: &str, end: Option<&str>| t.writes_in_range(Some(start), end);
        assert!(from("20250101000000005", None).contains(archived));
        assert!(!from("20250101000000010", None).contains(archived));
        assert!(!from("20250101000000005", Some("20250101000000009")).contains(archived));
        // A start inside the active timeline takes no archived write.
        let later = from("20250101000000060", None);
        assert!(!later.contains(archived) && !later.contains(active) && later.is_empty());
        assert!(from("20250101000000059", None).contains(active), "completed at ..060, after the start");
    }
}
