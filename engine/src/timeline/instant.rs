//! Timeline file names (hudi-format.md §2.2–2.4).

/// The lifecycle state of an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    Requested,
    Inflight,
    Completed,
}

/// One timeline file, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstantFile {
    /// Requested instant time (17 or 14 digits).
    pub timestamp: String,
    /// Action as named in the file (`commit`, `deltacommit`, `compaction`, ...).
    pub action: String,
    pub state: State,
    /// Completion time, present only in completed layout-2 names.
    pub completion: Option<String>,
    pub file_name: String,
}

/// Actions that can appear on a timeline.
pub const ACTIONS: &[&str] = &[
    "commit",
    "deltacommit",
    "replacecommit",
    "compaction",
    "logcompaction",
    "clustering",
    "clean",
    "rollback",
    "savepoint",
    "restore",
    "indexing",
    "schemacommit",
];

/// Whether `s` is an instant time: 17 digits (`yyyyMMddHHmmssSSS`) or the older 14.
pub fn is_instant_time(s: &str) -> bool {
    (s.len() == 17 || s.len() == 14) && s.bytes().all(|b| b.is_ascii_digit())
}

impl InstantFile {
    /// Parses a file name of `.hoodie/` (layout 1) or `.hoodie/timeline/` (layout 2);
    /// `None` for anything else.
    pub fn parse(file_name: &str) -> Option<InstantFile> {
        let (head, rest) = file_name.split_once('.')?;
        let (timestamp, completion) = match head.split_once('_') {
            Some((ts, done)) if is_instant_time(ts) && is_instant_time(done) => (ts, Some(done)),
            Some(_) => return None,
            None if is_instant_time(head) => (head, None),
            None => return None,
        };
        let (action, state) = match rest.split_once('.') {
            Some((action, "requested")) => (action, State::Requested),
            Some((action, "inflight")) => (action, State::Inflight),
            Some(_) => return None,
            // `<ts>.inflight` is a plain commit in flight.
            None if rest == "inflight" => ("commit", State::Inflight),
            None => (rest, State::Completed),
        };
        if !ACTIONS.contains(&action) || (completion.is_some() && state != State::Completed) {
            return None;
        }
        Some(InstantFile {
            timestamp: timestamp.to_owned(),
            action: action.to_owned(),
            state,
            completion: completion.map(str::to_owned),
            file_name: file_name.to_owned(),
        })
    }
}

/// The action a pending action completes as: compaction → commit, log compaction →
/// deltacommit, clustering → replacecommit.
pub fn completed_action(action: &str) -> &str {
    match action {
        "compaction" => "commit",
        "logcompaction" => "deltacommit",
        "clustering" => "replacecommit",
        other => other,
    }
}

/// The completion time of the completed `action` requested at `instant`, among the names of a
/// timeline directory's listing (layout 2 names carry it): how a writer under the table lock
/// tells, from one listing, whether an instant was completed already.
pub fn completion_in<'a>(names: impl IntoIterator<Item = &'a str>, instant: &str, action: &str) -> Option<String> {
    names.into_iter().find_map(|name| match InstantFile::parse(name) {
        Some(f) if f.timestamp == instant && f.action == action && f.state == State::Completed => f.completion,
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_layouts() {
        let done = InstantFile::parse("20251220210123755_20251220210124336.deltacommit").unwrap();
        assert_eq!(done.timestamp, "20251220210123755");
        assert_eq!(done.completion.as_deref(), Some("20251220210124336"));
        assert_eq!((done.action.as_str(), done.state), ("deltacommit", State::Completed));

        let v6 = InstantFile::parse("20250126040823628.deltacommit").unwrap();
        assert_eq!((v6.state, v6.completion), (State::Completed, None));

        let inflight = InstantFile::parse("20250713010535797.inflight").unwrap();
        assert_eq!((inflight.action.as_str(), inflight.state), ("commit", State::Inflight));

        let req = InstantFile::parse("20251220210129235.compaction.requested").unwrap();
        assert_eq!((req.action.as_str(), req.state), ("compaction", State::Requested));
    }

    #[test]
    fn finds_a_completed_instant_in_a_listing() {
        let names = ["20250101000000001.deltacommit.inflight", "20250101000000002_20250101000000009.deltacommit",
                     "20250101000000001_20250101000000005.commit"];
        assert_eq!(completion_in(names, "20250101000000002", "deltacommit").as_deref(), Some("20250101000000009"));
        assert_eq!(completion_in(names, "20250101000000001", "commit").as_deref(), Some("20250101000000005"));
        assert_eq!(completion_in(names, "20250101000000001", "deltacommit"), None, "only in flight");
    }

    #[test]
    fn ignores_other_files() {
        for name in ["hoodie.properties", "history", ".aux", "20251220210123755.deltacommit.crc",
                     "2025.commit", "20251220210123755_x.commit", "20251220210123755.unknown"] {
            assert_eq!(InstantFile::parse(name), None, "{name}");
        }
    }
}
