//! Quals the engine evaluates exactly as PostgreSQL does ([`Condition`]): the translation of
//! planner expressions of one relation into conditions, shared by pushed aggregates (which
//! decide in the engine which rows they aggregate) and scans (whose row filter drops rows
//! before they become datums), and the values of their parameters at execution.

use std::ffi::CStr;

use arrow::datatypes::Schema;
use engine::read::condition::{Column, Condition, Operand};
use engine::read::expression::{ArithmeticOp, Expression, NumberType};
use engine::read::filter::{Op, Scalar};
use engine::read::reading::Reading;
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use crate::error::raise;
use crate::fdw::pushdown::{self, list_items, strip, FieldNames};

/// How PostgreSQL reads a column of type `type_oid` over a field of `data_type`, when the
/// engine can compute with those values exactly (`None`: it cannot, and nothing is pushed).
pub(crate) fn reading_of(type_oid: pg_sys::Oid, data_type: &arrow::datatypes::DataType) -> Option<Reading> {
    use arrow::datatypes::DataType as D;
    let reading = match type_oid {
        // Narrower declarations than the field would make PostgreSQL reject wide values.
        pg_sys::INT2OID if matches!(data_type, D::Int8 | D::Int16) => Reading::Int,
        pg_sys::INT4OID if matches!(data_type, D::Int8 | D::Int16 | D::Int32 | D::UInt8 | D::UInt16) => Reading::Int,
        pg_sys::INT8OID => Reading::Int,
        pg_sys::FLOAT4OID => Reading::Float4,
        pg_sys::FLOAT8OID => Reading::Float8,
        pg_sys::NUMERICOID => Reading::Decimal,
        pg_sys::BOOLOID => Reading::Bool,
        pg_sys::TEXTOID | pg_sys::VARCHAROID => Reading::Text,
        pg_sys::DATEOID => Reading::Date,
        pg_sys::TIMESTAMPOID | pg_sys::TIMESTAMPTZOID => Reading::Timestamp,
        _ => return None,
    };
    reading.reads(data_type).then_some(reading)
}

/// The integer type of `type_oid`, if it is one.
fn integer_type(type_oid: pg_sys::Oid) -> Option<NumberType> {
    match type_oid {
        pg_sys::INT2OID => Some(NumberType::Smallint),
        pg_sys::INT4OID => Some(NumberType::Integer),
        pg_sys::INT8OID => Some(NumberType::Bigint),
        _ => None,
    }
}

/// Whether strings compare by their bytes under `collation`, as the engine compares them.
pub(crate) unsafe fn bytewise(collation: pg_sys::Oid) -> bool {
    match collation {
        pg_sys::C_COLLATION_OID | pg_sys::POSIX_COLLATION_OID => true,
        pg_sys::DEFAULT_COLLATION_OID => {
            let setting = pg_sys::GetConfigOption(c"lc_collate".as_ptr(), true, false);
            !setting.is_null() && matches!(CStr::from_ptr(setting).to_bytes(), b"C" | b"POSIX")
        }
        _ => false,
    }
}

/// Turns planner expressions of one relation into the engine's terms.
pub(crate) struct Translator<'a> {
    pub relid: u32,
    pub fields: &'a FieldNames,
    pub schema: &'a Schema,
    /// Operands evaluated at execution (`fdw_exprs`): parameters, stable expressions.
    pub params: Vec<*mut pg_sys::Node>,
}

impl Translator<'_> {
    /// A plain column of the relation that the engine reads exactly.
    pub(crate) unsafe fn column(&self, node: *mut pg_sys::Node) -> Option<Column> {
        self.field_column(pushdown::column_of(node, self.relid, self.fields)?)
    }

    /// The column of `field`, declared of type `type_oid`, when the engine reads it exactly.
    fn field_column(&self, (field, type_oid): (String, pg_sys::Oid)) -> Option<Column> {
        let reading = reading_of(type_oid, self.schema.field_with_name(&field).ok()?.data_type())?;
        Some(Column { field, reading })
    }

    /// A numeric expression the engine computes exactly ([`Expression`]): `+`, `-`, `*` and `/`
    /// of `numeric` columns and constants (`numeric_add`, `numeric_sub`, `numeric_mul`,
    /// `numeric_div`, whose result has a display scale per value); `+`,
    /// `-`, `*` and `/` of integer columns and constants (the built-in operators of `smallint`,
    /// `integer` and `bigint`); widening casts of integers; searched `CASE` of those whose
    /// conditions the engine evaluates without parameters; and `+`, `-`, `*` and `/` of
    /// `double precision` columns, constants and integers or reals cast to it (`float8pl`,
    /// `float8mi`, `float8mul`, `float8div`, with their range errors).
    pub(crate) unsafe fn expression(&mut self, node: *mut pg_sys::Node) -> Option<Expression> {
        let node = strip(node);
        match (*node).type_ {
            pg_sys::NodeTag::T_Var => {
                self.column(node).filter(|c| matches!(c.reading, Reading::Decimal | Reading::Int | Reading::Float8 | Reading::Float4)).map(Expression::Column)
            }
            pg_sys::NodeTag::T_Const => {
                let constant = node as *mut pg_sys::Const;
                if (*constant).constisnull {
                    return None;
                }
                let value = (*constant).constvalue;
                let unscaled = match (*constant).consttype {
                    pg_sys::NUMERICOID => {
                        let Some(Scalar::Decimal(text)) = pushdown::scalar_of(value, pg_sys::NUMERICOID) else { return None };
                        let (unscaled, scale) = decimal_parts(&text)?;
                        return Some(Expression::Constant { unscaled, scale });
                    }
                    pg_sys::INT2OID => i128::from(value.value() as i16),
                    pg_sys::INT4OID => i128::from(value.value() as i32),
                    pg_sys::INT8OID => i128::from(value.value() as i64),
                    pg_sys::FLOAT8OID => return Some(Expression::Double(f64::from_bits(value.value() as u64))),
                    _ => return None,
                };
                Some(Expression::Constant { unscaled, scale: 0 })
            }
            pg_sys::NodeTag::T_OpExpr => {
                let expr = node as *mut pg_sys::OpExpr;
                let (left, right) = match list_items::<pg_sys::Node>((*expr).args)[..] {
                    [left, right] => (left, right),
                    // Unary minus, as 0 - x (which overflows where PostgreSQL's does).
                    [operand] => (std::ptr::null_mut(), operand),
                    _ => return None,
                };
                let (op, result) = match pg_sys::get_opcode((*expr).opno).to_u32() {
                    pg_sys::F_NUMERIC_UMINUS => (ArithmeticOp::Subtract, NumberType::Numeric),
                    _ if left.is_null() && !matches!(pg_sys::get_opcode((*expr).opno).to_u32(), pg_sys::F_INT2UM | pg_sys::F_INT4UM | pg_sys::F_INT8UM) => return None,
                    pg_sys::F_NUMERIC_ADD => (ArithmeticOp::Add, NumberType::Numeric),
                    pg_sys::F_NUMERIC_SUB => (ArithmeticOp::Subtract, NumberType::Numeric),
                    pg_sys::F_NUMERIC_MUL => (ArithmeticOp::Multiply, NumberType::Numeric),
                    pg_sys::F_NUMERIC_DIV => (ArithmeticOp::Divide, NumberType::Numeric),
                    // Of two doubles, or a real and a double (the real made a double first).
                    pg_sys::F_FLOAT8PL | pg_sys::F_FLOAT48PL | pg_sys::F_FLOAT84PL => (ArithmeticOp::Add, NumberType::Double),
                    pg_sys::F_FLOAT8MI | pg_sys::F_FLOAT48MI | pg_sys::F_FLOAT84MI => (ArithmeticOp::Subtract, NumberType::Double),
                    pg_sys::F_FLOAT8MUL | pg_sys::F_FLOAT48MUL | pg_sys::F_FLOAT84MUL => (ArithmeticOp::Multiply, NumberType::Double),
                    pg_sys::F_FLOAT8DIV | pg_sys::F_FLOAT48DIV | pg_sys::F_FLOAT84DIV => (ArithmeticOp::Divide, NumberType::Double),
                    _ => {
                        // The built-in integer operators, which check their result's range.
                        let integers = [left, right].iter().all(|&arg| arg.is_null() || integer_type(pg_sys::exprType(arg)).is_some());
                        let result = integer_type((*expr).opresulttype)?;
                        if !integers || (*expr).opno.to_u32() >= pg_sys::FirstGenbkiObjectId {
                            return None;
                        }
                        let name = pg_sys::get_opname((*expr).opno);
                        if name.is_null() {
                            return None;
                        }
                        let op = match CStr::from_ptr(name).to_bytes() {
                            b"+" => ArithmeticOp::Add,
                            b"-" => ArithmeticOp::Subtract,
                            b"*" => ArithmeticOp::Multiply,
                            b"/" => ArithmeticOp::Divide,
                            _ => return None,
                        };
                        (op, result)
                    }
                };
                let left = match left.is_null() {
                    true => Expression::Constant { unscaled: 0, scale: 0 },
                    false => self.expression(left)?,
                };
                Some(Expression::Arithmetic { op, left: Box::new(left), right: Box::new(self.expression(right)?), result })
            }
            pg_sys::NodeTag::T_FuncExpr => {
                // Casts that keep every value: integers to wider integers or to numeric.
                let func = node as *mut pg_sys::FuncExpr;
                let widening = matches!(
                    (*func).funcid.to_u32(),
                    pg_sys::F_NUMERIC_INT2 | pg_sys::F_NUMERIC_INT4 | pg_sys::F_NUMERIC_INT8 | pg_sys::F_INT4_INT2 | pg_sys::F_INT8_INT2 | pg_sys::F_INT8_INT4
                );
                let [argument] = list_items::<pg_sys::Node>((*func).args)[..] else { return None };
                // Integers and reals to double precision (the nearest double).
                let to_double = matches!((*func).funcid.to_u32(), pg_sys::F_FLOAT8_INT2 | pg_sys::F_FLOAT8_INT4 | pg_sys::F_FLOAT8_INT8 | pg_sys::F_FLOAT8_FLOAT4);
                match (widening, to_double) {
                    (true, _) => self.expression(argument),
                    (_, true) => Some(Expression::ToDouble(Box::new(self.expression(argument)?))),
                    _ => None,
                }
            }
            pg_sys::NodeTag::T_CaseExpr => {
                let case = node as *mut pg_sys::CaseExpr;
                if !(*case).arg.is_null() || !((*case).casetype == pg_sys::NUMERICOID || integer_type((*case).casetype).is_some()) {
                    return None;
                }
                // Conditions with parameters are not taken: they would need binding per run.
                let params = self.params.len();
                let mut branches = Vec::new();
                for when in list_items::<pg_sys::CaseWhen>((*case).args) {
                    let condition = self.condition((*when).expr as *mut pg_sys::Node);
                    if self.params.len() != params {
                        self.params.truncate(params);
                        return None;
                    }
                    branches.push((condition?, self.expression((*when).result as *mut pg_sys::Node)?));
                }
                let otherwise = strip((*case).defresult as *mut pg_sys::Node);
                let is_null = otherwise.is_null() || (*otherwise).type_ == pg_sys::NodeTag::T_Const && (*(otherwise as *mut pg_sys::Const)).constisnull;
                let otherwise = if is_null { None } else { Some(Box::new(self.expression(otherwise)?)) };
                Some(Expression::Case { branches, otherwise })
            }
            _ => None,
        }
    }

    /// A qual the engine evaluates exactly, with SQL's three-valued logic.
    pub(crate) unsafe fn condition(&mut self, node: *mut pg_sys::Node) -> Option<Condition> {
        let node = strip(node);
        match (*node).type_ {
            pg_sys::NodeTag::T_BoolExpr => {
                let expr = node as *mut pg_sys::BoolExpr;
                let items = list_items::<pg_sys::Node>((*expr).args).into_iter().map(|arg| self.condition(arg)).collect::<Option<Vec<_>>>()?;
                Some(match (*expr).boolop {
                    pg_sys::BoolExprType::AND_EXPR => Condition::And(items),
                    pg_sys::BoolExprType::OR_EXPR => Condition::Or(items),
                    _ => Condition::Not(Box::new(items.into_iter().next()?)),
                })
            }
            pg_sys::NodeTag::T_NullTest => {
                let test = node as *mut pg_sys::NullTest;
                if (*test).argisrow {
                    return None;
                }
                let column = self.column((*test).arg as *mut pg_sys::Node)?;
                Some(Condition::IsNull { column, negated: (*test).nulltesttype == pg_sys::NullTestType::IS_NOT_NULL })
            }
            pg_sys::NodeTag::T_Var => self.column(node).filter(|c| c.reading == Reading::Bool).map(Condition::IsTrue),
            pg_sys::NodeTag::T_OpExpr => self.like(node).or_else(|| self.comparison(node)).or_else(|| self.date_against_timestamp(node)),
            pg_sys::NodeTag::T_ScalarArrayOpExpr => self.comparison(node),
            _ => None,
        }
    }

    /// `text_column [NOT] LIKE 'constant'`, PostgreSQL's built-in operators on text (which
    /// match characters alike under every deterministic collation).
    unsafe fn like(&self, node: *mut pg_sys::Node) -> Option<Condition> {
        let expr = node as *mut pg_sys::OpExpr;
        let negated = match pg_sys::get_opcode((*expr).opno).to_u32() {
            pg_sys::F_TEXTLIKE => false,
            pg_sys::F_TEXTNLIKE => true,
            _ => return None,
        };
        let collation = (*expr).inputcollid;
        if collation != pg_sys::InvalidOid && !pg_sys::get_collation_isdeterministic(collation) {
            return None;
        }
        let [text, pattern] = list_items::<pg_sys::Node>((*expr).args)[..] else { return None };
        let column = self.column(text).filter(|c| c.reading == Reading::Text)?;
        let pattern = strip(pattern);
        if (*pattern).type_ != pg_sys::NodeTag::T_Const || (*(pattern as *mut pg_sys::Const)).constisnull {
            return None;
        }
        let Some(Scalar::String(pattern)) = pushdown::scalar_of((*(pattern as *mut pg_sys::Const)).constvalue, pg_sys::TEXTOID) else {
            return None;
        };
        Some(Condition::Like { column, pattern, negated })
    }

    unsafe fn comparison(&mut self, node: *mut pg_sys::Node) -> Option<Condition> {
        let comparison = pushdown::column_comparison(node, self.relid, self.fields)?;
        let column = self.field_column(comparison.column.clone())?;
        let collation = match (*node).type_ {
            pg_sys::NodeTag::T_OpExpr => (*(node as *mut pg_sys::OpExpr)).inputcollid,
            _ => (*(node as *mut pg_sys::ScalarArrayOpExpr)).inputcollid,
        };
        if column.reading == Reading::Text && !matches!(comparison.op, Op::Eq | Op::NotEq) && !bytewise(collation) {
            return None;
        }
        let other = strip(comparison.other);
        let other_type = pg_sys::exprType(other);
        if comparison.any {
            // A constant list without NULLs (one would make a mismatch unknown, not false).
            let constant = (*other).type_ == pg_sys::NodeTag::T_Const && !(*(other as *mut pg_sys::Const)).constisnull;
            if !constant {
                return None;
            }
            let array = (*(other as *mut pg_sys::Const)).constvalue;
            let (element_type, items) = pushdown::array_elements(array);
            if pg_sys::array_contains_nulls(pg_sys::pg_detoast_datum(array.cast_mut_ptr()).cast()) || !pushdown::same_family(comparison.column.1, element_type) {
                return None;
            }
            let values = items.into_iter().map(|item| pushdown::scalar_of(item, element_type)).collect::<Option<Vec<_>>>()?;
            return Some(Condition::In { column, values });
        }
        let (op, operand) = match (*other).type_ {
            pg_sys::NodeTag::T_Const if (*(other as *mut pg_sys::Const)).constisnull => (comparison.op, Operand::Null),
            pg_sys::NodeTag::T_Const => {
                let datum = (*(other as *mut pg_sys::Const)).constvalue;
                let (op, value) = pushdown::constant_comparison(comparison.column.1, comparison.op, datum, other_type)?;
                (op, Operand::Value(value))
            }
            // Known at execution: parameters, and expressions of no column that give one value
            // for the statement (`now() - interval '1 day'`).
            _ if is_runtime_value(other) && pushdown::same_family(comparison.column.1, other_type) => {
                self.params.push(other);
                (comparison.op, Operand::Param(self.params.len() - 1))
            }
            _ => return None,
        };
        // Constants the engine cannot compare (a NaN numeric) fail the query's check.
        Some(Condition::Compare { column, op, operand })
    }

    /// `date_column < t` (or `<=`, `>`, `>=`, either side) for a `timestamp` or `timestamptz`
    /// `t` known at execution: a stable expression (`now() - interval '7 days'`), a parameter,
    /// or a `timestamptz` constant (whose date depends on the session's time zone then). Its
    /// operand is a date computed at execution, with PostgreSQL's own functions. PostgreSQL
    /// compares the date's midnight (in the session's time zone, for `timestamptz`) with `t`,
    /// and midnights grow with dates; so with `D` the date of `t`, `d <= t` is `d <= D` and
    /// `d > t` is `d > D`, while `d < t` is `d < C` and `d >= t` is `d >= C`, where `C` is `D`
    /// when `t` is `D`'s midnight and `D + 1` when it is later. (Timestamp constants are
    /// converted at planning: [`pushdown::constant_comparison`].)
    unsafe fn date_against_timestamp(&mut self, node: *mut pg_sys::Node) -> Option<Condition> {
        use pg_sys::{F_DATE_GE_TIMESTAMP, F_DATE_GE_TIMESTAMPTZ, F_DATE_GT_TIMESTAMP, F_DATE_GT_TIMESTAMPTZ};
        use pg_sys::{F_DATE_LE_TIMESTAMP, F_DATE_LE_TIMESTAMPTZ, F_DATE_LT_TIMESTAMP, F_DATE_LT_TIMESTAMPTZ};
        use pg_sys::{F_TIMESTAMPTZ_GE_DATE, F_TIMESTAMPTZ_GT_DATE, F_TIMESTAMPTZ_LE_DATE, F_TIMESTAMPTZ_LT_DATE};
        use pg_sys::{F_TIMESTAMP_GE_DATE, F_TIMESTAMP_GT_DATE, F_TIMESTAMP_LE_DATE, F_TIMESTAMP_LT_DATE};
        let expr = node as *mut pg_sys::OpExpr;
        let [left, right] = list_items::<pg_sys::Node>((*expr).args)[..] else { return None };
        let (op, date_first) = match pg_sys::get_opcode((*expr).opno).to_u32() {
            F_DATE_LT_TIMESTAMP | F_DATE_LT_TIMESTAMPTZ => (Op::Lt, true),
            F_DATE_LE_TIMESTAMP | F_DATE_LE_TIMESTAMPTZ => (Op::LtEq, true),
            F_DATE_GT_TIMESTAMP | F_DATE_GT_TIMESTAMPTZ => (Op::Gt, true),
            F_DATE_GE_TIMESTAMP | F_DATE_GE_TIMESTAMPTZ => (Op::GtEq, true),
            F_TIMESTAMP_LT_DATE | F_TIMESTAMPTZ_LT_DATE => (Op::Lt, false),
            F_TIMESTAMP_LE_DATE | F_TIMESTAMPTZ_LE_DATE => (Op::LtEq, false),
            F_TIMESTAMP_GT_DATE | F_TIMESTAMPTZ_GT_DATE => (Op::Gt, false),
            F_TIMESTAMP_GE_DATE | F_TIMESTAMPTZ_GE_DATE => (Op::GtEq, false),
            _ => return None,
        };
        let (column, t, op) = if date_first { (left, right, op) } else { (right, left, op.commuted()) };
        let column = self.column(column).filter(|c| c.reading == Reading::Date)?;
        let with_zone = match pg_sys::exprType(t) {
            pg_sys::TIMESTAMPTZOID => true,
            pg_sys::TIMESTAMPOID if (*strip(t)).type_ != pg_sys::NodeTag::T_Const => false,
            _ => return None,
        };
        if !is_runtime_value(t) {
            return None;
        }
        let call = |function: u32, result: pg_sys::Oid, args: &[*mut pg_sys::Node]| -> *mut pg_sys::Node {
            let mut list: *mut pg_sys::List = std::ptr::null_mut();
            for &arg in args {
                list = pg_sys::lappend(list, pg_sys::copyObjectImpl(arg.cast()));
            }
            let oid = pg_sys::Oid::from(function);
            pg_sys::makeFuncExpr(oid, result, list, pg_sys::InvalidOid, pg_sys::InvalidOid, pg_sys::CoercionForm::COERCE_EXPLICIT_CALL).cast()
        };
        let date = call(if with_zone { pg_sys::F_DATE_TIMESTAMPTZ } else { pg_sys::F_DATE_TIMESTAMP }, pg_sys::DATEOID, &[t]);
        let bound = match op {
            Op::LtEq | Op::Gt => date,
            Op::Lt | Op::GtEq => {
                // D + (t > D)::integer; an infinite t gives its infinite date.
                let later = call(if with_zone { pg_sys::F_TIMESTAMPTZ_GT_DATE } else { pg_sys::F_TIMESTAMP_GT_DATE }, pg_sys::BOOLOID, &[t, date]);
                let one_if_later = call(pg_sys::F_INT4_BOOL, pg_sys::INT4OID, &[later]);
                call(pg_sys::F_DATE_PLI, pg_sys::DATEOID, &[date, one_if_later])
            }
            Op::Eq | Op::NotEq => return None,
        };
        self.params.push(bound);
        Some(Condition::Compare { column, op, operand: Operand::Param(self.params.len() - 1) })
    }
}

/// An expression without columns, volatile functions, aggregates or subplans: one value per
/// scan, evaluated at its start.
unsafe fn is_runtime_value(node: *mut pg_sys::Node) -> bool {
    !pg_sys::contain_var_clause(node)
        && !pg_sys::contain_volatile_functions(node)
        && !pg_sys::contain_agg_clause(node)
        && !pg_sys::contain_subplans(node)
        && !pg_sys::expression_returns_set(node)
}


/// A value for a condition's operand; floats may be NaN or infinite here (the plan's JSON
/// carries no such constant, but the engine compares them).
pub(crate) unsafe fn operand_value(datum: pg_sys::Datum, type_oid: pg_sys::Oid) -> Scalar {
    use pgrx::FromDatum;
    if type_oid == pg_sys::DATEOID {
        // PostgreSQL's infinite dates (DATEVAL_NOBEGIN, DATEVAL_NOEND) compare as the extremes
        // of the engine's days since 1970: every date a table stores lies strictly between
        // them (PostgreSQL's dates end in 5874897, 2,145,042,905 days after 1970).
        match datum.value() as i32 {
            i32::MIN => return Scalar::Date(i32::MIN),
            i32::MAX => return Scalar::Date(i32::MAX),
            _ => {}
        }
    }
    let float = match type_oid {
        pg_sys::FLOAT4OID => f32::from_datum(datum, false).map(f64::from),
        pg_sys::FLOAT8OID => f64::from_datum(datum, false),
        _ => None,
    };
    if let Some(x) = float {
        return Scalar::Float(if x.is_nan() { f64::NAN } else { x });
    }
    pushdown::scalar_of(datum, type_oid).unwrap_or_else(|| {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "a pushed aggregate's condition compares with a value the engine cannot represent (an infinite date or timestamp, or a NaN or infinite numeric)",
            Some("SET hudi.aggregate_pushdown = off to aggregate in PostgreSQL.".into()),
        )
    })
}


/// The runtime operands of a plan's conditions (its `fdw_exprs`), ready to evaluate at each
/// (re)scan.
pub(crate) struct RuntimeValues(Vec<(*mut pg_sys::ExprState, pg_sys::Oid)>);

impl RuntimeValues {
    /// Prepares the expressions `exprs` of the plan of `node`.
    pub(crate) unsafe fn init(node: *mut pg_sys::ForeignScanState, exprs: *mut pg_sys::List) -> RuntimeValues {
        let states = list_items::<pg_sys::ExprState>(pg_sys::ExecInitExprList(exprs, node as *mut pg_sys::PlanState));
        let types = list_items::<pg_sys::Node>(exprs).into_iter().map(|e| pg_sys::exprType(e));
        RuntimeValues(states.into_iter().zip(types).collect())
    }

    /// The operands' values now (`None`: NULL), to bind a condition with.
    pub(crate) unsafe fn evaluate(&self, node: *mut pg_sys::ForeignScanState) -> Vec<Option<Scalar>> {
        let context = (*node).ss.ps.ps_ExprContext;
        self.0
            .iter()
            .map(|&(state, type_oid)| {
                let mut is_null = false;
                let datum = pg_sys::ExecEvalExprSwitchContext(state, context, &mut is_null);
                (!is_null).then(|| operand_value(datum, type_oid))
            })
            .collect()
    }
}

/// The restriction clauses of `baserel` that the engine evaluates exactly: each one's index in
/// `baserestrictinfo` and its condition, and the runtime operands the conditions name (their
/// [`Operand::Param`] numbers index it).
pub(crate) unsafe fn translate_quals(
    baserel: *mut pg_sys::RelOptInfo,
    fields: &FieldNames,
    schema: &Schema,
) -> (Vec<(usize, Condition)>, Vec<*mut pg_sys::Node>) {
    let mut translator = Translator { relid: (*baserel).relid, fields, schema, params: Vec::new() };
    let mut translated = Vec::new();
    for (index, info) in list_items::<pg_sys::RestrictInfo>((*baserel).baserestrictinfo).into_iter().enumerate() {
        let params = translator.params.len();
        match translator.condition((*info).clause as *mut pg_sys::Node) {
            Some(condition) if condition.check(schema).is_ok() => translated.push((index, condition)),
            // Operands of a clause that is not pushed are not evaluated.
            _ => translator.params.truncate(params),
        }
    }
    (translated, translator.params)
}

/// The unscaled value and scale of a plain decimal's text (`-12.50` is (-1250, 2)); `None` for
/// NaN, infinities and values beyond 38 digits.
fn decimal_parts(text: &str) -> Option<(i128, i8)> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (integer, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if integer.is_empty() || !integer.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()) || integer.len() + fraction.len() > 38 {
        return None;
    }
    let unscaled: i128 = format!("{integer}{fraction}").parse().ok()?;
    Some((if negative { -unscaled } else { unscaled }, i8::try_from(fraction.len()).ok()?))
}
