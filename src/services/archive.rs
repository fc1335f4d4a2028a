//! Archival: moves the oldest completed actions of a table's timeline into its LSM history,
//! keeping `archive_min_instants` to `archive_max_instants` completed commits active (Hudi's
//! `hoodie.keep.min.commits` / `hoodie.keep.max.commits`).

use engine::services::archive::{self, ArchiveOptions};
use pgrx::prelude::*;

use crate::error::OrReport;
use crate::fdw::table::ForeignHudiTable;
use crate::guc::lock_options;
use crate::runtime::block_on;
use crate::services::ServiceTable;
use crate::writer::writer_id;

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
pub(crate) fn archive(table: &ServiceTable, trigger: Trigger) -> archive::ArchiveOutcome {
    let mut options = archive_options(&table.foreign);
    if trigger == Trigger::AboveMidpoint {
        options.start_above = Some(options.min_commits + (options.max_commits - options.min_commits).div_ceil(2));
    }
    block_on(archive::archive(&table.storage, &writer_id(), &lock_options(), &options)).or_report()
}
