//! Ordering (precombine / event-time) values: what decides which version of a record wins.
//! They come from data rows (any Arrow column type) and from delete blocks (Hudi's typed
//! wrappers), so they are compared across numeric types as Java's merge does after widening.

use std::cmp::Ordering;

use arrow::array::{
    Array, AsArray, BinaryArray, BooleanArray, FixedSizeBinaryArray, LargeBinaryArray, LargeStringArray, PrimitiveArray, StringArray,
    StringViewArray,
};
use arrow::buffer::NullBuffer;
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
        self.as_ref().is_default()
    }

    /// The value of `array` at `row`.
    pub fn from_array(array: &dyn Array, row: usize) -> OrderingValue {
        OrderingColumn::of(array).get(row).to_owned()
    }

    /// The value, borrowed.
    pub fn as_ref(&self) -> OrderingRef<'_> {
        match self {
            OrderingValue::Null => OrderingRef::Null,
            OrderingValue::Bool(b) => OrderingRef::Bool(*b),
            OrderingValue::Int(i) => OrderingRef::Int(*i),
            OrderingValue::Float(f) => OrderingRef::Float(*f),
            OrderingValue::Decimal(v, s) => OrderingRef::Decimal(*v, *s),
            OrderingValue::String(s) => OrderingRef::String(s),
            OrderingValue::Bytes(b) => OrderingRef::Bytes(b),
        }
    }

    /// Compares two values; `None` when they cannot be compared (different kinds, NaN).
    /// Null sorts before everything.
    pub fn compare(&self, other: &OrderingValue) -> Option<Ordering> {
        self.as_ref().compare(other.as_ref())
    }

    /// `self > other`, strictly; incomparable values are not greater.
    pub fn greater_than(&self, other: &OrderingValue) -> bool {
        self.as_ref().greater_than(other.as_ref())
    }
}

/// An ordering value borrowed from a column or a delete record: what a merge compares, once
/// per version, without copying strings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OrderingRef<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Decimal(i128, i8),
    String(&'a str),
    Bytes(&'a [u8]),
}

impl OrderingRef<'_> {
    /// See [`OrderingValue::is_default`].
    #[inline]
    pub fn is_default(self) -> bool {
        matches!(self, OrderingRef::Int(0) | OrderingRef::Null)
    }

    pub fn to_owned(self) -> OrderingValue {
        match self {
            OrderingRef::Null => OrderingValue::Null,
            OrderingRef::Bool(b) => OrderingValue::Bool(b),
            OrderingRef::Int(i) => OrderingValue::Int(i),
            OrderingRef::Float(f) => OrderingValue::Float(f),
            OrderingRef::Decimal(v, s) => OrderingValue::Decimal(v, s),
            OrderingRef::String(s) => OrderingValue::String(s.to_owned()),
            OrderingRef::Bytes(b) => OrderingValue::Bytes(b.to_vec()),
        }
    }

    fn as_f64(self) -> Option<f64> {
        match self {
            OrderingRef::Int(i) => Some(i as f64),
            OrderingRef::Float(f) => Some(f),
            OrderingRef::Decimal(v, s) => Some(v as f64 / 10f64.powi(i32::from(s))),
            _ => None,
        }
    }

    /// See [`OrderingValue::compare`].
    #[inline(always)]
    pub fn compare(self, other: OrderingRef<'_>) -> Option<Ordering> {
        use OrderingRef::*;
        match (self, other) {
            (Int(a), Int(b)) => Some(a.cmp(&b)),
            (Null, Null) => Some(Ordering::Equal),
            (Null, _) => Some(Ordering::Less),
            (_, Null) => Some(Ordering::Greater),
            (Bool(a), Bool(b)) => Some(a.cmp(&b)),
            (Decimal(a, sa), Decimal(b, sb)) => {
                let scale = sa.max(sb);
                let widen = |v: i128, s: i8| v.checked_mul(10i128.checked_pow((scale - s) as u32)?);
                match (widen(a, sa), widen(b, sb)) {
                    (Some(a), Some(b)) => Some(a.cmp(&b)),
                    _ => self.as_f64()?.partial_cmp(&other.as_f64()?),
                }
            }
            (Decimal(..), Int(i)) => self.compare(Decimal(i128::from(i), 0)),
            (Int(i), Decimal(..)) => Decimal(i128::from(i), 0).compare(other),
            (String(a), String(b)) => Some(a.cmp(b)),
            (Bytes(a), Bytes(b)) => Some(a.cmp(b)),
            _ => self.as_f64()?.partial_cmp(&other.as_f64()?),
        }
    }

    /// See [`OrderingValue::greater_than`].
    #[inline]
    pub fn greater_than(self, other: OrderingRef<'_>) -> bool {
        self.compare(other) == Some(Ordering::Greater)
    }
}

/// The values of an ordering column, resolved to their type once: reading a row's value is
/// then a load, not a dispatch on the column's type (a merge reads one per version).
#[derive(Debug, Clone, Copy)]
pub struct OrderingColumn<'a> {
    nulls: Option<&'a NullBuffer>,
    values: Values<'a>,
}

/// The typed values of an [`OrderingColumn`].
#[derive(Debug, Clone, Copy)]
enum Values<'a> {
    /// Nested types cannot order records: their values are absent (NULL).
    Absent,
    Bool(&'a BooleanArray),
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    U8(&'a [u8]),
    U16(&'a [u16]),
    U32(&'a [u32]),
    U64(&'a [u64]),
    F16(&'a PrimitiveArray<types::Float16Type>),
    F32(&'a [f32]),
    F64(&'a [f64]),
    Decimal(&'a [i128], i8),
    Utf8(&'a StringArray),
    LargeUtf8(&'a LargeStringArray),
    Utf8View(&'a StringViewArray),
    Binary(&'a BinaryArray),
    LargeBinary(&'a LargeBinaryArray),
    FixedSizeBinary(&'a FixedSizeBinaryArray),
}

impl<'a> OrderingColumn<'a> {
    /// Integers, dates (days), times and timestamps read as their stored integers.
    pub fn of(array: &'a dyn Array) -> OrderingColumn<'a> {
        use arrow::datatypes::TimeUnit;
        macro_rules! ints {
            ($variant:ident, $t:ty) => {
                Values::$variant(array.as_primitive::<$t>().values())
            };
        }
        let values = match array.data_type() {
            DataType::Boolean => Values::Bool(array.as_boolean()),
            DataType::Int8 => ints!(I8, types::Int8Type),
            DataType::Int16 => ints!(I16, types::Int16Type),
            DataType::Int32 => ints!(I32, types::Int32Type),
            DataType::Int64 => ints!(I64, types::Int64Type),
            DataType::UInt8 => ints!(U8, types::UInt8Type),
            DataType::UInt16 => ints!(U16, types::UInt16Type),
            DataType::UInt32 => ints!(U32, types::UInt32Type),
            DataType::UInt64 => ints!(U64, types::UInt64Type),
            DataType::Date32 => ints!(I32, types::Date32Type),
            DataType::Date64 => ints!(I64, types::Date64Type),
            DataType::Time32(TimeUnit::Second) => ints!(I32, types::Time32SecondType),
            DataType::Time32(_) => ints!(I32, types::Time32MillisecondType),
            DataType::Time64(TimeUnit::Microsecond) => ints!(I64, types::Time64MicrosecondType),
            DataType::Time64(_) => ints!(I64, types::Time64NanosecondType),
            DataType::Timestamp(TimeUnit::Second, _) => ints!(I64, types::TimestampSecondType),
            DataType::Timestamp(TimeUnit::Millisecond, _) => ints!(I64, types::TimestampMillisecondType),
            DataType::Timestamp(TimeUnit::Microsecond, _) => ints!(I64, types::TimestampMicrosecondType),
            DataType::Timestamp(TimeUnit::Nanosecond, _) => ints!(I64, types::TimestampNanosecondType),
            DataType::Float16 => Values::F16(array.as_primitive::<types::Float16Type>()),
            DataType::Float32 => Values::F32(array.as_primitive::<types::Float32Type>().values()),
            DataType::Float64 => Values::F64(array.as_primitive::<types::Float64Type>().values()),
            DataType::Decimal128(_, scale) => Values::Decimal(array.as_primitive::<types::Decimal128Type>().values(), *scale),
            DataType::Utf8 => Values::Utf8(array.as_string()),
            DataType::LargeUtf8 => Values::LargeUtf8(array.as_string()),
            DataType::Utf8View => Values::Utf8View(array.as_string_view()),
            DataType::Binary => Values::Binary(array.as_binary()),
            DataType::LargeBinary => Values::LargeBinary(array.as_binary()),
            DataType::FixedSizeBinary(_) => Values::FixedSizeBinary(array.as_fixed_size_binary()),
            _ => Values::Absent,
        };
        OrderingColumn { nulls: array.nulls(), values }
    }

    /// The value at `row`.
    #[inline(always)]
    pub fn get(&self, row: usize) -> OrderingRef<'a> {
        if self.nulls.is_some_and(|n| n.is_null(row)) {
            return OrderingRef::Null;
        }
        match self.values {
            Values::Absent => OrderingRef::Null,
            Values::Bool(a) => OrderingRef::Bool(a.value(row)),
            Values::I8(v) => OrderingRef::Int(i64::from(v[row])),
            Values::I16(v) => OrderingRef::Int(i64::from(v[row])),
            Values::I32(v) => OrderingRef::Int(i64::from(v[row])),
            Values::I64(v) => OrderingRef::Int(v[row]),
            Values::U8(v) => OrderingRef::Int(i64::from(v[row])),
            Values::U16(v) => OrderingRef::Int(i64::from(v[row])),
            Values::U32(v) => OrderingRef::Int(i64::from(v[row])),
            // As Java's long: unsigned values past i64::MAX wrap.
            Values::U64(v) => OrderingRef::Int(v[row] as i64),
            Values::F16(a) => OrderingRef::Float(a.value(row).to_f64()),
            Values::F32(v) => OrderingRef::Float(f64::from(v[row])),
            Values::F64(v) => OrderingRef::Float(v[row]),
            Values::Decimal(v, scale) => OrderingRef::Decimal(v[row], scale),
            Values::Utf8(a) => OrderingRef::String(a.value(row)),
            Values::LargeUtf8(a) => OrderingRef::String(a.value(row)),
            Values::Utf8View(a) => OrderingRef::String(a.value(row)),
            Values::Binary(a) => OrderingRef::Bytes(a.value(row)),
            Values::LargeBinary(a) => OrderingRef::Bytes(a.value(row)),
            Values::FixedSizeBinary(a) => OrderingRef::Bytes(a.value(row)),
        }
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
    fn every_column_type_reads_as_its_ordering_value() {
        use arrow::array::*;
        use OrderingValue as V;
        let columns: Vec<(ArrayRef, OrderingValue)> = vec![
            (Arc::new(BooleanArray::from(vec![None, Some(true)])), V::Bool(true)),
            (Arc::new(Int8Array::from(vec![None, Some(-8)])), V::Int(-8)),
            (Arc::new(Int16Array::from(vec![None, Some(-16)])), V::Int(-16)),
            (Arc::new(Int32Array::from(vec![None, Some(-32)])), V::Int(-32)),
            (Arc::new(Int64Array::from(vec![None, Some(i64::MIN)])), V::Int(i64::MIN)),
            (Arc::new(UInt8Array::from(vec![None, Some(200)])), V::Int(200)),
            (Arc::new(UInt16Array::from(vec![None, Some(60000)])), V::Int(60000)),
            (Arc::new(UInt32Array::from(vec![None, Some(u32::MAX)])), V::Int(i64::from(u32::MAX))),
            (Arc::new(UInt64Array::from(vec![None, Some(u64::MAX)])), V::Int(-1)),
            (Arc::new(Date32Array::from(vec![None, Some(-3)])), V::Int(-3)),
            (Arc::new(Date64Array::from(vec![None, Some(86_400_000)])), V::Int(86_400_000)),
            (Arc::new(Time32SecondArray::from(vec![None, Some(59)])), V::Int(59)),
            (Arc::new(Time32MillisecondArray::from(vec![None, Some(59_000)])), V::Int(59_000)),
            (Arc::new(Time64MicrosecondArray::from(vec![None, Some(7)])), V::Int(7)),
            (Arc::new(Time64NanosecondArray::from(vec![None, Some(7_000)])), V::Int(7_000)),
            (Arc::new(TimestampSecondArray::from(vec![None, Some(1)])), V::Int(1)),
            (Arc::new(TimestampMillisecondArray::from(vec![None, Some(2)]).with_timezone("UTC")), V::Int(2)),
            (Arc::new(TimestampNanosecondArray::from(vec![None, Some(-4)])), V::Int(-4)),
            (Arc::new(Float16Array::from(vec![None, Some(half_of(1.5))])), V::Float(1.5)),
            (Arc::new(Float32Array::from(vec![None, Some(-2.5f32)])), V::Float(-2.5)),
            (Arc::new(Float64Array::from(vec![None, Some(f64::MAX)])), V::Float(f64::MAX)),
            (Arc::new(Decimal128Array::from(vec![None, Some(1250)]).with_precision_and_scale(10, 2).unwrap()), V::Decimal(1250, 2)),
            (Arc::new(StringArray::from(vec![None, Some("ä")])), V::String("ä".into())),
            (Arc::new(LargeStringArray::from(vec![None, Some("l")])), V::String("l".into())),
            (Arc::new(StringViewArray::from(vec![None, Some("a view longer than twelve bytes")])), V::String("a view longer than twelve bytes".into())),
            (Arc::new(BinaryArray::from(vec![None, Some(&b"\x00\xff"[..])])), V::Bytes(vec![0, 255])),
            (Arc::new(LargeBinaryArray::from(vec![None, Some(&b"b"[..])])), V::Bytes(b"b".to_vec())),
            (Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(vec![None, Some(b"xy")].into_iter(), 2).unwrap()), V::Bytes(b"xy".to_vec())),
            (Arc::new(ListArray::from_iter_primitive::<types::Int32Type, _, _>(vec![None, Some(vec![Some(1)])])), V::Null),
        ];
        for (array, expected) in columns {
            let column = OrderingColumn::of(array.as_ref());
            assert_eq!(column.get(0), OrderingRef::Null, "{}", array.data_type());
            assert_eq!(column.get(1).to_owned(), expected, "{}", array.data_type());
            assert_eq!(OrderingValue::from_array(array.as_ref(), 1), expected);
            // A slice reads from its own offset.
            assert_eq!(OrderingColumn::of(array.slice(1, 1).as_ref()).get(0).to_owned(), expected, "{}", array.data_type());
        }
    }

    /// A 16-bit float, through Arrow's cast (the `half` crate is not a dependency).
    fn half_of(value: f32) -> <types::Float16Type as types::ArrowPrimitiveType>::Native {
        let wide = arrow::array::Float32Array::from(vec![value]);
        arrow::compute::cast(&wide, &DataType::Float16).unwrap().as_primitive::<types::Float16Type>().value(0)
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
