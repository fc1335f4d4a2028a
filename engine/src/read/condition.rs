//! Conditions the engine evaluates on rows exactly as the host does, with SQL's three-valued
//! logic: comparisons of a column with a constant (or a parameter bound at execution), `IN`
//! lists, `IS [NOT] NULL`, boolean columns, and `AND`/`OR`/`NOT` of those. Unlike a
//! [`crate::read::filter::ScanFilter`], which only skips data and leaves the host to check
//! every row, a condition decides which rows a scan returns ([`crate::read::ScanOptions::row_filter`])
//! or an aggregate sees.

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int64Array, StringArray};
use arrow::array::{Datum, Scalar as ArrowScalar, TimestampMicrosecondArray};
use arrow::compute::kernels::{boolean, cmp};
use arrow::compute::{cast, is_not_null, is_null};
use arrow::datatypes::{DataType, Schema};
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::read::reading::Reading;
use crate::error::{Error, ErrorKind, Result};
use crate::read::filter::{Op, Predicate, Scalar};

/// A column of the table as the host reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub field: String,
    pub reading: Reading,
}

impl Column {
    /// This column of `rows` as read.
    pub(crate) fn read(&self, rows: &RecordBatch) -> Result<ArrayRef> {
        self.reading.read(self.raw(rows)?)
    }

    /// This column of `rows` as stored.
    pub(crate) fn raw<'a>(&self, rows: &'a RecordBatch) -> Result<&'a ArrayRef> {
        rows.column_by_name(&self.field)
            .ok_or_else(|| Error::new(ErrorKind::Internal, format!("the rows have no column {}", self.field)))
    }

    /// Checks that the table's `schema` has the field and that reading it this way is exact.
    pub fn check(&self, schema: &Schema) -> Result<()> {
        let field = schema
            .field_with_name(&self.field)
            .map_err(|_| Error::new(ErrorKind::InvalidArgument, format!("the table has no field {}", self.field)))?;
        if !self.reading.reads(field.data_type()) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("field {} of type {} is not read as {:?}", self.field, field.data_type(), self.reading),
            ));
        }
        Ok(())
    }
}

impl std::fmt::Display for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.field)
    }
}

/// The other side of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Operand {
    Value(Scalar),
    /// SQL NULL: the comparison is unknown.
    Null,
    /// The host's parameter number `n`, known at execution ([`Condition::bind`]).
    Param(usize),
}

/// A condition on rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Condition {
    Compare { column: Column, op: Op, operand: Operand },
    /// `column IN (values)`, the values non-NULL.
    In { column: Column, values: Vec<Scalar> },
    IsNull { column: Column, negated: bool },
    /// A boolean column used as a condition.
    IsTrue(Column),
    /// `column [NOT] LIKE pattern`: `%` any characters, `_` one, `\` escapes the next one
    /// (PostgreSQL's default escape). A pattern that ends in a lone `\`, which PostgreSQL
    /// refuses, is not one.
    Like { column: Column, pattern: String, negated: bool },
    And(Vec<Condition>),
    Or(Vec<Condition>),
    Not(Box<Condition>),
}

impl Condition {
    /// The condition with each parameter replaced by its value (`None`: NULL).
    pub fn bind(&self, params: &[Option<Scalar>]) -> Result<Condition> {
        let all = |items: &[Condition]| items.iter().map(|c| c.bind(params)).collect::<Result<Vec<_>>>();
        Ok(match self {
            Condition::Compare { column, op, operand: Operand::Param(n) } => {
                let value = params
                    .get(*n)
                    .ok_or_else(|| Error::new(ErrorKind::Internal, format!("no value for parameter {n}")))?;
                let operand = value.clone().map_or(Operand::Null, Operand::Value);
                Condition::Compare { column: column.clone(), op: *op, operand }
            }
            Condition::And(items) => Condition::And(all(items)?),
            Condition::Or(items) => Condition::Or(all(items)?),
            Condition::Not(item) => Condition::Not(Box::new(item.bind(params)?)),
            other => other.clone(),
        })
    }

    /// Whether the condition names a parameter, to [`Self::bind`] before it is evaluated.
    pub fn has_params(&self) -> bool {
        match self {
            Condition::Compare { operand, .. } => matches!(operand, Operand::Param(_)),
            Condition::And(items) | Condition::Or(items) => items.iter().any(Condition::has_params),
            Condition::Not(item) => item.has_params(),
            _ => false,
        }
    }

    /// Predicates every row satisfying the (bound) condition satisfies, for skipping data
    /// ([`crate::read::filter::ScanFilter`]): its top-level comparisons of a column with a
    /// value and `IN` lists, text only for `=` and `<>` (a filter compares text byte-wise) and
    /// floats only finite.
    pub fn implied_predicates(&self) -> Vec<Predicate> {
        let items = match self {
            Condition::And(items) => items.as_slice(),
            one => std::slice::from_ref(one),
        };
        let usable = |op: Op, value: &Scalar| match value {
            Scalar::String(_) => matches!(op, Op::Eq | Op::NotEq),
            Scalar::Float(x) => x.is_finite(),
            _ => true,
        };
        items
            .iter()
            .filter_map(|item| match item {
                Condition::Compare { column, op, operand: Operand::Value(value) } if usable(*op, value) => {
                    Some(Predicate::Compare { column: column.field.clone(), op: *op, value: value.clone() })
                }
                Condition::In { column, values } if values.iter().all(|v| usable(Op::Eq, v)) => {
                    Some(Predicate::In { column: column.field.clone(), values: values.clone() })
                }
                _ => None,
            })
            .collect()
    }

    /// The conjunction of `conditions` (`None` for none).
    pub fn all(mut conditions: Vec<Condition>) -> Option<Condition> {
        match conditions.len() {
            0 => None,
            1 => conditions.pop(),
            _ => Some(Condition::And(conditions)),
        }
    }

    /// The columns the condition reads.
    pub fn columns(&self) -> Vec<&Column> {
        match self {
            Condition::Compare { column, .. } | Condition::In { column, .. } | Condition::IsNull { column, .. } => vec![column],
            Condition::IsTrue(column) | Condition::Like { column, .. } => vec![column],
            Condition::And(items) | Condition::Or(items) => items.iter().flat_map(Condition::columns).collect(),
            Condition::Not(item) => item.columns(),
        }
    }

    /// Checks the condition against the table's `schema`: fields, readings and constants of
    /// the right kinds.
    pub fn check(&self, schema: &Schema) -> Result<()> {
        match self {
            Condition::Compare { column, operand, .. } => {
                column.check(schema)?;
                match operand {
                    Operand::Value(value) => constant(column.reading, value).map(|_| ()),
                    Operand::Null | Operand::Param(_) => Ok(()),
                }
            }
            Condition::In { column, values } => {
                column.check(schema)?;
                values.iter().try_for_each(|v| constant(column.reading, v).map(|_| ()))
            }
            Condition::IsNull { column, .. } => column.check(schema),
            Condition::Like { column, pattern, .. } if column.reading == Reading::Text && !ends_in_escape(pattern) => column.check(schema),
            Condition::Like { column, .. } => Err(Error::new(ErrorKind::Unsupported, format!("{column} LIKE needs text and a whole pattern"))),
            Condition::IsTrue(column) if column.reading == Reading::Bool => column.check(schema),
            Condition::IsTrue(column) => Err(Error::new(ErrorKind::Unsupported, format!("{column} is not boolean"))),
            Condition::And(items) | Condition::Or(items) => items.iter().try_for_each(|c| c.check(schema)),
            Condition::Not(item) => item.check(schema),
        }
    }

    /// Whether each row of `rows` satisfies the condition: true, false, or NULL (unknown).
    pub fn evaluate(&self, rows: &RecordBatch) -> Result<BooleanArray> {
        let kernel = |e: arrow::error::ArrowError| Error::new(ErrorKind::Internal, "cannot evaluate a condition").with_source(e);
        match self {
            Condition::Compare { column, op, operand } => {
                let value = match operand {
                    Operand::Value(value) => value,
                    Operand::Null => return Ok(BooleanArray::new_null(rows.num_rows())),
                    Operand::Param(n) => return Err(Error::new(ErrorKind::Internal, format!("parameter {n} is not bound"))),
                };
                compare(&column.read(rows)?, column.reading, *op, value)
            }
            Condition::In { column, values } => {
                let read = column.read(rows)?;
                let mut any = BooleanArray::from(vec![false; rows.num_rows()]);
                for value in values {
                    any = boolean::or_kleene(&any, &compare(&read, column.reading, Op::Eq, value)?).map_err(kernel)?;
                }
                // A NULL column value compares as unknown with each value, so it stays unknown.
                Ok(any)
            }
            Condition::IsNull { column, negated: false } => is_null(column.raw(rows)?).map_err(kernel),
            Condition::IsNull { column, negated: true } => is_not_null(column.raw(rows)?).map_err(kernel),
            Condition::Like { column, pattern, negated } => {
                let pattern = ArrowScalar::new(StringArray::from(vec![pattern.as_str()]));
                let read = column.read(rows)?;
                let matched = if *negated { arrow::compute::kernels::comparison::nlike(&read, &pattern) } else { arrow::compute::kernels::comparison::like(&read, &pattern) };
                matched.map_err(kernel)
            }
            Condition::IsTrue(column) => Ok(column.read(rows)?.as_any().downcast_ref::<BooleanArray>().cloned().ok_or_else(|| {
                Error::new(ErrorKind::Internal, format!("{column} is not boolean"))
            })?),
            Condition::And(items) | Condition::Or(items) => {
                let and = matches!(self, Condition::And(_));
                let mut result = BooleanArray::from(vec![and; rows.num_rows()]);
                for item in items {
                    let next = item.evaluate(rows)?;
                    result = if and { boolean::and_kleene(&result, &next) } else { boolean::or_kleene(&result, &next) }.map_err(kernel)?;
                }
                Ok(result)
            }
            Condition::Not(item) => boolean::not(&item.evaluate(rows)?).map_err(kernel),
        }
    }
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let joined = |f: &mut std::fmt::Formatter<'_>, items: &[Condition], with: &str| {
            let parts: Vec<String> = items.iter().map(|c| format!("({c})")).collect();
            f.write_str(&parts.join(with))
        };
        match self {
            Condition::Compare { column, op, operand } => match operand {
                Operand::Value(value) => write!(f, "{column} {} {value}", op.symbol()),
                Operand::Null => write!(f, "{column} {} NULL", op.symbol()),
                Operand::Param(n) => write!(f, "{column} {} ${}", op.symbol(), n + 1),
            },
            Condition::In { column, values } => {
                let list: Vec<String> = values.iter().map(|v| v.to_string()).collect();
                write!(f, "{column} IN ({})", list.join(", "))
            }
            Condition::IsNull { column, negated } => write!(f, "{column} IS {}NULL", if *negated { "NOT " } else { "" }),
            Condition::IsTrue(column) => write!(f, "{column}"),
            Condition::Like { column, pattern, negated } => {
                write!(f, "{column} {}LIKE '{}'", if *negated { "NOT " } else { "" }, pattern.replace('\'', "''"))
            }
            Condition::And(items) => joined(f, items, " AND "),
            Condition::Or(items) => joined(f, items, " OR "),
            Condition::Not(item) => write!(f, "NOT ({item})"),
        }
    }
}

/// Whether a LIKE pattern ends in an escape character that escapes nothing.
fn ends_in_escape(pattern: &str) -> bool {
    pattern.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

/// A constant in the form values of `reading` compare with.
enum Constant {
    /// One value, of the reading's Arrow type (a decimal at scale 0 here; see [`compare`]).
    Value(ArrayRef),
    /// A decimal's text (digits, an optional sign and point).
    Decimal(String),
}

fn mismatch(reading: Reading, value: &Scalar) -> Error {
    Error::new(ErrorKind::Unsupported, format!("the constant {value} does not compare with values read as {reading:?}"))
}

fn constant(reading: Reading, value: &Scalar) -> Result<Constant> {
    let one = |array: ArrayRef| Ok(Constant::Value(array));
    match (reading, value) {
        (Reading::Int, Scalar::Int(i)) => one(Arc::new(Int64Array::from(vec![*i]))),
        (Reading::Float4 | Reading::Float8, Scalar::Float(x)) => one(Arc::new(Float64Array::from(vec![*x + 0.0]))),
        (Reading::Decimal, Scalar::Int(i)) => Ok(Constant::Decimal(i.to_string())),
        (Reading::Decimal, Scalar::Decimal(text)) if at_scale(text, 0).is_some() => Ok(Constant::Decimal(text.clone())),
        (Reading::Bool, Scalar::Bool(b)) => one(Arc::new(BooleanArray::from(vec![*b]))),
        (Reading::Text, Scalar::String(s)) => one(Arc::new(StringArray::from(vec![s.as_str()]))),
        (Reading::Date, Scalar::Date(d)) => one(Arc::new(Date32Array::from(vec![*d]))),
        (Reading::Timestamp, Scalar::TimestampMicros(t)) => one(Arc::new(TimestampMicrosecondArray::from(vec![*t]))),
        _ => Err(mismatch(reading, value)),
    }
}

fn compare(read: &ArrayRef, reading: Reading, op: Op, value: &Scalar) -> Result<BooleanArray> {
    let kernel = |e: arrow::error::ArrowError| Error::new(ErrorKind::Internal, "cannot compare values").with_source(e);
    let (read, constant): (ArrayRef, ArrayRef) = match constant(reading, value)? {
        // Floats compare as double precision, as PostgreSQL compares real with a float8 constant.
        Constant::Value(constant) if reading == Reading::Float4 => (cast(read, &DataType::Float64).map_err(kernel)?, constant),
        // A timestamp constant takes the column's time zone label (the instant is the same).
        Constant::Value(constant) if reading == Reading::Timestamp => (read.clone(), cast(&constant, read.data_type()).map_err(kernel)?),
        Constant::Value(constant) => (read.clone(), constant),
        Constant::Decimal(text) => {
            let DataType::Decimal128(precision, column_scale) = read.data_type() else {
                return Err(Error::new(ErrorKind::Internal, "a decimal reading that is not a decimal"));
            };
            match at_scale(&text, *column_scale).ok_or_else(|| mismatch(reading, value))? {
                AtScale::Exact(c) => (read.clone(), decimal_constant(c, *precision, *column_scale)?),
                // Between two values of the column's scale: no value equals it.
                AtScale::Between(floor) => {
                    let op = match op {
                        Op::Eq => return fixed(read, false),
                        Op::NotEq => return fixed(read, true),
                        Op::Lt | Op::LtEq => Op::LtEq,
                        Op::Gt | Op::GtEq => Op::Gt,
                    };
                    return compare_arrays(read, &decimal_constant(floor, *precision, *column_scale)?, op);
                }
                AtScale::Above => return fixed(read, matches!(op, Op::NotEq | Op::Lt | Op::LtEq)),
                AtScale::Below => return fixed(read, matches!(op, Op::NotEq | Op::Gt | Op::GtEq)),
            }
        }
    };
    compare_arrays(&read, &constant, op)
}

fn compare_arrays(read: &ArrayRef, constant: &ArrayRef, op: Op) -> Result<BooleanArray> {
    let kernel = |e: arrow::error::ArrowError| Error::new(ErrorKind::Internal, "cannot compare values").with_source(e);
    let right = ArrowScalar::new(constant.clone());
    let left: &dyn Datum = read;
    match op {
        Op::Eq => cmp::eq(left, &right),
        Op::NotEq => cmp::neq(left, &right),
        Op::Lt => cmp::lt(left, &right),
        Op::LtEq => cmp::lt_eq(left, &right),
        Op::Gt => cmp::gt(left, &right),
        Op::GtEq => cmp::gt_eq(left, &right),
    }
    .map_err(kernel)
}

/// `value` for every non-NULL row of `read`, NULL for the others.
fn fixed(read: &ArrayRef, value: bool) -> Result<BooleanArray> {
    if read.null_count() == read.len() {
        let nulls = new_null_array(&DataType::Boolean, read.len());
        return Ok(nulls.as_any().downcast_ref::<BooleanArray>().cloned().unwrap_or_else(|| BooleanArray::new_null(read.len())));
    }
    Ok(BooleanArray::new(vec![value; read.len()].into(), read.nulls().cloned()))
}

fn decimal_constant(unscaled: i128, precision: u8, scale: i8) -> Result<ArrayRef> {
    let array = Decimal128Array::from(vec![unscaled]).with_precision_and_scale(precision, scale);
    Ok(Arc::new(array.map_err(|e| Error::new(ErrorKind::Internal, "cannot build a decimal constant").with_source(e))?))
}

/// A decimal constant at a column's scale.
#[derive(Debug, PartialEq)]
enum AtScale {
    Exact(i128),
    /// Strictly between `floor` and `floor + 1` units.
    Between(i128),
    /// Beyond every value the column can hold.
    Above,
    Below,
}

/// The decimal `text` at `scale` (`None`: not a plain decimal, such as NaN or an exponent).
/// Worked on the digits, so that a constant of any length compares exactly.
fn at_scale(text: &str, scale: i8) -> Option<AtScale> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let scale = usize::try_from(scale).ok()?;
    let kept: String = frac.chars().chain(std::iter::repeat('0')).take(scale).collect();
    let exact = frac.bytes().skip(scale).all(|b| b == b'0');
    let units = format!("{int}{kept}");
    let Ok(units) = units.trim_start_matches('0').parse::<i128>().or_else(|e| if units.bytes().all(|b| b == b'0') { Ok(0) } else { Err(e) }) else {
        return Some(if negative { AtScale::Below } else { AtScale::Above });
    };
    Some(match (negative, exact) {
        (false, true) => AtScale::Exact(units),
        (false, false) => AtScale::Between(units),
        (true, true) => AtScale::Exact(-units),
        // -(units + a fraction) lies between -units - 1 and -units.
        (true, false) => AtScale::Between(-units - 1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;

    fn rows() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("d", DataType::Decimal128(10, 2), true),
            Field::new("f", DataType::Float64, true),
        ]);
        let d = Decimal128Array::from(vec![Some(100), Some(101), None, Some(-5)]).with_precision_and_scale(10, 2).unwrap();
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(arrow::array::Int32Array::from(vec![Some(1), None, Some(3), Some(4)])),
                Arc::new(d),
                Arc::new(Float64Array::from(vec![Some(f64::NAN), Some(-0.0), Some(1.5), None])),
            ],
        )
        .unwrap()
    }

    fn column(field: &str, reading: Reading) -> Column {
        Column { field: field.into(), reading }
    }

    fn eval(c: &Condition) -> Vec<Option<bool>> {
        c.evaluate(&rows()).unwrap().iter().collect()
    }

    #[test]
    fn three_valued_logic() {
        let i = column("i", Reading::Int);
        let gt = Condition::Compare { column: i.clone(), op: Op::Gt, operand: Operand::Value(Scalar::Int(2)) };
        assert_eq!(eval(&gt), vec![Some(false), None, Some(true), Some(true)]);
        assert_eq!(eval(&Condition::Not(Box::new(gt.clone()))), vec![Some(true), None, Some(false), Some(false)]);
        let null = Condition::Compare { column: i.clone(), op: Op::Eq, operand: Operand::Null };
        assert_eq!(eval(&Condition::Or(vec![gt.clone(), null])), vec![None, None, Some(true), Some(true)]);
        let in_list = Condition::In { column: i.clone(), values: vec![Scalar::Int(1), Scalar::Int(4)] };
        assert_eq!(eval(&in_list), vec![Some(true), None, Some(false), Some(true)]);
        assert_eq!(eval(&Condition::IsNull { column: i, negated: false }), vec![Some(false), Some(true), Some(false), Some(false)]);
    }

    #[test]
    fn decimals_compare_at_any_scale() {
        let d = column("d", Reading::Decimal);
        let cmp = |op, text: &str| Condition::Compare { column: d.clone(), op, operand: Operand::Value(Scalar::Decimal(text.into())) };
        assert_eq!(eval(&cmp(Op::Eq, "1.0")), vec![Some(true), Some(false), None, Some(false)]);
        assert_eq!(eval(&cmp(Op::Eq, "1.005")), vec![Some(false), Some(false), None, Some(false)]);
        assert_eq!(eval(&cmp(Op::Lt, "1.005")), vec![Some(true), Some(false), None, Some(true)]);
        assert_eq!(eval(&cmp(Op::GtEq, "1.005")), vec![Some(false), Some(true), None, Some(false)]);
        assert_eq!(eval(&cmp(Op::Lt, "-0.049")), vec![Some(false), Some(false), None, Some(true)]);
        let huge = "9".repeat(60);
        assert_eq!(eval(&cmp(Op::Lt, &huge)), vec![Some(true), Some(true), None, Some(true)]);
        assert!(cmp(Op::Eq, "NaN").check(&rows().schema()).is_err());
        assert_eq!(at_scale("-0.049", 2), Some(AtScale::Between(-5)));
        assert_eq!(at_scale("1.0000000000000000000000000000000000000000001", 2), Some(AtScale::Between(100)));
        assert_eq!(at_scale(&format!("-{}", "9".repeat(50)), 2), Some(AtScale::Below));
        assert_eq!(at_scale("000.10", 1), Some(AtScale::Exact(1)));
    }

    /// PostgreSQL's LIKE, character by character: `%` any run, `_` one character, `\` makes
    /// the next character literal.
    fn like_model(text: &[char], pattern: &[char]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some(('%', rest)) => (0..=text.len()).any(|skip| like_model(&text[skip..], rest)),
            Some(('_', rest)) => !text.is_empty() && like_model(&text[1..], rest),
            Some(('\\', rest)) if !rest.is_empty() => text.first() == Some(&rest[0]) && like_model(&text[1..], &rest[1..]),
            Some((c, rest)) => text.first() == Some(c) && like_model(&text[1..], rest),
        }
    }

    /// LIKE and NOT LIKE against the model over seeded random strings and patterns of
    /// wildcards, escapes, multibyte characters and newlines; NULL stays unknown.
    #[test]
    fn like_matches_as_postgres_does() {
        use rand::{Rng, SeedableRng};
        let seed: u64 = rand::random();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let alphabet = ['a', 'b', 'é', '\n', '%', '_', '\\', '.', '*'];
        let random = |rng: &mut rand::rngs::StdRng, n: usize| -> String { (0..rng.random_range(0..n)).map(|_| alphabet[rng.random_range(0..alphabet.len())]).collect() };
        let texts: Vec<Option<String>> = (0..60).map(|i| (i != 0).then(|| random(&mut rng, 7))).collect();
        let schema = Schema::new(vec![Field::new("t", DataType::Utf8, true)]);
        let rows = RecordBatch::try_new(Arc::new(schema.clone()), vec![Arc::new(StringArray::from(texts.clone()))]).unwrap();
        for _ in 0..300 {
            let pattern = random(&mut rng, 6);
            for negated in [false, true] {
                let like = Condition::Like { column: column("t", Reading::Text), pattern: pattern.clone(), negated };
                if super::ends_in_escape(&pattern) {
                    assert!(like.check(&schema).is_err(), "{pattern:?}");
                    continue;
                }
                like.check(&schema).unwrap();
                let got: Vec<Option<bool>> = like.evaluate(&rows).unwrap().iter().collect();
                let chars: Vec<char> = pattern.chars().collect();
                let expected: Vec<Option<bool>> =
                    texts.iter().map(|t| t.as_ref().map(|t| like_model(&t.chars().collect::<Vec<_>>(), &chars) != negated)).collect();
                assert_eq!(got, expected, "seed {seed}: {pattern:?}");
            }
        }
    }

    #[test]
    fn floats_compare_as_postgres_does() {
        let f = column("f", Reading::Float8);
        let cmp = |op, x: f64| Condition::Compare { column: f.clone(), op, operand: Operand::Value(Scalar::Float(x)) };
        // NaN is above every number; -0 equals 0.
        assert_eq!(eval(&cmp(Op::Gt, 1e300)), vec![Some(true), Some(false), Some(false), None]);
        assert_eq!(eval(&cmp(Op::Eq, 0.0)), vec![Some(false), Some(true), Some(false), None]);
    }
}
