//! Ordering (precombine / event-time) values: what decides which version of a record wins.
//! They come from data rows (any Arrow column type) and from delete blocks (Hudi's typed
//! wrappers), so they are compared across numeric types as Java's merge does after widening.

use std::cmp::Ordering;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{self as types, DataType};

/// One ordering value.
#[derive(Debug, Clone, PartialEq)]
pub enum OrderingValue {
    Null,
    Bool(bool),
    /// Integers, dates (days), times and timestamps (their stored unit).
    Int(i64),
    Float(f64),
    /// Unscaled value and scale.
    Decimal(i128, i8),
    String(String),
    Bytes(Vec<u8>),
}

impl OrderingValue {
    /// Hudi's default ordering value (`IntWrapper(0)`), written by deletes that must win
    /// regardless of event time.
    pub fn is_default(&self) -> bool {
        matches!(self, OrderingValue::Int(0) | OrderingValue::Null)
    }

    /// The value of `array` at `row`.
    pub fn from_array(array: &dyn Array, row: usize) -> OrderingValue {
        if array.is_null(row) {
            return OrderingValue::Null;
        }
        macro_rules! int {
            ($t:ty) => {
                OrderingValue::Int(array.as_primitive::<$t>().value(row) as i64)
            };
        }
        match array.data_type() {
            DataType::Boolean => OrderingValue::Bool(array.as_boolean().value(row)),
            DataType::Int8 => int!(types::Int8Type),
            DataType::Int16 => int!(types::Int16Type),
            DataType::Int32 => int!(types::Int32Type),
            DataType::Int64 => int!(types::Int64Type),
            DataType::UInt8 => int!(types::UInt8Type),
            DataType::UInt16 => int!(types::UInt16Type),
            DataType::UInt32 => int!(types::UInt32Type),
            DataType::UInt64 => int!(types::UInt64Type),
            DataType::Date32 => int!(types::Date32Type),
            DataType::Date64 => int!(types::Date64Type),
            DataType::Time32(arrow::datatypes::TimeUnit::Second) => int!(types::Time32SecondType),
            DataType::Time32(_) => int!(types::Time32MillisecondType),
            DataType::Time64(arrow::datatypes::TimeUnit::Microsecond) => int!(types::Time64MicrosecondType),
            DataType::Time64(_) => int!(types::Time64NanosecondType),
            DataType::Timestamp(unit, _) => match unit {
                arrow::datatypes::TimeUnit::Second => int!(types::TimestampSecondType),
                arrow::datatypes::TimeUnit::Millisecond => int!(types::TimestampMillisecondType),
                arrow::datatypes::TimeUnit::Microsecond => int!(types::TimestampMicrosecondType),
                arrow::datatypes::TimeUnit::Nanosecond => int!(types::TimestampNanosecondType),
            },
            DataType::Float16 => OrderingValue::Float(array.as_primitive::<types::Float16Type>().value(row).to_f64()),
            DataType::Float32 => OrderingValue::Float(array.as_primitive::<types::Float32Type>().value(row) as f64),
            DataType::Float64 => OrderingValue::Float(array.as_primitive::<types::Float64Type>().value(row)),
            DataType::Decimal128(_, scale) => {
                OrderingValue::Decimal(array.as_primitive::<types::Decimal128Type>().value(row), *scale)
            }
            DataType::Utf8 => OrderingValue::String(array.as_string::<i32>().value(row).to_owned()),
            DataType::LargeUtf8 => OrderingValue::String(array.as_string::<i64>().value(row).to_owned()),
            DataType::Utf8View => OrderingValue::String(array.as_string_view().value(row).to_owned()),
            DataType::Binary => OrderingValue::Bytes(array.as_binary::<i32>().value(row).to_vec()),
            DataType::LargeBinary => OrderingValue::Bytes(array.as_binary::<i64>().value(row).to_vec()),
            DataType::FixedSizeBinary(_) => OrderingValue::Bytes(array.as_fixed_size_binary().value(row).to_vec()),
            // Nested types cannot order records; treat them as absent.
            _ => OrderingValue::Null,
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match self {
            OrderingValue::Int(i) => Some(*i as f64),
            OrderingValue::Float(f) => Some(*f),
            OrderingValue::Decimal(v, s) => Some(*v as f64 / 10f64.powi(i32::from(*s))),
            _ => None,
        }
    }

    /// Compares two values; `None` when they cannot be compared (different kinds, NaN).
    /// Null sorts before everything.
    pub fn compare(&self, other: &OrderingValue) -> Option<Ordering> {
        use OrderingValue::*;
        match (self, other) {
            (Null, Null) => Some(Ordering::Equal),
            (Null, _) => Some(Ordering::Less),
            (_, Null) => Some(Ordering::Greater),
            (Bool(a), Bool(b)) => Some(a.cmp(b)),
            (Int(a), Int(b)) => Some(a.cmp(b)),
            (Decimal(a, sa), Decimal(b, sb)) => {
                let scale = (*sa).max(*sb);
                let widen = |v: i128, s: i8| v.checked_mul(10i128.checked_pow((scale - s) as u32)?);
                match (widen(*a, *sa), widen(*b, *sb)) {
                    (Some(a), Some(b)) => Some(a.cmp(&b)),
                    _ => self.as_f64()?.partial_cmp(&other.as_f64()?),
                }
            }
            (Decimal(..), Int(i)) => self.compare(&Decimal(i128::from(*i), 0)),
            (Int(i), Decimal(..)) => Decimal(i128::from(*i), 0).compare(other),
            (String(a), String(b)) => Some(a.cmp(b)),
            (Bytes(a), Bytes(b)) => Some(a.cmp(b)),
            _ => self.as_f64()?.partial_cmp(&other.as_f64()?),
        }
    }

    /// `self > other`, strictly; incomparable values are not greater.
    pub fn greater_than(&self, other: &OrderingValue) -> bool {
        self.compare(other) == Some(Ordering::Greater)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn compares_across_numeric_kinds() {
        use OrderingValue::*;
        assert!(Int(5).greater_than(&Float(4.5)));
        assert!(Decimal(1250, 2).greater_than(&Int(12)));
        assert!(!Decimal(1200, 2).greater_than(&Int(12)));
        assert!(Decimal(1, 0).greater_than(&Decimal(999, 3)));
        assert!(String("b".into()).greater_than(&String("a".into())));
        assert!(!String("b".into()).greater_than(&Int(1)));
        assert!(Int(0).greater_than(&Null));
    }

    #[test]
    fn reads_values_from_arrow_columns() {
        let ts = arrow::array::TimestampMicrosecondArray::from(vec![Some(7), None]).with_timezone("UTC");
        let array: Arc<dyn Array> = Arc::new(ts);
        assert_eq!(OrderingValue::from_array(array.as_ref(), 0), OrderingValue::Int(7));
        assert_eq!(OrderingValue::from_array(array.as_ref(), 1), OrderingValue::Null);
        let s = arrow::array::StringArray::from(vec!["x"]);
        assert_eq!(OrderingValue::from_array(&s, 0), OrderingValue::String("x".into()));
    }
}
