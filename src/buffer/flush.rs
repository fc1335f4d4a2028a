//! Flushing the write buffer into Hudi: one deltacommit per flush of a table, written by the
//! background worker as one more NBCC writer. A flush reads the committed transactions' chunks
//! in commit order, writes them through the same path as a direct write, and deletes them from
//! the buffer in the transaction whose commit intent makes the deltacommit committed
//! ([`crate::xact`]): the rows leave the buffer exactly when their deltacommit is decided, so a
//! flush cut short anywhere (an ERROR, kill -9, an immediate shutdown) is done again from the
//! start or not at all. A table whose buffer a TRUNCATE emptied meanwhile fails the flush
//! (fewer rows deleted than written), and it starts over.

use std::time::{Duration, Instant};

use pgrx::bgworkers::BackgroundWorker;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::error::OrReport;
use crate::fdw::table::ForeignHudiTable;
use crate::role::{as_pg_hudi, as_role, in_subtransaction};

/// The most transactions one flush takes (a flush's rows are in memory at once).
const MAX_TRANSACTIONS: i64 = 100_000;
/// How often the flusher looks at the buffer while rows are waiting.
const POLL: Duration = Duration::from_millis(50);
/// The default of the table option `flush_interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// The default of the table option `flush_rows`.
pub const DEFAULT_ROWS: usize = 100_000;

fn spi_error(e: pgrx::spi::SpiError) -> ! {
    crate::error::spi_failed("the write buffer", e)
}

/// A table with buffered rows committed: its location, a foreign table of it that still
/// exists (whose owner flushes), how many rows wait, and for how long the oldest has.
struct Waiting {
    location: String,
    relation: pg_sys::Oid,
    owner: pg_sys::Oid,
    rows: i64,
    oldest: Duration,
}

/// The tables of this database whose buffer holds committed rows.
fn waiting() -> Vec<Waiting> {
    // A database whose extension is older than the library has no buffer.
    let exists = crate::spi::read_one::<bool>("SELECT pg_catalog.to_regclass('hudi.write_buffer') IS NOT NULL", &[]).ok().flatten().unwrap_or(false);
    if !exists {
        return Vec::new();
    }
    Spi::connect(|client| {
        let rows = client
            .select(
                // Every chunk it sees committed; a transaction's last one (`commits`) says when.
                "SELECT b.location, pg_catalog.min(c.oid::int8), pg_catalog.sum(b.row_count)::int8, \
                        EXTRACT(epoch FROM pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) \
                                           pg_catalog.min(b.written_at) FILTER (WHERE b.commits))::float8 \
                   FROM hudi.write_buffer b JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) b.relation \
                  GROUP BY b.location HAVING pg_catalog.bool_or(b.commits)",
                None,
                &[],
            )
            .unwrap_or_else(|e| spi_error(e));
        rows.filter_map(|row| {
            let relation = pg_sys::Oid::from(row.get::<i64>(2).ok()?? as u32);
            Some(Waiting {
                location: row.get::<String>(1).ok()??,
                relation,
                owner: pg_sys::Oid::INVALID,
                rows: row.get::<i64>(3).ok()??,
                oldest: Duration::from_secs_f64(row.get::<f64>(4).ok()??.max(0.0)),
            })
        })
        .collect::<Vec<_>>()
    })
    .into_iter()
    .map(|mut w| {
        // SAFETY: a syscache lookup inside the transaction.
        w.owner = unsafe { owner_of(w.relation) };
        w
    })
    .collect()
}

/// The owner of relation `relid`.
unsafe fn owner_of(relid: pg_sys::Oid) -> pg_sys::Oid {
    let tuple = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::RELOID as i32, pg_sys::Datum::from(relid));
    if tuple.is_null() {
        return pg_sys::Oid::INVALID;
    }
    let class = pg_sys::GETSTRUCT(tuple) as pg_sys::Form_pg_class;
    let owner = (*class).relowner;
    pg_sys::ReleaseSysCache(tuple);
    owner
}

thread_local! {
    /// How long the last flushes of each table took ([`RECENT_FLUSHES`] of them), from start
    /// to commit.
    static LAST_FLUSHES: std::cell::RefCell<std::collections::HashMap<String, std::collections::VecDeque<Duration>>> = Default::default();
    /// Chunks the flushes deleted from the buffer since the round last vacuumed it.
    static DELETED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The memory context [`vacuum_buffer`] gives vacuum() as its portal's.
    static VACUUM_CONTEXT: std::cell::OnceCell<pg_sys::MemoryContext> = const { std::cell::OnceCell::new() };
}

/// How often the round vacuums the buffer while its flushes delete chunks.
const VACUUM_EVERY: Duration = Duration::from_secs(1);

/// VACUUM of `hudi.write_buffer`, in transactions of its own (as a top-level VACUUM command
/// runs; not possible inside SPI's). Every buffered row is inserted once and deleted once by
/// its flush: autovacuum, which visits a database once a minute (`autovacuum_naptime`), leaves
/// a minute of deleted chunks in the table (585 MB at 10,000 one-row commits a second), and
/// every scan of the buffer (the flusher's, the writers' limit check) reads them all. Vacuumed
/// about once a second, the table stays at a few seconds of rows. `shrink`: give empty pages at
/// the end back to the file system, which takes a moment's ACCESS EXCLUSIVE lock (when no one
/// holds a lock on the table; writers that come then wait for it) — only when the buffer is
/// empty. SKIP_LOCKED: a vacuum already running (autovacuum's) is left to finish.
fn vacuum_buffer(shrink: bool) {
    let sql = match shrink {
        true => c"VACUUM (SKIP_LOCKED) hudi.write_buffer",
        false => c"VACUUM (SKIP_LOCKED, TRUNCATE false) hudi.write_buffer",
    };
    // SAFETY: as PostgresMain runs a VACUUM command, outside any transaction (the worker is
    // between its transactions here); vacuum() commits the transaction started here and starts
    // one for each relation and one that it returns in. An ERROR aborts them, as PostgresMain's
    // error recovery does. vacuum() allocates under the portal's context, which a worker has
    // none of: one of the process's own stands in, emptied after each vacuum.
    unsafe {
        let portal = pg_sys::PortalContext;
        pg_sys::PortalContext = VACUUM_CONTEXT.with(|c| {
            *c.get_or_init(|| {
                pg_sys::AllocSetContextCreateExtended(
                    pg_sys::TopMemoryContext,
                    c"pg_hudi write buffer vacuum".as_ptr(),
                    pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
                    pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
                    pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
                )
            })
        });
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        let vacuumed = PgTryBuilder::new(|| {
            let parsed = pg_sys::raw_parser(sql.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
            let raw = (*(*parsed).elements).ptr_value as *mut pg_sys::RawStmt;
            let pstate = pg_sys::make_parsestate(std::ptr::null_mut());
            (*pstate).p_sourcetext = sql.as_ptr();
            pg_sys::ExecVacuum(pstate, (*raw).stmt as *mut pg_sys::VacuumStmt, true);
            pg_sys::CommitTransactionCommand();
            Ok(())
        })
        .catch_others(|error| {
            pg_sys::AbortCurrentTransaction();
            Err(crate::error::caught_message(&error))
        })
        .execute();
        pg_sys::MemoryContextReset(pg_sys::PortalContext);
        pg_sys::PortalContext = portal;
        if let Err(why) = vacuumed {
            log!("{}: vacuuming the write buffer failed: {why}", crate::worker::WORKER_NAME);
        }
    }
    DELETED.with(|d| d.set(0));
}

/// How many flushes of a table tell how long its next one may take.
const RECENT_FLUSHES: usize = 8;

/// How long a flush of the table at `location` may take: the longest of its recent ones.
fn flush_takes(location: &str) -> Duration {
    LAST_FLUSHES.with(|l| l.borrow().get(location).and_then(|recent| recent.iter().max().copied())).unwrap_or_default()
}

fn flush_took(location: &str, took: Duration) {
    LAST_FLUSHES.with(|l| {
        let mut last = l.borrow_mut();
        let recent = last.entry(location.to_owned()).or_default();
        if recent.len() == RECENT_FLUSHES {
            recent.pop_front();
        }
        recent.push_back(took);
    });
}

/// When `table`'s buffer is due for a flush: early enough that its oldest commit, `waited`
/// old now, is in the lake `flush_interval` after it committed, allowing for the round's
/// polling and for `pass`: how long a flush of every waiting table may take (as their recent
/// flushes tell), since those of other tables may come first — or at once when `flush_rows`
/// wait.
fn due_in(table: &ForeignHudiTable, waiting: &Waiting, waited: Duration, pass: Duration) -> Duration {
    let interval = table.options.get("flush_interval").and_then(|v| crate::fdw::options::parse_duration(v)).unwrap_or(DEFAULT_INTERVAL);
    let rows = table.count_option("flush_rows", DEFAULT_ROWS);
    if waiting.rows as usize >= rows { Duration::ZERO } else { interval.saturating_sub(waited + pass + POLL) }
}

/// Flushes every table of this database with committed rows in the buffer, then vacuums what
/// the flushes deleted: for a database's full round (rows a flush round did not take).
pub fn flush_all() {
    flush_due(true);
    if DELETED.with(|d| d.get()) > 0 {
        vacuum_buffer(false);
    }
}

/// Flushes every table of this database whose buffer is due (all with committed rows when
/// `all`), each in a transaction of its own. Returns how long until the next is due, or
/// `None` when the buffer holds no committed row.
fn flush_due(all: bool) -> Option<Duration> {
    let counted = Instant::now();
    let mut tables = BackgroundWorker::transaction(waiting);
    super::limit::counted(tables.iter().map(|t| t.rows).sum());
    if tables.is_empty() {
        return None;
    }
    // The longest waiting first; each table's flush is planned to end in time even after
    // those of all the others (a one-row table flushed late because a large one went first
    // was most of the flush lag).
    tables.sort_by(|a, b| b.oldest.cmp(&a.oldest));
    let pass: Duration = tables.iter().map(|t| flush_takes(&t.location)).sum();
    let mut next = POLL * 20;
    for table in tables {
        if crate::runtime::stopping() {
            break;
        }
        let started = Instant::now();
        let waited = table.oldest + counted.elapsed();
        let flushed = BackgroundWorker::transaction(std::panic::AssertUnwindSafe(|| {
            let outcome = in_subtransaction(|| {
                as_role(table.owner, || {
                    let foreign = ForeignHudiTable::of_relation(table.relation);
                    // Rows go where they were written: a foreign table whose path changed since
                    // (another role's, sharing the location) must not take them elsewhere.
                    if foreign.uri.to_string() != table.location {
                        crate::error::raise(
                            pgrx::PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                            format!(
                                "foreign table {} no longer points at {}, where its buffered rows were written",
                                crate::fdw::table::relation_name(table.relation),
                                table.location
                            ),
                            Some("Point it back there (ALTER FOREIGN TABLE ... OPTIONS (SET path ...)) so that they are flushed.".into()),
                        );
                    }
                    let wait = if all { Duration::ZERO } else { due_in(&foreign, &table, waited, pass) };
                    if !wait.is_zero() {
                        return Some(wait);
                    }
                    flush_table(&table.location, table.relation, &foreign);
                    None
                })
            });
            if outcome.is_err() {
                // What the write wrote before the ERROR goes; the transaction commits nothing.
                crate::xact::discard_write(table.relation);
            }
            outcome
        }));
        match flushed {
            Ok(Some(wait)) => next = next.min(wait),
            Ok(None) => {
                flush_took(&table.location, started.elapsed());
                next = Duration::ZERO;
            }
            Err(why) => {
                log!("{}: flushing the buffered rows of {} failed, tried again later: {why}", crate::worker::WORKER_NAME, table.location);
                next = next.min(POLL * 20);
            }
        }
    }
    Some(next.max(POLL))
}

/// Flushes the committed rows of the table at `location` through its foreign table `relid`
/// (in the current transaction, as the table's owner): how many rows it wrote.
fn flush_table(location: &str, relid: pg_sys::Oid, table: &ForeignHudiTable) -> usize {
    let args: Vec<DatumWithOid> = vec![location.into(), MAX_TRANSACTIONS.into()];
    // One flusher per table on this server: another worker flushing it now is left to it.
    let chunks = as_pg_hudi(|| {
        Spi::connect(|client| {
            let mine = client
                .select("SELECT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pg_hudi flush ' OPERATOR(pg_catalog.||) $1))", None, &args[..1])
                .unwrap_or_else(|e| spi_error(e))
                .first()
                .get_one::<bool>()
                .ok()
                .flatten()
                .unwrap_or(false);
            if !mine {
                return Vec::new();
            }
            // The chunks of the first transactions by commit, in order: windows, not a join of
            // the buffer with itself, which the planner may make a nested loop of index scans —
            // quadratic in the chunks (a flush of 13,000 commits ran for minutes), most likely
            // just after a vacuum counted the buffer nearly empty.
            let rows = client
                .select(
                    "SELECT transaction::text, change, row_count, rows FROM ( \
                        SELECT transaction, change, row_count, rows, position, committed, \
                               pg_catalog.dense_rank() OVER (ORDER BY committed) AS nth \
                          FROM (SELECT transaction, change, row_count, rows, position, \
                                       pg_catalog.max(position) FILTER (WHERE commits) OVER (PARTITION BY transaction) AS committed \
                                  FROM hudi.write_buffer WHERE location OPERATOR(pg_catalog.=) $1) chunks \
                         WHERE committed IS NOT NULL) ranked \
                      WHERE nth OPERATOR(pg_catalog.<=) $2 ORDER BY committed, position",
                    None,
                    &args,
                )
                .unwrap_or_else(|e| spi_error(e));
            rows.filter_map(|row| Some((row.get::<String>(1).ok()??, (row.get::<i8>(2).ok()??, row.get::<i32>(3).ok()??, row.get::<Vec<u8>>(4).ok()??))))
                .collect::<Vec<_>>()
        })
    });
    if chunks.is_empty() {
        return 0;
    }
    let (mut transactions, chunks): (Vec<String>, Vec<_>) = chunks.into_iter().unzip();
    transactions.dedup();
    let changes = engine::write::rows::coalesce(super::decode_chunks(&chunks)).or_report();
    let written = changes.iter().map(|(_, rows)| rows.num_rows()).sum();
    crate::xact::with_open_write(relid, || crate::fdw::modify::new_write(table, relid, false), |write| {
        for (change, rows) in changes {
            write.write_rows(change, rows).or_report();
        }
    });
    let args: Vec<DatumWithOid> = vec![location.into(), transactions.into()];
    let deleted = as_pg_hudi(|| {
        Spi::connect_mut(|client| {
            let deleted = client
                .update(
                    "DELETE FROM hudi.write_buffer WHERE location OPERATOR(pg_catalog.=) $1 \
                        AND transaction OPERATOR(pg_catalog.=) ANY ($2::text[]::xid8[])",
                    None,
                    &args,
                )
                .unwrap_or_else(|e| spi_error(e))
                .len();
            DELETED.with(|d| d.set(d.get() + deleted));
            client
                .update(
                    "INSERT INTO hudi.buffer_flushes AS f (location, flushes) VALUES ($1, 1) \
                     ON CONFLICT (location) DO UPDATE SET flushes = f.flushes OPERATOR(pg_catalog.+) 1",
                    None,
                    &args[..1],
                )
                .unwrap_or_else(|e| spi_error(e));
            deleted
        })
    });
    if deleted != chunks.len() {
        // An ERROR, so that the subtransaction takes back the DELETE of the others too.
        crate::error::raise(
            pgrx::PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            format!("{} of the {} buffered chunks it wrote were gone (a TRUNCATE); it starts over", chunks.len() - deleted, chunks.len()),
            None,
        );
    }
    written
}

/// The body of a database's flush round: flushes its buffered tables as they come due, until
/// the buffer holds no committed row (or the worker is asked to stop); while the database has
/// mirrors captured from the WAL or subscriptions, it decodes the mirrors every
/// [`super::capture::POLL`], applies the subscriptions' commits ([`crate::subscription`]) and
/// does not end — unless `hudi.worker_databases` stops naming the database.
pub fn flush_until_empty() {
    // SAFETY: a read of the worker's database.
    let database = unsafe { pg_sys::MyDatabaseId };
    let name = BackgroundWorker::transaction(|| crate::spi::read_one::<String>("SELECT pg_catalog.current_database()::text", &[]))
        .ok()
        .flatten()
        .unwrap_or_default();
    crate::worker::wake::set_flushing(database, true);
    // The commits on this server that subscriptions follow stop waking this process with it.
    struct Following;
    impl Drop for Following {
        fn drop(&mut self) {
            crate::stream::unfollow_all();
        }
    }
    let _following = Following;
    let (mut vacuumed, mut vacuum_takes) = (Instant::now(), Duration::ZERO);
    while !crate::runtime::stopping() {
        let started = Instant::now();
        // Both, each time: WAL mirrors and subscriptions keep the round running.
        let capturing = super::capture::capture_all() | crate::subscription::apply_all();
        crate::worker::wake::set_capturing(database, capturing);
        let mut next = flush_due(false);
        // Between flushes: a vacuum that would hold up the next due flush waits for a gap
        // (up to VACUUM_EVERY more).
        let gap = next.is_none_or(|next| next > vacuum_takes) || vacuumed.elapsed() >= VACUUM_EVERY * 2;
        if DELETED.with(|d| d.get()) > 0 && vacuumed.elapsed() >= VACUUM_EVERY && gap {
            let began = Instant::now();
            vacuum_buffer(next.is_none());
            vacuum_takes = began.elapsed();
            vacuumed = Instant::now();
        }
        if next.is_none() && !capturing {
            // Commits stop skipping the launcher; one that skipped it committed before this.
            crate::worker::wake::set_flushing(database, false);
            next = flush_due(false);
            match next {
                None => {
                    if DELETED.with(|d| d.get()) > 0 {
                        vacuum_buffer(true);
                    }
                    return;
                }
                Some(_) => crate::worker::wake::set_flushing(database, true),
            }
        }
        let next = match next {
            Some(next) if capturing => next.min(super::capture::POLL),
            Some(next) => next,
            None => super::capture::POLL,
        };
        let wait = next.saturating_sub(started.elapsed()).max(Duration::from_millis(5));
        if !crate::worker::signals::wait(wait) {
            break;
        }
        // A round that captures from the WAL runs for as long as the server does, and serves
        // its database for as long as the settings say so (the launcher starts no new one).
        crate::worker::signals::reload_if_asked();
        if !crate::guc::serves_database(&name) {
            log!("{}: no longer serving database \"{name}\" (hudi.worker_databases); its flush round ends", crate::worker::WORKER_NAME);
            break;
        }
    }
    crate::worker::wake::set_flushing(database, false);
}
