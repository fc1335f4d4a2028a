//! Arithmetic the engine computes exactly as PostgreSQL computes it: `+`, `-`, `*` and `/` of
//! `numeric` columns and constants, of integers and of doubles, and searched `CASE` over them.
//! PostgreSQL's `numeric` never overflows; the engine computes in 128-bit decimals, so a
//! `numeric` expression is accepted only when the digits of its result are bounded by 38
//! from the operands' declared precisions, and a stored value beyond its field's precision is
//! an error rather than a wrong sum. Results have the scale PostgreSQL gives them: the larger
//! of the operands' for `+` and `-`, their sum for `*`. An integer operation is computed
//! exactly and its result checked against its type's range, as PostgreSQL's `int4mul` and its
//! kin check theirs (22003), and integer division truncates toward zero and refuses zero
//! (22012). A `CASE` evaluates each branch only on the rows that take it, so that a branch's
//! error is raised only for rows PostgreSQL would evaluate it on.
//!
//! PostgreSQL's `numeric` values carry their own display scale, and a sum's is the largest of
//! its values'. A `numeric` division chooses its scale from its operands' values (`numeric_div`'s
//! `select_div_scale`), and a `CASE` takes each row's from the branch that made it: such an
//! expression is computed in 256 bits at the largest scale any value can have, each value with
//! its own display scale ([`Decimals::per_value`]), and is not an operand of more arithmetic.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float64Array, Int8Array, PrimitiveArray, StructArray};
use arrow::buffer::NullBuffer;
use arrow::compute::kernels::arity::try_binary;
use arrow::compute::kernels::boolean::{and_not, or};
use arrow::compute::{cast, filter_record_batch, prep_null_mask_filter};
use arrow::datatypes::{i256, DataType, Decimal128Type, Decimal256Type, Field, Fields, Float64Type, Int64Type, Schema};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::read::condition::{Column, Condition};
use crate::read::reading::Reading;

/// The most digits a 128-bit decimal holds.
const MAX_DIGITS: u8 = 38;

/// The most digits, at its scale, of an expression with a display scale per value: a sum of
/// 2^63 of them stays within a 256-bit decimal's 76.
const PER_VALUE_DIGITS: u8 = 57;

/// PostgreSQL's `NUMERIC_MIN_SIG_DIGITS`: the significant digits a quotient has at least.
const MIN_SIG_DIGITS: i32 = 16;

/// PostgreSQL's `NUMERIC_MAX_DISPLAY_SCALE`.
const MAX_DISPLAY_SCALE: i32 = 1000;

/// How a decimal expression's values are represented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decimals {
    /// Digits, at `scale`, that hold every value.
    pub precision: u8,
    /// The scale values are computed at.
    pub scale: i8,
    /// Whether each value has a display scale of its own, at most `scale` (a `numeric`
    /// division, a `CASE` of branches of different scales): the values are then 256-bit
    /// decimals, each with its display scale ([`per_value_type`]).
    pub per_value: bool,
}

/// The type of the values of an expression with a display scale per value: a struct of the
/// value (a 256-bit decimal of `precision` digits at `scale`) and its display scale (`Int8`).
pub fn per_value_type(precision: u8, scale: i8) -> DataType {
    DataType::Struct(per_value_fields(precision, scale))
}

/// The fields of [`per_value_type`].
pub(crate) fn per_value_fields(precision: u8, scale: i8) -> Fields {
    Fields::from(vec![Field::new("value", DataType::Decimal256(precision, scale), true), Field::new("scale", DataType::Int8, false)])
}

/// Values with a display scale each: the values at one scale and each row's display scale.
struct ScaledValues {
    values: PrimitiveArray<Decimal256Type>,
    scales: Vec<i8>,
}

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArithmeticOp {
    Add,
    Subtract,
    Multiply,
    /// Division: truncating for integers, rounded at a scale chosen per value for `numeric`.
    Divide,
}

/// The PostgreSQL type of an operation's result, which bounds its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NumberType {
    Smallint,
    Integer,
    Bigint,
    Numeric,
    /// `double precision`, with `float8pl`'s, `float8mi`'s, `float8mul`'s and `float8div`'s
    /// errors (overflow and underflow, division by zero).
    Double,
}

impl NumberType {
    /// The type's range and PostgreSQL's message for a value beyond it (none for `numeric`).
    fn range(self) -> Option<(i128, i128, &'static str)> {
        match self {
            NumberType::Smallint => Some((i16::MIN.into(), i16::MAX.into(), "smallint out of range")),
            NumberType::Integer => Some((i32::MIN.into(), i32::MAX.into(), "integer out of range")),
            NumberType::Bigint => Some((i64::MIN.into(), i64::MAX.into(), "bigint out of range")),
            NumberType::Numeric | NumberType::Double => None,
        }
    }

    /// Decimal digits that hold every value of an integer type.
    fn digits(self) -> Option<u8> {
        match self {
            NumberType::Smallint => Some(5),
            NumberType::Integer => Some(10),
            NumberType::Bigint => Some(19),
            NumberType::Numeric | NumberType::Double => None,
        }
    }
}

/// A numeric expression: of `numeric` and integer values (decimals, exactly), or of `double
/// precision` values ([`Self::is_double`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Expression {
    /// A column read as `numeric` over a decimal or integer field, an integer column, or a
    /// float column.
    Column(Column),
    /// A constant: its unscaled value and scale (PostgreSQL's display scale; 0 for integers).
    Constant { unscaled: i128, scale: i8 },
    /// A `double precision` constant.
    Double(f64),
    /// An integer or `real` expression as `double precision` (`float8(integer)` and the like:
    /// the nearest double, as C converts).
    ToDouble(Box<Expression>),
    /// `left op right`, whose value must fit `result`.
    Arithmetic { op: ArithmeticOp, left: Box<Expression>, right: Box<Expression>, result: NumberType },
    /// `CASE WHEN condition THEN value ... [ELSE otherwise] END`: NULL where no branch applies
    /// and there is no `ELSE`.
    Case { branches: Vec<(Condition, Expression)>, otherwise: Option<Box<Expression>> },
}

/// Decimal digits of `v`'s magnitude (at least 1).
fn digits(v: i128) -> u8 {
    let mut n = 1;
    let mut m = v.unsigned_abs() / 10;
    while m > 0 {
        n += 1;
        m /= 10;
    }
    n
}

/// Digits that hold every value of an integer field.
fn integer_digits(data_type: &DataType) -> Option<u8> {
    Some(match data_type {
        DataType::Int8 | DataType::UInt8 => 3,
        DataType::Int16 | DataType::UInt16 => 5,
        DataType::Int32 | DataType::UInt32 => 10,
        DataType::Int64 => 19,
        _ => return None,
    })
}

fn unsupported(why: String) -> Error {
    Error::new(ErrorKind::Unsupported, why)
}

impl Expression {
    /// Whether the expression's values are `double precision` (else decimals).
    pub fn is_double(&self) -> bool {
        match self {
            Expression::Column(column) => matches!(column.reading, Reading::Float8 | Reading::Float4),
            Expression::Double(_) | Expression::ToDouble(_) => true,
            Expression::Arithmetic { result, .. } => *result == NumberType::Double,
            Expression::Constant { .. } | Expression::Case { .. } => false,
        }
    }

    /// Whether the expression's values are of an integer type (`smallint`, `integer`,
    /// `bigint`), as PostgreSQL types it: integer columns, the built-in integer operators and
    /// a `CASE` of those.
    pub fn is_integer(&self) -> bool {
        match self {
            Expression::Column(column) => column.reading == Reading::Int,
            Expression::Arithmetic { result, .. } => result.digits().is_some(),
            Expression::Case { branches, otherwise } => branches.iter().map(|(_, v)| v).chain(otherwise.as_deref()).all(Expression::is_integer),
            Expression::Constant { .. } | Expression::Double(_) | Expression::ToDouble(_) => false,
        }
    }

    /// Checks a `double precision` expression against the table's `schema`: its columns, and
    /// that every operation is of doubles (its operands made doubles by [`Self::ToDouble`]).
    fn check_double(&self, schema: &Schema) -> Result<()> {
        match self {
            Expression::Column(column) if self.is_double() => column.check(schema),
            Expression::Double(_) => Ok(()),
            Expression::ToDouble(inner) if inner.is_double() => inner.check_double(schema),
            Expression::ToDouble(inner) => match inner.decimal_type(schema)? {
                (_, 0) => Ok(()),
                _ => Err(unsupported(format!("{self} converts a fraction to double precision"))),
            },
            Expression::Arithmetic { left, right, result: NumberType::Double, .. } if left.is_double() && right.is_double() => {
                left.check_double(schema)?;
                right.check_double(schema)
            }
            _ => Err(unsupported(format!("{self} mixes double precision with other values"))),
        }
    }

    /// Checks the expression against the table's `schema`: it can be computed here exactly as
    /// the host computes it.
    pub fn check(&self, schema: &Schema) -> Result<()> {
        match self.is_double() {
            true => self.check_double(schema),
            false => self.decimals(schema).map(|_| ()),
        }
    }

    /// The precision and scale of the expression's values over the table's `schema`; an
    /// error when it cannot be computed exactly here, or when its values have a display scale
    /// each ([`Self::decimals`]).
    pub fn decimal_type(&self, schema: &Schema) -> Result<(u8, i8)> {
        match self.decimals(schema)? {
            Decimals { per_value: true, .. } => Err(unsupported(format!("{self} has a display scale per value, and is not an operand"))),
            Decimals { precision, scale, .. } => Ok((precision, scale)),
        }
    }

    /// How the expression's values are represented over the table's `schema`; an error when
    /// they cannot be computed exactly here.
    pub fn decimals(&self, schema: &Schema) -> Result<Decimals> {
        let fixed = |(precision, scale): (u8, i8)| Decimals { precision, scale, per_value: false };
        let decimals = match self {
            Expression::Column(column) => {
                column.check(schema)?;
                let data_type = schema.field_with_name(&column.field).map(|f| f.data_type()).ok();
                fixed(match (column.reading, data_type) {
                    (Reading::Decimal, Some(&DataType::Decimal128(p, s))) if s >= 0 => (p, s),
                    (Reading::Decimal | Reading::Int, Some(data_type)) if integer_digits(data_type).is_some() => (integer_digits(data_type).unwrap_or(MAX_DIGITS), 0),
                    _ => return Err(unsupported(format!("{} is not a decimal or integer column", column.field))),
                })
            }
            Expression::Constant { unscaled, scale } if *scale >= 0 => fixed((digits(*unscaled).max(*scale as u8), *scale)),
            Expression::Constant { .. } => return Err(unsupported("a constant of negative scale".into())),
            Expression::Double(_) | Expression::ToDouble(_) | Expression::Arithmetic { result: NumberType::Double, .. } => {
                return Err(unsupported(format!("{self} is of double precision")))
            }
            Expression::Arithmetic { op, left, right, result } => {
                let ((p1, s1), (p2, s2)) = (left.decimal_type(schema)?, right.decimal_type(schema)?);
                if let Some(digits) = result.digits() {
                    if s1 != 0 || s2 != 0 {
                        return Err(unsupported(format!("{self} is an integer operation on fractions")));
                    }
                    fixed((digits, 0))
                } else {
                    match op {
                        ArithmeticOp::Add | ArithmeticOp::Subtract => {
                            let scale = s1.max(s2);
                            let integer = (p1 - s1 as u8).max(p2 - s2 as u8) + 1;
                            fixed((integer.saturating_add(scale as u8), scale))
                        }
                        ArithmeticOp::Multiply => fixed((p1.saturating_add(p2), s1.saturating_add(s2))),
                        ArithmeticOp::Divide => {
                            let (precision, scale) = quotient_type((p1, s1), (p2, s2));
                            if precision > i32::from(PER_VALUE_DIGITS) {
                                return Err(unsupported(format!("{self} may need more than {PER_VALUE_DIGITS} digits")));
                            }
                            Decimals { precision: precision as u8, scale: scale as i8, per_value: true }
                        }
                    }
                }
            }
            Expression::Case { branches, otherwise } => {
                let mut types = Vec::new();
                for (condition, value) in branches {
                    condition.check(schema)?;
                    if condition.has_params() {
                        return Err(unsupported(format!("{self} has a parameter in a condition")));
                    }
                    types.push(value.decimals(schema)?);
                }
                if let Some(otherwise) = otherwise {
                    types.push(otherwise.decimals(schema)?);
                }
                // A value keeps the scale of the branch that made it: branches of different
                // scales make one per value.
                let scale = types.iter().map(|d| d.scale).max().unwrap_or(0);
                let per_value = types.iter().any(|d| d.per_value || d.scale != scale);
                let integer = types.iter().map(|d| d.precision - d.scale as u8).max().unwrap_or(1);
                Decimals { precision: integer.saturating_add(scale as u8), scale, per_value }
            }
        };
        let most = if decimals.per_value { PER_VALUE_DIGITS } else { MAX_DIGITS };
        if decimals.precision > most || decimals.scale as u8 > most {
            return Err(unsupported(format!("{self} may need more than {most} digits")));
        }
        Ok(decimals)
    }

    /// The type of the expression's values over the table's `schema` ([`Self::evaluate`]'s).
    pub fn data_type(&self, schema: &Schema) -> Option<DataType> {
        if self.is_double() {
            return Some(DataType::Float64);
        }
        Some(match self.decimals(schema).ok()? {
            Decimals { precision, scale, per_value: true } => per_value_type(precision, scale),
            Decimals { precision, scale, .. } => DataType::Decimal128(precision, scale),
        })
    }

    /// The columns the expression reads.
    pub fn columns(&self) -> Vec<&Column> {
        match self {
            Expression::Column(column) => vec![column],
            Expression::Constant { .. } | Expression::Double(_) => vec![],
            Expression::ToDouble(inner) => inner.columns(),
            Expression::Arithmetic { left, right, .. } => left.columns().into_iter().chain(right.columns()).collect(),
            Expression::Case { branches, otherwise } => branches
                .iter()
                .flat_map(|(condition, value)| condition.columns().into_iter().chain(value.columns()))
                .chain(otherwise.iter().flat_map(|o| o.columns()))
                .collect(),
        }
    }

    /// The expression's value for each row of `rows` (NULL where an operand is): a decimal of
    /// [`Self::decimal_type`], or a double.
    pub fn evaluate(&self, rows: &RecordBatch) -> Result<ArrayRef> {
        let schema = rows.schema();
        if self.is_double() {
            return Ok(Arc::new(self.doubles(rows, &schema)?));
        }
        let internal = |e: ArrowError| Error::new(ErrorKind::Internal, "a decimal result").with_source(e);
        let Decimals { precision, scale, per_value } = self.decimals(&schema)?;
        if per_value {
            let ScaledValues { values, scales } = self.scaled_values(rows, &schema, scale)?;
            let values = values.with_precision_and_scale(precision, scale).map_err(internal)?;
            let nulls = values.nulls().cloned();
            let columns: Vec<ArrayRef> = vec![Arc::new(values), Arc::new(Int8Array::from(scales))];
            return Ok(Arc::new(StructArray::try_new(per_value_fields(precision, scale), columns, nulls).map_err(internal)?));
        }
        let values = self.values(rows, &schema)?;
        Ok(Arc::new(values.with_precision_and_scale(precision, scale).map_err(internal)?))
    }

    /// The values of an expression at scale `at` (at least its own), each with its display
    /// scale.
    fn scaled_values(&self, rows: &RecordBatch, schema: &Schema, at: i8) -> Result<ScaledValues> {
        let n = rows.num_rows();
        match self {
            Expression::Arithmetic { op: ArithmeticOp::Divide, left, right, result: NumberType::Numeric } => {
                let ((_, s1), (_, s2)) = (left.decimal_type(schema)?, right.decimal_type(schema)?);
                let (a, b) = (left.values(rows, schema)?, right.values(rows, schema)?);
                let mut scales = vec![0; n];
                let mut values = vec![i256::ZERO; n];
                let nulls = NullBuffer::union(a.nulls(), b.nulls());
                for row in 0..n {
                    if nulls.as_ref().is_some_and(|nulls| nulls.is_null(row)) {
                        continue;
                    }
                    let (x, y) = (a.value(row), b.value(row));
                    if y == 0 {
                        return Err(Error::new(ErrorKind::DivisionByZero, "division by zero"));
                    }
                    let (quotient, scale) = numeric_quotient((x, s1), (y, s2));
                    if scale > at {
                        return Err(Error::new(ErrorKind::Corrupt, format!("a value of {self} exceeds the precision its fields declare")));
                    }
                    values[row] = quotient.wrapping_mul(pow10(at - scale));
                    scales[row] = scale;
                }
                Ok(ScaledValues { values: PrimitiveArray::new(values.into(), nulls), scales })
            }
            Expression::Case { branches, otherwise } => {
                let arms = case_arms(branches, otherwise.as_deref(), rows)?;
                let mut parts = Vec::new();
                for (chosen, value) in &arms.chosen {
                    let subset = filter_record_batch(rows, chosen).map_err(|e| Error::new(ErrorKind::Internal, format!("cannot evaluate {self}")).with_source(e))?;
                    parts.push(value.scaled_values(&subset, schema, at)?);
                }
                let mut scales = vec![0; n];
                let values = arms.interleave(|arm, place, row| {
                    let part = &parts[arm];
                    scales[row] = part.scales[place];
                    part.values.is_valid(place).then(|| part.values.value(place))
                });
                Ok(ScaledValues { values: values.into_iter().collect(), scales })
            }
            _ => {
                let (_, scale) = self.decimal_type(schema)?;
                let factor = pow10(at - scale);
                let values = self.values(rows, schema)?.unary(|v| i256::from_i128(v).wrapping_mul(factor));
                Ok(ScaledValues { values, scales: vec![scale; n] })
            }
        }
    }

    /// The values of a `double precision` expression, computed as PostgreSQL's `float8`
    /// operators compute them.
    fn doubles(&self, rows: &RecordBatch, schema: &Schema) -> Result<Float64Array> {
        let kernel = |e: ArrowError| Error::new(ErrorKind::Internal, format!("cannot evaluate {self}")).with_source(e);
        Ok(match self {
            Expression::Column(column) => cast(column.raw(rows)?, &DataType::Float64).map_err(kernel)?.as_primitive::<Float64Type>().clone(),
            Expression::Double(value) => Float64Array::from(vec![*value; rows.num_rows()]),
            Expression::ToDouble(inner) if inner.is_double() => inner.doubles(rows, schema)?,
            Expression::ToDouble(inner) => inner.values(rows, schema)?.unary(|v: i128| v as f64),
            Expression::Arithmetic { op, left, right, result: NumberType::Double } => {
                let (a, b) = (left.doubles(rows, schema)?, right.doubles(rows, schema)?);
                let values = try_binary(&a, &b, |x: f64, y: f64| double_operation(*op, x, y));
                values.map_err(|e| match e {
                    ArrowError::DivideByZero => Error::new(ErrorKind::DivisionByZero, "division by zero"),
                    ArrowError::ComputeError(message) => Error::new(ErrorKind::OutOfRange, message),
                    other => kernel(other),
                })?
            }
            _ => return Err(unsupported(format!("{self} is not of double precision"))),
        })
    }

    /// The unscaled values, at the expression's scale.
    fn values(&self, rows: &RecordBatch, schema: &Schema) -> Result<PrimitiveArray<Decimal128Type>> {
        let kernel = |e: ArrowError| Error::new(ErrorKind::Internal, format!("cannot evaluate {self}")).with_source(e);
        Ok(match self {
            Expression::Column(column) => {
                let raw = column.raw(rows)?;
                match raw.data_type() {
                    DataType::Decimal128(..) => raw.as_primitive::<Decimal128Type>().clone(),
                    _ => cast(raw, &DataType::Int64).map_err(kernel)?.as_primitive::<Int64Type>().unary(i128::from),
                }
            }
            Expression::Constant { unscaled, .. } => Decimal128Array::from(vec![*unscaled; rows.num_rows()]),
            Expression::Double(_) | Expression::ToDouble(_) | Expression::Arithmetic { result: NumberType::Double, .. } => {
                return Err(unsupported(format!("{self} is of double precision")))
            }
            Expression::Arithmetic { op, left, right, result } => {
                let ((_, s1), (_, s2)) = (left.decimal_type(schema)?, right.decimal_type(schema)?);
                let (a, b) = (left.values(rows, schema)?, right.values(rows, schema)?);
                // Overflow of i128 itself: only a stored value beyond its declared precision.
                let overflow = || ArrowError::ComputeError(String::new());
                let values = match op {
                    ArithmeticOp::Multiply => try_binary(&a, &b, |x: i128, y: i128| x.checked_mul(y).ok_or_else(overflow)),
                    ArithmeticOp::Divide => try_binary(&a, &b, |x: i128, y: i128| match y {
                        0 => Err(ArrowError::DivideByZero),
                        _ => x.checked_div(y).ok_or_else(overflow),
                    }),
                    ArithmeticOp::Add | ArithmeticOp::Subtract => {
                        let scale = s1.max(s2);
                        let (fa, fb) = (10i128.pow((scale - s1) as u32), 10i128.pow((scale - s2) as u32));
                        let subtract = *op == ArithmeticOp::Subtract;
                        try_binary(&a, &b, |x: i128, y: i128| {
                            let (x, y) = (x.checked_mul(fa), y.checked_mul(fb));
                            let sum = match (x, y) {
                                (Some(x), Some(y)) if subtract => x.checked_sub(y),
                                (Some(x), Some(y)) => x.checked_add(y),
                                _ => None,
                            };
                            sum.ok_or_else(overflow)
                        })
                    }
                };
                let values = values.map_err(|e| match e {
                    ArrowError::DivideByZero => Error::new(ErrorKind::DivisionByZero, "division by zero"),
                    _ => Error::new(ErrorKind::Corrupt, format!("a value of {self} exceeds the precision its fields declare")),
                })?;
                if let Some((low, high, message)) = result.range() {
                    if values.iter().flatten().any(|v| v < low || v > high) {
                        return Err(Error::new(ErrorKind::OutOfRange, message));
                    }
                }
                values
            }
            Expression::Case { branches, otherwise } => {
                let (_, scale) = self.decimal_type(schema)?;
                let arms = case_arms(branches, otherwise.as_deref(), rows)?;
                let mut parts = Vec::new();
                for (chosen, value) in &arms.chosen {
                    let subset = filter_record_batch(rows, chosen).map_err(kernel)?;
                    let (_, own) = value.decimal_type(schema)?;
                    let factor = 10i128.pow((scale - own) as u32);
                    parts.push(value.values(&subset, schema)?.unary::<_, Decimal128Type>(|v| v * factor));
                }
                arms.interleave(|arm, at, _| parts[arm].is_valid(at).then(|| parts[arm].value(at))).into_iter().collect()
            }
        })
    }
}

/// The rows of a `CASE`'s arms: each row's arm, and each arm's rows with its value.
struct CaseArms<'a> {
    /// Each row's arm (`usize::MAX` where none applies: no `ELSE`).
    arm_of: Vec<usize>,
    /// Each arm's rows (the first whose condition is true, not NULL; `ELSE` last) and value.
    chosen: Vec<(BooleanArray, &'a Expression)>,
}

fn case_arms<'a>(branches: &'a [(Condition, Expression)], otherwise: Option<&'a Expression>, rows: &RecordBatch) -> Result<CaseArms<'a>> {
    let kernel = |e: ArrowError| Error::new(ErrorKind::Internal, "cannot choose the branches of a CASE").with_source(e);
    let n = rows.num_rows();
    let mut taken = BooleanArray::from(vec![false; n]);
    let mut arm_of = vec![usize::MAX; n];
    let mut chosen_arms = Vec::new();
    let arms = branches.iter().map(|(c, v)| (Some(c), v)).chain(otherwise.map(|o| (None, o)));
    for (i, (condition, value)) in arms.enumerate() {
        let chosen = match condition {
            Some(condition) => {
                let hit = condition.evaluate(rows)?;
                let hit = if hit.null_count() > 0 { prep_null_mask_filter(&hit) } else { hit };
                and_not(&hit, &taken).map_err(kernel)?
            }
            None => arrow::compute::not(&taken).map_err(kernel)?,
        };
        taken = or(&taken, &chosen).map_err(kernel)?;
        for row in chosen.values().set_indices() {
            arm_of[row] = i;
        }
        chosen_arms.push((chosen, value));
    }
    Ok(CaseArms { arm_of, chosen: chosen_arms })
}

impl CaseArms<'_> {
    /// A value per row: `value(arm, at, row)` of the row's arm at the row's place among the
    /// arm's rows (NULL where no arm applies).
    fn interleave<T>(&self, mut value: impl FnMut(usize, usize, usize) -> Option<T>) -> Vec<Option<T>> {
        let mut next = vec![0usize; self.chosen.len()];
        self.arm_of
            .iter()
            .enumerate()
            .map(|(row, &arm)| {
                let at = *next.get(arm)?;
                next[arm] += 1;
                value(arm, at, row)
            })
            .collect()
    }
}

/// The text of `unscaled` (at `scale`) at the smaller `display` scale, which drops only zeros.
pub(crate) fn decimal_text(unscaled: i256, scale: i8, display: i8) -> String {
    let digits = unscaled.wrapping_abs().to_string();
    let digits = &digits[..digits.len().saturating_sub((scale - display).max(0) as usize)];
    let display = display.max(0) as usize;
    let digits = format!("{digits:0>width$}", width = display + 1);
    let (integer, fraction) = digits.split_at(digits.len() - display);
    let sign = if unscaled < i256::ZERO { "-" } else { "" };
    match fraction {
        "" => format!("{sign}{integer}"),
        _ => format!("{sign}{integer}.{fraction}"),
    }
}

/// 10^`exponent` in 256 bits (`exponent` at most 76).
fn pow10(exponent: i8) -> i256 {
    i256::from_i128(10).wrapping_pow(exponent as u32)
}

/// A nonzero value's weight and first digit in base 10000, as PostgreSQL's `NumericVar`
/// holds it (its digits are groups of four decimal digits from the decimal point); zero's
/// are (0, 0), as `select_div_scale` takes them.
fn base_10000(unscaled: i128, scale: i8) -> (i32, u128) {
    if unscaled == 0 {
        return (0, 0);
    }
    let magnitude = unscaled.unsigned_abs();
    let exponent = i32::from(digits(unscaled)) - 1 - i32::from(scale);
    let weight = exponent.div_euclid(4);
    // The first digit is the magnitude times 10^shift, truncated (below 10^4).
    let shift = -i32::from(scale) - 4 * weight;
    let first = match shift >= 0 {
        true => magnitude * 10u128.pow(shift as u32),
        false => magnitude / 10u128.pow(shift.unsigned_abs()),
    };
    (weight, first)
}

/// PostgreSQL's `select_div_scale`: the display scale of `x / y` (unscaled values and scales).
fn division_scale((x, s1): (i128, i8), (y, s2): (i128, i8)) -> i8 {
    let ((weight1, first1), (weight2, first2)) = (base_10000(x, s1), base_10000(y, s2));
    // The quotient's weight, taking x below y where their first digits are equal.
    let weight = weight1 - weight2 - i32::from(first1 <= first2);
    let scale = (MIN_SIG_DIGITS - weight * 4).max(s1.into()).max(s2.into()).max(0).min(MAX_DISPLAY_SCALE);
    // Within i8: `quotient_type` bounds every value's scale by the expression's, which is.
    scale as i8
}

/// The precision and scale, at the largest scale any of its values can have, of the quotients
/// of `numeric` operands of the types `(p1, s1)` and `(p2, s2)`.
fn quotient_type((p1, s1): (u8, i8), (p2, s2): (u8, i8)) -> (i32, i32) {
    let (p1, s1, p2, s2) = (i32::from(p1), i32::from(s1), i32::from(p2), i32::from(s2));
    // The lowest quotient weight: the smallest dividend's (10^-s1) by the largest divisor's
    // (below 10^(p2 - s2)), first digits not greater.
    let weight = (-s1).div_euclid(4) - (p2 - s2 - 1).div_euclid(4) - 1;
    let scale = (MIN_SIG_DIGITS - weight * 4).max(s1).max(s2).max(0).min(MAX_DISPLAY_SCALE);
    // Quotients are below 10^(p1 - s1 + s2) (the largest dividend by the smallest divisor),
    // and rounding may reach it.
    let integer = (p1 - s1 + s2).max(0) + 1;
    (integer + scale, scale)
}

/// PostgreSQL's `numeric_div` of `x` (unscaled, at scale `s1`) by `y` (nonzero, at `s2`): the
/// quotient, unscaled at its display scale ([`division_scale`]), rounded half away from zero
/// as `div_var` rounds; and that scale.
fn numeric_quotient((x, s1): (i128, i8), (y, s2): (i128, i8)) -> (i256, i8) {
    let scale = division_scale((x, s1), (y, s2));
    // x / y at `scale` is x * 10^(scale - s1 + s2) / y, with scale >= s1.
    let shift = u32::try_from(i32::from(scale) - i32::from(s1) + i32::from(s2)).unwrap_or(0);
    let negative = (x < 0) != (y < 0);
    let (magnitude, divisor) = (x.unsigned_abs(), y.unsigned_abs());
    let quotient = match 10u128.checked_pow(shift).and_then(|f| magnitude.checked_mul(f)) {
        Some(numerator) => {
            let (q, r) = (numerator / divisor, numerator % divisor);
            // r < divisor <= 2^127: no overflow doubling it.
            i256::from_parts(q, 0).wrapping_add(i256::from_i128(i128::from(r >= divisor - r)))
        }
        None => {
            let numerator = i256::from_parts(magnitude, 0).wrapping_mul(pow10(shift as i8));
            let divisor = i256::from_parts(divisor, 0);
            let (q, r) = (numerator.wrapping_div(divisor), numerator.wrapping_rem(divisor));
            q.wrapping_add(i256::from_i128(i128::from(r >= divisor.wrapping_sub(r))))
        }
    };
    (if negative { quotient.wrapping_neg() } else { quotient }, scale)
}

/// `x op y` as PostgreSQL's `float8pl`, `float8mi`, `float8mul` and `float8div` compute it:
/// an infinite result of finite operands is an overflow, a zero one of non-zero operands an
/// underflow (for a division: of a finite divisor), and dividing by zero (but NaN) an error.
fn double_operation(op: ArithmeticOp, x: f64, y: f64) -> std::result::Result<f64, ArrowError> {
    let out_of_range = |what: &str| ArrowError::ComputeError(format!("value out of range: {what}"));
    let result = match op {
        ArithmeticOp::Add => x + y,
        ArithmeticOp::Subtract => x - y,
        ArithmeticOp::Multiply => x * y,
        ArithmeticOp::Divide if y == 0.0 && !x.is_nan() => return Err(ArrowError::DivideByZero),
        ArithmeticOp::Divide => x / y,
    };
    let overflow = match op {
        ArithmeticOp::Divide => result.is_infinite() && !x.is_infinite(),
        _ => result.is_infinite() && !x.is_infinite() && !y.is_infinite(),
    };
    let underflow = match op {
        ArithmeticOp::Multiply => result == 0.0 && x != 0.0 && y != 0.0,
        ArithmeticOp::Divide => result == 0.0 && x != 0.0 && !y.is_infinite(),
        ArithmeticOp::Add | ArithmeticOp::Subtract => false,
    };
    match (overflow, underflow) {
        (true, _) => Err(out_of_range("overflow")),
        (_, true) => Err(out_of_range("underflow")),
        _ => Ok(result),
    }
}

impl std::fmt::Display for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expression::Column(column) => write!(f, "{column}"),
            Expression::Double(value) => write!(f, "{value:?}::float8"),
            Expression::ToDouble(inner) => write!(f, "{inner}::float8"),
            Expression::Constant { unscaled, scale } => f.write_str(&decimal_text(i256::from_i128(*unscaled), *scale, *scale)),
            Expression::Arithmetic { op, left, right, .. } => {
                let symbol = match op {
                    ArithmeticOp::Add => "+",
                    ArithmeticOp::Subtract => "-",
                    ArithmeticOp::Multiply => "*",
                    ArithmeticOp::Divide => "/",
                };
                write!(f, "({left} {symbol} {right})")
            }
            Expression::Case { branches, otherwise } => {
                f.write_str("CASE")?;
                for (condition, value) in branches {
                    write!(f, " WHEN {condition} THEN {value}")?;
                }
                if let Some(otherwise) = otherwise {
                    write!(f, " ELSE {otherwise}")?;
                }
                f.write_str(" END")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;

    fn column(field: &str) -> Expression {
        Expression::Column(Column { field: field.into(), reading: Reading::Decimal })
    }

    fn op(op: ArithmeticOp, left: Expression, right: Expression) -> Expression {
        Expression::Arithmetic { op, left: Box::new(left), right: Box::new(right), result: NumberType::Numeric }
    }

    /// `price * (1 - disc) * (1 + tax)`, TPC-H's charge, with PostgreSQL's scales, NULLs and
    /// exact values; precisions beyond 38 digits are refused.
    #[test]
    fn decimal_arithmetic_is_exact() {
        let schema = Schema::new(vec![
            Field::new("price", DataType::Decimal128(12, 2), true),
            Field::new("disc", DataType::Decimal128(4, 2), true),
            Field::new("wide", DataType::Decimal128(30, 0), true),
        ]);
        let price = Decimal128Array::from(vec![Some(123_45), None, Some(-99_999_999_999_99)]).with_precision_and_scale(12, 2).unwrap();
        let disc = Decimal128Array::from(vec![Some(5), Some(7), Some(10)]).with_precision_and_scale(4, 2).unwrap();
        let wide = Decimal128Array::from(vec![Some(1), Some(2), Some(3)]).with_precision_and_scale(30, 0).unwrap();
        let rows = RecordBatch::try_new(Arc::new(schema.clone()), vec![Arc::new(price), Arc::new(disc), Arc::new(wide)]).unwrap();
        let one = Expression::Constant { unscaled: 1, scale: 0 };
        let charge = op(ArithmeticOp::Multiply, column("price"), op(ArithmeticOp::Subtract, one.clone(), column("disc")));
        assert_eq!(charge.decimal_type(&schema).unwrap(), (17, 4));
        assert_eq!(charge.to_string(), "(price * (1 - disc))");
        let values = charge.evaluate(&rows).unwrap();
        let values = values.as_primitive::<Decimal128Type>();
        // 123.45 * 0.95 = 117.2775; -99999999999.99 * 0.90 = -89999999999.9910
        assert_eq!(values.iter().collect::<Vec<_>>(), vec![Some(1_172_775), None, Some(-899_999_999_999_910)]);
        let taxed = op(ArithmeticOp::Multiply, charge, op(ArithmeticOp::Add, one, Expression::Constant { unscaled: 8, scale: 2 }));
        assert_eq!(taxed.decimal_type(&schema).unwrap(), (21, 6));
        assert_eq!(taxed.evaluate(&rows).unwrap().as_primitive::<Decimal128Type>().value(0), 126_659_700);
        assert_eq!(Expression::Constant { unscaled: -5, scale: 2 }.to_string(), "-0.05");
        assert!(op(ArithmeticOp::Multiply, column("wide"), column("price")).decimal_type(&schema).is_err());
        assert!(op(ArithmeticOp::Add, column("wide"), column("wide")).decimal_type(&schema).is_ok());
    }

    /// double precision operations as PostgreSQL's float8 operators: IEEE results, NaN and
    /// infinities passing through, overflow and underflow of finite operands refused (22003),
    /// division by zero refused but for NaN (22012); integers and reals made doubles.
    #[test]
    fn double_arithmetic_raises_what_postgres_raises() {
        use ArithmeticOp::*;
        assert_eq!(double_operation(Add, 0.1, 0.2).unwrap(), 0.1 + 0.2);
        assert!(double_operation(Add, f64::NAN, 1.0).unwrap().is_nan());
        assert_eq!(double_operation(Add, f64::INFINITY, 1.0).unwrap(), f64::INFINITY);
        assert!(matches!(double_operation(Add, f64::MAX, f64::MAX), Err(ArrowError::ComputeError(m)) if m.ends_with("overflow")));
        assert!(matches!(double_operation(Subtract, -f64::MAX, f64::MAX), Err(ArrowError::ComputeError(m)) if m.ends_with("overflow")));
        assert!(matches!(double_operation(Multiply, 1e-300, 1e-300), Err(ArrowError::ComputeError(m)) if m.ends_with("underflow")));
        assert_eq!(double_operation(Multiply, 0.0, 1e-300).unwrap(), 0.0);
        assert!(matches!(double_operation(Divide, 1.0, 0.0), Err(ArrowError::DivideByZero)));
        assert!(matches!(double_operation(Divide, 0.0, -0.0), Err(ArrowError::DivideByZero)));
        assert!(double_operation(Divide, f64::NAN, 0.0).unwrap().is_nan());
        assert_eq!(double_operation(Divide, 1.0, f64::INFINITY).unwrap(), 0.0);
        assert!(matches!(double_operation(Divide, 1e-300, 1e300), Err(ArrowError::ComputeError(m)) if m.ends_with("underflow")));
        assert!(matches!(double_operation(Divide, 1e300, 1e-300), Err(ArrowError::ComputeError(m)) if m.ends_with("overflow")));

        let schema = Schema::new(vec![Field::new("f", DataType::Float64, true), Field::new("r", DataType::Float32, true), Field::new("q", DataType::Int64, true)]);
        let rows = RecordBatch::try_new(
            Arc::new(schema.clone()),
            vec![
                Arc::new(Float64Array::from(vec![Some(1.5), None, Some(-2.0)])),
                Arc::new(arrow::array::Float32Array::from(vec![Some(0.1f32), Some(2.0), None])),
                Arc::new(arrow::array::Int64Array::from(vec![Some(i64::MAX), Some(3), Some(-4)])),
            ],
        )
        .unwrap();
        let double = |field: &str, reading| Expression::Column(Column { field: field.into(), reading });
        let to_double = |e: Expression| Expression::ToDouble(Box::new(e));
        let q = Expression::Column(Column { field: "q".into(), reading: Reading::Int });
        // f * r::float8 + q::float8 / 2.0
        let expression = integer(
            Add,
            integer(Multiply, double("f", Reading::Float8), to_double(double("r", Reading::Float4)), NumberType::Double),
            integer(Divide, to_double(q.clone()), Expression::Double(2.0), NumberType::Double),
            NumberType::Double,
        );
        expression.check(&schema).unwrap();
        assert!(expression.is_double() && expression.decimal_type(&schema).is_err());
        let values = expression.evaluate(&rows).unwrap();
        let values: Vec<Option<f64>> = values.as_primitive::<Float64Type>().iter().collect();
        assert_eq!(values, [Some(1.5 * f64::from(0.1f32) + i64::MAX as f64 / 2.0), None, None]);
        // An operation of doubles over a decimal operand, or a fraction made a double, is not
        // computed here.
        assert!(integer(Add, double("f", Reading::Float8), q, NumberType::Double).check(&schema).is_err());
        assert!(to_double(Expression::Constant { unscaled: 15, scale: 1 }).check(&schema).is_err());
        let failing = integer(Divide, double("f", Reading::Float8), Expression::Double(0.0), NumberType::Double);
        assert_eq!(failing.evaluate(&rows).unwrap_err().kind(), ErrorKind::DivisionByZero);
    }

    fn integer(op: ArithmeticOp, left: Expression, right: Expression, result: NumberType) -> Expression {
        Expression::Arithmetic { op, left: Box::new(left), right: Box::new(right), result }
    }

    fn int_column(field: &str) -> Expression {
        Expression::Column(Column { field: field.into(), reading: Reading::Int })
    }

    fn constant(unscaled: i128) -> Expression {
        Expression::Constant { unscaled, scale: 0 }
    }

    /// Integer operations as PostgreSQL's: exact, checked against the result type's range
    /// (22003), division truncating toward zero and refusing zero (22012); NULL operands give
    /// NULL without an error.
    #[test]
    fn integer_arithmetic_checks_its_type() {
        let schema = Schema::new(vec![Field::new("q", DataType::Int32, true), Field::new("b", DataType::Int64, true)]);
        let q = arrow::array::Int32Array::from(vec![Some(7), Some(-7), None, Some(i32::MAX)]);
        let b = arrow::array::Int64Array::from(vec![Some(2), Some(2), Some(0), Some(1)]);
        let rows = RecordBatch::try_new(Arc::new(schema.clone()), vec![Arc::new(q), Arc::new(b)]).unwrap();
        let values = |e: &Expression| e.evaluate(&rows).map(|a| a.as_primitive::<Decimal128Type>().iter().collect::<Vec<_>>());
        // int4 * int8 is computed as bigint: no overflow.
        let times = integer(ArithmeticOp::Multiply, int_column("q"), int_column("b"), NumberType::Bigint);
        assert_eq!(times.decimal_type(&schema).unwrap(), (19, 0));
        assert_eq!(values(&times).unwrap(), vec![Some(14), Some(-14), None, Some(i32::MAX as i128)]);
        // int4 + int4 overflows at the last row.
        let plus = integer(ArithmeticOp::Add, int_column("q"), constant(1), NumberType::Integer);
        let error = values(&plus).unwrap_err();
        assert_eq!((error.kind(), error.detail()), (ErrorKind::OutOfRange, "integer out of range".to_string()));
        // Truncation toward zero; NULL / 0 is NULL, not an error.
        let first = RecordBatch::try_new(rows.schema(), rows.columns().iter().map(|c| c.slice(0, 3)).collect()).unwrap();
        let divided = integer(ArithmeticOp::Divide, int_column("q"), int_column("b"), NumberType::Bigint);
        assert_eq!(divided.evaluate(&first).unwrap().as_primitive::<Decimal128Type>().iter().collect::<Vec<_>>(), vec![Some(3), Some(-3), None]);
        let by_zero = integer(ArithmeticOp::Divide, int_column("b"), constant(0), NumberType::Bigint);
        assert_eq!(values(&by_zero).unwrap_err().kind(), ErrorKind::DivisionByZero);
        // Integer operations on fractions are not computed here.
        let fraction = Expression::Constant { unscaled: 5, scale: 1 };
        assert!(integer(ArithmeticOp::Add, int_column("q"), fraction, NumberType::Integer).decimal_type(&schema).is_err());
    }

    /// `numeric` division as PostgreSQL's `numeric_div` (results taken from PostgreSQL 15): the
    /// display scale `select_div_scale` chooses from the operands' values, rounding half away
    /// from zero.
    #[test]
    fn numeric_division_is_postgres() {
        let cases: [((i128, i8), (i128, i8), &str); 12] = [
            ((1_00, 2), (3_00, 2), "0.33333333333333333333"),
            ((0, 2), (5_00, 2), "0.00000000000000000000"),
            ((-2_50, 2), (4_00, 2), "-0.62500000000000000000"),
            ((123456_78, 2), (7, 2), "1763668.285714285714"),
            ((1, 2), (9999999999_99, 2), "0.0000000000010000000000010000"),
            ((2, 0), (3, 0), "0.66666666666666666667"),
            ((-1, 0), (6, 0), "-0.16666666666666666667"),
            ((99999, 0), (7, 0), "14285.571428571429"),
            ((1_0000000005, 10), (2, 0), "0.50000000025000000000"),
            ((5, 0), (10, 0), "0.50000000000000000000"),
            ((1, 0), (1, 7), "10000000.000000000000"),
            ((-5, 0), (-3, 0), "1.6666666666666667"),
        ];
        for (x, y, expected) in cases {
            let (quotient, scale) = numeric_quotient(x, y);
            assert_eq!(decimal_text(quotient, scale, scale), expected, "{x:?} / {y:?}");
        }
    }

    /// The type of a quotient holds every quotient of its operands' types at its scale: random
    /// operands of random precisions and scales.
    #[test]
    fn quotient_type_bounds_every_quotient() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        for _ in 0..20_000 {
            let (p1, p2) = (1 + next(20) as u8, 1 + next(20) as u8);
            let (s1, s2) = (next(u64::from(p1) + 1) as i8, next(u64::from(p2) + 1) as i8);
            let mut value = |p: u8| {
                let digits = 1 + next(u64::from(p)) as u32;
                let v = (next(10u64.pow(digits.min(19))) as i128).max(1);
                if next(2) == 0 { -v } else { v }
            };
            let (x, y) = (value(p1), value(p2));
            let (precision, scale) = quotient_type((p1, s1), (p2, s2));
            let (quotient, own) = numeric_quotient((x, s1), (y, s2));
            assert!(own <= scale as i8, "{x}e-{s1} / {y}e-{s2}: scale {own} > {scale}");
            let digits = quotient.wrapping_mul(pow10(scale as i8 - own)).wrapping_abs().to_string().len();
            assert!(digits as i32 <= precision, "{x}e-{s1} / {y}e-{s2}: {digits} digits > {precision}");
        }
    }

    /// Values with a display scale each: a division's, and a `CASE`'s of branches of different
    /// scales, evaluated to values at the largest scale with each row's own; not operands.
    #[test]
    fn scales_per_value() {
        use crate::read::condition::Operand;
        use crate::read::filter::{Op, Scalar};
        let schema = Schema::new(vec![Field::new("q", DataType::Int32, true), Field::new("price", DataType::Decimal128(12, 2), true)]);
        let q = arrow::array::Int32Array::from(vec![Some(3), Some(0), None, Some(8)]);
        let price = Decimal128Array::from(vec![Some(1_00), Some(2_50), Some(3_00), None]).with_precision_and_scale(12, 2).unwrap();
        let rows = RecordBatch::try_new(Arc::new(schema.clone()), vec![Arc::new(q), Arc::new(price)]).unwrap();
        let q_is = |op: Op, value: i64| Condition::Compare { column: Column { field: "q".into(), reading: Reading::Int }, op, operand: Operand::Value(Scalar::Int(value)) };
        let per_row = |e: &Expression| {
            let values = e.evaluate(&rows).unwrap();
            let parts = values.as_struct();
            let (numbers, scales) = (parts.column(0).as_primitive::<Decimal256Type>(), parts.column(1).as_primitive::<arrow::datatypes::Int8Type>());
            let DataType::Decimal256(_, at) = numbers.data_type() else { panic!() };
            (0..rows.num_rows()).map(|r| values.is_valid(r).then(|| decimal_text(numbers.value(r), *at, scales.value(r)))).collect::<Vec<_>>()
        };
        // price / q where q > 0, else price: 1.00 / 3 and a NULL q's 3.00.
        let divided = op(ArithmeticOp::Divide, column("price"), int_column("q"));
        let case = Expression::Case { branches: vec![(q_is(Op::Gt, 0), divided.clone())], otherwise: Some(Box::new(column("price"))) };
        assert!(case.decimals(&schema).unwrap().per_value);
        let texts = per_row(&case);
        assert_eq!(texts, [Some("0.33333333333333333333".into()), Some("2.50".into()), Some("3.00".into()), None]);
        // A division by zero that a row reaches is PostgreSQL's error; not one no row takes.
        assert_eq!(divided.evaluate(&rows).unwrap_err().kind(), ErrorKind::DivisionByZero);
        let mixed = Expression::Case { branches: vec![(q_is(Op::Gt, 2), column("price"))], otherwise: Some(Box::new(constant(0))) };
        assert_eq!(per_row(&mixed), [Some("1.00".into()), Some("0".into()), Some("0".into()), None]);
        // Not an operand of more arithmetic.
        assert!(op(ArithmeticOp::Multiply, divided, constant(2)).decimals(&schema).is_err());
    }

    /// `CASE`: the first branch whose condition is true (not NULL), else `ELSE` or NULL, at the
    /// widest scale of its values; a branch is evaluated only on its rows, so a division by
    /// zero that no row takes raises nothing.
    #[test]
    fn case_takes_the_first_true_branch() {
        use crate::read::condition::Operand;
        use crate::read::filter::{Op, Scalar};
        let schema = Schema::new(vec![Field::new("q", DataType::Int32, true), Field::new("price", DataType::Decimal128(12, 2), true)]);
        let q = arrow::array::Int32Array::from(vec![Some(0), Some(5), Some(50), None]);
        let price = Decimal128Array::from(vec![Some(1_00), Some(2_50), Some(3_00), Some(4_00)]).with_precision_and_scale(12, 2).unwrap();
        let rows = RecordBatch::try_new(Arc::new(schema.clone()), vec![Arc::new(q), Arc::new(price)]).unwrap();
        let q_is = |op: Op, value: i64| Condition::Compare { column: Column { field: "q".into(), reading: Reading::Int }, op, operand: Operand::Value(Scalar::Int(value)) };
        let case = Expression::Case {
            branches: vec![
                (q_is(Op::Gt, 10), column("price")),
                (q_is(Op::Gt, 0), op(ArithmeticOp::Multiply, integer(ArithmeticOp::Divide, constant(100), int_column("q"), NumberType::Integer), Expression::Constant { unscaled: 100, scale: 2 })),
            ],
            otherwise: Some(Box::new(Expression::Constant { unscaled: -1_00, scale: 2 })),
        };
        assert_eq!(case.decimal_type(&schema).unwrap(), (13, 2));
        let mixed = Expression::Case { branches: vec![(q_is(Op::Gt, 10), column("price"))], otherwise: Some(Box::new(constant(0))) };
        assert!(mixed.decimal_type(&schema).is_err() && mixed.decimals(&schema).unwrap().per_value);
        assert!(case.to_string().starts_with("CASE WHEN"));
        let values = case.evaluate(&rows).unwrap();
        // q = 0 and NULL take ELSE: 100 / q runs only for q = 5.
        assert_eq!(values.as_primitive::<Decimal128Type>().iter().collect::<Vec<_>>(), vec![Some(-1_00), Some(20_00), Some(3_00), Some(-1_00)]);
        // Conditions that are never NULL.
        let values = case.evaluate(&rows.slice(0, 3)).unwrap();
        assert_eq!(values.as_primitive::<Decimal128Type>().iter().collect::<Vec<_>>(), vec![Some(-1_00), Some(20_00), Some(3_00)]);
        let without_else = Expression::Case { branches: vec![(q_is(Op::Gt, 10), constant(1))], otherwise: None };
        let values = without_else.evaluate(&rows).unwrap();
        assert_eq!(values.as_primitive::<Decimal128Type>().iter().collect::<Vec<_>>(), vec![None, None, Some(1), None]);
    }
}
