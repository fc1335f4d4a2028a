//! How far a long service run (a compaction, a clean, an archival) has come, for whoever
//! shows it: the run reports its phase and counts to the [`Progress`] it runs under
//! ([`Progress::track`]), without a handle passed through every call; outside one, reports
//! go nowhere.

use std::future::Future;
use std::sync::{Arc, Mutex};

tokio::task_local! {
    static CURRENT: Progress;
}

/// Where a run's reports go; cheap to clone (the clones share the counts).
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<Mutex<Counts>>);

#[derive(Debug, Default)]
struct Counts {
    phase: String,
    done: u64,
    total: u64,
    unit: &'static str,
    rows: u64,
    /// Reports so far: a watcher shows the text again only when it grew.
    reports: u64,
}

impl Progress {
    /// Runs `future` with its reports going to this progress.
    pub async fn track<F: Future>(&self, future: F) -> F::Output {
        CURRENT.scope(self.clone(), future).await
    }

    /// The number of reports so far and what they come to, e.g. "compacting 2026…: 3/10 file
    /// groups, 1200 rows"; `None` before the first.
    pub fn describe(&self) -> Option<(u64, String)> {
        let counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if counts.reports == 0 {
            return None;
        }
        let mut text = counts.phase.clone();
        if counts.total > 0 {
            text.push_str(&format!(": {}/{} {}", counts.done, counts.total, counts.unit));
        }
        if counts.rows > 0 {
            text.push_str(&format!(", {} rows", counts.rows));
        }
        Some((counts.reports, text))
    }
}

fn update(f: impl FnOnce(&mut Counts)) {
    let _ = CURRENT.try_with(|progress| {
        let mut counts = progress.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut counts);
        counts.reports += 1;
    });
}

/// The run enters `phase`, with `total` `unit`s to do (0: not counted).
pub fn phase(phase: impl Into<String>, total: usize, unit: &'static str) {
    let phase = phase.into();
    update(|c| {
        *c = Counts { phase, total: total as u64, unit, reports: c.reports, ..Default::default() };
    });
}

/// One more unit of the phase done, with `rows` rows.
pub fn advance(rows: u64) {
    update(|c| {
        c.done += 1;
        c.rows += rows;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reports_reach_the_progress_they_run_under_and_only_it() {
        let progress = Progress::default();
        phase("outside", 3, "files");
        assert_eq!(progress.describe(), None);
        progress
            .track(async {
                phase("compacting 1", 2, "file groups");
                advance(10);
                advance(5);
            })
            .await;
        assert_eq!(progress.describe(), Some((3, "compacting 1: 2/2 file groups, 15 rows".to_owned())));
        progress.track(async { phase("writing the history", 0, "") }).await;
        assert_eq!(progress.describe(), Some((4, "writing the history".to_owned())));
    }
}
