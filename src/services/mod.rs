//! The table services — rollback of failed writes, compaction, cleaning, archival — and the
//! lookup caches' refresh: what the SQL functions of [`crate::api`] and the background worker
//! ([`crate::worker`]) both run on a foreign table. Each opens its table once, as a
//! [`ServiceTable`]; the callers decide as which role (the caller's own, or the worker's
//! [`crate::role::as_role`] of the table's owner) and in which transaction.

pub mod archive;
pub mod clean;
pub mod compaction;
pub mod lookup_cache;
pub mod rollback;

use engine::storage::Storage;
use pgrx::prelude::*;
use pgrx::{PgRelation, PgSqlErrorCode};

use crate::fdw::table::ForeignHudiTable;

/// A foreign table a service runs on, resolved once for it: its location and options, and
/// its storage opened with the current role's credentials.
pub struct ServiceTable {
    pub foreign: ForeignHudiTable,
    pub storage: Storage,
}

impl ServiceTable {
    /// `table`, for a service that will `to` it: like VACUUM, services that rewrite and delete
    /// a table's files are for its owner. What the service changes is read anew afterwards,
    /// also later in the same statement.
    pub fn open(table: &PgRelation, to: &str) -> ServiceTable {
        require_owner(table, to);
        crate::fdw::table_state::forget_all();
        let foreign = ForeignHudiTable::for_function(table.oid());
        let storage = foreign.storage();
        ServiceTable { foreign, storage }
    }
}

/// Raises 42501 unless the current role owns `table` (or is a superuser), naming what it wanted
/// `to` do.
pub(crate) fn require_owner(table: &PgRelation, to: &str) {
    // SAFETY: catalog lookup on the main thread for an open relation.
    let owner = unsafe { pg_sys::pg_class_ownercheck(table.oid(), pg_sys::GetUserId()) };
    if !owner {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("must be owner of foreign table \"{}\" to {to}", table.name()),
            None,
        );
    }
}
