//! Options of the wrapper's objects and their validation (`hudi_fdw_validator`).
//!
//! | object        | options |
//! |---------------|---------|
//! | server        | `base_uri` (required): `file://`, `s3://`, `gs://`, `az://` or `memory://`; `credential_chain` (superusers only); `max_retries`, `retry_timeout`, `request_timeout`, `connect_timeout` |
//! | user mapping  | object-store credentials (`aws_access_key_id`, ...): secrets live only here |
//! | foreign table | `path`, `query_type`, `as_of_instant`, `start_instant`, `end_instant`, `primary_key`, `ordering_field`, `partition_by`, `buckets`, `merge_mode`, `clean_retain_commits`, `clean_retain`, `clean_max_retain`, `services`, `compaction_delta_commits`, `archive_min_instants`, `archive_max_instants`, `compaction_log_bytes`, `compaction_max_delay`, `lookup_max_lag`, `lookup_on_stale`, `write_mode`, `flush_interval`, `flush_rows` |

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use std::collections::BTreeMap;
use std::time::Duration;

use engine::storage::{self, RetrySettings, StorageUri, StoreSettings};

use crate::error::raise;
use crate::guc;

pub const SERVER_OPTIONS: &[&str] =
    &["base_uri", "credential_chain", "max_retries", "retry_timeout", "request_timeout", "connect_timeout"];
/// The longest the background worker retries one storage request (a server's `retry_timeout`
/// applies below it).
pub const WORKER_RETRY_TIMEOUT: Duration = Duration::from_secs(30);
/// Upper bound for `max_retries`: beyond it a request would outlast any `retry_timeout` worth having.
pub const MAX_RETRIES: usize = 100;
pub const TABLE_OPTIONS: &[&str] = &[
    "path",
    "query_type",
    "as_of_instant",
    "start_instant",
    "end_instant",
    "primary_key",
    "ordering_field",
    "partition_by",
    "buckets",
    "merge_mode",
    "metadata_table",
    "clean_retain_commits",
    "clean_max_retain",
    "clean_retain",
    "services",
    "compaction_delta_commits",
    "archive_min_instants",
    "archive_max_instants",
    "compaction_log_bytes",
    "compaction_max_delay",
    "lookup_max_lag",
    "lookup_on_stale",
    "write_mode",
    "flush_interval",
    "flush_rows",
];
/// What a lookup does with a cache more than `lookup_max_lag` behind its table.
pub const LOOKUP_ON_STALE: &[&str] = &["wait", "error", "scan"];
pub const SERVICES: &[&str] = &["auto", "off"];
pub const QUERY_TYPES: &[&str] = &["snapshot", "read_optimized", "incremental"];
pub const MERGE_MODES: &[&str] = &["event_time", "commit_time", "partial_update"];
/// Whether `hudi.create_table` gives the table a metadata table listing its files.
pub const METADATA_TABLE: &[&str] = &["on", "off"];
/// Upper bound for `buckets`: Hudi's bucket file ids have eight digits, but a table with more
/// file groups than this is a configuration mistake rather than a design.
pub const MAX_BUCKETS: u32 = 65_536;

/// The kind of catalog object whose options are being validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OptionTarget {
    Wrapper,
    Server,
    UserMapping,
    ForeignTable,
    Column,
}

impl OptionTarget {
    fn from_catalog(catalog: pg_sys::Oid) -> OptionTarget {
        match catalog {
            pg_sys::ForeignServerRelationId => OptionTarget::Server,
            pg_sys::UserMappingRelationId => OptionTarget::UserMapping,
            pg_sys::ForeignTableRelationId => OptionTarget::ForeignTable,
            pg_sys::AttributeRelationId => OptionTarget::Column,
            _ => OptionTarget::Wrapper,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            OptionTarget::Wrapper => "the hudi_fdw wrapper",
            OptionTarget::Server => "a hudi_fdw server",
            OptionTarget::UserMapping => "a hudi_fdw user mapping",
            OptionTarget::ForeignTable => "a hudi_fdw foreign table",
            OptionTarget::Column => "a hudi_fdw foreign table column",
        }
    }
}

/// Splits PostgreSQL's `name=value` option strings.
fn parse_options(options: Option<Vec<Option<String>>>) -> Vec<(String, String)> {
    options
        .unwrap_or_default()
        .into_iter()
        .flatten()
        .map(|option| match option.split_once('=') {
            Some((name, value)) => (name.to_owned(), value.to_owned()),
            None => (option, String::new()),
        })
        .collect()
}

/// Validates options of the wrapper, servers, user mappings, foreign tables and columns.
#[pg_extern]
pub fn hudi_fdw_validator(options: Option<Vec<Option<String>>>, catalog: Option<pg_sys::Oid>) {
    let target = OptionTarget::from_catalog(catalog.unwrap_or(pg_sys::InvalidOid));
    let options = parse_options(options);
    match target {
        OptionTarget::Server => validate_server(&options),
        OptionTarget::UserMapping => validate_user_mapping(&options),
        OptionTarget::ForeignTable => validate_table(&options),
        OptionTarget::Wrapper | OptionTarget::Column => {
            if let Some((name, _)) = options.first() {
                raise(
                    PgSqlErrorCode::ERRCODE_FDW_INVALID_OPTION_NAME,
                    format!("invalid option \"{name}\" for {}; it takes no options", target.describe()),
                    None,
                );
            }
        }
    }
}

fn unknown_option(name: &str, target: OptionTarget, valid: &[&str]) -> ! {
    let hint = storage::is_credential_option(storage::Scheme::S3, name)
        || storage::is_credential_option(storage::Scheme::Gcs, name)
        || storage::is_credential_option(storage::Scheme::Azure, name);
    raise(
        PgSqlErrorCode::ERRCODE_FDW_INVALID_OPTION_NAME,
        format!("invalid option \"{name}\" for {}; valid options: {}", target.describe(), valid.join(", ")),
        hint.then(|| "Credentials belong in USER MAPPING options.".to_owned()),
    )
}

fn bad_value(name: &str, value: &str, why: impl std::fmt::Display) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_FDW_INVALID_ATTRIBUTE_VALUE,
        format!("invalid value \"{value}\" for option \"{name}\": {why}"),
        None,
    )
}

fn validate_server(options: &[(String, String)]) {
    for (name, value) in options {
        match name.as_str() {
            "base_uri" => {
                let uri = StorageUri::parse(value).unwrap_or_else(|e| bad_value(name, value, e.message()));
                check_location_access(&uri);
            }
            "credential_chain" => {
                let allowed = parse_bool(value).unwrap_or_else(|| bad_value(name, value, "expected true or false"));
                // The chain signs requests as the database server's own identity.
                if allowed && !unsafe { pg_sys::superuser() } {
                    raise(
                        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                        "permission denied to set option \"credential_chain\"",
                        Some("Only superusers may let a server use the database server's own credentials.".into()),
                    );
                }
            }
            "max_retries" => match value.trim().parse::<usize>() {
                Ok(n) if n <= MAX_RETRIES => {}
                _ => bad_value(name, value, format_args!("expected an integer from 0 to {MAX_RETRIES}")),
            },
            "retry_timeout" | "request_timeout" | "connect_timeout" => {
                parse_duration(value).unwrap_or_else(|| bad_value(name, value, "expected a duration such as 30s, 500ms or 2min"));
            }
            _ => unknown_option(name, OptionTarget::Server, SERVER_OPTIONS),
        }
    }
    if !options.iter().any(|(name, _)| name == "base_uri") {
        raise(
            PgSqlErrorCode::ERRCODE_FDW_DYNAMIC_PARAMETER_VALUE_NEEDED,
            "hudi_fdw servers need the option base_uri",
            Some("For example: OPTIONS (base_uri 'file:///srv/lake') or (base_uri 's3://bucket/lake').".into()),
        );
    }
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Some(true),
        "false" | "off" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// A duration as PostgreSQL spells its time settings: a number with `ms`, `s`, `min` or `h`
/// (seconds without a unit); positive and at most a day.
pub(crate) fn parse_duration(value: &str) -> Option<Duration> {
    let value = value.trim();
    let split = value.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "min" => number * 60.0,
        "h" => number * 3600.0,
        _ => return None,
    };
    (seconds > 0.0 && seconds <= 86_400.0).then(|| Duration::from_secs_f64(seconds))
}

/// The settings a store is opened with: the user mapping's `options`, and what the server's
/// options say about retries and the credential chain (validated when they were set).
pub fn store_settings(server: &BTreeMap<String, String>, options: BTreeMap<String, String>) -> StoreSettings {
    let duration = |name: &str| server.get(name).and_then(|v| parse_duration(v));
    let defaults = RetrySettings::default();
    let retry_timeout = duration("retry_timeout").unwrap_or(defaults.retry_timeout);
    StoreSettings {
        options,
        credential_chain: server.get("credential_chain").and_then(|v| parse_bool(v)).unwrap_or(false),
        retry: RetrySettings {
            max_retries: server.get("max_retries").and_then(|v| v.trim().parse().ok()).unwrap_or(defaults.max_retries),
            // The worker serves every table of its database in turn: one table's unreachable
            // store must not hold the others up for the store's full retry time per request.
            retry_timeout: if crate::runtime::is_worker() { retry_timeout.min(WORKER_RETRY_TIMEOUT) } else { retry_timeout },
            request_timeout: duration("request_timeout"),
            connect_timeout: duration("connect_timeout"),
        },
    }
}

/// The endpoints the current role may name in user mapping options: any for a superuser, else
/// those of `hudi.allowed_endpoints` (a superuser setting). Checked when the options are
/// written, as the role that writes them (mappings a superuser wrote name what it chose).
fn allowed_endpoints() -> Option<Vec<String>> {
    // SAFETY: a catalog lookup of the current role, on the main thread.
    if unsafe { pg_sys::superuser() } {
        return None;
    }
    let allowed = guc::string_value(&guc::ALLOWED_ENDPOINTS);
    Some(allowed.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect())
}

fn validate_user_mapping(options: &[(String, String)]) {
    let named: BTreeMap<String, String> = options.iter().cloned().collect();
    if let Err(e) = storage::access::check_endpoints(&named, allowed_endpoints().as_deref()) {
        crate::error::report(e);
    }
    for (name, _) in options {
        let schemes = [storage::Scheme::S3, storage::Scheme::Gcs, storage::Scheme::Azure];
        let known = schemes.into_iter().any(|scheme| storage::is_credential_option(scheme, name));
        if !known {
            raise(
                PgSqlErrorCode::ERRCODE_FDW_INVALID_OPTION_NAME,
                format!(
                    "invalid option \"{name}\" for {}; valid options are object-store settings such as {}",
                    OptionTarget::UserMapping.describe(),
                    storage::COMMON_CREDENTIAL_OPTIONS.join(", ")
                ),
                None,
            );
        }
        // Files, metadata endpoints or tools of the database server's: its identity, not the user's.
        let server_identity = schemes.into_iter().any(|scheme| storage::access::takes_server_identity(scheme, name));
        if server_identity && !unsafe { pg_sys::superuser() } {
            raise(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("permission denied to set option \"{name}\""),
                Some("It makes the store use the database server's own files or identity: only superusers may set it, on a server with credential_chain 'true'.".into()),
            );
        }
    }
}

fn validate_table(options: &[(String, String)]) {
    for (name, value) in options {
        match name.as_str() {
            "path" => validate_table_path(value),
            "query_type" if !QUERY_TYPES.contains(&value.as_str()) => {
                bad_value(name, value, format_args!("expected one of {}", QUERY_TYPES.join(", ")))
            }
            "as_of_instant" | "start_instant" | "end_instant" => validate_instant(name, value),
            "primary_key" | "ordering_field" | "partition_by" => {
                if value.split(',').any(|field| field.trim().is_empty()) {
                    bad_value(name, value, "expected a comma-separated list of column names")
                }
            }
            "buckets" => match value.trim().parse::<u32>() {
                Ok(n) if (1..=MAX_BUCKETS).contains(&n) => {}
                _ => bad_value(name, value, format_args!("expected an integer from 1 to {MAX_BUCKETS}")),
            },
            "merge_mode" if !MERGE_MODES.contains(&value.as_str()) => {
                bad_value(name, value, format_args!("expected one of {}", MERGE_MODES.join(", ")))
            }
            "metadata_table" if !METADATA_TABLE.contains(&value.as_str()) => {
                bad_value(name, value, format_args!("expected one of {}", METADATA_TABLE.join(", ")))
            }
            "clean_max_retain" | "clean_retain" | "compaction_max_delay" | "lookup_max_lag" => validate_interval(name, value),
            "lookup_on_stale" if !LOOKUP_ON_STALE.contains(&value.as_str()) => {
                bad_value(name, value, format_args!("expected one of {}", LOOKUP_ON_STALE.join(", ")))
            }
            "compaction_log_bytes" => validate_size(name, value),
            "services" if !SERVICES.contains(&value.as_str()) => {
                bad_value(name, value, format_args!("expected one of {}", SERVICES.join(", ")))
            }
            "clean_retain_commits" | "compaction_delta_commits" | "archive_min_instants" | "archive_max_instants" => match value.trim().parse::<u32>() {
                Ok(n) if n >= 1 => {}
                _ => bad_value(name, value, "expected a positive integer"),
            },
            "write_mode" if !crate::buffer::WRITE_MODES.contains(&value.as_str()) => {
                bad_value(name, value, format_args!("expected one of {}", crate::buffer::WRITE_MODES.join(", ")))
            }
            "flush_interval" if parse_duration(value).is_none() => bad_value(name, value, "expected a duration from 1ms to 1 day such as '1s' or '200ms'"),
            "flush_rows" => match value.trim().parse::<u32>() {
                Ok(n) if n >= 1 => {}
                _ => bad_value(name, value, "expected a positive integer"),
            },
            "query_type" | "merge_mode" | "metadata_table" | "services" | "lookup_on_stale" | "write_mode" | "flush_interval" => {}
            _ => unknown_option(name, OptionTarget::ForeignTable, TABLE_OPTIONS),
        }
    }
    if !options.iter().any(|(name, _)| name == "path") {
        raise(
            PgSqlErrorCode::ERRCODE_FDW_DYNAMIC_PARAMETER_VALUE_NEEDED,
            "hudi_fdw foreign tables need the option path",
            Some("path is relative to the server's base_uri, or an absolute URI.".into()),
        );
    }
}

/// A table path is relative to the server's base or an absolute URI below it. The validator
/// does not know the server, so that part is checked whenever the table is opened
/// ([`crate::fdw::table::ForeignHudiTable::of_relation`]); here, what the path alone shows.
fn validate_table_path(value: &str) {
    if value.contains("://") {
        let uri = StorageUri::parse(value).unwrap_or_else(|e| bad_value("path", value, e.message()));
        check_location_access(&uri);
    } else if let Err(e) = storage::relative_path_segments(value) {
        crate::error::report(e);
    }
}

/// An interval as PostgreSQL reads one (`7 days`, `12 hours`), positive.
fn validate_interval(name: &str, value: &str) {
    validate_by_sql(name, value, "SELECT $1::pg_catalog.interval OPERATOR(pg_catalog.>) '0'::pg_catalog.interval", "expected a positive interval such as '7 days'")
}

/// A size as `pg_size_bytes` reads one (`64MB`, `1GB`), positive.
fn validate_size(name: &str, value: &str) {
    validate_by_sql(name, value, "SELECT pg_catalog.pg_size_bytes($1) OPERATOR(pg_catalog.>) 0", "expected a positive size such as '64MB'")
}

/// Refuses `value` unless `query` (of `$1`, the value) answers true; a value PostgreSQL cannot
/// read at all is refused the same way.
fn validate_by_sql(name: &str, value: &str, query: &str, expected: &str) {
    let args: Vec<pgrx::datum::DatumWithOid> = vec![value.into()];
    let check = || crate::role::pinned_search_path(|| Spi::get_one_with_args::<bool>(query, &args).ok().flatten());
    // In a subtransaction: a value PostgreSQL cannot read is an ERROR, rolled back with it.
    let valid = crate::role::in_subtransaction(check).ok().flatten();
    if valid != Some(true) {
        bad_value(name, value, expected)
    }
}

/// Instants are Hudi timeline timestamps: `yyyyMMddHHmmssSSS` (or the older 14 digits).
fn validate_instant(name: &str, value: &str) {
    if instant_of(value).is_none() {
        bad_value(name, value, INSTANT_FORMS)
    }
}

/// What [`instant_of`] takes, for errors.
pub const INSTANT_FORMS: &str =
    "expected a Hudi instant such as 20261130120000000 (yyyyMMddHHmmssSSS) or a timestamp such as '2026-11-30 12:00:00+00'";

/// The Hudi instant an instant option or setting names: an instant as it is, or a finite
/// timestamp (with a time zone, or in the session's `TimeZone`) as the instant of that moment
/// in UTC, the time zone of pg_hudi's timelines and of Hudi's with
/// `hoodie.table.timeline.timezone=UTC`. `None` for anything else, also for PostgreSQL's
/// special inputs (`now`, `yesterday`, `epoch`, ...): a pinned instant is a time written out,
/// not one that moves with the clock.
pub fn instant_of(value: &str) -> Option<String> {
    use std::str::FromStr;
    if engine::timeline::instant::is_instant_time(value) {
        return Some(value.to_owned());
    }
    if !value.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let time = pgrx::datum::TimestampWithTimeZone::from_str(value).ok().filter(|t| t.is_finite())?;
    // Microseconds since 2000-01-01 UTC, PostgreSQL's epoch, 946,684,800 s after Unix's.
    let unix_ms = time.into_inner().div_euclid(1000) + 946_684_800_000;
    Some(engine::write::time::format_instant(unix_ms)).filter(|i| engine::timeline::instant::is_instant_time(i))
}

/// `file://` locations are open to superusers anywhere and to other roles only under
/// `hudi.allowed_file_roots` (also after following symbolic links): a file:// table reads and
/// writes as the server's OS user. Checked when a location is named (server, table, function
/// argument) and again whenever a table is opened, as the role that opens it.
pub fn check_location_access(uri: &StorageUri) {
    if uri.scheme() != storage::Scheme::File || unsafe { pg_sys::superuser() } {
        return;
    }
    let roots = guc::string_value(&guc::ALLOWED_FILE_ROOTS);
    let allowed = roots.split(',').map(str::trim).filter(|r| !r.is_empty()).any(|root| {
        let root = if root.contains("://") { root.to_owned() } else { format!("file://{root}") };
        StorageUri::parse(&root).is_ok_and(|root| uri.is_within_resolved(&root))
    });
    if !allowed {
        raise(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("permission denied for location \"{uri}\""),
            Some("Only superusers may use file:// locations outside hudi.allowed_file_roots.".into()),
        );
    }
}
