//! Archival from SQL: `hudi.archive(table)` moves the oldest completed actions of the table's
//! timeline into its LSM history, keeping `archive_min_instants` to `archive_max_instants`
//! completed commits active (Hudi's `hoodie.keep.min.commits` / `hoodie.keep.max.commits`).
//! Like compaction and cleaning it commits on its own, whatever becomes of the calling
//! transaction.

use engine::services::archive::{self, ArchiveOptions};
use pgrx::prelude::*;
use pgrx::PgRelation;

use crate::activity::ServiceActivity;
use crate::api::service_target;
use crate::error::OrReport;
use crate::fdw::modify::writer_id;
use crate::fdw::table::ForeignHudiTable;
use crate::guc::lock_options;
use crate::runtime::block_on;

/// What the table options of `table` ask archival to keep.
pub(crate) fn archive_options(table: &ForeignHudiTable) -> ArchiveOptions {
    let defaults = ArchiveOptions::default();
    let options = ArchiveOptions {
        min_commits: table.count_option("archive_min_instants", defaults.min_commits),
        max_commits: table.count_option("archive_max_instants", defaults.max_commits),
        compaction_delta_commits: table.count_option("compaction_delta_commits", defaults.compaction_delta_commits),
        start_above: None,
    };
    if options.min_commits >= options.max_commits {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "archive_min_instants ({}) must be less than archive_max_instants ({})",
                options.min_commits, options.max_commits
            ),
            Some("Set both options of the foreign table, e.g. archive_min_instants '20', archive_max_instants '30'.".into()),
        );
    }
    options
}

/// `hudi.archive(table)`: one archival of the table (no row when nothing may go yet).
#[pg_extern(volatile)]
pub(crate) fn archive(table: PgRelation) -> TableIterator<
    'static,
    (
        name!(instants_archived, i32),
        name!(commits_archived, i32),
        name!(first_instant, String),
        name!(last_instant, String),
    ),
> {
    let _shown = ServiceActivity::begin("archive", table.oid());
    let outcome = archive_table(&table, Trigger::AboveMax);
    if let Some(why) = &outcome.held_back {
        pgrx::notice!("{why}");
    }
    TableIterator::new(outcome.archived.into_iter().map(|a| (a.actions as i32, a.commits as i32, a.first, a.last)))
}

/// When an archival starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// Above `archive_max_instants` commits, as Hudi's archiver after each commit.
    AboveMax,
    /// Above the midpoint between `archive_min_instants` and `archive_max_instants`: the
    /// worker's rounds come a while apart, and the commits in between must not take the active
    /// timeline past the maximum.
    AboveMidpoint,
}

/// One archival of `table` that starts at `trigger`: what it moved, if anything, and what holds
/// it back while the active timeline stays above its maximum.
pub(crate) fn archive_table(table: &PgRelation, trigger: Trigger) -> archive::ArchiveOutcome {
    let storage = service_target(table, "archive it");
    let mut options = archive_options(&ForeignHudiTable::of_relation(table.oid()));
    if trigger == Trigger::AboveMidpoint {
        options.start_above = Some(options.min_commits + (options.max_commits - options.min_commits).div_ceil(2));
    }
    block_on(archive::archive(&storage, &writer_id(), &lock_options(), &options)).or_report()
}
