//! What a backend shows as its `pg_stat_activity.query` while a table service runs in it — a
//! task of the background worker, or a SQL call of `hudi.compact`, `hudi.run_compaction`,
//! `hudi.clean` or `hudi.archive` — in the one format `hudi.table_services` reads:
//! `pg_hudi: <service> of <oid> (<name>)`, then ` — ` and the run's phase and progress
//! ("compacting …: 3/10 file groups, 1200 rows"), kept current by [`crate::runtime::block_on`].

use std::cell::RefCell;
use std::ffi::CString;

use engine::services::progress::Progress;
use pgrx::pg_sys;

thread_local! {
    /// The activity this backend shows now, if any.
    static CURRENT: RefCell<Option<Shown>> = const { RefCell::new(None) };
}

struct Shown {
    label: String,
    progress: Progress,
    /// The progress reports already shown.
    reports: u64,
}

/// Shows a service run of a table in `pg_stat_activity` while it lives; when it ends, a SQL
/// call shows its statement again and the worker shows itself idle. An activity begun while
/// one is shown (a SQL call inside the worker's task) leaves the outer one in place.
pub struct ServiceActivity {
    outermost: bool,
}

impl ServiceActivity {
    /// Shows `service` running on `relid`.
    pub fn begin(service: &str, relid: pg_sys::Oid) -> ServiceActivity {
        let label = format!("pg_hudi: {service} of {} ({})", relid.to_u32(), crate::fdw::table::relation_name(relid));
        let outermost = CURRENT.with(|c| c.borrow().is_none());
        if outermost {
            report(&label);
            CURRENT.with(|c| *c.borrow_mut() = Some(Shown { label, progress: Progress::default(), reports: 0 }));
        }
        ServiceActivity { outermost }
    }

    /// Shows `phase` after the label, until the run reports progress.
    pub fn phase(&self, phase: &str) {
        CURRENT.with(|c| {
            if let Some(shown) = c.borrow().as_ref() {
                report(&format!("{} — {phase}", shown.label));
            }
        });
    }
}

impl Drop for ServiceActivity {
    fn drop(&mut self) {
        if !self.outermost {
            return;
        }
        CURRENT.with(|c| *c.borrow_mut() = None);
        // SAFETY: reads of backend globals on the main thread; PostgreSQL copies the text.
        unsafe {
            if pg_sys::IsBackgroundWorker {
                // A null text keeps the last query shown, as for an idle backend.
                pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_IDLE, std::ptr::null());
            } else if !pg_sys::debug_query_string.is_null() {
                pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_RUNNING, pg_sys::debug_query_string);
            }
        }
    }
}

/// The progress the current activity's storage work reports to, if an activity is shown.
pub(crate) fn progress() -> Option<Progress> {
    CURRENT.with(|c| c.borrow().as_ref().map(|s| s.progress.clone()))
}

/// Shows the current activity's progress again when it changed since last shown.
pub(crate) fn refresh() {
    CURRENT.with(|c| {
        let mut current = c.borrow_mut();
        let Some(shown) = current.as_mut() else { return };
        match shown.progress.describe() {
            Some((reports, text)) if reports != shown.reports => {
                shown.reports = reports;
                report(&format!("{} — {text}", shown.label));
            }
            _ => {}
        }
    });
}

fn report(text: &str) {
    let text = CString::new(text.replace('\0', "")).unwrap_or_default();
    // SAFETY: called on the main thread; PostgreSQL copies the text.
    unsafe { pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_RUNNING, text.as_ptr()) };
}
