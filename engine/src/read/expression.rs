//! Arithmetic the engine computes exactly as PostgreSQL computes it on `numeric` values: `+`,
//! `-` and `*` of decimal columns and constants. PostgreSQL's `numeric` never overflows; the
//! engine computes in 128-bit decimals, so an expression is accepted only when the digits of
//! its result are bounded by 38 from the operands' declared precisions, and a stored value
//! beyond its field's precision is an error rather than a wrong sum. Results have the scale
//! PostgreSQL gives them: the larger of the operands' for `+` and `-`, their sum for `*`.

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Decimal128Array, PrimitiveArray};
use arrow::compute::kernels::arity::try_binary;
use arrow::datatypes::{DataType, Decimal128Type, Schema};
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::read::condition::Column;
use crate::read::reading::Reading;

/// The most digits a 128-bit decimal holds.
const MAX_DIGITS: u8 = 38;

/// An arithmetic operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArithmeticOp {
    Add,
    Subtract,
    Multiply,
}

/// A `numeric` expression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Expression {
    /// A column read as `numeric` over a decimal field.
    Column(Column),
    /// A constant: its unscaled value and scale (PostgreSQL's display scale).
    Constant { unscaled: i128, scale: i8 },
    Arithmetic { op: ArithmeticOp, left: Box<Expression>, right: Box<Expression> },
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

impl Expression {
    /// The precision and scale of the expression's values over the table's `schema`; an
    /// error when it cannot be computed exactly here.
    pub fn decimal_type(&self, schema: &Schema) -> Result<(u8, i8)> {
        let unsupported = |why: String| Error::new(ErrorKind::Unsupported, why);
        let (precision, scale) = match self {
            Expression::Column(column) => {
                column.check(schema)?;
                match schema.field_with_name(&column.field).map(|f| f.data_type()) {
                    Ok(&DataType::Decimal128(p, s)) if column.reading == Reading::Decimal && s >= 0 => (p, s),
                    _ => return Err(unsupported(format!("{} is not a decimal column", column.field))),
                }
            }
            Expression::Constant { unscaled, scale } if *scale >= 0 => (digits(*unscaled).max(*scale as u8), *scale),
            Expression::Constant { .. } => return Err(unsupported("a constant of negative scale".into())),
            Expression::Arithmetic { op, left, right } => {
                let ((p1, s1), (p2, s2)) = (left.decimal_type(schema)?, right.decimal_type(schema)?);
                match op {
                    ArithmeticOp::Add | ArithmeticOp::Subtract => {
                        let scale = s1.max(s2);
                        let integer = (p1 - s1 as u8).max(p2 - s2 as u8) + 1;
                        (integer.saturating_add(scale as u8), scale)
                    }
                    ArithmeticOp::Multiply => (p1.saturating_add(p2), s1.saturating_add(s2)),
                }
            }
        };
        if precision > MAX_DIGITS || scale as u8 > MAX_DIGITS {
            return Err(unsupported(format!("{self} may need more than {MAX_DIGITS} digits")));
        }
        Ok((precision, scale))
    }

    /// The columns the expression reads.
    pub fn columns(&self) -> Vec<&Column> {
        match self {
            Expression::Column(column) => vec![column],
            Expression::Constant { .. } => vec![],
            Expression::Arithmetic { left, right, .. } => left.columns().into_iter().chain(right.columns()).collect(),
        }
    }

    /// The expression's value for each row of `rows` (NULL where an operand is), a decimal of
    /// [`Self::decimal_type`].
    pub fn evaluate(&self, rows: &RecordBatch) -> Result<ArrayRef> {
        let schema = rows.schema();
        let (precision, scale) = self.decimal_type(&schema)?;
        let values = self.values(rows, &schema)?;
        Ok(Arc::new(values.with_precision_and_scale(precision, scale).map_err(|e| Error::new(ErrorKind::Internal, "a decimal result").with_source(e))?))
    }

    fn values(&self, rows: &RecordBatch, schema: &Schema) -> Result<PrimitiveArray<Decimal128Type>> {
        let too_large = || Error::new(ErrorKind::Corrupt, format!("a value of {self} exceeds the precision its fields declare"));
        Ok(match self {
            Expression::Column(column) => column.raw(rows)?.as_primitive::<Decimal128Type>().clone(),
            Expression::Constant { unscaled, .. } => Decimal128Array::from(vec![*unscaled; rows.num_rows()]),
            Expression::Arithmetic { op, left, right } => {
                let ((_, s1), (_, s2)) = (left.decimal_type(schema)?, right.decimal_type(schema)?);
                let (a, b) = (left.values(rows, schema)?, right.values(rows, schema)?);
                let result = match op {
                    ArithmeticOp::Multiply => try_binary(&a, &b, |x: i128, y: i128| x.checked_mul(y).ok_or_else(|| arrow::error::ArrowError::ComputeError(String::new()))),
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
                            sum.ok_or_else(|| arrow::error::ArrowError::ComputeError(String::new()))
                        })
                    }
                };
                result.map_err(|_| too_large())?
            }
        })
    }
}

impl std::fmt::Display for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expression::Column(column) => write!(f, "{column}"),
            Expression::Constant { unscaled, scale } => {
                let digits = format!("{:0>width$}", unscaled.unsigned_abs(), width = *scale as usize + 1);
                let (integer, fraction) = digits.split_at(digits.len() - *scale as usize);
                let sign = if *unscaled < 0 { "-" } else { "" };
                match fraction {
                    "" => write!(f, "{sign}{integer}"),
                    _ => write!(f, "{sign}{integer}.{fraction}"),
                }
            }
            Expression::Arithmetic { op, left, right } => {
                let symbol = match op {
                    ArithmeticOp::Add => "+",
                    ArithmeticOp::Subtract => "-",
                    ArithmeticOp::Multiply => "*",
                };
                write!(f, "({left} {symbol} {right})")
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
        Expression::Arithmetic { op, left: Box::new(left), right: Box::new(right) }
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
}
