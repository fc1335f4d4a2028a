//! Arrow record batches in the exact JSON form of the fixtures' `expected/*.json` files.
//!
//! Those files were written by Python: `pyarrow.Table.from_batches(batches).to_pylist()`, then
//! every value normalised for JSON. This module reproduces that pipeline in Rust:
//!
//! | Arrow type                                   | JSON                                           |
//! |----------------------------------------------|------------------------------------------------|
//! | null (any type)                              | `null`                                         |
//! | Boolean                                      | bool                                           |
//! | Int8 … Int64, UInt8 … UInt64                 | integer                                        |
//! | Float16, Float32                             | number, widened exactly to f64 (as pyarrow)    |
//! | Float64                                      | number                                         |
//! | Utf8, LargeUtf8, Utf8View                    | string                                         |
//! | Binary, LargeBinary, BinaryView, FixedSizeBinary | lowercase hex string                       |
//! | Decimal32/64/128/256                         | Python `str(decimal.Decimal)`                  |
//! | Date32, Date64                               | Python `str(datetime.date)`: `2023-04-01`      |
//! | Time32, Time64                               | Python `str(datetime.time)`: `12:01:00[.ffffff]` |
//! | Timestamp (any unit, with or without tz)     | Python `str(datetime.datetime)`                |
//! | List, LargeList, FixedSizeList               | array                                          |
//! | Struct                                       | object                                         |
//! | Map                                          | array of `[key, value]` pairs                  |
//! | Dictionary                                   | its decoded value                              |
//!
//! Other types (durations, intervals, unions, …) never occur in the fixtures and panic.
//!
//! Objects are `serde_json::Map`s, which (without serde_json's `preserve_order` feature) keep
//! keys sorted rather than in field order; equality is unaffected.
//!
//! Date and time rendering uses `arrow::temporal_conversions` and the inherent `format` of the
//! chrono values it returns (chrono is not a direct dependency of the engine).

// Integration tests each include `mod common;` and use only part of it.
#![allow(dead_code)]

use std::path::Path;
use std::str::FromStr;

use arrow::array::timezone::Tz;
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Date32Type, Date64Type, Decimal128Type, Decimal256Type,
    Decimal32Type, Decimal64Type, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, Time32MillisecondType, Time32SecondType, Time64MicrosecondType,
    Time64NanosecondType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow::record_batch::RecordBatch;
use arrow::temporal_conversions::{as_date, as_datetime, as_datetime_with_timezone, as_time};
use serde_json::{Map, Number, Value};

/// The column the expected files leave out: it names data files, not data.
const FILE_NAME_COLUMN: &str = "_hoodie_file_name";
/// First sort key of the expected rows.
const PARTITION_PATH_COLUMN: &str = "_hoodie_partition_path";
/// Second sort key of the expected rows.
const RECORD_KEY_COLUMN: &str = "_hoodie_record_key";

/// Rows of `batches` in the fixtures' expected-JSON form: `_hoodie_file_name` dropped, values normalised, sorted.
///
/// Rows are sorted (stably) by (`_hoodie_partition_path`, `_hoodie_record_key`), a null or
/// missing value counting as `""`, exactly like the Python that wrote the expected files.
pub fn rows_as_expected_json(batches: &[RecordBatch]) -> Vec<Value> {
    let mut rows = Vec::new();
    for batch in batches {
        let schema = batch.schema();
        let columns: Vec<(&str, Vec<Value>)> = schema
            .fields()
            .iter()
            .zip(batch.columns())
            .filter(|(field, _)| field.name() != FILE_NAME_COLUMN)
            .map(|(field, column)| (field.name().as_str(), values(column)))
            .collect();
        for row in 0..batch.num_rows() {
            let object: Map<String, Value> = columns
                .iter()
                .map(|(name, column)| (name.to_string(), column[row].clone()))
                .collect();
            rows.push(Value::Object(object));
        }
    }
    rows.sort_by(|a, b| sort_key(a).cmp(&sort_key(b)));
    rows
}

/// The parsed `expected/<zip path with / as __, no .zip>.json` for a fixture zip path relative to the fixtures root (use `super::fixtures_root()` from common/mod.rs).
///
/// E.g. `sample_table/cow/v8_nonpartitioned.zip` → `expected/sample_table__cow__v8_nonpartitioned.json`.
pub fn load_expected(relative_zip: &Path) -> Value {
    let stem = relative_zip.with_extension("");
    let name = stem
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("__");
    let path = super::fixtures_root()
        .join("expected")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read expected rows {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("cannot parse expected rows {}: {e}", path.display()))
}

/// Panics with a readable message (fixture name, first differing row index, both rows pretty-printed, row counts) when `actual` differs from `expected["rows"]`. Compares floats with == after both went through serde_json (the expected file has Python's repr of the double; serde_json parses it back to the same f64).
///
/// "Both went through serde_json" is literal: `actual` is serialised to JSON text and parsed
/// back before comparing, so both sides' floats come out of the same text-to-f64 parser (serde_json
/// is built without `float_roundtrip`, whose absence can make parsing differ from the exact
/// value by one ulp; Python's repr and serde_json's output are both the shortest round-trip
/// digits, so both sides parse identically).
pub fn assert_rows_match(fixture: &str, actual: &[Value], expected: &Value) {
    let expected_rows = expected
        .get("rows")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{fixture}: expected JSON has no \"rows\" array"));
    let actual_text = serde_json::to_string(actual).expect("JSON values always serialise");
    let actual_rows: Vec<Value> =
        serde_json::from_str(&actual_text).expect("serde_json re-reads its own output");

    let first_difference = actual_rows
        .iter()
        .zip(expected_rows)
        .position(|(a, e)| a != e)
        .or_else(|| {
            let shorter = actual_rows.len().min(expected_rows.len());
            (actual_rows.len() != expected_rows.len()).then_some(shorter)
        });
    let Some(index) = first_difference else {
        return;
    };

    let actual_row = actual_rows.get(index);
    let expected_row = expected_rows.get(index);
    let columns = match (actual_row, expected_row) {
        (Some(Value::Object(a)), Some(Value::Object(e))) => {
            let mut names: Vec<&String> = a.keys().chain(e.keys()).collect();
            names.sort();
            names.dedup();
            names.retain(|name| a.get(*name) != e.get(*name));
            format!("\ndiffering columns: {names:?}")
        }
        _ => String::new(),
    };
    panic!(
        "{fixture}: rows differ at index {index} (actual {} rows, expected {} rows){columns}\n\
         actual row {index}:\n{}\nexpected row {index}:\n{}",
        actual_rows.len(),
        expected_rows.len(),
        pretty(actual_row),
        pretty(expected_row),
    );
}

/// A row pretty-printed for a failure message, or `(no such row)`.
fn pretty(row: Option<&Value>) -> String {
    match row {
        Some(row) => serde_json::to_string_pretty(row).expect("JSON values always serialise"),
        None => "(no such row)".to_string(),
    }
}

/// The (partition path, record key) a row sorts by; null or missing counts as `""`.
fn sort_key(row: &Value) -> (&str, &str) {
    let text = |column| row.get(column).and_then(Value::as_str).unwrap_or("");
    (text(PARTITION_PATH_COLUMN), text(RECORD_KEY_COLUMN))
}

/// One JSON value per slot of `array`, in the expected files' normalised form.
fn values(array: &ArrayRef) -> Vec<Value> {
    let array = array.as_ref();
    match array.data_type() {
        DataType::Null => vec![Value::Null; array.len()],
        DataType::Boolean => {
            let a = array.as_boolean();
            each(array, |i| Value::Bool(a.value(i)))
        }
        DataType::Int8 => integers::<Int8Type>(array),
        DataType::Int16 => integers::<Int16Type>(array),
        DataType::Int32 => integers::<Int32Type>(array),
        DataType::Int64 => integers::<Int64Type>(array),
        DataType::UInt8 => unsigned::<UInt8Type>(array),
        DataType::UInt16 => unsigned::<UInt16Type>(array),
        DataType::UInt32 => unsigned::<UInt32Type>(array),
        DataType::UInt64 => unsigned::<UInt64Type>(array),
        DataType::Float16 => {
            let a = array.as_primitive::<Float16Type>();
            each(array, |i| float(a.value(i).to_f64()))
        }
        DataType::Float32 => {
            let a = array.as_primitive::<Float32Type>();
            each(array, |i| float(f64::from(a.value(i))))
        }
        DataType::Float64 => {
            let a = array.as_primitive::<Float64Type>();
            each(array, |i| float(a.value(i)))
        }
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            each(array, |i| Value::String(a.value(i).to_string()))
        }
        DataType::LargeUtf8 => {
            let a = array.as_string::<i64>();
            each(array, |i| Value::String(a.value(i).to_string()))
        }
        DataType::Utf8View => {
            let a = array.as_string_view();
            each(array, |i| Value::String(a.value(i).to_string()))
        }
        DataType::Binary => {
            let a = array.as_binary::<i32>();
            each(array, |i| hex(a.value(i)))
        }
        DataType::LargeBinary => {
            let a = array.as_binary::<i64>();
            each(array, |i| hex(a.value(i)))
        }
        DataType::BinaryView => {
            let a = array.as_binary_view();
            each(array, |i| hex(a.value(i)))
        }
        DataType::FixedSizeBinary(_) => {
            let a = array.as_fixed_size_binary();
            each(array, |i| hex(a.value(i)))
        }
        DataType::Decimal32(_, scale) => decimals::<Decimal32Type>(array, *scale),
        DataType::Decimal64(_, scale) => decimals::<Decimal64Type>(array, *scale),
        DataType::Decimal128(_, scale) => decimals::<Decimal128Type>(array, *scale),
        DataType::Decimal256(_, scale) => decimals::<Decimal256Type>(array, *scale),
        DataType::Date32 => dates::<Date32Type>(array),
        DataType::Date64 => dates::<Date64Type>(array),
        DataType::Time32(TimeUnit::Second) => times::<Time32SecondType>(array),
        DataType::Time32(TimeUnit::Millisecond) => times::<Time32MillisecondType>(array),
        DataType::Time64(TimeUnit::Microsecond) => times::<Time64MicrosecondType>(array),
        DataType::Time64(TimeUnit::Nanosecond) => times::<Time64NanosecondType>(array),
        DataType::Timestamp(unit, tz) => {
            let tz = tz.as_deref();
            match unit {
                TimeUnit::Second => timestamps::<TimestampSecondType>(array, tz),
                TimeUnit::Millisecond => timestamps::<TimestampMillisecondType>(array, tz),
                TimeUnit::Microsecond => timestamps::<TimestampMicrosecondType>(array, tz),
                TimeUnit::Nanosecond => timestamps::<TimestampNanosecondType>(array, tz),
            }
        }
        DataType::List(_) => {
            let a = array.as_list::<i32>();
            each(array, |i| Value::Array(values(&a.value(i))))
        }
        DataType::LargeList(_) => {
            let a = array.as_list::<i64>();
            each(array, |i| Value::Array(values(&a.value(i))))
        }
        DataType::FixedSizeList(_, _) => {
            let a = array.as_fixed_size_list();
            each(array, |i| Value::Array(values(&a.value(i))))
        }
        DataType::Struct(fields) => {
            let a = array.as_struct();
            let children: Vec<Vec<Value>> = a.columns().iter().map(values).collect();
            each(array, |i| {
                let object: Map<String, Value> = fields
                    .iter()
                    .zip(&children)
                    .map(|(field, child)| (field.name().clone(), child[i].clone()))
                    .collect();
                Value::Object(object)
            })
        }
        DataType::Map(_, _) => {
            let a = array.as_map();
            each(array, |i| {
                let entries = a.value(i);
                let keys = values(entries.column(0));
                let items = values(entries.column(1));
                let pairs = keys
                    .into_iter()
                    .zip(items)
                    .map(|(k, v)| Value::Array(vec![k, v]));
                Value::Array(pairs.collect())
            })
        }
        DataType::Dictionary(_, _) => {
            let a = array.as_any_dictionary();
            let decoded = values(a.values());
            let keys = a.normalized_keys();
            each(array, |i| decoded[keys[i]].clone())
        }
        other => panic!("no expected-JSON form for Arrow type {other}"),
    }
}

/// `render(i)` for every non-null slot `i` of `array`, `null` for the others.
fn each(array: &dyn Array, render: impl Fn(usize) -> Value) -> Vec<Value> {
    (0..array.len())
        .map(|i| {
            if array.is_null(i) {
                Value::Null
            } else {
                render(i)
            }
        })
        .collect()
}

/// Signed integers as JSON integers.
fn integers<T>(array: &dyn Array) -> Vec<Value>
where
    T: ArrowPrimitiveType,
    T::Native: Into<i64>,
{
    let a = array.as_primitive::<T>();
    each(array, |i| {
        let value: i64 = a.value(i).into();
        Value::from(value)
    })
}

/// Unsigned integers as JSON integers.
fn unsigned<T>(array: &dyn Array) -> Vec<Value>
where
    T: ArrowPrimitiveType,
    T::Native: Into<u64>,
{
    let a = array.as_primitive::<T>();
    each(array, |i| {
        let value: u64 = a.value(i).into();
        Value::from(value)
    })
}

/// A double as a JSON number. JSON has no NaN or infinities; they become the strings Python's
/// `json` module would have written unquoted (`NaN`, `Infinity`, `-Infinity`).
fn float(value: f64) -> Value {
    match Number::from_f64(value) {
        Some(number) => Value::Number(number),
        None if value.is_nan() => Value::String("NaN".to_string()),
        None if value > 0.0 => Value::String("Infinity".to_string()),
        None => Value::String("-Infinity".to_string()),
    }
}

/// Bytes as a lowercase hex string (Python's `bytes.hex()`).
fn hex(bytes: &[u8]) -> Value {
    Value::String(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Decimals (any width) as Python's `str(Decimal)` of the unscaled value with exponent `-scale`.
fn decimals<T>(array: &dyn Array, scale: i8) -> Vec<Value>
where
    T: ArrowPrimitiveType,
    T::Native: std::fmt::Display,
{
    let a = array.as_primitive::<T>();
    each(array, |i| {
        Value::String(python_decimal(&a.value(i).to_string(), scale))
    })
}

/// Python's `str(decimal.Decimal)` (`_pydecimal.Decimal.__str__`, non-engineering) for the
/// integer `unscaled` (decimal text, optionally `-`) times 10^-`scale`.
///
/// Plain notation when the exponent is <= 0 and the adjusted exponent is >= -6
/// (`12345.67890`, `0.00`, `0.000001`); otherwise one digit before the point and an `E`
/// exponent (`1E-7`, `0E-7`, `1.23E+5`).
fn python_decimal(unscaled: &str, scale: i8) -> String {
    let (sign, digits) = match unscaled.strip_prefix('-') {
        Some(digits) => ("-", digits),
        None => ("", unscaled),
    };
    let exponent = -i64::from(scale);
    let digit_count = digits.len() as i64;
    // Position of the decimal point relative to the start of `digits`.
    let left_digits = exponent + digit_count;
    let dot_place = if exponent <= 0 && left_digits > -6 {
        left_digits
    } else {
        1
    };

    let (int_part, frac_part) = if dot_place <= 0 {
        (
            "0".to_string(),
            format!(".{}{digits}", "0".repeat((-dot_place) as usize)),
        )
    } else if dot_place >= digit_count {
        (
            format!("{digits}{}", "0".repeat((dot_place - digit_count) as usize)),
            String::new(),
        )
    } else {
        let (int, frac) = digits.split_at(dot_place as usize);
        (int.to_string(), format!(".{frac}"))
    };
    let exp = if left_digits == dot_place {
        String::new()
    } else {
        format!("E{:+}", left_digits - dot_place)
    };
    format!("{sign}{int_part}{frac_part}{exp}")
}

/// Python's `.ffffff` suffix of a time: empty when the microseconds are zero. `fraction` is
/// chrono's `%.6f` (nanoseconds truncated to microseconds).
fn python_fraction(fraction: String) -> String {
    if fraction == ".000000" {
        String::new()
    } else {
        fraction
    }
}

/// Panics for a non-null temporal value that no Python `datetime` can hold.
fn unrepresentable(kind: &str, value: i64) -> ! {
    panic!("{kind} value {value} is outside the range Python's datetime can represent")
}

/// Dates as Python's `str(datetime.date)`: `2023-04-01`.
fn dates<T>(array: &dyn Array) -> Vec<Value>
where
    T: ArrowPrimitiveType,
    T::Native: Into<i64>,
{
    let a = array.as_primitive::<T>();
    each(array, |i| {
        let raw: i64 = a.value(i).into();
        let date = as_date::<T>(raw).unwrap_or_else(|| unrepresentable("date", raw));
        Value::String(date.format("%Y-%m-%d").to_string())
    })
}

/// Times of day as Python's `str(datetime.time)`: `12:01:00` or `12:01:00.123000`.
fn times<T>(array: &dyn Array) -> Vec<Value>
where
    T: ArrowPrimitiveType,
    T::Native: Into<i64>,
{
    let a = array.as_primitive::<T>();
    each(array, |i| {
        let raw: i64 = a.value(i).into();
        let time = as_time::<T>(raw).unwrap_or_else(|| unrepresentable("time", raw));
        let fraction = python_fraction(time.format("%.6f").to_string());
        Value::String(format!("{}{fraction}", time.format("%H:%M:%S")))
    })
}

/// Timestamps as Python's `str(datetime.datetime)`: `2023-04-01 12:01:00[.ffffff]`, followed by
/// the UTC offset (`+00:00`, `+05:30`) when the Arrow type has a timezone. Nanoseconds are
/// truncated to microseconds.
///
/// `UTC`-like names mean `+00:00`; other timezones must be fixed offsets (`+05:30`, `-0800`,
/// `+05`): arrow is built without `chrono-tz`, so named zones cannot be resolved.
fn timestamps<T>(array: &dyn Array, tz: Option<&str>) -> Vec<Value>
where
    T: ArrowPrimitiveType<Native = i64>,
{
    let a = array.as_primitive::<T>();
    match tz {
        None => each(array, |i| {
            let raw = a.value(i);
            let at = as_datetime::<T>(raw).unwrap_or_else(|| unrepresentable("timestamp", raw));
            let fraction = python_fraction(at.format("%.6f").to_string());
            Value::String(format!("{}{fraction}", at.format("%Y-%m-%d %H:%M:%S")))
        }),
        Some(name) => {
            let zone = timezone(name);
            each(array, |i| {
                let raw = a.value(i);
                let at = as_datetime_with_timezone::<T>(raw, zone)
                    .unwrap_or_else(|| unrepresentable("timestamp", raw));
                let fraction = python_fraction(at.format("%.6f").to_string());
                // The offset's Display is `+HH:MM` (`+HH:MM:SS` with seconds), as in Python.
                Value::String(format!(
                    "{}{fraction}{}",
                    at.format("%Y-%m-%d %H:%M:%S"),
                    at.offset()
                ))
            })
        }
    }
}

/// The Arrow timezone `name`: `UTC`-like names as `+00:00`, anything else as a fixed offset.
fn timezone(name: &str) -> Tz {
    let utc = [
        "UTC",
        "Z",
        "GMT",
        "Etc/UTC",
        "Etc/GMT",
        "Zulu",
        "UCT",
        "Universal",
    ];
    let offset = if utc.iter().any(|u| u.eq_ignore_ascii_case(name)) {
        "+00:00"
    } else {
        name
    };
    Tz::from_str(offset).unwrap_or_else(|e| {
        panic!(
            "timestamp timezone {name:?} is not supported here (only UTC and fixed offsets): {e}"
        )
    })
}
