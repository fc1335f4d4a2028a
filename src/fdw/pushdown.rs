//! What a scan can hand to the engine: simple quals (`column op constant`, `column IN
//! (constants)`) as a [`ScanFilter`] that lets it skip partitions, buckets and row groups, and
//! the columns the query uses. Which rows pass is decided by the row filter
//! ([`crate::fdw::conditions`]) and by PostgreSQL, never by this filter alone.

use std::collections::BTreeMap;
use std::ffi::CStr;

use engine::read::filter::{Op, Predicate, Scalar, ScanFilter};
use pgrx::pg_sys;
use pgrx::{AnyNumeric, FromDatum};

use crate::datum::{PG_EPOCH_DAYS, PG_EPOCH_MICROS};

/// Attribute number → Hudi field name of the foreign table's bound columns.
pub type FieldNames = BTreeMap<i16, String>;

pub(crate) fn list_items<T>(list: *mut pg_sys::List) -> Vec<*mut T> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: a pointer list owned by the planner.
    unsafe { (0..(*list).length).map(|i| (*(*list).elements.offset(i as isize)).ptr_value as *mut T).collect() }
}

/// Strips binary-compatible casts around an expression.
pub(crate) unsafe fn strip(mut node: *mut pg_sys::Node) -> *mut pg_sys::Node {
    while !node.is_null() && (*node).type_ == pg_sys::NodeTag::T_RelabelType {
        node = (*(node as *mut pg_sys::RelabelType)).arg as *mut pg_sys::Node;
    }
    node
}

/// The field a plain column reference of relation `relid` names, and the column's type.
pub(crate) unsafe fn column_of(node: *mut pg_sys::Node, relid: u32, fields: &FieldNames) -> Option<(String, pg_sys::Oid)> {
    let node = strip(node);
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_Var {
        return None;
    }
    let var = node as *mut pg_sys::Var;
    if (*var).varno as u32 != relid || (*var).varlevelsup != 0 {
        return None;
    }
    Some((fields.get(&(*var).varattno)?.clone(), (*var).vartype))
}

/// Families of built-in types whose comparisons the engine evaluates exactly as PostgreSQL
/// does, when both sides of an operator are of the same family (`date < timestamp` is not:
/// its constant would need converting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TypeFamily {
    Bool,
    Integer,
    Float,
    Numeric,
    Text,
    Date,
    Timestamp,
    TimestampTz,
}

fn family(type_oid: pg_sys::Oid) -> Option<TypeFamily> {
    Some(match type_oid {
        pg_sys::BOOLOID => TypeFamily::Bool,
        pg_sys::INT2OID | pg_sys::INT4OID | pg_sys::INT8OID => TypeFamily::Integer,
        pg_sys::FLOAT4OID | pg_sys::FLOAT8OID => TypeFamily::Float,
        pg_sys::NUMERICOID => TypeFamily::Numeric,
        pg_sys::TEXTOID | pg_sys::VARCHAROID => TypeFamily::Text,
        pg_sys::DATEOID => TypeFamily::Date,
        pg_sys::TIMESTAMPOID => TypeFamily::Timestamp,
        pg_sys::TIMESTAMPTZOID => TypeFamily::TimestampTz,
        _ => return None,
    })
}

/// Whether values of the two types compare as PostgreSQL compares them once converted to one
/// of them (integers of any width, text and varchar, ...).
pub(crate) fn same_family(a: pg_sys::Oid, b: pg_sys::Oid) -> bool {
    family(a).is_some_and(|f| family(b) == Some(f))
}

/// A datum of a type filters understand as a [`Scalar`].
pub(crate) unsafe fn scalar_of(datum: pg_sys::Datum, type_oid: pg_sys::Oid) -> Option<Scalar> {
    Some(match family(type_oid)? {
        TypeFamily::Bool => Scalar::Bool(bool::from_datum(datum, false)?),
        TypeFamily::Integer => Scalar::Int(match type_oid {
            pg_sys::INT2OID => i64::from(i16::from_datum(datum, false)?),
            pg_sys::INT4OID => i64::from(i32::from_datum(datum, false)?),
            _ => i64::from_datum(datum, false)?,
        }),
        // NaN and the infinities cannot travel in the plan's JSON: such constants stay with
        // PostgreSQL alone.
        TypeFamily::Float => Scalar::Float(Some(match type_oid {
            pg_sys::FLOAT4OID => f64::from(f32::from_datum(datum, false)?),
            _ => f64::from_datum(datum, false)?,
        })
        .filter(|x| x.is_finite())?),
        TypeFamily::Numeric => Scalar::Decimal(AnyNumeric::from_datum(datum, false)?.to_string()),
        TypeFamily::Text => Scalar::String(String::from_datum(datum, false)?),
        TypeFamily::Date => Scalar::Date(i32::try_from(datum.value() as i32 as i64 + PG_EPOCH_DAYS).ok()?),
        TypeFamily::Timestamp | TypeFamily::TimestampTz => {
            Scalar::TimestampMicros((datum.value() as i64).checked_add(PG_EPOCH_MICROS)?)
        }
    })
}

unsafe fn constant_of(node: *mut pg_sys::Node) -> Option<(pg_sys::Datum, pg_sys::Oid)> {
    let node = strip(node);
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_Const {
        return None;
    }
    let constant = node as *mut pg_sys::Const;
    if (*constant).constisnull {
        return None;
    }
    Some(((*constant).constvalue, (*constant).consttype))
}

/// The comparison an operator is, when the engine may evaluate it in PostgreSQL's place: a
/// built-in operator (not a user-defined one that happens to be called `=`) whose function is
/// immutable (so neither `TimeZone` nor other settings change its answer) under a
/// deterministic collation (a nondeterministic one equates strings that differ in bytes).
pub(crate) unsafe fn exact_comparison(opno: pg_sys::Oid, collation: pg_sys::Oid) -> Option<Op> {
    if opno.to_u32() >= pg_sys::FirstGenbkiObjectId {
        return None;
    }
    if pg_sys::func_volatile(pg_sys::get_opcode(opno)) != pg_sys::PROVOLATILE_IMMUTABLE as std::ffi::c_char {
        return None;
    }
    if collation != pg_sys::InvalidOid && !pg_sys::get_collation_isdeterministic(collation) {
        return None;
    }
    Some(match CStr::from_ptr(pg_sys::get_opname(opno)).to_bytes() {
        b"=" => Op::Eq,
        b"<>" => Op::NotEq,
        b"<" => Op::Lt,
        b"<=" => Op::LtEq,
        b">" => Op::Gt,
        b">=" => Op::GtEq,
        _ => return None,
    })
}

/// Strings are compared byte-wise by filters, which agrees with PostgreSQL only for equality;
/// ranges over text would depend on the collation.
fn pushable(op: Op, value: &Scalar) -> bool {
    !matches!(value, Scalar::String(_)) || matches!(op, Op::Eq | Op::NotEq)
}

/// A comparison of a column of relation `relid` with another expression: the column (its
/// field and type), the operator as seen from the column's side, the other side, and whether
/// the column is compared with any element of that side, an array (`= ANY`, `IN`).
pub(crate) struct ColumnComparison {
    pub column: (String, pg_sys::Oid),
    pub op: Op,
    pub other: *mut pg_sys::Node,
    pub any: bool,
}

/// The comparison `clause` is, when the engine may evaluate its operator
/// ([`exact_comparison`]) and one side is a column of `relid` (the other not: it may be
/// anything else). `= ANY` only; other array comparisons are not.
pub(crate) unsafe fn column_comparison(clause: *mut pg_sys::Node, relid: u32, fields: &FieldNames) -> Option<ColumnComparison> {
    match (*clause).type_ {
        pg_sys::NodeTag::T_OpExpr => {
            let expr = clause as *mut pg_sys::OpExpr;
            let args: Vec<*mut pg_sys::Node> = list_items((*expr).args);
            let [left, right] = args.as_slice() else { return None };
            let op = exact_comparison((*expr).opno, (*expr).inputcollid)?;
            match (column_of(*left, relid, fields), column_of(*right, relid, fields)) {
                (Some(column), None) => Some(ColumnComparison { column, op, other: *right, any: false }),
                (None, Some(column)) => Some(ColumnComparison { column, op: op.commuted(), other: *left, any: false }),
                _ => None,
            }
        }
        pg_sys::NodeTag::T_ScalarArrayOpExpr => {
            let expr = clause as *mut pg_sys::ScalarArrayOpExpr;
            let args: Vec<*mut pg_sys::Node> = list_items((*expr).args);
            let [left, right] = args.as_slice() else { return None };
            if !(*expr).useOr || exact_comparison((*expr).opno, (*expr).inputcollid)? != Op::Eq {
                return None;
            }
            Some(ColumnComparison { column: column_of(*left, relid, fields)?, op: Op::Eq, other: *right, any: true })
        }
        _ => None,
    }
}

/// The element type and the non-NULL elements of an array datum.
pub(crate) unsafe fn array_elements(datum: pg_sys::Datum) -> (pg_sys::Oid, Vec<pg_sys::Datum>) {
    let array = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) as *mut pg_sys::ArrayType;
    let element_type = (*array).elemtype;
    let (mut len, mut by_value, mut align) = (0i16, false, 0 as std::ffi::c_char);
    pg_sys::get_typlenbyvalalign(element_type, &mut len, &mut by_value, &mut align);
    let (mut items, mut nulls, mut count) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
    pg_sys::deconstruct_array(array, element_type, len.into(), by_value, align, &mut items, &mut nulls, &mut count);
    (element_type, (0..count as usize).filter(|&i| !*nulls.add(i)).map(|i| *items.add(i)).collect())
}

unsafe fn predicate_of(clause: *mut pg_sys::Node, relid: u32, fields: &FieldNames) -> Option<Predicate> {
    let ColumnComparison { column: (column, column_type), op, other, any } = column_comparison(clause, relid, fields)?;
    let (datum, type_oid) = constant_of(other)?;
    if any {
        let (element_type, items) = array_elements(datum);
        if !same_family(column_type, element_type) {
            return None;
        }
        let values = items.into_iter().map(|item| scalar_of(item, element_type)).collect::<Option<Vec<_>>>()?;
        return Some(Predicate::In { column, values });
    }
    let (op, value) = constant_comparison(column_type, op, datum, type_oid)?;
    pushable(op, &value).then_some(Predicate::Compare { column, op, value })
}

/// Microseconds in a day.
const DAY_MICROS: i64 = 86_400_000_000;

/// Days since 1970 of 294277-01-01, the first date PostgreSQL cannot make a timestamp of; the
/// first it can is 4714-11-24 BC.
const TIMESTAMP_END_DAYS: i64 = 106_762_940;
const TIMESTAMP_START_DAYS: i64 = -2_440_588;

/// `column op constant` as a comparison of the column's values with a constant of their own
/// family, which the engine makes exactly (`None`: there is none). A constant of the same
/// family is itself. A timestamp against a date column, which PostgreSQL compares as the
/// date's midnight, is the date comparison that holds for the same dates (`d < '2024-01-01
/// 12:00'` is `d < '2024-01-02'`); a date against a timestamp column is its midnight. (Against
/// `timestamptz` the midnight depends on `TimeZone`: such operators are not immutable and never
/// get here.)
pub(crate) unsafe fn constant_comparison(column_type: pg_sys::Oid, op: Op, datum: pg_sys::Datum, type_oid: pg_sys::Oid) -> Option<(Op, Scalar)> {
    if same_family(column_type, type_oid) {
        return Some((op, scalar_of(datum, type_oid)?));
    }
    match (column_type, scalar_of(datum, type_oid)?) {
        (pg_sys::DATEOID, Scalar::TimestampMicros(t)) => {
            let day = t.div_euclid(DAY_MICROS);
            let midnight = t.rem_euclid(DAY_MICROS) == 0;
            // The first date whose midnight is at or after t.
            let ceiling = day + i64::from(!midnight);
            let (op, day) = match op {
                Op::Lt => (Op::Lt, ceiling),
                Op::LtEq => (Op::LtEq, day),
                Op::Gt => (Op::Gt, day),
                Op::GtEq => (Op::GtEq, ceiling),
                // No date's midnight equals a t of another time of day.
                Op::Eq | Op::NotEq if midnight => (op, day),
                Op::Eq | Op::NotEq => return None,
            };
            Some((op, Scalar::Date(i32::try_from(day).ok()?)))
        }
        (pg_sys::TIMESTAMPOID, Scalar::Date(d)) => {
            let d = i64::from(d);
            // Outside these PostgreSQL raises an error, which it must still raise.
            (TIMESTAMP_START_DAYS..TIMESTAMP_END_DAYS).contains(&d).then(|| (op, Scalar::TimestampMicros(d * DAY_MICROS)))
        }
        _ => None,
    }
}

/// The pushable part of a relation's restriction clauses.
pub unsafe fn scan_filter(baserel: *mut pg_sys::RelOptInfo, fields: &FieldNames) -> ScanFilter {
    let relid = (*baserel).relid;
    let predicates = list_items::<pg_sys::RestrictInfo>((*baserel).baserestrictinfo)
        .into_iter()
        .filter_map(|info| predicate_of((*info).clause as *mut pg_sys::Node, relid, fields))
        .collect();
    ScanFilter { predicates }
}

/// Whether the scan must return `ctid`: the row identity column of an UPDATE or DELETE target
/// (see [`crate::fdw::positions`]).
pub unsafe fn wants_row_positions(baserel: *mut pg_sys::RelOptInfo) -> bool {
    let mut attrs: *mut pg_sys::Bitmapset = std::ptr::null_mut();
    pg_sys::pull_varattnos((*(*baserel).reltarget).exprs as *mut pg_sys::Node, (*baserel).relid, &mut attrs);
    let ctid = pg_sys::SelfItemPointerAttributeNumber as i32 - pg_sys::FirstLowInvalidHeapAttributeNumber;
    pg_sys::bms_is_member(ctid, attrs)
}

/// The fields the query reads (target list and quals), or `None` for all of them (a whole-row
/// reference).
pub unsafe fn used_columns(baserel: *mut pg_sys::RelOptInfo, fields: &FieldNames) -> Option<Vec<String>> {
    let quals = list_items::<pg_sys::RestrictInfo>((*baserel).baserestrictinfo).into_iter().map(|info| (*info).clause as *mut pg_sys::Node);
    columns_of(baserel, quals, fields)
}

/// The fields the relation's target list and `quals` read, or `None` for all of them (a
/// whole-row reference).
pub unsafe fn columns_of(baserel: *mut pg_sys::RelOptInfo, quals: impl Iterator<Item = *mut pg_sys::Node>, fields: &FieldNames) -> Option<Vec<String>> {
    let relid = (*baserel).relid;
    let mut attrs: *mut pg_sys::Bitmapset = std::ptr::null_mut();
    pg_sys::pull_varattnos((*(*baserel).reltarget).exprs as *mut pg_sys::Node, relid, &mut attrs);
    for qual in quals {
        pg_sys::pull_varattnos(qual, relid, &mut attrs);
    }
    let mut columns = Vec::new();
    let mut member = -1;
    loop {
        member = pg_sys::bms_next_member(attrs, member);
        if member < 0 {
            break;
        }
        let attno = member + pg_sys::FirstLowInvalidHeapAttributeNumber;
        if attno == 0 {
            return None; // whole-row reference
        }
        if let Some(name) = fields.get(&(attno as i16)) {
            columns.push(name.clone());
        }
    }
    Some(columns)
}
