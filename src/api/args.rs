//! Arguments of the SQL functions, checked the same way everywhere: NULL is 22004, an empty or
//! malformed value 22023, a relation that does not exist 42P01, one that is not a `hudi_fdw`
//! foreign table 42809 — never an internal error or a panic. (pgrx converts a NULL passed for
//! a non-`Option` argument of a non-strict function by panicking, and opens a `PgRelation`
//! argument while converting it, so that a relation that does not exist is an internal error:
//! the functions take `Option`s and [`RegClass`] and check them here.)

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::{PgRelation, PgSqlErrorCode};

use crate::error::raise;

/// A `regclass` argument, not opened yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegClass(pub pg_sys::Oid);

impl FromDatum for RegClass {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _typoid: pg_sys::Oid) -> Option<RegClass> {
        (!is_null).then(|| RegClass(pg_sys::Oid::from(datum.value() as u32)))
    }
}

impl IntoDatum for RegClass {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(pg_sys::Datum::from(self.0))
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::REGCLASSOID
    }
}

pgrx::impl_sql_translatable!(RegClass, "regclass");

// SAFETY: a `regclass` is an `oid` passed by value, read as `FromDatum` does above; the
// functions take it as an `Option`, so a NULL is never unboxed as a value.
unsafe impl<'fcx> pgrx::callconv::ArgAbi<'fcx> for RegClass {
    unsafe fn unbox_arg_unchecked(arg: pgrx::callconv::Arg<'_, 'fcx>) -> RegClass {
        // SAFETY: the caller passes a non-NULL regclass argument.
        unsafe { arg.unbox_arg_using_from_datum() }.unwrap_or(RegClass(pg_sys::Oid::INVALID))
    }
}

// SAFETY: returns the `oid` datum `into_datum` makes, which is never NULL; by value, so it
// needs no memory context.
unsafe impl pgrx::callconv::BoxRet for RegClass {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut pgrx::callconv::FcInfo<'fcx>) -> pgrx::datum::Datum<'fcx> {
        // SAFETY: a by-value datum of the type the function is declared to return.
        unsafe { fcinfo.return_raw_datum(pg_sys::Datum::from(self.0)) }
    }
}

/// `value`, or 22004 naming the argument `name`.
pub fn required<T>(value: Option<T>, name: &str) -> T {
    value.unwrap_or_else(|| raise(PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED, format!("{name} must not be NULL"), None))
}

/// A text argument that must be neither NULL nor empty, nor hold control characters (it is
/// stored, logged or used as a name).
pub fn name<'a>(value: Option<&'a str>, what: &str) -> &'a str {
    let value = required(value, what);
    if value.trim().is_empty() {
        raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("{what} must not be empty"), None);
    }
    if value.chars().any(char::is_control) {
        raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("{what} must not contain control characters"), None);
    }
    value
}

/// A list of column names: not NULL, no NULL, empty or repeated element, at least one.
pub fn column_names(value: Option<Vec<Option<String>>>, what: &str) -> Vec<String> {
    let value = required(value, what);
    let mut names: Vec<String> = Vec::with_capacity(value.len());
    for element in value {
        let element = name(element.as_deref(), &format!("an element of {what}")).to_owned();
        if names.contains(&element) {
            raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("{what} names column \"{element}\" twice"), None);
        }
        names.push(element);
    }
    if names.is_empty() {
        raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("{what} must name at least one column"), None);
    }
    names
}

/// The `hudi_fdw` foreign table `table` names, opened (and locked against DROP until the end of
/// the transaction). A role may learn no more of a relation than `regclass` would tell it:
/// whether it exists and what kind it is.
pub fn hudi_table(table: Option<RegClass>) -> PgRelation {
    let RegClass(relid) = required(table, "table");
    // SAFETY: catalog lookups on the main thread; a relation that exists is opened (and its
    // lock kept until the end of the transaction, as regclass arguments are).
    let relation = unsafe { pg_sys::try_relation_open(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE) };
    if relation.is_null() {
        raise(PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE, format!("relation with OID {} does not exist", relid.to_u32()), None);
    }
    // SAFETY: a relation opened just above; closed (its lock kept) when the value drops.
    let relation = unsafe { PgRelation::from_pg_owned(relation) };
    if !crate::fdw::table::is_hudi_table(relid) {
        raise(PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE, format!("\"{}\" is not a hudi_fdw foreign table", relation.name()), None);
    }
    relation
}
