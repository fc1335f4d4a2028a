//! Rollback of failed writes: the pending writes of a table whose writer's heartbeat is older
//! than `hudi.heartbeat_expiry` (a crashed or killed backend) lose their files and get a
//! rollback instant.
//!
//! A write prepared by a PostgreSQL transaction (see [`crate::intents`]) is decided by that
//! transaction: on this server it is completed if the transaction committed, left alone while
//! it runs, and rolled back if it aborted; a write prepared on another server is left to that
//! server.

use engine::services::rollback::RolledBack;

use crate::error::OrReport;
use crate::runtime::block_on;
use crate::services::ServiceTable;
use crate::writer::writer_id;

/// Rolls back the failed writes of `table`: what it rolled back.
pub(crate) fn rollback_failed_writes(table: &ServiceTable) -> Vec<RolledBack> {
    let (storage, location) = (&table.storage, table.foreign.uri.to_string());
    let config = block_on(engine::table::load_config(storage)).or_report();
    let failed = block_on(engine::services::rollback::failed_writes(storage, &config, crate::guc::heartbeat_expiry())).or_report();
    let node = writer_id().node;
    let mut to_roll_back = Vec::new();
    for write in failed {
        let Some(mark) = write.prepared.clone() else {
            // Not prepared yet: failed unless its backend is alive here (a heartbeat can be
            // late; a live backend is not).
            if !crate::locks::write_is_live_here(&location, &write.instant) {
                to_roll_back.push(write);
            }
            continue;
        };
        if mark.node != node {
            pgrx::notice!(
                "write {} was prepared by a transaction of server {}; only that server decides it",
                write.instant,
                mark.node
            );
        } else {
            // This server decided it: by its transaction's fate, never by what this snapshot
            // happens to see of the intents (a REPEATABLE READ snapshot, another database).
            match crate::intents::transaction_status(mark.transaction as i64).as_deref() {
                Some("aborted") => to_roll_back.push(write),
                Some("committed") => {
                    let instant = std::slice::from_ref(&write.instant);
                    match crate::intents::to_finish(Some(&location), Some(instant), None).pop() {
                        Some(intent) => {
                            if let crate::intents::Finished::Failed(e) = crate::intents::finish(&intent) {
                                pgrx::warning!("the committed write {} is not completed yet: {e}", write.instant);
                            }
                        }
                        None => pgrx::notice!(
                            "write {} was committed; it is completed from its intent in the database that wrote it",
                            write.instant
                        ),
                    }
                }
                Some(_) => {} // in progress: alive
                None => pgrx::warning!(
                    "write {} was prepared by a transaction too old to know the fate of; it is left alone",
                    write.instant
                ),
            }
        }
    }
    // SAFETY: a plain read of the backend's pid.
    let owner = format!("rollback:{}", unsafe { pgrx::pg_sys::MyProcPid });
    block_on(engine::services::rollback::rollback_writes(
        storage,
        &config,
        &to_roll_back,
        crate::guc::heartbeat_expiry(),
        &owner,
        &crate::guc::lock_options(),
    ))
    .or_report()
}
