//! A per-backend cache of table state, so that a query does not list every data file of a
//! table in the store twice (planning, then executing) and a query repeated on a table that
//! did not change lists none.
//!
//! An entry is a loaded [`TableReader`], keyed by the table's location and the settings it
//! is opened with (a role with other credentials has an entry of its own). Its state is
//! trusted without any request for the rest of the statement that checked it; the next
//! statement checks it with one LIST of the timeline ([`TableReader::refreshed`]), which
//! loads the table anew when anything happened. A statement therefore sees each table as it
//! was when the statement first opened it. `hudi.cache_table_state = off` turns it off.

use std::cell::RefCell;
use std::collections::BTreeSet;

use engine::read::TableReader;
use engine::storage::StoreSettings;
use pgrx::pg_sys;

use crate::error::OrReport;
use crate::fdw::table::ForeignHudiTable;
use crate::runtime::block_on;

/// Tables whose state a backend keeps; the least recently used goes first.
const CAPACITY: usize = 16;

struct Entry {
    location: String,
    settings: StoreSettings,
    reader: TableReader,
    checked_in: Statement,
    /// The committed intents that were read before the entry's files were listed: their
    /// instants' files are all in the listing (an intent is recorded after its files).
    committed_before_listing: BTreeSet<String>,
}

/// One top-level statement of one transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statement {
    transaction_start: pg_sys::TimestampTz,
    statement_start: pg_sys::TimestampTz,
}

pub fn current_statement() -> Statement {
    // SAFETY: reads of the transaction's timestamps, on the main thread.
    unsafe {
        Statement {
            transaction_start: pg_sys::GetCurrentTransactionStartTimestamp(),
            statement_start: pg_sys::GetCurrentStatementStartTimestamp(),
        }
    }
}

thread_local! {
    static ENTRIES: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// Forgets every kept state: for what this backend changes in a table itself (a service, a
/// new table), which the rest of the statement must see.
pub fn forget_all() {
    ENTRIES.with(|entries| entries.borrow_mut().clear());
}

/// Makes the next read of the table at `location` check its kept state with a LIST of the
/// timeline, even within the statement that checked it already (a read that must see every
/// commit completed by now: one of a table with a write buffer).
pub fn recheck(location: &str) {
    ENTRIES.with(|entries| {
        for entry in entries.borrow_mut().iter_mut().filter(|e| e.location == location) {
            entry.checked_in.statement_start = 0;
        }
    });
}

/// The state of `table` now, for a read that must see the files of the `committed` intents'
/// instants: from the cache when it is still valid, else refreshed or loaded (and cached).
pub fn reader(table: &ForeignHudiTable, committed: &[String]) -> TableReader {
    engine::read::merge_cache::set_capacity(crate::guc::merge_cache_bytes());
    if !crate::guc::CACHE_TABLE_STATE.get() {
        forget_all();
        return table.load_reader();
    }
    let location = table.uri.to_string();
    let now = current_statement();
    let cached = ENTRIES.with(|entries| {
        let mut entries = entries.borrow_mut();
        let at = entries.iter().position(|e| e.location == location && e.settings == table.store)?;
        Some(entries.remove(at))
    });
    let covers = |entry: &Entry| committed.iter().all(|c| entry.committed_before_listing.contains(c));
    let entry = match cached {
        Some(entry) if entry.checked_in == now && covers(&entry) => entry,
        Some(entry) if covers(&entry) => {
            let reader = block_on(entry.reader.refreshed()).or_report();
            let committed_before_listing = if reader.is_same_load(&entry.reader) {
                entry.committed_before_listing
            } else {
                committed.iter().cloned().collect()
            };
            Entry { reader, checked_in: now, committed_before_listing, ..entry }
        }
        _ => Entry {
            location,
            settings: table.store.clone(),
            reader: table.load_reader(),
            checked_in: now,
            committed_before_listing: committed.iter().cloned().collect(),
        },
    };
    let reader = entry.reader.clone();
    ENTRIES.with(|entries| {
        let mut entries = entries.borrow_mut();
        entries.insert(0, entry);
        entries.truncate(CAPACITY);
    });
    reader
}
