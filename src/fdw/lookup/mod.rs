//! Lookup scans: a scan of a Hudi foreign table whose quals fix every column of one of its
//! lookup cache's indexes (`c.id = o.customer_id`, also through equivalence classes;
//! `id = 42`, `id = $1`, `id IN (...)`, `id = ANY($1)`) finds its rows in the cache
//! ([`engine::lookup`]) instead of the lake. For joins the planner gets a parameterized path
//! (postgres_fdw's way: `required_outer`, the outer values as `fdw_exprs`, evaluated again at
//! every rescan), so that it can choose a nested loop with point probes. PostgreSQL rechecks
//! every qual on the rows found, the probed ones too.
//!
//! A backend keeps each cache open as a RocksDB secondary instance and catches up with the
//! worker once per statement, at executor start, so that one statement sees one applied
//! commit across every index; a new generation is opened when the worker published one. A
//! plan whose cache is gone by execution reads the lake instead (the rechecked quals keep its
//! answer the same).
//!
//! Freshness: after this session committed to the Hudi table (through any foreign table on
//! its location), its lookups read their writes: a scan that runs once reads the lake while
//! the cache misses that commit, and a join's probes wait (a bounded while) for the cache to
//! hold it. A table with `lookup_max_lag`
//! whose cache misses a commit older than that waits for the cache too (`lookup_on_stale
//! 'wait'`, the default), fails (`'error'`), or reads the lake (`'scan'`). A wait that runs out
//! reads the lake.

mod paths;
mod probe;
mod readers;

use engine::lookup::Index;
use serde::{Deserialize, Serialize};

pub use paths::{add_foreign_path, add_paths, path_index, plan};
pub use probe::{begin, Probe};
pub use readers::{cached_position, cached_schema, committed, shape};

/// What planning needs to know of a table's cache.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CacheShape {
    /// The record key fields, when probes by their values work.
    record_key: Option<Vec<String>>,
    /// Each secondary index's columns, by number.
    secondary: Vec<Vec<String>>,
    /// The cached columns.
    columns: Vec<String>,
}

impl CacheShape {
    fn indexes(&self) -> Vec<(Index, &[String])> {
        let mut out: Vec<(Index, &[String])> = Vec::new();
        if let Some(fields) = &self.record_key {
            out.push((Index::RecordKey, fields));
        }
        out.extend(self.secondary.iter().enumerate().map(|(i, c)| (Index::Secondary(i), c.as_slice())));
        out
    }
}

/// What a lookup scan probes, carried in its plan: one value expression per index column in
/// `fdw_exprs`, in the index's column order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LookupPlan {
    pub index: Index,
    /// The index's columns.
    pub columns: Vec<String>,
    /// Per column: whether its expression gives an array of values (`IN`, `= ANY`).
    pub arrays: Vec<bool>,
    /// Per column: its expression as EXPLAIN shows it.
    pub shown: Vec<String>,
}
