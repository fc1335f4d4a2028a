//! Arrow ↔ PostgreSQL values, in one place: which PostgreSQL type may hold which Arrow type,
//! what type `IMPORT FOREIGN SCHEMA` declares for each, and the conversion of one Arrow value
//! to a `Datum`.
//!
//! | Arrow (from Hudi's Avro)            | PostgreSQL |
//! |-------------------------------------|------------|
//! | boolean                             | boolean |
//! | int8/16/32 (Avro int)               | integer (also smallint, bigint, numeric, float) |
//! | int64 (Avro long)                   | bigint |
//! | float32 / float64                   | real / double precision |
//! | decimal(p, s)                       | numeric(p, s) |
//! | utf8                                | text (also varchar) |
//! | binary, fixed                       | bytea |
//! | date32                              | date |
//! | timestamp (micros, millis) with tz  | timestamp with time zone (also timestamp) |
//! | timestamp without tz                | timestamp |
//! | list of a primitive type            | an array of that type's column type (`integer[]`, `text[]`, ...) |
//! | struct, map, list of nested values  | jsonb (a struct and a map become objects, a list an array) |
//!
//! Any Arrow value can also be read into `text` (its display form, nested values as JSON).

use std::ffi::CString;
use std::fmt::Write as _;
use std::str::FromStr;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{self as types, DataType, TimeUnit};
use pgrx::prelude::*;
use pgrx::{AnyNumeric, FromDatum, IntoDatum};

/// Days from 1970-01-01 (Arrow) to 2000-01-01 (PostgreSQL).
pub const PG_EPOCH_DAYS: i64 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
pub const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS * 86_400_000_000;

/// The PostgreSQL types a foreign table column may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgKind {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Numeric,
    Text,
    Bytea,
    Date,
    Timestamp,
    TimestampTz,
    Jsonb,
}

impl PgKind {
    pub fn from_type_oid(oid: pg_sys::Oid) -> Option<PgKind> {
        Some(match oid {
            pg_sys::BOOLOID => PgKind::Bool,
            pg_sys::INT2OID => PgKind::Int2,
            pg_sys::INT4OID => PgKind::Int4,
            pg_sys::INT8OID => PgKind::Int8,
            pg_sys::FLOAT4OID => PgKind::Float4,
            pg_sys::FLOAT8OID => PgKind::Float8,
            pg_sys::NUMERICOID => PgKind::Numeric,
            pg_sys::TEXTOID | pg_sys::VARCHAROID | pg_sys::BPCHAROID => PgKind::Text,
            pg_sys::BYTEAOID => PgKind::Bytea,
            pg_sys::DATEOID => PgKind::Date,
            pg_sys::TIMESTAMPOID => PgKind::Timestamp,
            pg_sys::TIMESTAMPTZOID => PgKind::TimestampTz,
            pg_sys::JSONBOID => PgKind::Jsonb,
            _ => return None,
        })
    }

    /// Whether a column of this kind can hold every value of `data_type`.
    pub fn accepts(self, data_type: &DataType) -> bool {
        use DataType as D;
        let integer = |bits: u32| match data_type {
            D::Int8 | D::UInt8 => bits >= 8,
            D::Int16 => bits >= 16,
            D::UInt16 | D::Int32 => bits >= 32,
            D::UInt32 | D::Int64 => bits >= 64,
            _ => false,
        };
        match self {
            PgKind::Text => true,
            PgKind::Bool => matches!(data_type, D::Boolean),
            // Avro has no 16-bit integer: a smallint column (as create_table writes it) is an
            // int, and a value out of smallint's range is an error when read.
            PgKind::Int2 => integer(16) || matches!(data_type, D::Int32),
            PgKind::Int4 => integer(32),
            PgKind::Int8 => integer(64),
            PgKind::Float4 | PgKind::Float8 => {
                data_type.is_floating() || data_type.is_integer() || matches!(data_type, D::Decimal128(..))
            }
            PgKind::Numeric => data_type.is_integer() || matches!(data_type, D::Decimal128(..) | D::Decimal256(..)),
            PgKind::Bytea => matches!(data_type, D::Binary | D::LargeBinary | D::FixedSizeBinary(_) | D::BinaryView),
            PgKind::Date => matches!(data_type, D::Date32 | D::Date64),
            PgKind::Timestamp | PgKind::TimestampTz => matches!(data_type, D::Timestamp(..)),
            PgKind::Jsonb => data_type.is_nested(),
        }
    }
}

/// A column's PostgreSQL type: a scalar kind, or a one-dimensional array of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnType {
    pub kind: PgKind,
    /// The element type when the column is an array.
    pub element: Option<pg_sys::Oid>,
}

impl ColumnType {
    pub fn from_type_oid(oid: pg_sys::Oid) -> Option<ColumnType> {
        // SAFETY: a syscache lookup on the main thread.
        let element = unsafe { pg_sys::get_element_type(oid) };
        if element != pg_sys::InvalidOid {
            let kind = PgKind::from_type_oid(element).filter(|k| *k != PgKind::Jsonb)?;
            return Some(ColumnType { kind, element: Some(element) });
        }
        Some(ColumnType { kind: PgKind::from_type_oid(oid)?, element: None })
    }

    /// Whether the column can hold every value of `data_type`: arrays take lists whose items
    /// their element type accepts.
    pub fn accepts(&self, data_type: &DataType) -> bool {
        match (self.element, data_type) {
            (Some(_), DataType::List(item) | DataType::LargeList(item)) => {
                !item.data_type().is_nested() && self.kind.accepts(item.data_type())
            }
            (Some(_), _) => false,
            (None, _) => self.kind.accepts(data_type),
        }
    }

    /// The value at `row` as a `Datum` of this type (`None` for NULL).
    pub fn to_datum(&self, array: &dyn Array, row: usize) -> Result<Option<pg_sys::Datum>, ConversionError> {
        let Some(element) = self.element else { return to_datum(self.kind, array, row) };
        if array.is_null(row) {
            return Ok(None);
        }
        let items = match array.data_type() {
            DataType::List(_) => array.as_list::<i32>().value(row),
            DataType::LargeList(_) => array.as_list::<i64>().value(row),
            other => return Err(format!("a value of type {other} is not a list")),
        };
        let mut datums = Vec::with_capacity(items.len());
        let mut nulls = Vec::with_capacity(items.len());
        for i in 0..items.len() {
            let datum = to_datum(self.kind, items.as_ref(), i)?;
            nulls.push(datum.is_none());
            datums.push(datum.unwrap_or(pg_sys::Datum::from(0)));
        }
        // SAFETY: one-dimensional array construction from datums of the element type.
        unsafe {
            let (mut len, mut by_value, mut align) = (0i16, false, 0 as std::ffi::c_char);
            pg_sys::get_typlenbyvalalign(element, &mut len, &mut by_value, &mut align);
            let mut dims = [datums.len() as i32];
            let mut lower_bounds = [1i32];
            let array = pg_sys::construct_md_array(
                datums.as_mut_ptr(),
                nulls.as_mut_ptr(),
                1,
                dims.as_mut_ptr(),
                lower_bounds.as_mut_ptr(),
                element,
                len.into(),
                by_value,
                align,
            );
            Ok(Some(pg_sys::Datum::from(array)))
        }
    }
}

/// One column of a batch, ready to be converted value after value: the common exact type
/// pairs read their Arrow array directly, without dispatching on types per value; the rest go
/// through [`ColumnType::to_datum`].
pub enum ColumnReader {
    Int4(arrow::array::Int32Array),
    Int8(arrow::array::Int64Array),
    Float8(arrow::array::Float64Array),
    Bool(arrow::array::BooleanArray),
    /// `text` from UTF-8: each value is written as a varlena into the reader's own buffer, which
    /// the next value reuses, rather than into a `String` and then a palloc'd copy (two copies,
    /// an allocation, a free and a call into PostgreSQL per value).
    Text(arrow::array::StringArray, TextBuffer),
    /// `numeric` from a decimal of scale 0 to [`NumericBuffer::MAX_SCALE`]: each value is
    /// built in PostgreSQL's format in the reader's buffer, as text values are (through
    /// decimal text and `numeric_in` it cost ten times the rest of a row).
    Numeric(arrow::array::Decimal128Array, u32, NumericBuffer),
    /// `date` from days since 1970.
    Date(arrow::array::Date32Array),
    /// `timestamp` or `timestamptz` from microseconds since 1970.
    Timestamp(arrow::array::TimestampMicrosecondArray),
    Any(ColumnType, ArrayRef),
}

/// The one varlena a [`ColumnReader::Text`] hands out at a time, in 4-byte words so that its
/// 4-byte header is aligned as PostgreSQL reads it.
///
/// A datum pointing into it lives until the reader's next value: as long as one palloc'd in
/// the per-tuple memory that the executor resets before it asks a scan for the next row, and
/// no consumer keeps a slot's values past that without copying them (materializing).
#[derive(Default)]
pub struct TextBuffer(Vec<u32>);

impl TextBuffer {
    /// `bytes` as a `text` datum in this buffer, replacing the previous one.
    fn text(&mut self, bytes: &[u8]) -> Result<pg_sys::Datum, ConversionError> {
        const MAX_VARLENA: usize = 0x3FFF_FFFF;
        let size = bytes.len() + pg_sys::VARHDRSZ;
        if size > MAX_VARLENA {
            return Err(format!("a string of {} bytes is longer than a text value can be", bytes.len()));
        }
        // Grown, never cleared: the bytes past the value are not read.
        if self.0.len() < size.div_ceil(4) {
            self.0.resize(size.div_ceil(4), 0);
        }
        let start = self.0.as_mut_ptr() as *mut u8;
        // SAFETY: the buffer holds `size` bytes, from a 4-byte aligned start: the header, then
        // the value's bytes.
        unsafe {
            pgrx::set_varsize_4b(start as *mut pg_sys::varlena, size as i32);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), start.add(pg_sys::VARHDRSZ), bytes.len());
        }
        Ok(pg_sys::Datum::from(start))
    }
}

/// The one `numeric` varlena a [`ColumnReader::Numeric`] hands out at a time (valid as a
/// [`TextBuffer`]'s value is), in 4-byte words for the alignment of its header.
#[derive(Default)]
pub struct NumericBuffer([u32; 12]);

impl NumericBuffer {
    /// Scales up to this one have their fraction's base-10000 digits computed in `u128`.
    const MAX_SCALE: u32 = 34;

    /// The value `unscaled` x 10^-`scale` as a `numeric` datum in this buffer, as
    /// `make_result` in PostgreSQL's `numeric.c` would build it: base-10000 digits without
    /// leading or trailing zero digits, their weight, the sign and the display scale, in the
    /// short header (values of 38 digits always fit it).
    fn numeric(&mut self, unscaled: i128, scale: u32) -> pg_sys::Datum {
        const NUMERIC_SHORT: u16 = 0x8000;
        const SHORT_SIGN: u16 = 0x2000;
        const SHORT_DSCALE_SHIFT: u16 = 7;
        const SHORT_WEIGHT_SIGN: u16 = 0x0040;
        const SHORT_WEIGHT_MASK: u16 = 0x003F;
        let magnitude = unscaled.unsigned_abs();
        let divisor = 10u128.pow(scale);
        // Most values fit 64 bits, whose divisions are instructions (128-bit ones are calls).
        let (int, fraction) = match (u64::try_from(magnitude), u64::try_from(divisor)) {
            (Ok(m), Ok(d)) => (u128::from(m / d), u128::from(m % d)),
            _ => (magnitude / divisor, magnitude % divisor),
        };
        // Base-10000 digits, least significant first: the integer part's, then (below) the
        // fraction's, padded to whole digits.
        let mut int_digits = [0u16; 10];
        let ints = base_10000_digits(int, &mut int_digits, None);
        let fraction_digits_count = scale.div_ceil(4) as usize;
        let fraction = fraction * 10u128.pow(fraction_digits_count as u32 * 4 - scale);
        let mut fraction_digits = [0u16; 10];
        base_10000_digits(fraction, &mut fraction_digits[..fraction_digits_count], Some(fraction_digits_count));
        fraction_digits[..fraction_digits_count].reverse();
        // Most significant first, as stored.
        let mut digits = [0u16; 20];
        let mut n = 0;
        for &d in int_digits[..ints].iter().rev().chain(&fraction_digits[..fraction_digits_count]) {
            digits[n] = d;
            n += 1;
        }
        let mut weight = ints as i32 - 1;
        let leading = digits[..n].iter().take_while(|&&d| d == 0).count();
        weight -= leading as i32;
        let digits = &digits[leading..n];
        let digits = &digits[..digits.len() - digits.iter().rev().take_while(|&&d| d == 0).count()];
        let (negative, weight) = if digits.is_empty() { (false, 0) } else { (unscaled < 0, weight) };
        let header = NUMERIC_SHORT
            | if negative { SHORT_SIGN } else { 0 }
            | ((scale as u16) << SHORT_DSCALE_SHIFT)
            | if weight < 0 { SHORT_WEIGHT_SIGN } else { 0 }
            | (weight as u16 & SHORT_WEIGHT_MASK);
        let size = pg_sys::VARHDRSZ + 2 + 2 * digits.len();
        let start = self.0.as_mut_ptr() as *mut u8;
        // SAFETY: at most 4 + 2 + 2 x 20 bytes, within the buffer's 48; the header first.
        unsafe {
            pgrx::set_varsize_4b(start as *mut pg_sys::varlena, size as i32);
            let words = start.add(pg_sys::VARHDRSZ) as *mut u16;
            words.write(header);
            for (i, &d) in digits.iter().enumerate() {
                words.add(1 + i).write(d);
            }
        }
        pg_sys::Datum::from(start)
    }
}

/// The base-10000 digits of `value` into `out`, least significant first: as many as it has
/// (none for 0), or exactly `count`; returns how many were written.
fn base_10000_digits(value: u128, out: &mut [u16], count: Option<usize>) -> usize {
    fn digits<T: Copy + PartialEq + From<u16> + std::ops::Rem<Output = T> + std::ops::Div<Output = T>>(
        mut value: T,
        out: &mut [u16],
        count: Option<usize>,
        low: impl Fn(T) -> u16,
    ) -> usize {
        let (zero, base) = (T::from(0), T::from(10_000));
        let mut n = 0;
        while count.map_or(value != zero, |count| n < count) {
            out[n] = low(value % base);
            value = value / base;
            n += 1;
        }
        n
    }
    match u64::try_from(value) {
        Ok(small) => digits(small, out, count, |d| d as u16),
        Err(_) => digits(value, out, count, |d| d as u16),
    }
}

impl ColumnReader {
    pub fn new(column_type: ColumnType, array: &ArrayRef) -> ColumnReader {
        match (column_type.kind, column_type.element, array.data_type()) {
            (PgKind::Int4, None, DataType::Int32) => ColumnReader::Int4(array.as_primitive::<types::Int32Type>().clone()),
            (PgKind::Int8, None, DataType::Int64) => ColumnReader::Int8(array.as_primitive::<types::Int64Type>().clone()),
            (PgKind::Float8, None, DataType::Float64) => ColumnReader::Float8(array.as_primitive::<types::Float64Type>().clone()),
            (PgKind::Bool, None, DataType::Boolean) => ColumnReader::Bool(array.as_boolean().clone()),
            (PgKind::Text, None, DataType::Utf8) => ColumnReader::Text(array.as_string::<i32>().clone(), TextBuffer::default()),
            (PgKind::Date, None, DataType::Date32) => ColumnReader::Date(array.as_primitive::<types::Date32Type>().clone()),
            (PgKind::Timestamp | PgKind::TimestampTz, None, DataType::Timestamp(TimeUnit::Microsecond, _)) => {
                ColumnReader::Timestamp(array.as_primitive::<types::TimestampMicrosecondType>().clone())
            }
            (PgKind::Numeric, None, &DataType::Decimal128(_, scale)) if (0..=NumericBuffer::MAX_SCALE as i8).contains(&scale) => {
                ColumnReader::Numeric(array.as_primitive::<types::Decimal128Type>().clone(), scale as u32, NumericBuffer::default())
            }
            _ => ColumnReader::Any(column_type, array.clone()),
        }
    }

    /// The value at `row` (`None` for NULL). A `text` value is valid until the next call
    /// ([`TextBuffer`]).
    #[inline]
    pub fn datum(&mut self, row: usize) -> Result<Option<pg_sys::Datum>, ConversionError> {
        fn get<A: Array, T: IntoDatum>(array: &A, row: usize, value: impl FnOnce(&A) -> T) -> Option<pg_sys::Datum> {
            if array.is_null(row) {
                None
            } else {
                value(array).into_datum()
            }
        }
        Ok(match self {
            ColumnReader::Int4(a) => get(a, row, |a| a.value(row)),
            ColumnReader::Int8(a) => get(a, row, |a| a.value(row)),
            ColumnReader::Float8(a) => get(a, row, |a| a.value(row)),
            ColumnReader::Bool(a) => get(a, row, |a| a.value(row)),
            ColumnReader::Text(a, buffer) => match a.is_null(row) {
                true => None,
                false => Some(buffer.text(a.value(row).as_bytes())?),
            },
            ColumnReader::Numeric(a, scale, buffer) => match a.is_null(row) {
                true => None,
                false => Some(buffer.numeric(a.value(row), *scale)),
            },
            ColumnReader::Date(a) => match a.is_null(row) {
                true => None,
                // As `to_datum` converts one (days since 2000 in PostgreSQL).
                false => Some(pg_sys::Datum::from(i32::try_from(i64::from(a.value(row)) - PG_EPOCH_DAYS).map_err(|_| "value out of range for type date".to_owned())?)),
            },
            ColumnReader::Timestamp(a) => get(a, row, |a| a.value(row).saturating_sub(PG_EPOCH_MICROS)),
            ColumnReader::Any(column_type, array) => return column_type.to_datum(array.as_ref(), row),
        })
    }
}

/// The column type `IMPORT FOREIGN SCHEMA` declares for an Arrow type.
pub fn declared_type(data_type: &DataType) -> String {
    use DataType as D;
    match data_type {
        D::List(item) | D::LargeList(item) if !item.data_type().is_nested() => {
            format!("{}[]", declared_type(item.data_type()))
        }
        D::Boolean => "boolean".into(),
        D::Int8 | D::Int16 | D::Int32 | D::UInt8 | D::UInt16 => "integer".into(),
        D::Int64 | D::UInt32 => "bigint".into(),
        D::UInt64 => "numeric(20, 0)".into(),
        D::Float16 | D::Float32 => "real".into(),
        D::Float64 => "double precision".into(),
        D::Decimal128(p, s) | D::Decimal256(p, s) => format!("numeric({p}, {s})"),
        D::Binary | D::LargeBinary | D::FixedSizeBinary(_) | D::BinaryView => "bytea".into(),
        D::Date32 | D::Date64 => "date".into(),
        D::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
        D::Timestamp(_, None) => "timestamp without time zone".into(),
        d if d.is_nested() => "jsonb".into(),
        _ => "text".into(),
    }
}

/// Why a value cannot be stored; the caller adds the column name.
pub type ConversionError = String;

fn integer_at(array: &dyn Array, row: usize) -> Option<i128> {
    macro_rules! get {
        ($t:ty) => {
            Some(array.as_primitive::<$t>().value(row) as i128)
        };
    }
    match array.data_type() {
        DataType::Int8 => get!(types::Int8Type),
        DataType::Int16 => get!(types::Int16Type),
        DataType::Int32 => get!(types::Int32Type),
        DataType::Int64 => get!(types::Int64Type),
        DataType::UInt8 => get!(types::UInt8Type),
        DataType::UInt16 => get!(types::UInt16Type),
        DataType::UInt32 => get!(types::UInt32Type),
        DataType::UInt64 => get!(types::UInt64Type),
        _ => None,
    }
}

fn float_at(array: &dyn Array, row: usize) -> Option<f64> {
    match array.data_type() {
        DataType::Float16 => Some(array.as_primitive::<types::Float16Type>().value(row).to_f64()),
        DataType::Float32 => Some(f64::from(array.as_primitive::<types::Float32Type>().value(row))),
        DataType::Float64 => Some(array.as_primitive::<types::Float64Type>().value(row)),
        DataType::Decimal128(_, s) => {
            Some(array.as_primitive::<types::Decimal128Type>().value(row) as f64 / 10f64.powi(i32::from(*s)))
        }
        _ => integer_at(array, row).map(|i| i as f64),
    }
}

/// `unscaled × 10^-scale` as exact decimal text.
pub fn decimal_text(unscaled: i128, scale: i8) -> String {
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale <= 0 {
        return format!("{sign}{digits}{}", "0".repeat(scale.unsigned_abs() as usize));
    }
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

fn decimal_at(array: &dyn Array, row: usize) -> Option<String> {
    match array.data_type() {
        DataType::Decimal128(_, s) => Some(decimal_text(array.as_primitive::<types::Decimal128Type>().value(row), *s)),
        DataType::Decimal256(..) => Some(arrow::util::display::array_value_to_string(array, row).ok()?),
        _ => integer_at(array, row).map(|i| i.to_string()),
    }
}

/// Microseconds since 1970 of a timestamp value.
fn timestamp_micros(array: &dyn Array, row: usize) -> Option<i64> {
    let DataType::Timestamp(unit, _) = array.data_type() else { return None };
    Some(match unit {
        TimeUnit::Second => array.as_primitive::<types::TimestampSecondType>().value(row).saturating_mul(1_000_000),
        TimeUnit::Millisecond => array.as_primitive::<types::TimestampMillisecondType>().value(row).saturating_mul(1000),
        TimeUnit::Microsecond => array.as_primitive::<types::TimestampMicrosecondType>().value(row),
        TimeUnit::Nanosecond => array.as_primitive::<types::TimestampNanosecondType>().value(row) / 1000,
    })
}

fn days_at(array: &dyn Array, row: usize) -> Option<i64> {
    match array.data_type() {
        DataType::Date32 => Some(i64::from(array.as_primitive::<types::Date32Type>().value(row))),
        DataType::Date64 => Some(array.as_primitive::<types::Date64Type>().value(row).div_euclid(86_400_000)),
        _ => None,
    }
}

/// Writes the value at `row` as JSON: structs and maps as objects, lists as arrays, decimals
/// as exact numbers, bytes as hex strings, dates and timestamps as ISO strings.
pub fn write_json(out: &mut String, array: &dyn Array, row: usize) {
    if array.is_null(row) {
        out.push_str("null");
        return;
    }
    let quoted = |out: &mut String, s: &str| out.push_str(&serde_json::Value::from(s).to_string());
    match array.data_type() {
        DataType::Boolean => out.push_str(if array.as_boolean().value(row) { "true" } else { "false" }),
        DataType::Struct(fields) => {
            let s = array.as_struct();
            out.push('{');
            for (i, field) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                quoted(out, field.name());
                out.push(':');
                write_json(out, s.column(i).as_ref(), row);
            }
            out.push('}');
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => {
            let values = match array.data_type() {
                DataType::List(_) => array.as_list::<i32>().value(row),
                DataType::LargeList(_) => array.as_list::<i64>().value(row),
                _ => array.as_fixed_size_list().value(row),
            };
            out.push('[');
            for i in 0..values.len() {
                if i > 0 {
                    out.push(',');
                }
                write_json(out, values.as_ref(), i);
            }
            out.push(']');
        }
        DataType::Map(..) => {
            let entries = array.as_map().value(row);
            let (keys, values) = (entries.column(0), entries.column(1));
            out.push('{');
            for i in 0..entries.len() {
                if i > 0 {
                    out.push(',');
                }
                let key = arrow::util::display::array_value_to_string(keys.as_ref(), i).unwrap_or_default();
                quoted(out, &key);
                out.push(':');
                write_json(out, values.as_ref(), i);
            }
            out.push('}');
        }
        DataType::Decimal128(..) | DataType::Decimal256(..) => out.push_str(&decimal_at(array, row).unwrap_or_default()),
        d if d.is_integer() => {
            let _ = write!(out, "{}", integer_at(array, row).unwrap_or_default());
        }
        d if d.is_floating() => match float_at(array, row) {
            Some(f) if f.is_finite() => {
                let _ = write!(out, "{f}");
            }
            Some(f) => quoted(out, &f.to_string()),
            None => out.push_str("null"),
        },
        DataType::Binary | DataType::LargeBinary | DataType::FixedSizeBinary(_) | DataType::BinaryView => {
            let bytes: &[u8] = match array.data_type() {
                DataType::Binary => array.as_binary::<i32>().value(row),
                DataType::LargeBinary => array.as_binary::<i64>().value(row),
                DataType::BinaryView => array.as_binary_view().value(row),
                _ => array.as_fixed_size_binary().value(row),
            };
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            quoted(out, &hex);
        }
        _ => {
            let text = arrow::util::display::array_value_to_string(array, row).unwrap_or_default();
            quoted(out, &text);
        }
    }
}

fn text_at(array: &dyn Array, row: usize) -> String {
    match array.data_type() {
        DataType::Utf8 => array.as_string::<i32>().value(row).to_owned(),
        DataType::LargeUtf8 => array.as_string::<i64>().value(row).to_owned(),
        DataType::Utf8View => array.as_string_view().value(row).to_owned(),
        d if d.is_nested() => {
            let mut json = String::new();
            write_json(&mut json, array, row);
            json
        }
        DataType::Decimal128(..) => decimal_at(array, row).unwrap_or_default(),
        _ => arrow::util::display::array_value_to_string(array, row).unwrap_or_default(),
    }
}

/// The `Datum` for the value at `row` of `array` in a column of `kind` (`None` for SQL NULL).
/// The kind must accept the array's type ([`PgKind::accepts`]); values out of the column's
/// range are errors.
pub fn to_datum(kind: PgKind, array: &dyn Array, row: usize) -> Result<Option<pg_sys::Datum>, ConversionError> {
    if array.is_null(row) {
        return Ok(None);
    }
    let mismatch = || format!("a value of type {} cannot be stored in this column", array.data_type());
    let out_of_range = |what: &str| format!("value out of range for type {what}");
    Ok(match kind {
        PgKind::Bool => array.as_boolean_opt().ok_or_else(mismatch)?.value(row).into_datum(),
        PgKind::Int2 => {
            let v = integer_at(array, row).ok_or_else(mismatch)?;
            i16::try_from(v).map_err(|_| out_of_range("smallint"))?.into_datum()
        }
        PgKind::Int4 => {
            let v = integer_at(array, row).ok_or_else(mismatch)?;
            i32::try_from(v).map_err(|_| out_of_range("integer"))?.into_datum()
        }
        PgKind::Int8 => {
            let v = integer_at(array, row).ok_or_else(mismatch)?;
            i64::try_from(v).map_err(|_| out_of_range("bigint"))?.into_datum()
        }
        PgKind::Float4 => (float_at(array, row).ok_or_else(mismatch)? as f32).into_datum(),
        PgKind::Float8 => float_at(array, row).ok_or_else(mismatch)?.into_datum(),
        PgKind::Numeric => {
            let text = decimal_at(array, row).ok_or_else(mismatch)?;
            AnyNumeric::from_str(&text).map_err(|e| format!("invalid numeric {text}: {e}"))?.into_datum()
        }
        PgKind::Text => text_at(array, row).into_datum(),
        PgKind::Bytea => {
            let bytes: &[u8] = match array.data_type() {
                DataType::Binary => array.as_binary::<i32>().value(row),
                DataType::LargeBinary => array.as_binary::<i64>().value(row),
                DataType::BinaryView => array.as_binary_view().value(row),
                DataType::FixedSizeBinary(_) => array.as_fixed_size_binary().value(row),
                _ => return Err(mismatch()),
            };
            bytes.into_datum()
        }
        PgKind::Date => {
            let days = days_at(array, row).ok_or_else(mismatch)? - PG_EPOCH_DAYS;
            Some(pg_sys::Datum::from(i32::try_from(days).map_err(|_| out_of_range("date"))?))
        }
        PgKind::Timestamp | PgKind::TimestampTz => {
            let micros = timestamp_micros(array, row).ok_or_else(mismatch)?;
            Some(pg_sys::Datum::from(micros.saturating_sub(PG_EPOCH_MICROS)))
        }
        PgKind::Jsonb => {
            let mut json = String::new();
            write_json(&mut json, array, row);
            let text = CString::new(json).map_err(|_| "JSON text contains a NUL byte".to_owned())?;
            // SAFETY: jsonb_in takes one cstring argument and returns a jsonb datum.
            unsafe { pgrx::direct_function_call_as_datum(pg_sys::jsonb_in, &[text.as_c_str().into_datum()]) }
        }
    })
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use super::*;

    #[pg_test]
    fn lists_become_arrays() {
        let list = arrow::array::ListArray::from_iter_primitive::<types::Int32Type, _, _>(vec![
            Some(vec![Some(1), None, Some(3)]),
            None,
        ]);
        let column = ColumnType::from_type_oid(pg_sys::INT4ARRAYOID).unwrap();
        let datum = column.to_datum(&list, 0).unwrap().unwrap();
        let values = unsafe { Vec::<Option<i32>>::from_datum(datum, false) }.unwrap();
        assert_eq!(values, [Some(1), None, Some(3)]);
        assert_eq!(column.to_datum(&list, 1).unwrap(), None);
    }

    #[pg_test]
    fn text_read_in_place_equals_text_made_by_postgresql() {
        let long = "ü7".repeat(5000);
        let values = [Some(""), None, Some("a"), Some(long.as_str()), Some("%7% mit Umlaut: äöü"), Some("x")];
        let strings = arrow::array::StringArray::from(values.to_vec());
        let array: ArrayRef = std::sync::Arc::new(strings);
        let mut reader = ColumnReader::new(ColumnType { kind: PgKind::Text, element: None }, &array);
        assert!(matches!(reader, ColumnReader::Text(..)));
        for (row, expected) in values.iter().enumerate() {
            let datum = reader.datum(row).unwrap();
            // Compared with the text PostgreSQL makes itself, and read back.
            let made = expected.map(|e| e.into_datum().unwrap());
            match (datum, made) {
                (Some(datum), Some(made)) => {
                    // Byte for byte, header included.
                    let bytes = |d: pg_sys::Datum| unsafe {
                        let varlena = d.cast_mut_ptr::<pg_sys::varlena>();
                        std::slice::from_raw_parts(varlena as *const u8, pgrx::varlena::varsize_any(varlena)).to_vec()
                    };
                    assert_eq!(bytes(datum), bytes(made), "row {row}");
                    assert_eq!(unsafe { String::from_datum(datum, false) }.as_deref(), *expected);
                }
                (datum, made) => assert_eq!(datum.is_none(), made.is_none(), "row {row}"),
            }
        }
    }

    /// Numerics built in place are byte for byte those `numeric_in` makes of the same text,
    /// over seeded values of every width and scale (64-bit and 128-bit paths); dates and
    /// timestamps read in place are what the general conversion makes.
    #[pg_test]
    fn values_read_in_place_equal_postgresqls() {
        let bytes = |d: pg_sys::Datum| unsafe {
            let varlena = d.cast_mut_ptr::<pg_sys::varlena>();
            std::slice::from_raw_parts(varlena as *const u8, pgrx::varlena::varsize_any(varlena)).to_vec()
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for scale in [0u32, 1, 2, 4, 5, 9, 18, 19, 20, 34] {
            let mut values: Vec<i128> = vec![0, 1, -1, 9_999, 10_000, i128::from(u64::MAX), -i128::from(u64::MAX) - 1, 10i128.pow(37) - 1];
            values.extend((0..200).map(|_| {
                let wide = (i128::from(next()) << 64 | i128::from(next())) % 10i128.pow(1 + (next() % 37) as u32);
                if next() % 2 == 0 { wide } else { -wide }
            }));
            let array = arrow::array::Decimal128Array::from(values.clone()).with_precision_and_scale(38, scale as i8).unwrap();
            let array: ArrayRef = std::sync::Arc::new(array);
            let mut reader = ColumnReader::new(ColumnType { kind: PgKind::Numeric, element: None }, &array);
            assert!(matches!(reader, ColumnReader::Numeric(..)));
            for (row, &value) in values.iter().enumerate() {
                let made = AnyNumeric::from_str(&decimal_text(value, scale as i8)).unwrap().into_datum().unwrap();
                assert_eq!(bytes(reader.datum(row).unwrap().unwrap()), bytes(made), "{value} at scale {scale}");
            }
        }
        let days: ArrayRef = std::sync::Arc::new(arrow::array::Date32Array::from(vec![Some(0), Some(-719_162), None, Some(2_932_896)]));
        let micros = arrow::array::TimestampMicrosecondArray::from(vec![Some(0), Some(i64::MIN), None, Some(1_767_259_800_500_000)]);
        let micros: ArrayRef = std::sync::Arc::new(micros.with_timezone("UTC"));
        for (kind, array) in [(PgKind::Date, &days), (PgKind::TimestampTz, &micros)] {
            let column = ColumnType { kind, element: None };
            let mut reader = ColumnReader::new(column, array);
            assert!(matches!(reader, ColumnReader::Date(_) | ColumnReader::Timestamp(_)));
            for row in 0..array.len() {
                assert_eq!(reader.datum(row).unwrap(), column.to_datum(array.as_ref(), row).unwrap(), "{kind:?} row {row}");
            }
        }
    }

    #[pg_test]
    fn decimal_text_is_exact() {
        assert_eq!(decimal_text(1234567890, 5), "12345.67890");
        assert_eq!(decimal_text(-150, 2), "-1.50");
        assert_eq!(decimal_text(5, 3), "0.005");
        assert_eq!(decimal_text(7, -2), "700");
    }

    #[pg_test]
    fn declared_types_accept_their_arrow_types() {
        for data_type in [
            DataType::Boolean,
            DataType::Int32,
            DataType::Int64,
            DataType::Float32,
            DataType::Decimal128(10, 5),
            DataType::Utf8,
            DataType::Binary,
            DataType::Date32,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ] {
            let declared = declared_type(&data_type);
            let oid = Spi::get_one::<pg_sys::Oid>(&format!("SELECT '{declared}'::regtype::oid")).unwrap().unwrap();
            let kind = PgKind::from_type_oid(oid).unwrap();
            assert!(kind.accepts(&data_type), "{declared} for {data_type}");
        }
        assert!(!PgKind::Int4.accepts(&DataType::Int64));
        assert!(!PgKind::Bool.accepts(&DataType::Utf8));

        let list = DataType::new_list(DataType::Int32, true);
        assert_eq!(declared_type(&list), "integer[]");
        let int_array = ColumnType::from_type_oid(pg_sys::INT4ARRAYOID).unwrap();
        assert!(int_array.accepts(&list));
        assert!(!int_array.accepts(&DataType::Int32));
        let nested = DataType::new_list(DataType::new_list(DataType::Int32, true), true);
        assert_eq!(declared_type(&nested), "jsonb");
        assert!(!int_array.accepts(&nested));
    }
}

/// The Arrow type a column of PostgreSQL type `oid` (with `typmod`) is stored as when pg_hudi
/// creates a table; `Err` names what cannot be stored.
pub fn stored_type(oid: pg_sys::Oid, typmod: i32) -> Result<DataType, String> {
    Ok(match PgKind::from_type_oid(oid) {
        Some(PgKind::Bool) => DataType::Boolean,
        Some(PgKind::Int2 | PgKind::Int4) => DataType::Int32,
        Some(PgKind::Int8) => DataType::Int64,
        Some(PgKind::Float4) => DataType::Float32,
        Some(PgKind::Float8) => DataType::Float64,
        Some(PgKind::Numeric) => {
            if typmod < pg_sys::VARHDRSZ as i32 {
                return Err("numeric columns need a precision and scale, e.g. numeric(12, 2)".into());
            }
            let packed = typmod - pg_sys::VARHDRSZ as i32;
            let (precision, scale) = ((packed >> 16) & 0xffff, packed & 0xffff);
            if precision > 38 {
                return Err(format!("numeric precision {precision} is over the 38 digits Hudi decimals hold"));
            }
            DataType::Decimal128(precision as u8, scale as i8)
        }
        Some(PgKind::Text) => DataType::Utf8,
        Some(PgKind::Bytea) => DataType::Binary,
        Some(PgKind::Date) => DataType::Date32,
        Some(PgKind::Timestamp) => DataType::Timestamp(TimeUnit::Microsecond, None),
        Some(PgKind::TimestampTz) => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        Some(PgKind::Jsonb) | None => return Err("this type cannot be stored in a Hudi table yet".into()),
    })
}

/// Whether values of PostgreSQL kind `kind` can be written into a table column of `data_type`.
pub fn writable(kind: PgKind, data_type: &DataType) -> bool {
    use DataType as D;
    match kind {
        PgKind::Bool => matches!(data_type, D::Boolean),
        PgKind::Int2 | PgKind::Int4 | PgKind::Int8 => {
            matches!(data_type, D::Int32 | D::Int64 | D::Float32 | D::Float64 | D::Decimal128(..))
        }
        PgKind::Float4 | PgKind::Float8 => matches!(data_type, D::Float32 | D::Float64),
        PgKind::Numeric => matches!(data_type, D::Decimal128(..) | D::Float64),
        PgKind::Text => matches!(data_type, D::Utf8),
        PgKind::Bytea => matches!(data_type, D::Binary),
        PgKind::Date => matches!(data_type, D::Date32),
        PgKind::Timestamp | PgKind::TimestampTz => matches!(data_type, D::Timestamp(TimeUnit::Microsecond, _)),
        PgKind::Jsonb => false,
    }
}

/// Decimal text (`-12.5`) as an unscaled integer at `scale`; `None` if it has more digits.
fn unscaled(text: &str, scale: i8) -> Option<i128> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let frac = frac.trim_end_matches('0');
    if frac.len() > scale.max(0) as usize {
        return None;
    }
    let digits = format!("{int}{frac:0<width$}", width = scale.max(0) as usize);
    digits.parse().ok()
}

/// A `numeric` datum as an unscaled integer at `scale`, read from its varlena in place
/// (`src/include/utils/numeric.h` layout: base-10000 digits, weight, sign, display scale)
/// without a round trip through text. `None` when it cannot be read that way — toasted or
/// compressed, NaN or infinite, more fraction digits than `scale`, beyond `i128` — and the
/// caller takes the text path, which reports those cases.
///
/// # Safety
/// `datum` must point to a `numeric` varlena.
unsafe fn numeric_unscaled(datum: pg_sys::Datum, scale: i8) -> Option<i128> {
    let varlena = datum.cast_mut_ptr::<u8>().cast_const();
    let first = *varlena;
    // Little-endian varlena headers: 1-byte (low bit set; 0x01 alone is a TOAST pointer),
    // or 4-byte uncompressed (low two bits clear).
    let (data, len) = if first & 0x01 == 0x01 {
        if first == 0x01 {
            return None;
        }
        (varlena.add(1), ((first >> 1) & 0x7F) as usize - 1)
    } else if first & 0x03 == 0x00 {
        let header = u32::from_le_bytes(std::ptr::read_unaligned(varlena as *const [u8; 4]));
        (varlena.add(4), ((header >> 2) & 0x3FFF_FFFF) as usize - 4)
    } else {
        return None;
    };
    let bytes = std::slice::from_raw_parts(data, len);
    let word = |i: usize| bytes.get(i..i + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let header = word(0)?;
    let (negative, weight, digits_at) = match header & 0xC000 {
        0xC000 => return None, // NaN, +/-Infinity
        0x8000 => {
            // Short format: sign bit, display scale, 7-bit signed weight in the header.
            let weight = (header & 0x003F) as i32 - if header & 0x0040 != 0 { 0x40 } else { 0 };
            (header & 0x2000 != 0, weight, 2)
        }
        sign => (sign == 0x4000, word(2)? as i16 as i32, 4),
    };
    let digits = bytes.get(digits_at..)?.chunks_exact(2).map(|b| i16::from_le_bytes([b[0], b[1]]) as i128);
    let count = (len - digits_at) as i32 / 2;
    let mut value: i128 = 0;
    for digit in digits {
        value = value.checked_mul(10_000)?.checked_add(digit)?;
    }
    // value x 10000^(weight - count + 1), at `scale` decimal places.
    let exponent = 4 * (weight - count + 1) + i32::from(scale);
    let value = if exponent >= 0 {
        value.checked_mul(10i128.checked_pow(exponent as u32)?)?
    } else {
        let divisor = 10i128.checked_pow(exponent.unsigned_abs())?;
        if value % divisor != 0 {
            return None;
        }
        value / divisor
    };
    Some(if negative { -value } else { value })
}

/// Rows being written, column by column, as Arrow arrays of the table's data columns.
pub struct RowBuffer {
    schema: arrow::datatypes::SchemaRef,
    builders: Vec<Box<dyn arrow::array::ArrayBuilder>>,
    rows: usize,
}

impl RowBuffer {
    pub fn new(schema: arrow::datatypes::SchemaRef) -> RowBuffer {
        // Small: most buffers hold a statement's rows, often one (a buffered write's is made per
        // transaction); a builder grows by doubling, and [`Self::take`] sizes the next ones.
        let builders = schema.fields().iter().map(|f| arrow::array::make_builder(f.data_type(), 16)).collect();
        RowBuffer { schema, builders, rows: 0 }
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    /// Appends one row: for each table column, the datum of kind `kind` (or NULL / absent).
    pub fn push(&mut self, values: &[Option<(pg_sys::Datum, PgKind)>]) -> Result<(), ConversionError> {
        use arrow::array::*;
        for ((builder, field), value) in self.builders.iter_mut().zip(self.schema.fields()).zip(values) {
            let any = builder.as_any_mut();
            macro_rules! append {
                ($builder:ty, $value:expr) => {{
                    let b = any.downcast_mut::<$builder>().ok_or("internal: builder type")?;
                    match value {
                        None => b.append_null(),
                        Some((datum, kind)) => b.append_value($value(*datum, *kind)?),
                    }
                }};
            }
            let int = |datum: pg_sys::Datum, kind: PgKind| -> Result<i64, ConversionError> {
                // SAFETY: the datum has the attribute's type, `kind`.
                unsafe {
                    Ok(match kind {
                        PgKind::Int2 => i64::from(i16::from_datum(datum, false).unwrap_or_default()),
                        PgKind::Int4 => i64::from(i32::from_datum(datum, false).unwrap_or_default()),
                        _ => i64::from_datum(datum, false).unwrap_or_default(),
                    })
                }
            };
            let name = field.name();
            match field.data_type() {
                DataType::Boolean => append!(BooleanBuilder, |d, _| Ok::<_, String>(unsafe { bool::from_datum(d, false) }.unwrap_or_default())),
                DataType::Int32 => append!(Int32Builder, |d, k| i32::try_from(int(d, k)?)
                    .map_err(|_| format!("value out of range for column {name} (integer)"))),
                DataType::Int64 => append!(Int64Builder, int),
                DataType::Float32 | DataType::Float64 => {
                    let float = |d: pg_sys::Datum, k: PgKind| -> Result<f64, ConversionError> {
                        // SAFETY: the datum has the attribute's type, `k`.
                        unsafe {
                            Ok(match k {
                                PgKind::Float4 => f64::from(f32::from_datum(d, false).unwrap_or_default()),
                                PgKind::Float8 => f64::from_datum(d, false).unwrap_or_default(),
                                PgKind::Numeric => AnyNumeric::from_datum(d, false)
                                    .map(|n| n.to_string().parse().unwrap_or(f64::NAN))
                                    .unwrap_or_default(),
                                _ => int(d, k)? as f64,
                            })
                        }
                    };
                    if matches!(field.data_type(), DataType::Float32) {
                        append!(Float32Builder, |d, k| float(d, k).map(|f| f as f32))
                    } else {
                        append!(Float64Builder, float)
                    }
                }
                DataType::Decimal128(_, scale) => {
                    let scale = *scale;
                    append!(Decimal128Builder, |d, k: PgKind| {
                        // SAFETY: a numeric datum, read in place when stored plainly.
                        if let Some(value) = (k == PgKind::Numeric).then(|| unsafe { numeric_unscaled(d, scale) }).flatten() {
                            return Ok(value);
                        }
                        let text = if k == PgKind::Numeric {
                            // SAFETY: a numeric datum.
                            unsafe { AnyNumeric::from_datum(d, false) }.map(|n| n.to_string()).unwrap_or_default()
                        } else {
                            int(d, k)?.to_string()
                        };
                        unscaled(&text, scale).ok_or_else(|| format!("value {text} does not fit column {name} ({})", field.data_type()))
                    })
                }
                DataType::Utf8 => {
                    let b = any.downcast_mut::<StringBuilder>().ok_or("internal: builder type")?;
                    match value {
                        None => b.append_null(),
                        // SAFETY: a text-like datum.
                        Some((d, _)) => b.append_value(unsafe { <&str>::from_datum(*d, false) }.unwrap_or_default()),
                    }
                }
                DataType::Binary => {
                    let b = any.downcast_mut::<BinaryBuilder>().ok_or("internal: builder type")?;
                    match value {
                        None => b.append_null(),
                        // SAFETY: a bytea datum.
                        Some((d, _)) => b.append_value(unsafe { <&[u8]>::from_datum(*d, false) }.unwrap_or_default()),
                    }
                }
                DataType::Date32 => append!(Date32Builder, |d: pg_sys::Datum, _| i32::try_from(d.value() as i32 as i64 + PG_EPOCH_DAYS)
                    .map_err(|_| format!("date out of range for column {name}"))),
                DataType::Timestamp(TimeUnit::Microsecond, _) => {
                    let b = any.downcast_mut::<TimestampMicrosecondBuilder>().ok_or("internal: builder type")?;
                    match value {
                        None => b.append_null(),
                        Some((d, _)) => b.append_value((d.value() as i64).saturating_add(PG_EPOCH_MICROS)),
                    }
                }
                other => return Err(format!("column {name} of type {other} cannot be written")),
            }
        }
        self.rows += 1;
        Ok(())
    }

    /// The buffered rows as a batch; the buffer starts over empty.
    pub fn take(&mut self) -> arrow::record_batch::RecordBatch {
        self.finish_batch(true)
    }

    /// The buffered rows as a batch, the buffer's last: its builders are not made again (a
    /// one-row buffered transaction made them twice).
    pub fn finish(mut self) -> arrow::record_batch::RecordBatch {
        self.finish_batch(false)
    }

    /// The rows as a batch; with `again`, new builders sized for as many rows.
    fn finish_batch(&mut self, again: bool) -> arrow::record_batch::RecordBatch {
        let rows = self.rows;
        let columns: Vec<arrow::array::ArrayRef> = self
            .builders
            .iter_mut()
            .zip(self.schema.fields())
            .map(|(b, f)| {
                let array = b.finish();
                // The next batch is likely as large: size the builder for it up front instead
                // of growing (and copying) its buffers from nothing again.
                if again {
                    *b = match array.as_string_opt::<i32>() {
                        Some(strings) => Box::new(arrow::array::StringBuilder::with_capacity(rows, strings.value_data().len())),
                        None => arrow::array::make_builder(f.data_type(), rows),
                    };
                }
                // Builders drop timezones; put the column's type back.
                match array.data_type() == f.data_type() {
                    true => array,
                    false => arrow::compute::cast(&array, f.data_type()).unwrap_or(array),
                }
            })
            .collect();
        self.rows = 0;
        arrow::record_batch::RecordBatch::try_new(self.schema.clone(), columns).expect("columns match the schema")
    }
}
