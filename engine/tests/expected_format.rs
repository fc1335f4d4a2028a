mod common;

// `common::expected` renders Arrow batches exactly like the Python that wrote the fixtures'
// `expected/*.json` (pyarrow `to_pylist()` plus normalisation), and compares against them.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BinaryArray, BinaryViewArray, BooleanArray, Date32Array, Date64Array,
    Decimal128Array, Decimal256Array, Decimal32Array, Decimal64Array, DictionaryArray,
    FixedSizeBinaryArray, FixedSizeListArray, Float32Array, Float64Array, Int16Array, Int32Array,
    Int64Array, Int8Array, LargeBinaryArray, LargeListArray, LargeStringArray, ListArray, MapArray,
    NullArray, StringArray, StringViewArray, StructArray, Time32MillisecondArray,
    Time32SecondArray, Time64MicrosecondArray, Time64NanosecondArray, TimestampMicrosecondArray,
    TimestampMillisecondArray, TimestampNanosecondArray, TimestampSecondArray, UInt16Array,
    UInt32Array, UInt64Array, UInt8Array,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::datatypes::{i256, DataType, Field, Fields, Int32Type};
use arrow::record_batch::RecordBatch;
use serde_json::{json, Value};

use common::expected::{assert_rows_match, load_expected, rows_as_expected_json};

/// 2023-04-01 12:01:00 UTC in seconds since the epoch.
const APRIL_FIRST_1201: i64 = 1_680_350_460;
/// 2023-04-01 in days since the epoch.
const APRIL_FIRST: i32 = 19_448;

/// A batch of the named columns (each field nullable when its array has nulls).
fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).expect("columns of equal length")
}

/// `array` as an `ArrayRef`.
fn arr(array: impl Array + 'static) -> ArrayRef {
    Arc::new(array)
}

/// The rendered values of a single column `c`, in row order.
fn column(array: impl Array + 'static) -> Vec<Value> {
    rows_as_expected_json(&[batch(vec![("c", arr(array))])])
        .into_iter()
        .map(|row| row["c"].clone())
        .collect()
}

/// Decimal128 values with the given scale (precision 38).
fn decimal128(unscaled: Vec<Option<i128>>, scale: i8) -> ArrayRef {
    arr(Decimal128Array::from(unscaled)
        .with_precision_and_scale(38, scale)
        .unwrap())
}

/// A nullable field named `name`.
fn field(name: &str, data_type: DataType) -> Field {
    Field::new(name, data_type, true)
}

/// A `List<item>` whose rows are `lengths` long slices of `values`; `None` lengths are null rows.
fn list(values: ArrayRef, lengths: &[Option<usize>]) -> ListArray {
    let item = Arc::new(field("item", values.data_type().clone()));
    let offsets = OffsetBuffer::from_lengths(lengths.iter().map(|l| l.unwrap_or(0)));
    let nulls = NullBuffer::from(lengths.iter().map(Option::is_some).collect::<Vec<_>>());
    ListArray::new(item, offsets, values, Some(nulls))
}

/// A map whose rows take `lengths` consecutive entries of `keys`/`values`; `None` lengths are null rows.
fn map(keys: ArrayRef, values: ArrayRef, lengths: &[Option<usize>]) -> MapArray {
    let entry_fields = Fields::from(vec![
        Field::new("key", keys.data_type().clone(), false),
        field("value", values.data_type().clone()),
    ]);
    let entries = StructArray::new(entry_fields.clone(), vec![keys, values], None);
    let entries_field = Arc::new(Field::new("entries", DataType::Struct(entry_fields), false));
    let offsets = OffsetBuffer::from_lengths(lengths.iter().map(|l| l.unwrap_or(0)));
    let nulls = NullBuffer::from(lengths.iter().map(Option::is_some).collect::<Vec<_>>());
    MapArray::new(entries_field, offsets, entries, Some(nulls), false)
}

/// A struct of the named children; `valid` marks the non-null rows (all when `None`).
fn structure(children: Vec<(&str, ArrayRef)>, valid: Option<Vec<bool>>) -> StructArray {
    let fields: Fields = children
        .iter()
        .map(|(name, a)| field(name, a.data_type().clone()))
        .collect();
    let arrays = children.into_iter().map(|(_, a)| a).collect();
    StructArray::new(fields, arrays, valid.map(NullBuffer::from))
}

#[test]
fn integers_booleans_and_strings() {
    assert_eq!(
        column(Int8Array::from(vec![Some(-8), None, Some(i8::MAX)])),
        [json!(-8), Value::Null, json!(127)]
    );
    assert_eq!(
        column(Int16Array::from(vec![Some(300), None])),
        [json!(300), Value::Null]
    );
    assert_eq!(
        column(Int32Array::from(vec![Some(15000), None])),
        [json!(15000), Value::Null]
    );
    assert_eq!(
        column(Int64Array::from(vec![Some(i64::MIN), None])),
        [json!(i64::MIN), Value::Null]
    );
    assert_eq!(
        column(UInt8Array::from(vec![Some(255), None])),
        [json!(255), Value::Null]
    );
    assert_eq!(
        column(UInt16Array::from(vec![Some(65535), None])),
        [json!(65535), Value::Null]
    );
    assert_eq!(
        column(UInt32Array::from(vec![Some(u32::MAX), None])),
        [json!(u32::MAX), Value::Null]
    );
    assert_eq!(
        column(UInt64Array::from(vec![Some(u64::MAX), None])),
        [json!(u64::MAX), Value::Null]
    );
    assert_eq!(
        column(BooleanArray::from(vec![Some(true), Some(false), None])),
        [json!(true), json!(false), Value::Null]
    );
    assert_eq!(
        column(StringArray::from(vec![Some("Alice"), Some(""), None])),
        [json!("Alice"), json!(""), Value::Null]
    );
    assert_eq!(
        column(LargeStringArray::from(vec![Some("ünï"), None])),
        [json!("ünï"), Value::Null]
    );
    assert_eq!(
        column(StringViewArray::from(vec![
            Some("a string longer than twelve bytes"),
            None
        ])),
        [json!("a string longer than twelve bytes"), Value::Null]
    );
    assert_eq!(column(NullArray::new(2)), [Value::Null, Value::Null]);
}

#[test]
fn binaries_are_lowercase_hex() {
    let binary = BinaryArray::from(vec![Some(&b"binary data"[..]), Some(&b""[..]), None]);
    assert_eq!(
        column(binary),
        [json!("62696e6172792064617461"), json!(""), Value::Null]
    );
    let large = LargeBinaryArray::from(vec![Some(&[0x00, 0xff, 0xab][..]), None]);
    assert_eq!(column(large), [json!("00ffab"), Value::Null]);
    let view = BinaryViewArray::from(vec![Some(&[0x0a, 0xb0][..]), None]);
    assert_eq!(column(view), [json!("0ab0"), Value::Null]);
    let fixed = FixedSizeBinaryArray::from(vec![Some(&[0xde, 0xad, 0xbe, 0xef][..]), None]);
    assert_eq!(column(fixed), [json!("deadbeef"), Value::Null]);
}

#[test]
fn floats_widen_like_pyarrow() {
    let singles = column(Float32Array::from(vec![
        Some(1.1),
        Some(0.1),
        Some(1.0),
        Some(-3.3),
        None,
    ]));
    assert_eq!(
        singles,
        [
            json!(1.100000023841858),
            json!(0.10000000149011612),
            json!(1.0),
            json!(-3.299999952316284),
            Value::Null
        ]
    );
    assert!(
        singles[2].is_f64(),
        "1.0f32 stays a float, like the expected files' 1.0"
    );

    let doubles = column(Float64Array::from(vec![
        Some(3.14159),
        Some(1e-7),
        Some(0.0),
        None,
    ]));
    assert_eq!(
        doubles,
        [json!(3.14159), json!(1e-7), json!(0.0), Value::Null]
    );

    let halves = arrow::compute::cast(
        &Float32Array::from(vec![Some(1.1), None]),
        &DataType::Float16,
    )
    .unwrap();
    assert_eq!(column(halves), [json!(1.099609375), Value::Null]);

    let special = column(Float64Array::from(vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ]));
    assert_eq!(
        special,
        [json!("NaN"), json!("Infinity"), json!("-Infinity")]
    );
}

#[test]
fn decimals_print_like_python_decimal_str() {
    // (unscaled, scale, Python's str(Decimal)), checked against CPython's decimal module.
    let cases: [(i128, i8, &str); 16] = [
        (1_234_567_890, 5, "12345.67890"),
        (0, 2, "0.00"),
        (-150, 2, "-1.50"),
        (5, 0, "5"),
        (0, 0, "0"),
        (1, 6, "0.000001"),
        (12, 7, "0.0000012"),
        (123_456, 8, "0.00123456"),
        (1_000_000, 7, "0.1000000"),
        (1, 7, "1E-7"),
        (0, 7, "0E-7"),
        (-1, 8, "-1E-8"),
        (100, 9, "1.00E-7"),
        (123, -3, "1.23E+5"),
        (0, -2, "0E+2"),
        (-5, -1, "-5E+1"),
    ];
    for (unscaled, scale, python) in cases {
        assert_eq!(
            column(decimal128(vec![Some(unscaled)], scale)),
            [json!(python)],
            "{unscaled} scale {scale}"
        );
    }
    assert_eq!(column(decimal128(vec![None], 5)), [Value::Null]);

    let wide = Decimal256Array::from(vec![
        Some(i256::from_i128(10).wrapping_pow(40)),
        Some(i256::from_i128(-12345)),
        None,
    ])
    .with_precision_and_scale(76, 2)
    .unwrap();
    assert_eq!(
        column(wide),
        [
            json!("100000000000000000000000000000000000000.00"),
            json!("-123.45"),
            Value::Null
        ]
    );
    let tiny = Decimal256Array::from(vec![i256::from_i128(-12345)])
        .with_precision_and_scale(76, 20)
        .unwrap();
    assert_eq!(column(tiny), [json!("-1.2345E-16")]);

    let small = Decimal32Array::from(vec![Some(125_000), None])
        .with_precision_and_scale(9, 4)
        .unwrap();
    assert_eq!(column(small), [json!("12.5000"), Value::Null]);
    let medium = Decimal64Array::from(vec![Some(-7), None])
        .with_precision_and_scale(18, 3)
        .unwrap();
    assert_eq!(column(medium), [json!("-0.007"), Value::Null]);
}

#[test]
fn dates_and_times_of_day() {
    assert_eq!(
        column(Date32Array::from(vec![Some(APRIL_FIRST), Some(-1), None])),
        [json!("2023-04-01"), json!("1969-12-31"), Value::Null]
    );
    let millis = i64::from(APRIL_FIRST) * 86_400_000;
    assert_eq!(
        column(Date64Array::from(vec![Some(millis), None])),
        [json!("2023-04-01"), Value::Null]
    );

    let noon = 12 * 3600 + 60; // 12:01:00
    assert_eq!(
        column(Time32SecondArray::from(vec![Some(noon), None])),
        [json!("12:01:00"), Value::Null]
    );
    assert_eq!(
        column(Time32MillisecondArray::from(vec![
            noon * 1000 + 123,
            noon * 1000
        ])),
        [json!("12:01:00.123000"), json!("12:01:00")]
    );
    let noon = i64::from(noon);
    assert_eq!(
        column(Time64MicrosecondArray::from(vec![
            Some(noon * 1_000_000 + 1),
            None
        ])),
        [json!("12:01:00.000001"), Value::Null]
    );
    assert_eq!(
        column(Time64NanosecondArray::from(vec![
            noon * 1_000_000_000 + 123_456_789,
            999
        ])),
        [json!("12:01:00.123456"), json!("00:00:00")]
    );
}

#[test]
fn timestamps_print_like_python_datetime_str() {
    let micros = APRIL_FIRST_1201 * 1_000_000;
    let utc = TimestampMicrosecondArray::from(vec![Some(micros), Some(micros + 123_000), None])
        .with_timezone("UTC");
    assert_eq!(
        column(utc),
        [
            json!("2023-04-01 12:01:00+00:00"),
            json!("2023-04-01 12:01:00.123000+00:00"),
            Value::Null
        ]
    );
    let zero = TimestampMicrosecondArray::from(vec![micros + 5]).with_timezone("+00:00");
    assert_eq!(column(zero), [json!("2023-04-01 12:01:00.000005+00:00")]);
    let india = TimestampMicrosecondArray::from(vec![micros]).with_timezone("+05:30");
    assert_eq!(column(india), [json!("2023-04-01 17:31:00+05:30")]);
    let pacific =
        TimestampMillisecondArray::from(vec![APRIL_FIRST_1201 * 1000 + 7]).with_timezone("-08:00");
    assert_eq!(column(pacific), [json!("2023-04-01 04:01:00.007000-08:00")]);

    let naive = TimestampSecondArray::from(vec![Some(APRIL_FIRST_1201), None]);
    assert_eq!(column(naive), [json!("2023-04-01 12:01:00"), Value::Null]);
    let naive_millis = TimestampMillisecondArray::from(vec![APRIL_FIRST_1201 * 1000 + 123]);
    assert_eq!(column(naive_millis), [json!("2023-04-01 12:01:00.123000")]);
    let before_epoch = TimestampMicrosecondArray::from(vec![-1]);
    assert_eq!(column(before_epoch), [json!("1969-12-31 23:59:59.999999")]);

    // Nanoseconds are truncated to microseconds; all-zero microseconds are left out.
    let nanos = APRIL_FIRST_1201 * 1_000_000_000;
    let nano =
        TimestampNanosecondArray::from(vec![nanos + 123_456_789, nanos + 999]).with_timezone("UTC");
    assert_eq!(
        column(nano),
        [
            json!("2023-04-01 12:01:00.123456+00:00"),
            json!("2023-04-01 12:01:00+00:00")
        ]
    );
}

#[test]
fn structs_lists_and_maps_nest() {
    // Struct with a child struct; the second row is null, the third has a null child.
    let child = structure(
        vec![
            (
                "child_field1",
                arr(Float64Array::from(vec![Some(123.456), Some(0.0), None])),
            ),
            (
                "child_field2",
                arr(BooleanArray::from(vec![Some(true), Some(false), None])),
            ),
        ],
        Some(vec![true, true, false]),
    );
    let parent = structure(
        vec![
            (
                "field1",
                arr(StringArray::from(vec![Some("Alice"), Some("x"), None])),
            ),
            ("child_struct", arr(child)),
        ],
        Some(vec![true, false, true]),
    );
    assert_eq!(
        column(parent),
        [
            json!({"field1": "Alice", "child_struct": {"child_field1": 123.456, "child_field2": true}}),
            Value::Null,
            json!({"field1": null, "child_struct": null}),
        ]
    );

    // List of structs: three items, an empty list, a null list, a list holding a null item.
    let items = structure(
        vec![
            (
                "f1",
                arr(StringArray::from(vec![
                    Some("red"),
                    Some("blue"),
                    Some("green"),
                    None,
                ])),
            ),
            (
                "f2",
                arr(Int32Array::from(vec![
                    Some(100),
                    Some(200),
                    Some(300),
                    None,
                ])),
            ),
        ],
        Some(vec![true, true, true, false]),
    );
    let lists = list(arr(items), &[Some(3), Some(0), None, Some(1)]);
    assert_eq!(
        column(lists),
        [
            json!([{"f1": "red", "f2": 100}, {"f1": "blue", "f2": 200}, {"f1": "green", "f2": 300}]),
            json!([]),
            Value::Null,
            json!([null]),
        ]
    );

    // Large and fixed-size lists, including nested lists.
    let large = LargeListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1), None]),
        None,
        Some(vec![]),
    ]);
    assert_eq!(column(large), [json!([1, null]), Value::Null, json!([])]);
    let fixed = FixedSizeListArray::from_iter_primitive::<Int32Type, _, _>(
        vec![Some(vec![Some(1), Some(2)]), None],
        2,
    );
    assert_eq!(column(fixed), [json!([1, 2]), Value::Null]);
    let inner = list(arr(Int64Array::from(vec![1, 2, 3])), &[Some(2), Some(1)]);
    let nested = list(arr(inner), &[Some(2)]);
    assert_eq!(column(nested), [json!([[1, 2], [3]])]);

    // Map of string to struct: two entries, an empty map, a null map, a null value.
    let values = structure(
        vec![
            (
                "v1",
                arr(Float64Array::from(vec![Some(123.456), Some(789.012), None])),
            ),
            (
                "v2",
                arr(BooleanArray::from(vec![Some(true), Some(false), None])),
            ),
        ],
        Some(vec![true, true, false]),
    );
    let keys = arr(StringArray::from(vec!["key1", "key2", "key3"]));
    let maps = map(keys, arr(values), &[Some(2), Some(0), None, Some(1)]);
    assert_eq!(
        column(maps),
        [
            json!([["key1", {"v1": 123.456, "v2": true}], ["key2", {"v1": 789.012, "v2": false}]]),
            json!([]),
            Value::Null,
            json!([["key3", null]]),
        ]
    );
}

#[test]
fn dictionaries_decode_to_their_values() {
    let dictionary: DictionaryArray<Int32Type> = vec![Some("b"), None, Some("a"), Some("b")]
        .into_iter()
        .collect();
    assert_eq!(
        column(dictionary),
        [json!("b"), Value::Null, json!("a"), json!("b")]
    );
}

#[test]
fn file_name_is_dropped_and_rows_sorted_across_batches() {
    let first = batch(vec![
        (
            "_hoodie_record_key",
            arr(StringArray::from(vec![Some("2"), Some("1")])),
        ),
        (
            "_hoodie_partition_path",
            arr(StringArray::from(vec![Some("b"), Some("b")])),
        ),
        (
            "_hoodie_file_name",
            arr(StringArray::from(vec!["f1.parquet", "f1.parquet"])),
        ),
        ("id", arr(Int32Array::from(vec![2, 1]))),
    ]);
    let second = batch(vec![
        (
            "_hoodie_record_key",
            arr(StringArray::from(vec![Some("9"), None, Some("3")])),
        ),
        (
            "_hoodie_partition_path",
            arr(StringArray::from(vec![Some("a"), Some("a"), None])),
        ),
        (
            "_hoodie_file_name",
            arr(StringArray::from(vec![
                "f2.parquet",
                "f2.parquet",
                "f2.parquet",
            ])),
        ),
        ("id", arr(Int32Array::from(vec![9, 0, 3]))),
    ]);
    let rows = rows_as_expected_json(&[first, second]);
    let ids: Vec<_> = rows.iter().map(|row| row["id"].clone()).collect();
    // ("", "3") < ("a", "") < ("a", "9") < ("b", "1") < ("b", "2")
    assert_eq!(ids, [json!(3), json!(0), json!(9), json!(1), json!(2)]);
    assert!(rows
        .iter()
        .all(|row| row.get("_hoodie_file_name").is_none()));
    assert_eq!(
        rows[0],
        json!({"_hoodie_record_key": "3", "_hoodie_partition_path": null, "id": 3})
    );
    assert!(rows_as_expected_json(&[]).is_empty());
}

/// The first row of `sample_table/cow/v8_nonpartitioned`, typed as Spark writes it to Parquet.
fn v8_nonpartitioned_first_row() -> RecordBatch {
    let array_items = structure(
        vec![
            (
                "arr_struct_f1",
                arr(StringArray::from(vec!["red", "blue", "green"])),
            ),
            ("arr_struct_f2", arr(Int32Array::from(vec![100, 200, 300]))),
        ],
        None,
    );
    let map_values = structure(
        vec![
            (
                "map_field_value_struct_f1",
                arr(Float64Array::from(vec![123.456, 789.012])),
            ),
            (
                "map_field_value_struct_f2",
                arr(BooleanArray::from(vec![true, false])),
            ),
        ],
        None,
    );
    let child_struct = structure(
        vec![
            ("child_field1", arr(Float64Array::from(vec![123.456]))),
            ("child_field2", arr(BooleanArray::from(vec![true]))),
        ],
        None,
    );
    let struct_field = structure(
        vec![
            ("field1", arr(StringArray::from(vec!["Alice"]))),
            ("field2", arr(Int32Array::from(vec![30]))),
            ("child_struct", arr(child_struct)),
        ],
        None,
    );
    let text = |s: &str| arr(StringArray::from(vec![s]));
    batch(vec![
        ("_hoodie_commit_time", text("20250713010536861")),
        ("_hoodie_commit_seqno", text("20250713010536861_0_2")),
        ("_hoodie_record_key", text("1")),
        ("_hoodie_partition_path", text("")),
        (
            "_hoodie_file_name",
            text("a-file-name_0-1-2_20250713010536861.parquet"),
        ),
        ("id", arr(Int32Array::from(vec![1]))),
        ("name", text("Alice")),
        ("isActive", arr(BooleanArray::from(vec![false]))),
        ("byteField", arr(Int8Array::from(vec![1]))),
        ("shortField", arr(Int16Array::from(vec![300]))),
        ("intField", arr(Int32Array::from(vec![15000]))),
        ("longField", arr(Int64Array::from(vec![1_234_567_890]))),
        ("floatField", arr(Float32Array::from(vec![1.0]))),
        ("doubleField", arr(Float64Array::from(vec![3.14159]))),
        (
            "decimalField",
            arr(Decimal128Array::from(vec![1_234_567_890])
                .with_precision_and_scale(10, 5)
                .unwrap()),
        ),
        ("dateField", arr(Date32Array::from(vec![APRIL_FIRST]))),
        (
            "timestampField",
            arr(
                TimestampMicrosecondArray::from(vec![APRIL_FIRST_1201 * 1_000_000])
                    .with_timezone("UTC"),
            ),
        ),
        (
            "binaryField",
            arr(BinaryArray::from(vec![&b"binary data"[..]])),
        ),
        ("arrayField", arr(list(arr(array_items), &[Some(3)]))),
        (
            "mapField",
            arr(map(
                arr(StringArray::from(vec!["key1", "key2"])),
                arr(map_values),
                &[Some(2)],
            )),
        ),
        ("structField", arr(struct_field)),
    ])
}

#[test]
fn matches_a_real_fixture_row() {
    let zip = Path::new("sample_table/cow/v8_nonpartitioned.zip");
    let expected = load_expected(zip);
    let first_expected = &expected["rows"][0];
    let actual = rows_as_expected_json(&[v8_nonpartitioned_first_row()]);
    assert_eq!(actual.len(), 1);
    assert_eq!(&actual[0], first_expected);
    assert_rows_match(
        "v8_nonpartitioned (first row)",
        &actual,
        &json!({ "rows": [first_expected] }),
    );
}

#[test]
fn load_expected_maps_zip_paths_to_expected_files() {
    let zip = Path::new("sample_table/cow/v8_nonpartitioned.zip");
    let expected = load_expected(zip);
    assert_eq!(
        expected["fixture"],
        json!("sample_table/cow/v8_nonpartitioned")
    );
    assert_eq!(expected["row_count"], json!(4));
    assert_eq!(expected["rows"].as_array().map(Vec::len), Some(4));
    // The unzipped table is the folder the expected file's fixture name ends with.
    let (_dir, base) = common::unpack(zip);
    assert!(base.ends_with("v8_nonpartitioned"), "{}", base.display());
}

#[test]
fn every_fixture_zip_has_an_expected_file() {
    let zips = common::fixture_zips();
    assert!(!zips.is_empty());
    for zip in zips {
        let expected = load_expected(&zip);
        let name = zip.with_extension("").display().to_string();
        assert_eq!(expected["fixture"], json!(name), "{}", zip.display());
        let rows = expected["rows"].as_array().map(Vec::len);
        assert_eq!(
            expected["row_count"].as_u64(),
            rows.map(|n| n as u64),
            "{}",
            zip.display()
        );
    }
}

#[test]
fn floats_compare_after_a_serde_json_round_trip() {
    // Python's repr of the widened f32, parsed by serde_json as the expected file is.
    let expected: Value =
        serde_json::from_str(r#"{"rows": [{"f": 0.10000000149011612}, {"f": 1.100000023841858}]}"#)
            .unwrap();
    let actual =
        rows_as_expected_json(&[batch(vec![("f", arr(Float32Array::from(vec![0.1, 1.1])))])]);
    assert_rows_match("floats", &actual, &expected);
}

#[test]
#[should_panic(expected = "fixture-x: rows differ at index 1 (actual 2 rows, expected 2 rows)")]
fn mismatched_rows_panic_with_the_first_difference() {
    let expected = json!({"rows": [{"id": 1}, {"id": 2}]});
    assert_rows_match(
        "fixture-x",
        &[json!({"id": 1}), json!({"id": 3})],
        &expected,
    );
}

#[test]
#[should_panic(expected = "rows differ at index 1 (actual 1 rows, expected 2 rows)")]
fn missing_rows_panic_with_the_row_counts() {
    let expected = json!({"rows": [{"id": 1}, {"id": 2}]});
    assert_rows_match("fixture-y", &[json!({"id": 1})], &expected);
}
