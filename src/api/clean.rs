//! Cleaning from SQL: `hudi.clean(table)` deletes the file slices that no read needs any more
//! (Hudi's KEEP_LATEST_COMMITS), keeping those any consumer of the table still reads changes
//! from. Like compaction it commits on its own, whatever becomes of the calling transaction.

use pgrx::prelude::*;

use crate::api::args::{hudi_table, RegClass};
use crate::activity::ServiceActivity;
use crate::services::clean::clean_table;
use crate::services::ServiceTable;

/// `hudi.clean(table)`: one clean of the table (no row when nothing may go yet).
#[pg_extern(volatile)]
pub(crate) fn clean(table: Option<RegClass>) -> TableIterator<
    'static,
    (
        name!(instant, String),
        name!(completion_time, String),
        name!(files_deleted, i32),
        name!(bytes_freed, i64),
        name!(earliest_commit_to_retain, String),
    ),
> {
    let table = hudi_table(table);
    let _shown = ServiceActivity::begin("clean", table.oid());
    let (cleaned, _) = clean_table(&ServiceTable::open(&table, "clean it"));
    TableIterator::new(cleaned.into_iter().map(|c| {
        (c.instant, c.completion, c.files_deleted as i32, c.bytes_freed as i64, c.earliest_commit_to_retain)
    }))
}
