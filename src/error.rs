//! The one place where engine errors become PostgreSQL errors (`ereport` with a SQLSTATE).

use engine::ErrorKind;
use pgrx::pg_sys::panic::{CaughtError, ErrorReport, ErrorReportWithLevel};
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// The SQLSTATE for each kind of engine error.
fn sqlstate(kind: ErrorKind) -> PgSqlErrorCode {
    match kind {
        ErrorKind::InvalidArgument => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        ErrorKind::NotFound => PgSqlErrorCode::ERRCODE_FDW_TABLE_NOT_FOUND,
        ErrorKind::Corrupt => PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        ErrorKind::Unsupported => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        ErrorKind::PermissionDenied => PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        ErrorKind::Storage => PgSqlErrorCode::ERRCODE_FDW_UNABLE_TO_ESTABLISH_CONNECTION,
        ErrorKind::InUse => PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
        ErrorKind::OutOfRange => PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        ErrorKind::DivisionByZero => PgSqlErrorCode::ERRCODE_DIVISION_BY_ZERO,
        ErrorKind::Internal => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
    }
}

/// Raises `err` as an ERROR: the message first, the chain of contexts as DETAIL.
pub fn report(err: engine::Error) -> ! {
    let mut report = ErrorReport::new(sqlstate(err.kind()), err.detail(), "pg_hudi");
    if !err.contexts().is_empty() {
        let while_doing: Vec<_> = err.contexts().iter().rev().map(|c| format!("while {c}")).collect();
        report = report.set_detail(while_doing.join(", "));
    }
    if let Some(hint) = err.hint() {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Raises an SPI failure of the extension's own catalog work (`what` it was doing) as an
/// internal ERROR.
pub fn spi_failed(what: &str, error: pgrx::spi::SpiError) -> ! {
    raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("pg_hudi {what}: {error}"), None)
}

/// The message of an ERROR (or panic) that a `PgTryBuilder` caught.
pub fn caught_message(error: &pgrx::pg_sys::panic::CaughtError) -> String {
    use pgrx::pg_sys::panic::CaughtError;
    match error {
        CaughtError::PostgresError(report) | CaughtError::ErrorReport(report) | CaughtError::RustPanic { ereport: report, .. } => {
            report.message().to_owned()
        }
    }
}

/// Raises an ERROR that originates in the extension itself (options, types, privileges).
pub fn raise(code: PgSqlErrorCode, message: impl Into<String>, hint: Option<String>) -> ! {
    let mut report = ErrorReport::new(code, message.into(), "pg_hudi");
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// [`raise`] with a DETAIL line.
pub fn raise_with_detail(code: PgSqlErrorCode, message: impl Into<String>, detail: impl Into<String>, hint: impl Into<String>) -> ! {
    ErrorReport::new(code, message.into(), "pg_hudi").set_detail(detail.into()).set_hint(hint.into()).report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// `engine::Result` → value, or an ERROR through [`report`].
pub trait OrReport<T> {
    fn or_report(self) -> T;
}

impl<T> OrReport<T> for engine::Result<T> {
    fn or_report(self) -> T {
        self.unwrap_or_else(|e| report(e))
    }
}

/// Makes a Rust panic reach the client as a plain ERROR (XX000 with the panic's message, as
/// pgrx reports it) and its backtrace only the server log. pgrx attaches a captured backtrace
/// to the error's DETAIL, whenever the server runs with `RUST_BACKTRACE` set; disabling
/// library backtraces stops that capture, and the hook below writes a forced one to the
/// server's stderr (its log) instead. PostgreSQL's own ERRORs travel as panics too (pgrx
/// unwinds them through Rust frames): they are no bug, the log has their ERROR line already,
/// and a backtrace for each would cost its capture and dozens of log lines. Called once from
/// `_PG_init`, before any thread starts.
pub fn keep_panic_backtraces_in_the_server_log() {
    // SAFETY (of the environment change): `_PG_init` runs before this process starts any
    // thread, so nothing reads the environment concurrently.
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // SAFETY: plain system calls. A backend's main thread is the one whose id is the pid;
        // other threads' panics are printed by the default hook that `report` calls.
        let payload = info.payload();
        let postgres_error =
            payload.is::<ErrorReportWithLevel>() || payload.is::<ErrorReport>() || payload.is::<CaughtError>();
        // A decoder's panic on damaged input is caught by the engine and becomes an error
        // (XX001) like any other: no bug, nothing for the log.
        if engine::error::panic_is_caught() {
            return;
        }
        if !postgres_error && unsafe { libc::gettid() == libc::getpid() } {
            eprintln!("pg_hudi: {info}\n{}", std::backtrace::Backtrace::force_capture());
        }
        report(info);
    }));
}

