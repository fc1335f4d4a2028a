//! The one place where engine errors become PostgreSQL errors (`ereport` with a SQLSTATE).

use engine::ErrorKind;
use pgrx::pg_sys::panic::ErrorReport;
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
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
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

/// `engine::Result` → value, or an ERROR through [`report`].
pub trait OrReport<T> {
    fn or_report(self) -> T;
}

impl<T> OrReport<T> for engine::Result<T> {
    fn or_report(self) -> T {
        self.unwrap_or_else(|e| report(e))
    }
}
