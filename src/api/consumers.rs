//! The positions of `hudi.consume`'s consumers (`hudi.consumer_positions`, one row per table,
//! role and consumer). Roles read their own rows but change them only through these
//! functions, which `hudi.consume` calls: a position is always the start (`''`) or a commit
//! of the table that exists, moves only forward, and is stamped with the time it moved. (When
//! roles could write the rows, a position far in the future or an `updated_at` of 'infinity'
//! held cleaning back for every reader of the table, or made every clean fail.)

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::api::args::{hudi_table, name, required, RegClass};
use crate::error::{raise, OrReport};
use crate::fdw::table::ForeignHudiTable;
use crate::role::as_pg_hudi;

/// The longest consumer name.
const MAX_CONSUMER_NAME: usize = 200;

fn spi_error(e: pgrx::spi::SpiError) -> ! {
    crate::error::spi_failed("consumer positions", e)
}

/// The incremental table `changes` and `consumer`, checked for the current role: it must be
/// a `hudi_fdw` table the role may read.
fn consumer_of(changes: Option<RegClass>, consumer: Option<&str>) -> (pg_sys::Oid, String) {
    let table = hudi_table(changes);
    ForeignHudiTable::for_function(table.oid());
    let consumer = name(consumer, "consumer");
    if consumer.len() > MAX_CONSUMER_NAME {
        raise(PgSqlErrorCode::ERRCODE_NAME_TOO_LONG, format!("a consumer name has at most {MAX_CONSUMER_NAME} bytes"), None);
    }
    (table.oid(), consumer.to_owned())
}

/// The current role's position of `consumer` on `changes`, locked until the end of the
/// transaction: concurrent calls of one consumer queue. A new consumer is created at
/// `start_from`: `'earliest'` (the start, `''`), `'latest'` (the table's latest commit, so that
/// it gets the changes after now) or an instant or timestamp (the changes completed after it).
#[pg_extern(volatile, schema = "hudi_internal")]
fn claim_consumer_position(
    changes: Option<RegClass>,
    consumer: Option<&str>,
    start_from: default!(Option<&str>, "'earliest'"),
) -> String {
    let (relid, consumer) = consumer_of(changes, consumer);
    let start = start_position(relid, name(start_from, "start_from").trim());
    // SAFETY: a plain read of the backend's current user.
    let role = unsafe { pg_sys::GetUserId() };
    let args: Vec<DatumWithOid> = vec![relid.into(), role.into(), consumer.as_str().into(), start.into()];
    as_pg_hudi(|| {
        Spi::connect_mut(|client| {
            client
                .update(
                    "INSERT INTO hudi.consumer_positions (relation, role, consumer, position, updated_at) \
                     VALUES ($1, $2, $3, $4, pg_catalog.now()) ON CONFLICT DO NOTHING",
                    None,
                    &args,
                )
                .unwrap_or_else(|e| spi_error(e));
            client
                .update(
                    "SELECT position FROM hudi.consumer_positions WHERE relation OPERATOR(pg_catalog.=) $1 \
                     AND role OPERATOR(pg_catalog.=) $2 AND consumer OPERATOR(pg_catalog.=) $3 FOR UPDATE",
                    None,
                    &args[..3],
                )
                .unwrap_or_else(|e| spi_error(e))
                .first()
                .get_one::<String>()
                .unwrap_or_else(|e| spi_error(e))
                .unwrap_or_default()
        })
    })
}

/// The current role's position of `consumer` on `changes`, or where a new one would start from
/// `start_from` now (`'latest'`: the latest commit's completion time), without claiming it:
/// what `hudi.consume` waits to see passed before it claims the position.
#[pg_extern(volatile, schema = "hudi_internal")]
fn consumer_position(changes: Option<RegClass>, consumer: Option<&str>, start_from: default!(Option<&str>, "'earliest'")) -> String {
    let (relid, consumer) = consumer_of(changes, consumer);
    // Checked whether or not the consumer is new, as claim_consumer_position checks it.
    let start_from = name(start_from, "start_from").trim();
    // SAFETY: a plain read of the backend's current user.
    let role = unsafe { pg_sys::GetUserId() };
    let args: Vec<DatumWithOid> = vec![relid.into(), role.into(), consumer.as_str().into()];
    let current = as_pg_hudi(|| {
        crate::spi::read_one::<String>(
            "SELECT (SELECT position FROM hudi.consumer_positions WHERE relation OPERATOR(pg_catalog.=) $1 \
             AND role OPERATOR(pg_catalog.=) $2 AND consumer OPERATOR(pg_catalog.=) $3)",
            &args,
        )
    })
    .unwrap_or_else(|e| spi_error(e));
    current.unwrap_or_else(|| start_position(relid, start_from))
}

/// Waits until the Hudi table of `changes` has a commit completed after `after` (a position),
/// or until `until`: whether it has one ([`crate::stream`]). Commits on this server end the
/// wait at once; those of other servers and engines are seen within
/// `hudi.stream_check_interval`.
#[pg_extern(volatile, schema = "hudi_internal")]
fn wait_for_commit(changes: Option<RegClass>, after: Option<&str>, until: Option<pgrx::datum::TimestampWithTimeZone>) -> bool {
    let table = ForeignHudiTable::for_function(hudi_table(changes).oid());
    let after = required(after, "after");
    let until = required(until, "until");
    let found = waiter(&table)(after, until.into_inner());
    if found {
        // The rest of the statement reads the table as it is now.
        crate::fdw::table_state::recheck(&table.uri.to_string());
    }
    found
}

/// What waits for a commit of `table` after a position until a deadline (see
/// [`crate::stream::wait_for_commit`]): its storage, opened now — waiting needs no catalog.
fn waiter(table: &ForeignHudiTable) -> impl Fn(&str, i64) -> bool {
    let location = table.uri.to_string();
    let storage = table.storage();
    let config = crate::runtime::block_on(engine::table::load_config(&storage)).or_report();
    move |after, deadline| {
        let latest = || {
            let timeline = crate::runtime::block_on(engine::timeline::Timeline::load(&storage, &config)).or_report();
            timeline.latest_completion().map(str::to_owned)
        };
        crate::stream::wait_for_commit(&location, after, deadline, latest)
    }
}

/// `CALL hudi.wait_for_changes(changes, consumer, wait [, start_from])` (declared in
/// sql/consume.sql): waits up to `wait` until the table of `changes` (a `NULL::` value of an
/// incremental `hudi_fdw` table, as `hudi.consume` takes) has a commit after the consumer's
/// position, holding no snapshot while it waits — so that a consumer that waits long holds
/// back no vacuum. A function cannot do that (its statement's snapshot is in use); a
/// procedure called on its own can, as PostgreSQL's `pg_wal_replay_wait` does: the CALL's
/// snapshot is popped (PortalRunUtility allows it) once the position is read. Hence it must be
/// called outside a transaction block, and not from a function or another procedure.
///
/// # Safety
/// Called by PostgreSQL's function manager with a valid `fcinfo`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn hudi_wait_for_changes(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let context = (*fcinfo).context as *mut pg_sys::CallContext;
    if context.is_null() || !pgrx::is_a(context.cast(), pg_sys::NodeTag::T_CallContext) || (*context).atomic {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE,
            "hudi.wait_for_changes must be called on its own: not inside a transaction block, a function or another procedure",
            Some("It waits without a snapshot, which a transaction block holds; inside one, use hudi.consume(..., wait => ...).".into()),
        );
    }
    let type_oid = pgrx::fcinfo::pg_getarg_type(fcinfo, 0);
    let relid = pg_sys::get_typ_typrelid(type_oid);
    if relid == pg_sys::InvalidOid {
        raise(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            "changes must be a row of an incremental hudi_fdw table, such as NULL::my_changes",
            None,
        );
    }
    let consumer: Option<&str> = pgrx::fcinfo::pg_getarg(fcinfo, 1);
    let wait: pgrx::datum::Interval = required(pgrx::fcinfo::pg_getarg(fcinfo, 2), "wait");
    let start_from: Option<&str> = pgrx::fcinfo::pg_getarg(fcinfo, 3);
    if wait.is_negative() {
        raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, "wait must not be negative", None);
    }
    let deadline = pg_sys::GetCurrentTimestamp().saturating_add(wait.as_micros().clamp(0, i64::MAX as i128) as i64);
    let table = ForeignHudiTable::for_function(relid);
    if table.options.get("query_type").map(String::as_str) != Some("incremental") {
        raise(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!(
                "hudi.wait_for_changes needs a hudi_fdw foreign table with query_type 'incremental', and {} is not one",
                crate::fdw::table::relation_name(relid)
            ),
            None,
        );
    }
    // An omitted start_from is the declared default; an explicit NULL is refused, as by consume.
    let after = consumer_position(Some(RegClass(relid)), consumer, start_from);
    let wait_for = waiter(&table);
    drop(table);
    // From here on no catalog or table is read: the CALL's snapshot goes, and the catalog's.
    if pg_sys::ActiveSnapshotSet() {
        pg_sys::PopActiveSnapshot();
    }
    pg_sys::InvalidateCatalogSnapshot();
    if pg_sys::HaveRegisteredOrActiveSnapshot() || (*pg_sys::MyProc).xmin != pg_sys::InvalidTransactionId {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_TRANSACTION_STATE,
            "hudi.wait_for_changes cannot wait without a snapshot here",
            Some("Call it on its own, with no cursor open, at isolation level READ COMMITTED.".into()),
        );
    }
    wait_for(&after, deadline);
    pg_sys::Datum::from(0usize)
}

/// `fmgr` info record of [`hudi_wait_for_changes`].
#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_hudi_wait_for_changes() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// Where a new consumer of `relid` starts ([`claim_consumer_position`]'s `start_from`).
fn start_position(relid: pg_sys::Oid, start_from: &str) -> String {
    let position = match start_from {
        "earliest" => return String::new(),
        "latest" => return latest_commit(relid).unwrap_or_default(),
        other => crate::fdw::options::instant_of(other).unwrap_or_else(|| {
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("invalid start_from \"{other}\""),
                Some("A consumer starts from 'earliest', 'latest', a Hudi instant (yyyyMMddHHmmssSSS) or a timestamp.".into()),
            )
        }),
    };
    check_position(relid, &position);
    position
}

/// The completion time of the latest completed commit of `relid`: how far a position may move.
fn latest_commit(relid: pg_sys::Oid) -> Option<String> {
    crate::api::tables::latest_write(relid).map(|(_, completion)| completion)
}

/// Moves the current role's position of `consumer` on `changes` to `position`, a commit of the
/// table (at most its latest) not before the current position, and stamps it now. The
/// position is claimed first ([`claim_consumer_position`]).
#[pg_extern(volatile, schema = "hudi_internal")]
fn advance_consumer_position(changes: Option<RegClass>, consumer: Option<&str>, position: Option<&str>) {
    let position = required(position, "position");
    let current = claim_consumer_position(changes, consumer, Some("earliest"));
    let (relid, consumer) = consumer_of(changes, consumer);
    if position < current.as_str() {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("position {position} is before the consumer's position {current}"),
            None,
        );
    }
    set_position(relid, &consumer, Some(position));
}

/// Refuses a position of `relid` other than `''` or an instant no later than its latest commit.
fn check_position(relid: pg_sys::Oid, position: &str) {
    if position.is_empty() {
        return;
    }
    if !engine::timeline::instant::is_instant_time(position) || latest_commit(relid).is_none_or(|latest| position > latest.as_str()) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("position \"{position}\" is not a commit of the table"),
            Some("A position is '' (the start) or a completion time no later than that of hudi.latest_commit(table).".into()),
        );
    }
}

/// Sets the current role's `consumer` of `relid` to `position` (`None`: removes it), which
/// must be `''` or a completion time of the table no later than its latest commit.
fn set_position(relid: pg_sys::Oid, consumer: &str, position: Option<&str>) {
    if let Some(position) = position {
        check_position(relid, position);
    }
    // SAFETY: a plain read of the backend's current user.
    let role = unsafe { pg_sys::GetUserId() };
    let args: Vec<DatumWithOid> = vec![relid.into(), role.into(), consumer.into(), position.into()];
    let statement = if position.is_some() {
        "INSERT INTO hudi.consumer_positions AS p (relation, role, consumer, position, updated_at) \
         VALUES ($1, $2, $3, $4, pg_catalog.now()) \
         ON CONFLICT (relation, role, consumer) DO UPDATE SET position = excluded.position, updated_at = excluded.updated_at"
    } else {
        "DELETE FROM hudi.consumer_positions WHERE relation OPERATOR(pg_catalog.=) $1 AND role OPERATOR(pg_catalog.=) $2 \
         AND consumer OPERATOR(pg_catalog.=) $3 AND $4::pg_catalog.text IS NULL"
    };
    as_pg_hudi(|| Spi::run_with_args(statement, &args)).unwrap_or_else(|e| spi_error(e));
}

/// `hudi.reset_consumer(changes, consumer, position)`: sets the current role's position of
/// `consumer` on `changes` to `position` — `''`, the start, or a completion time of the table
/// no later than its latest commit — to read changes again from there; without a position
/// (NULL) the consumer is removed (a later `hudi.consume` starts from the start).
#[pg_extern(volatile)]
fn reset_consumer(changes: Option<RegClass>, consumer: Option<&str>, position: default!(Option<&str>, "NULL")) {
    let (relid, consumer) = consumer_of(changes, consumer);
    set_position(relid, &consumer, position);
}

/// `hudi.stream_watches()`: the tables sessions of this server wait on for their next commit
/// (`hudi.consume(..., wait => ...)`), and the Hudi tables of subscriptions: each one's
/// location, how many sessions wait now (a flush round applying subscriptions counts as one), how
/// many timeline listings the checks for other servers' commits made, and when the last
/// finished. Tables nobody waits on any more stay listed until their slot is reused.
#[pg_extern(volatile)]
fn stream_watches() -> TableIterator<
    'static,
    (
        name!(location, String),
        name!(waiting, i32),
        name!(listings, i64),
        name!(checked_at, Option<pgrx::datum::TimestampWithTimeZone>),
    ),
> {
    TableIterator::new(crate::stream::watched().into_iter().map(|(location, waiting, listings, checked_at)| {
        (location, waiting, listings, checked_at.map(|t| pgrx::datum::TimestampWithTimeZone::try_from(t).expect("a finite time")))
    }))
}
