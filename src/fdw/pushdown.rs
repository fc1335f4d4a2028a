//! What a scan can hand to the engine: simple quals (`column op constant`, `column IN
//! (constants)`) as a [`ScanFilter`] that lets it skip partitions, buckets and row groups, and
//! the columns the query uses. PostgreSQL still evaluates every qual on the returned rows.

use std::collections::BTreeMap;
use std::ffi::CStr;

use engine::read::filter::{Op, Predicate, Scalar, ScanFilter};
use pgrx::pg_sys;
use pgrx::{AnyNumeric, FromDatum};

use crate::datum::{PG_EPOCH_DAYS, PG_EPOCH_MICROS};

/// Attribute number → Hudi field name of the foreign table's bound columns.
pub type FieldNames = BTreeMap<i16, String>;

fn list_items<T>(list: *mut pg_sys::List) -> Vec<*mut T> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: a pointer list owned by the planner.
    unsafe { (0..(*list).length).map(|i| (*(*list).elements.offset(i as isize)).ptr_value as *mut T).collect() }
}

/// Strips binary-compatible casts around an expression.
unsafe fn strip(mut node: *mut pg_sys::Node) -> *mut pg_sys::Node {
    while !node.is_null() && (*node).type_ == pg_sys::NodeTag::T_RelabelType {
        node = (*(node as *mut pg_sys::RelabelType)).arg as *mut pg_sys::Node;
    }
    node
}

/// The field a plain column reference of relation `relid` names.
unsafe fn column_of(node: *mut pg_sys::Node, relid: u32, fields: &FieldNames) -> Option<String> {
    let node = strip(node);
    if node.is_null() || (*node).type_ != pg_sys::NodeTag::T_Var {
        return None;
    }
    let var = node as *mut pg_sys::Var;
    if (*var).varno as u32 != relid || (*var).varlevelsup != 0 {
        return None;
    }
    fields.get(&(*var).varattno).cloned()
}

/// A datum of a type filters understand as a [`Scalar`].
unsafe fn scalar_of(datum: pg_sys::Datum, type_oid: pg_sys::Oid) -> Option<Scalar> {
    Some(match type_oid {
        pg_sys::BOOLOID => Scalar::Bool(bool::from_datum(datum, false)?),
        pg_sys::INT2OID => Scalar::Int(i64::from(i16::from_datum(datum, false)?)),
        pg_sys::INT4OID => Scalar::Int(i64::from(i32::from_datum(datum, false)?)),
        pg_sys::INT8OID => Scalar::Int(i64::from_datum(datum, false)?),
        pg_sys::FLOAT4OID => Scalar::Float(f64::from(f32::from_datum(datum, false)?)),
        pg_sys::FLOAT8OID => Scalar::Float(f64::from_datum(datum, false)?),
        pg_sys::NUMERICOID => Scalar::Decimal(AnyNumeric::from_datum(datum, false)?.to_string()),
        pg_sys::TEXTOID | pg_sys::VARCHAROID => Scalar::String(String::from_datum(datum, false)?),
        pg_sys::DATEOID => Scalar::Date(i32::try_from(datum.value() as i32 as i64 + PG_EPOCH_DAYS).ok()?),
        pg_sys::TIMESTAMPOID | pg_sys::TIMESTAMPTZOID => {
            Scalar::TimestampMicros((datum.value() as i64).checked_add(PG_EPOCH_MICROS)?)
        }
        _ => return None,
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

fn op_of(name: &str) -> Option<Op> {
    Some(match name {
        "=" => Op::Eq,
        "<>" => Op::NotEq,
        "<" => Op::Lt,
        "<=" => Op::LtEq,
        ">" => Op::Gt,
        ">=" => Op::GtEq,
        _ => return None,
    })
}

/// Strings are compared byte-wise by filters, which agrees with PostgreSQL only for equality;
/// ranges over text would depend on the collation.
fn pushable(op: Op, value: &Scalar) -> bool {
    !matches!(value, Scalar::String(_)) || matches!(op, Op::Eq | Op::NotEq)
}

unsafe fn predicate_of(clause: *mut pg_sys::Node, relid: u32, fields: &FieldNames) -> Option<Predicate> {
    match (*clause).type_ {
        pg_sys::NodeTag::T_OpExpr => {
            let expr = clause as *mut pg_sys::OpExpr;
            let args: Vec<*mut pg_sys::Node> = list_items((*expr).args);
            let [left, right] = args.as_slice() else { return None };
            let op = op_of(&CStr::from_ptr(pg_sys::get_opname((*expr).opno)).to_string_lossy())?;
            let (column, constant, op) = match (column_of(*left, relid, fields), column_of(*right, relid, fields)) {
                (Some(column), None) => (column, constant_of(*right)?, op),
                (None, Some(column)) => (column, constant_of(*left)?, op.commuted()),
                _ => return None,
            };
            let value = scalar_of(constant.0, constant.1)?;
            pushable(op, &value).then_some(Predicate::Compare { column, op, value })
        }
        pg_sys::NodeTag::T_ScalarArrayOpExpr => {
            let expr = clause as *mut pg_sys::ScalarArrayOpExpr;
            let args: Vec<*mut pg_sys::Node> = list_items((*expr).args);
            let [left, right] = args.as_slice() else { return None };
            let name = CStr::from_ptr(pg_sys::get_opname((*expr).opno)).to_string_lossy().into_owned();
            if !(*expr).useOr || name != "=" {
                return None;
            }
            let column = column_of(*left, relid, fields)?;
            let (array, _) = constant_of(*right)?;
            let array = pg_sys::pg_detoast_datum(array.cast_mut_ptr()) as *mut pg_sys::ArrayType;
            let element_type = (*array).elemtype;
            let (mut len, mut by_value, mut align) = (0i16, false, 0 as std::ffi::c_char);
            pg_sys::get_typlenbyvalalign(element_type, &mut len, &mut by_value, &mut align);
            let (mut items, mut nulls, mut count) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
            pg_sys::deconstruct_array(array, element_type, len.into(), by_value, align, &mut items, &mut nulls, &mut count);
            let mut values = Vec::new();
            for i in 0..count as usize {
                if *nulls.add(i) {
                    continue;
                }
                values.push(scalar_of(*items.add(i), element_type)?);
            }
            Some(Predicate::In { column, values })
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
    let relid = (*baserel).relid;
    let mut attrs: *mut pg_sys::Bitmapset = std::ptr::null_mut();
    pg_sys::pull_varattnos((*(*baserel).reltarget).exprs as *mut pg_sys::Node, relid, &mut attrs);
    for info in list_items::<pg_sys::RestrictInfo>((*baserel).baserestrictinfo) {
        pg_sys::pull_varattnos((*info).clause as *mut pg_sys::Node, relid, &mut attrs);
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
