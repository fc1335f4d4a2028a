//! Configuration parameters (`hudi.*`).

use std::ffi::CString;

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};

/// `hudi.allowed_file_roots`: directories under which roles other than superusers may place
/// `file://` servers and tables (comma-separated absolute paths or `file://` URIs).
pub static ALLOWED_FILE_ROOTS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// `hudi.allowed_endpoints`: the object-store endpoints (URLs: scheme, host and port) that the
/// user mappings of roles other than superusers may name (`aws_endpoint`,
/// `azure_storage_endpoint`, the Azure emulator, `proxy_url`).
pub static ALLOWED_ENDPOINTS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// `hudi.worker_database`: the database the launcher connects to, to list the databases.
pub static WORKER_DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));

/// `hudi.worker_databases`: the databases the workers serve (comma-separated names; all that
/// allow connections when empty).
pub static WORKER_DATABASES: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// Whether the workers serve the database `name`, as `hudi.worker_databases` says now.
pub fn serves_database(name: &str) -> bool {
    let wanted = string_value(&WORKER_DATABASES);
    let mut wanted = wanted.split(',').map(str::trim).filter(|d| !d.is_empty()).peekable();
    wanted.peek().is_none() || wanted.any(|d| d == name)
}

/// `hudi.max_database_workers`: how many databases the workers serve at once.
pub static MAX_DATABASE_WORKERS: GucSetting<i32> = GucSetting::<i32>::new(2);

/// `hudi.worker_naptime`: seconds between the starts of two rounds of a database's worker.
pub static WORKER_NAPTIME: GucSetting<i32> = GucSetting::<i32>::new(10);

/// `hudi.worker_naptime` as a duration.
pub fn worker_naptime() -> std::time::Duration {
    std::time::Duration::from_secs(WORKER_NAPTIME.get().max(1) as u64)
}

/// `hudi.lookup_refresh_interval`: milliseconds between the starts of two lookup rounds of a
/// database with lookup caches (commits on this server start one at once).
pub static LOOKUP_REFRESH_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// `hudi.lookup_refresh_interval` as a duration.
pub fn lookup_refresh_interval() -> std::time::Duration {
    std::time::Duration::from_millis(LOOKUP_REFRESH_INTERVAL.get().max(100) as u64)
}

/// `hudi.stream_check_interval`: how often waiting consumers look for commits of other
/// servers and engines (one timeline listing per table and interval for the whole server).
pub static STREAM_CHECK_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(1000);

/// `hudi.stream_check_interval` as a duration.
pub fn stream_check_interval() -> std::time::Duration {
    std::time::Duration::from_millis(STREAM_CHECK_INTERVAL.get().max(10) as u64)
}

/// `hudi.as_of_instant`: time travel for every Hudi table read in the session (overrides the
/// tables' `as_of_instant` option).
pub static AS_OF_INSTANT: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// `hudi.start_instant` / `hudi.end_instant`: the range `(start, end]` of incremental reads in
/// the session (override the tables' options).
pub static START_INSTANT: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static END_INSTANT: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// `hudi.parallel_read_states` (set by pg_hudi only): the states at which a statement's leader
/// read the Hudi tables that its parallel workers scan whole ([`crate::fdw::parallel`]).
/// PostgreSQL hands every setting to the workers; only a superuser could set this one.
pub static PARALLEL_READ_STATES: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// `hudi.file_mode`: the permissions of the files pg_hudi creates on `file://` (its
/// directories get them with search allowed where reading is); `default` leaves them as the
/// server's umask does (PostgreSQL's: the server's OS user only).
#[derive(pgrx::PostgresGucEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileMode {
    #[name = c"default"]
    Default,
    #[name = c"0600"]
    OwnerOnly,
    #[name = c"0640"]
    GroupReads,
    #[name = c"0644"]
    AllRead,
    #[name = c"0660"]
    GroupWrites,
    #[name = c"0664"]
    GroupWritesAllRead,
}

pub static FILE_MODE: GucSetting<FileMode> = GucSetting::<FileMode>::new(FileMode::Default);

/// `hudi.storage_lock`: whether writers also take Hudi's storage-based lock
/// (`StorageBasedLockProvider`, `.hoodie/.locks/table_lock.json`), which Spark and Flink
/// writers configured with it take: where a writer took it before (`auto`), always (`on`,
/// creating it), or never (`off`).
#[derive(pgrx::PostgresGucEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageLock {
    #[name = c"auto"]
    Auto,
    #[name = c"on"]
    On,
    #[name = c"off"]
    Off,
}

pub static STORAGE_LOCK: GucSetting<StorageLock> = GucSetting::<StorageLock>::new(StorageLock::Auto);

/// [`FILE_MODE`] as permission bits (`None`: the umask's).
pub fn file_mode() -> Option<u32> {
    match FILE_MODE.get() {
        FileMode::Default => None,
        FileMode::OwnerOnly => Some(0o600),
        FileMode::GroupReads => Some(0o640),
        FileMode::AllRead => Some(0o644),
        FileMode::GroupWrites => Some(0o660),
        FileMode::GroupWritesAllRead => Some(0o664),
    }
}

/// `hudi.heartbeat_expiry`: seconds after which a pending write whose writer sent no heartbeat
/// counts as failed and may be rolled back (a server setting, at least a second).
pub static HEARTBEAT_EXPIRY: GucSetting<i32> = GucSetting::<i32>::new(300);

/// `hudi.max_clock_skew`: the bound on clock differences between servers writing the same
/// tables; writers wait it out under the table lock before taking a time.
pub static MAX_CLOCK_SKEW: GucSetting<i32> = GucSetting::<i32>::new(0);

/// `hudi.lock_lease`: how long a table lock holder owns the lock before others may break it.
pub static LOCK_LEASE: GucSetting<i32> = GucSetting::<i32>::new(60);

/// `hudi.debug_pause_before_complete`: a developer setting for crash tests; a committing
/// writer waits this long between taking its completion time and creating the completed
/// instant, so a test can kill it exactly there.
pub static DEBUG_PAUSE_BEFORE_COMPLETE: GucSetting<i32> = GucSetting::<i32>::new(0);
/// `hudi.debug_pause_before_commit`: a developer setting for crash tests; a committing
/// transaction pauses after recording its commit intents, before PostgreSQL commits.
pub static DEBUG_PAUSE_BEFORE_COMMIT: GucSetting<i32> = GucSetting::<i32>::new(0);

/// `hudi.read_ahead_slices`: how many file slices a scan decodes and merges ahead, on helper
/// threads, while the backend returns the rows of the current one (0: none, all on the
/// backend's thread).
pub static READ_AHEAD_SLICES: GucSetting<i32> = GucSetting::<i32>::new(2);

/// `hudi.write_batch_rows`: how many rows a backend buffers per written table before it
/// writes them as log blocks (one log file per touched file group): memory against files.
pub static WRITE_BATCH_ROWS: GucSetting<i32> = GucSetting::<i32>::new(100_000);

/// `hudi.write_buffer_max_rows`: the most rows the write buffer of buffered tables holds
/// before writers get an error (53400): flushing into Hudi has fallen behind.
pub static WRITE_BUFFER_MAX_ROWS: GucSetting<i32> = GucSetting::<i32>::new(10_000_000);

/// `hudi.use_record_positions`: whether scans merge a file slice by position when its log
/// blocks name the base-file rows they replace (otherwise by record key, as for other slices).
pub static USE_RECORD_POSITIONS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// `hudi.enable_lookup_cache`: whether the planner may answer equality on all of a lookup
/// cache's keys from the cache ([`crate::fdw::lookup`]) instead of scanning the lake.
pub static ENABLE_LOOKUP_CACHE: GucSetting<bool> = GucSetting::<bool>::new(true);

/// `hudi.aggregate_pushdown`: whether the planner may compute aggregates over a Hudi table in
/// the engine ([`crate::fdw::aggregate`]) instead of in PostgreSQL over a scan.
pub static AGGREGATE_PUSHDOWN: GucSetting<bool> = GucSetting::<bool>::new(true);

/// `hudi.cache_table_state`: whether a backend keeps tables' state between statements and
/// checks it with one timeline listing ([`crate::fdw::table_state`]); off lists every table's
/// files for every statement (for files placed by hand, outside any Hudi instant).
pub static CACHE_TABLE_STATE: GucSetting<bool> = GucSetting::<bool>::new(true);

/// `hudi.merge_cache_size`: kilobytes of merge outcomes a process keeps, so that a repeated
/// read of a file slice with logs assembles its rows without merging it again, and of the
/// log blocks' record keys that point queries look up (`engine::read::merge_cache`; 0: none).
pub static MERGE_CACHE_SIZE: GucSetting<i32> = GucSetting::<i32>::new((engine::read::merge_cache::DEFAULT_CAPACITY >> 10) as i32);

/// `hudi.merge_cache_size` in bytes.
pub fn merge_cache_bytes() -> usize {
    (MERGE_CACHE_SIZE.get().max(0) as usize) << 10
}

/// `hudi.read_ahead_slices` as a count.
pub fn read_ahead_slices() -> usize {
    READ_AHEAD_SLICES.get().max(0) as usize
}

/// `hudi.heartbeat_expiry` as a duration.
pub fn heartbeat_expiry() -> std::time::Duration {
    std::time::Duration::from_secs(HEARTBEAT_EXPIRY.get().max(1) as u64)
}

/// The lease of Hudi's storage-based lock: `hudi.lock_lease` (at least ten seconds, Hudi's
/// least), renewed ten times in it, as Hudi requires.
fn storage_lock_settings() -> engine::write::storage_lock::StorageLockSettings {
    let validity = std::time::Duration::from_secs(LOCK_LEASE.get().max(10) as u64);
    engine::write::storage_lock::StorageLockSettings { validity, renew: (validity / 10).max(std::time::Duration::from_secs(1)) }
}

/// The table-lock settings writers use.
pub fn lock_options() -> engine::write::time::LockOptions {
    use engine::write::time::StorageLockUse;
    engine::write::time::LockOptions {
        lease: std::time::Duration::from_secs(LOCK_LEASE.get().max(1) as u64),
        max_clock_skew: std::time::Duration::from_millis(MAX_CLOCK_SKEW.get().max(0) as u64),
        pause_before_completing: std::time::Duration::from_millis(DEBUG_PAUSE_BEFORE_COMPLETE.get().max(0) as u64),
        storage_lock: match STORAGE_LOCK.get() {
            StorageLock::Auto => StorageLockUse::IfInUse(storage_lock_settings()),
            StorageLock::On => StorageLockUse::Always(storage_lock_settings()),
            StorageLock::Off => StorageLockUse::Off,
        },
        ..Default::default()
    }
}

pub fn register() {
    GucRegistry::define_int_guc(
        c"hudi.read_ahead_slices",
        c"How many file slices a scan of a Hudi table decodes and merges ahead, on helper threads.",
        c"Each slice ahead holds its decoded rows in memory; 0 decodes every slice on the backend's own thread.",
        &READ_AHEAD_SLICES,
        0,
        64,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"hudi.write_batch_rows",
        c"How many rows a backend buffers per Hudi table it writes before writing them as log files.",
        c"Each batch becomes one log file per file group it touches; buffered rows take memory until then.",
        &WRITE_BATCH_ROWS,
        1,
        10_000_000,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"hudi.write_buffer_max_rows",
        c"The most rows the write buffer of tables with write_mode 'buffered' holds in a database.",
        c"Writers get an error (53400) beyond it: flushing into Hudi has fallen behind, and the buffer would fill the disk.",
        &WRITE_BUFFER_MAX_ROWS,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"hudi.use_record_positions",
        c"Whether scans of Hudi tables merge log blocks into base files by the record positions the blocks carry.",
        c"Off merges every file slice by record key (Hudi's hoodie.merge.use.record.positions).",
        &USE_RECORD_POSITIONS,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"hudi.aggregate_pushdown",
        c"Whether aggregates over a Hudi table may be computed by pg_hudi's engine.",
        c"Off aggregates in PostgreSQL over a scan of the table's rows.",
        &AGGREGATE_PUSHDOWN,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"hudi.enable_lookup_cache",
        c"Whether queries may find rows of Hudi tables in their lookup caches.",
        c"Off plans every scan of a Hudi table as a scan of its files, as enable_indexscan does for indexes.",
        &ENABLE_LOOKUP_CACHE,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"hudi.cache_table_state",
        c"Whether a backend keeps the state of Hudi tables between statements.",
        c"A kept state is checked with one listing of the timeline per statement; off lists every file for every statement.",
        &CACHE_TABLE_STATE,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"hudi.merge_cache_size",
        c"Memory a backend keeps for the merge outcomes of Hudi file slices with logs.",
        c"A repeated read of an unchanged file slice then assembles its rows without merging it again (0: none are kept).",
        &MERGE_CACHE_SIZE,
        0,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_int_guc(
        c"hudi.max_clock_skew",
        c"Largest clock difference between servers writing the same Hudi tables.",
        c"Writers wait this long under the table lock before taking an instant time.",
        &MAX_CLOCK_SKEW,
        0,
        60_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"hudi.lock_lease",
        c"How long a writer holding a Hudi table lock owns it before others may break it.",
        c"",
        &LOCK_LEASE,
        1,
        3600,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"hudi.debug_pause_before_complete",
        c"Developer setting for crash tests: pause between a commit's completion time and its completed instant.",
        c"",
        &DEBUG_PAUSE_BEFORE_COMPLETE,
        0,
        600_000,
        GucContext::Suset,
        GucFlags::UNIT_MS | GucFlags::NO_SHOW_ALL,
    );
    GucRegistry::define_int_guc(
        c"hudi.debug_pause_before_commit",
        c"Developer setting for crash tests: pause after a transaction's commit intents are recorded, before PostgreSQL commits.",
        c"",
        &DEBUG_PAUSE_BEFORE_COMMIT,
        0,
        600_000,
        GucContext::Suset,
        GucFlags::UNIT_MS | GucFlags::NO_SHOW_ALL,
    );
    GucRegistry::define_enum_guc(
        c"hudi.storage_lock",
        c"Whether writers of Hudi tables also take Hudi's storage-based lock (.hoodie/.locks/table_lock.json).",
        c"auto: where a writer took it before (Spark or Flink writers configured with StorageBasedLockProvider); on: always, creating it; off: never. It works on s3:// and gs:// (and memory://), as Hudi's does. A superuser setting: writers that skip it could commit alongside Spark's.",
        &STORAGE_LOCK,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"hudi.file_mode",
        c"Permissions of the files pg_hudi creates on file:// (directories: the same, searchable where readable).",
        c"default leaves them as the server's umask does (only the server's OS user may read them); 0640 or 0644 let a Spark job or another OS user of the host read the tables. A server setting: it decides who may read the lake's files.",
        &FILE_MODE,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"hudi.heartbeat_expiry",
        c"Seconds without a heartbeat after which a pending Hudi write counts as failed.",
        c"hudi.rollback_failed_writes rolls back such writes, except those of live backends of this server. A server setting: a session that could lower it could have the live writes of other servers rolled back.",
        &HEARTBEAT_EXPIRY,
        1,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_string_guc(
        c"hudi.start_instant",
        c"Start (exclusive) of incremental reads of Hudi tables.",
        c"A completion time on table version 8+, an instant time on version 6, or a timestamp (taken in UTC). Overrides the start_instant table option.",
        &START_INSTANT,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"hudi.end_instant",
        c"End (inclusive) of incremental reads of Hudi tables.",
        c"Empty means the latest commit. Overrides the end_instant table option.",
        &END_INSTANT,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"hudi.parallel_read_states",
        c"Internal: the read states of Hudi tables a statement's parallel workers scan.",
        c"Set by pg_hudi for each statement with parallel workers.",
        &PARALLEL_READ_STATES,
        GucContext::Suset,
        GucFlags::NO_SHOW_ALL | GucFlags::DISALLOW_IN_FILE,
    );
    GucRegistry::define_string_guc(
        c"hudi.as_of_instant",
        c"Reads Hudi tables as of this instant (yyyyMMddHHmmssSSS) or timestamp.",
        c"Empty means the latest snapshot. A timestamp names the instant of that moment in UTC. Overrides the as_of_instant table option.",
        &AS_OF_INSTANT,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"hudi.allowed_file_roots",
        c"Directories where non-superusers may place file:// Hudi tables.",
        c"Comma-separated absolute paths or file:// URIs. Superusers may use any location.",
        &ALLOWED_FILE_ROOTS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"hudi.allowed_endpoints",
        c"Object-store endpoints that the user mappings of non-superusers may name.",
        c"Comma-separated URLs (scheme, host and port), for aws_endpoint, azure_storage_endpoint, the Azure emulator and proxy_url. Empty: none. Superusers may name any.",
        &ALLOWED_ENDPOINTS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"hudi.worker_database",
        c"Database the pg_hudi launcher connects to, to list the databases.",
        c"",
        &WORKER_DATABASE,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"hudi.worker_databases",
        c"Databases whose tables the pg_hudi workers serve.",
        c"Comma-separated names; empty: every database that allows connections.",
        &WORKER_DATABASES,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"hudi.max_database_workers",
        c"How many databases the pg_hudi workers serve at once.",
        c"Each takes a background worker slot (max_worker_processes) while it runs its round.",
        &MAX_DATABASE_WORKERS,
        1,
        64,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"hudi.worker_naptime",
        c"Seconds between the starts of two rounds of the pg_hudi worker of a database.",
        c"Each round finishes committed writes and runs the services of tables with services 'auto'.",
        &WORKER_NAPTIME,
        1,
        86_400,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"hudi.lookup_refresh_interval",
        c"Time between two refreshes of the lookup caches of a database.",
        c"Each refresh applies the commits since the caches' instants; a commit on this server starts one at once.",
        &LOOKUP_REFRESH_INTERVAL,
        100,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"hudi.stream_check_interval",
        c"How often sessions waiting for a Hudi table's next commit look for commits of other servers and engines.",
        c"One listing of the table's timeline per interval for all waiting sessions of the server; commits made on this server wake them at once.",
        &STREAM_CHECK_INTERVAL,
        10,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    // A misspelt hudi.* setting is an error (and one set before the library was loaded is
    // removed with a warning), instead of a placeholder that silently does nothing.
    // SAFETY: called from _PG_init, on the main thread.
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"hudi".as_ptr()) };
}

/// The value of a string GUC as a Rust string (empty when unset).
pub fn string_value(setting: &GucSetting<Option<CString>>) -> String {
    setting.get().map(|v| v.to_string_lossy().into_owned()).unwrap_or_default()
}
