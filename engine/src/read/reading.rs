//! How the host reads a column's values. An aggregate or a condition computed in the engine
//! must see the values the host would see, so each column is first converted to its
//! *reading*: integers of any width as 64-bit integers, dates as days, timestamps as
//! microseconds (truncating nanoseconds), and floats with `-0` and every NaN made one value
//! each, because PostgreSQL compares and groups `-0 = 0` and `NaN = NaN` (Arrow's total order
//! would not).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use arrow::compute::cast;
use arrow::datatypes::{self as types, DataType, TimeUnit};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

/// How the host reads a column: the declared type's family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reading {
    /// `smallint`, `integer` or `bigint` over an integer field no wider.
    Int,
    /// `real` over a 32-bit float field.
    Float4,
    /// `double precision` over a float field.
    Float8,
    /// `numeric` over a decimal or integer field.
    Decimal,
    Bool,
    /// `text` or `varchar` over a string field.
    Text,
    Date,
    /// `timestamp` or `timestamptz` (both microseconds since the epoch).
    Timestamp,
}

impl Reading {
    /// Whether a field of `data_type` read this way gives exactly the host's values.
    pub fn reads(self, data_type: &DataType) -> bool {
        use DataType as D;
        match self {
            Reading::Int => matches!(data_type, D::Int8 | D::Int16 | D::Int32 | D::Int64 | D::UInt8 | D::UInt16 | D::UInt32),
            Reading::Float4 => matches!(data_type, D::Float32),
            Reading::Float8 => matches!(data_type, D::Float32 | D::Float64),
            Reading::Decimal => {
                matches!(data_type, D::Decimal128(..) | D::Int8 | D::Int16 | D::Int32 | D::Int64 | D::UInt8 | D::UInt16 | D::UInt32)
            }
            Reading::Bool => matches!(data_type, D::Boolean),
            Reading::Text => matches!(data_type, D::Utf8 | D::LargeUtf8 | D::Utf8View),
            Reading::Date => matches!(data_type, D::Date32 | D::Date64),
            Reading::Timestamp => matches!(data_type, D::Timestamp(..)),
        }
    }

    /// The type of the values as read, for a field of `data_type`.
    pub fn data_type(self, data_type: &DataType) -> DataType {
        match (self, data_type) {
            (Reading::Int, _) => DataType::Int64,
            (Reading::Float4, _) => DataType::Float32,
            (Reading::Float8, _) => DataType::Float64,
            (Reading::Decimal, DataType::Decimal128(p, s)) => DataType::Decimal128(*p, *s),
            (Reading::Decimal, _) => DataType::Decimal128(38, 0),
            (Reading::Bool, _) => DataType::Boolean,
            (Reading::Text, _) => DataType::Utf8,
            (Reading::Date, _) => DataType::Date32,
            (Reading::Timestamp, DataType::Timestamp(_, zone)) => DataType::Timestamp(TimeUnit::Microsecond, zone.clone()),
            (Reading::Timestamp, _) => DataType::Timestamp(TimeUnit::Microsecond, None),
        }
    }

    /// `array` as the host reads it, to compare, group and find extremes (see the module's
    /// comment).
    pub fn read(self, array: &ArrayRef) -> Result<ArrayRef> {
        self.read_with(array, true)
    }

    /// `array` as the host reads it, to add up: floats as they are (`-0 + -0` is `-0`), and
    /// integers (also those read as `numeric`) in their own width: the exact sums widen them
    /// as they add, without a cast of the column first.
    pub fn read_to_add(self, array: &ArrayRef) -> Result<ArrayRef> {
        if matches!(self, Reading::Int | Reading::Decimal) && array.data_type().is_integer() && self.reads(array.data_type()) {
            return Ok(array.clone());
        }
        self.read_with(array, false)
    }

    fn read_with(self, array: &ArrayRef, canonical: bool) -> Result<ArrayRef> {
        let wrong = || Error::new(ErrorKind::Internal, format!("a column of type {} cannot be read as {self:?}", array.data_type()));
        if !self.reads(array.data_type()) {
            return Err(wrong());
        }
        let target = self.data_type(array.data_type());
        Ok(match (self, array.data_type()) {
            (Reading::Float4, _) if canonical => Arc::new(canonical_floats(array.as_primitive::<types::Float32Type>())),
            (Reading::Float8, DataType::Float64) if canonical => Arc::new(canonical_floats(array.as_primitive::<types::Float64Type>())),
            (Reading::Float8, DataType::Float32) => {
                let wide = cast(array, &DataType::Float64).map_err(|e| wrong().with_source(e))?;
                match canonical {
                    true => Arc::new(canonical_floats(wide.as_primitive::<types::Float64Type>())),
                    false => wide,
                }
            }
            (Reading::Date, DataType::Date64) => {
                let days: PrimitiveArray<types::Date32Type> =
                    array.as_primitive::<types::Date64Type>().unary(|ms| ms.div_euclid(86_400_000) as i32);
                Arc::new(days)
            }
            (Reading::Timestamp, DataType::Timestamp(unit, _)) => {
                let micros: PrimitiveArray<types::TimestampMicrosecondType> = match unit {
                    TimeUnit::Second => array.as_primitive::<types::TimestampSecondType>().unary(|s| s.saturating_mul(1_000_000)),
                    TimeUnit::Millisecond => array.as_primitive::<types::TimestampMillisecondType>().unary(|ms| ms.saturating_mul(1000)),
                    TimeUnit::Microsecond => return Ok(cast(array, &target).map_err(|e| wrong().with_source(e))?),
                    TimeUnit::Nanosecond => array.as_primitive::<types::TimestampNanosecondType>().unary(|ns| ns / 1000),
                };
                Arc::new(micros.with_data_type(target))
            }
            _ if array.data_type() == &target => array.clone(),
            _ => cast(array, &target).map_err(|e| wrong().with_source(e))?,
        })
    }
}

/// Floats with `-0` as `0` and every NaN as the one positive quiet NaN: then Arrow's total
/// order is PostgreSQL's (NaN above every number, `-0 = 0`).
fn canonical_floats<T>(array: &PrimitiveArray<T>) -> PrimitiveArray<T>
where
    T: types::ArrowPrimitiveType,
    T::Native: num_like::Canonical,
{
    array.unary(num_like::Canonical::canonical)
}

mod num_like {
    /// A float made canonical for comparing and grouping.
    pub trait Canonical: Copy {
        fn canonical(self) -> Self;
    }

    macro_rules! canonical {
        ($($float:ty),*) => {$(
            impl Canonical for $float {
                fn canonical(self) -> $float {
                    // Adding 0 turns -0 into 0.
                    if self.is_nan() { <$float>::NAN } else { self + 0.0 }
                }
            }
        )*};
    }

    canonical!(f32, f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Date64Array, Float64Array, Int32Array, TimestampNanosecondArray};

    #[test]
    fn readings_are_the_hosts_values() {
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![Some(-3), None]));
        let read = Reading::Int.read(&ints).unwrap();
        assert_eq!(read.as_primitive::<types::Int64Type>().iter().collect::<Vec<_>>(), vec![Some(-3), None]);
        let days: ArrayRef = Arc::new(Date64Array::from(vec![-1, 86_400_000]));
        let read = Reading::Date.read(&days).unwrap();
        assert_eq!(read.as_primitive::<types::Date32Type>().values().to_vec(), vec![-1, 1]);
        let ns: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![-1_999, 2_999]));
        let read = Reading::Timestamp.read(&ns).unwrap();
        assert_eq!(read.as_primitive::<types::TimestampMicrosecondType>().values().to_vec(), vec![-1, 2]);
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![-0.0, f64::from_bits(0xfff8_0000_0000_0001)]));
        let read = Reading::Float8.read(&floats).unwrap();
        let read = read.as_primitive::<types::Float64Type>();
        assert_eq!(read.value(0).to_bits(), 0.0f64.to_bits());
        assert_eq!(read.value(1).to_bits(), f64::NAN.to_bits());
        assert!(Reading::Int.read(&floats).is_err());
    }
}
