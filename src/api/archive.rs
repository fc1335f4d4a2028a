//! Archival from SQL: `hudi.archive(table)` moves the oldest completed actions of the table's
//! timeline into its LSM history, keeping `archive_min_instants` to `archive_max_instants`
//! completed commits active (Hudi's `hoodie.keep.min.commits` / `hoodie.keep.max.commits`).
//! Like compaction and cleaning it commits on its own, whatever becomes of the calling
//! transaction.

use pgrx::prelude::*;

use crate::api::args::{hudi_table, RegClass};
use crate::activity::ServiceActivity;
use crate::services::archive::Trigger;
use crate::services::ServiceTable;

/// `hudi.archive(table)`: one archival of the table (no row when nothing may go yet).
#[pg_extern(volatile)]
fn archive(table: Option<RegClass>) -> TableIterator<
    'static,
    (
        name!(instants_archived, i32),
        name!(commits_archived, i32),
        name!(first_instant, String),
        name!(last_instant, String),
    ),
> {
    let table = hudi_table(table);
    let _shown = ServiceActivity::begin("archive", table.oid());
    let outcome = crate::services::archive::archive(&ServiceTable::open(&table, "archive it"), Trigger::AboveMax);
    if let Some(why) = &outcome.held_back {
        pgrx::notice!("{why}");
    }
    TableIterator::new(outcome.archived.into_iter().map(|a| (a.actions as i32, a.commits as i32, a.first, a.last)))
}
