//! This backend as a Hudi writer: who it is to the lake (the node and process a lock epoch,
//! a lease or a prepared mark names).

use engine::write::WriterId;
use pgrx::pg_sys;

/// This backend as a writer: the server's system identifier and the backend pid.
pub(crate) fn writer_id() -> WriterId {
    // SAFETY: plain reads of backend globals.
    unsafe { WriterId { node: pg_sys::GetSystemIdentifier() % 1_000_000_000, process: pg_sys::MyProcPid as u32 } }
}
