//! Key generation (hudi-format.md §3): how a record's key and partition path are made from its
//! fields, and so what a partition path says about the records in it.

use std::collections::BTreeMap;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::DataType;

use crate::error::{Error, ErrorKind, Result};
use crate::table::TableConfig;

/// How a record key is made of its fields' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum KeyFormat {
    /// The single key field's value (the simple and non-partitioned generators).
    Value,
    /// `f1:v1,f2:v2` (the complex generator; also Spark's for one field), a NULL value
    /// written as `__null__` and an empty one as `__empty__`; a key whose every value is NULL
    /// or empty is NULL (Hudi refuses to write it).
    Named,
}

impl KeyFormat {
    /// What pg_hudi writes for a key of `fields` fields.
    pub fn written_for(fields: usize) -> KeyFormat {
        if fields == 1 { KeyFormat::Value } else { KeyFormat::Named }
    }
}

/// The record keys of rows whose key fields `fields` have the values `columns` (of any type
/// with a text form; see [`KeyFormat`] for which NULLs make NULL keys). An error unless there is one column per field and
/// at least one field: no key is made of nothing.
pub fn record_keys(fields: &[String], columns: &[ArrayRef], format: KeyFormat) -> Result<StringArray> {
    if fields.is_empty() || fields.len() != columns.len() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("a record key of {} fields cannot be made of {} columns", fields.len(), columns.len()),
        ));
    }
    let text = columns
        .iter()
        .map(|c| {
            if let Some(ints) = c.as_primitive_opt::<arrow::datatypes::Int64Type>() {
                // The common key, without the cast kernel's generality (probes format one).
                return Ok(ints.iter().map(|v| v.map(|v| v.to_string())).collect::<StringArray>());
            }
            let cast = arrow::compute::cast(c, &DataType::Utf8)
                .map_err(|e| Error::new(ErrorKind::InvalidArgument, "cannot format key values").with_source(e))?;
            Ok(cast.as_string::<i32>().clone())
        })
        .collect::<Result<Vec<StringArray>>>()?;
    let rows = text.first().map_or(0, |c| c.len());
    match (format, text.as_slice()) {
        (KeyFormat::Value, [single]) => Ok(single.clone()),
        (KeyFormat::Value, _) => Err(Error::new(ErrorKind::InvalidArgument, "a record key of several fields names them")),
        (KeyFormat::Named, _) => {
            use std::fmt::Write;
            let mut keys = arrow::array::StringBuilder::with_capacity(rows, rows * 16 * fields.len());
            for row in 0..rows {
                // As Hudi's complex generator: a part may be NULL or empty, not every part.
                if text.iter().all(|c| c.is_null(row) || c.value(row).is_empty()) {
                    keys.append_null();
                    continue;
                }
                for (i, (field, column)) in fields.iter().zip(&text).enumerate() {
                    let value = match column.is_null(row) {
                        true => "__null__",
                        false if column.value(row).is_empty() => "__empty__",
                        false => column.value(row),
                    };
                    let _ = write!(keys, "{}{field}:{value}", if i > 0 { "," } else { "" });
                }
                keys.append_value("");
            }
            Ok(keys.finish())
        }
    }
}

/// Every record key that a row whose key fields have the texts `values` (one per field of
/// `config.record_key_fields`, in that order) may have been written with: one field's key is
/// its value or `field:value`, as generators differ on that (see the lookup cache's
/// `RecordKeys`); several fields' is `f1:v1,f2:v2`. `None` when the table's key generator is
/// not known to make keys of the values as they are, so that no key can be ruled out.
pub fn possible_record_keys(config: &TableConfig, values: &[&str]) -> Option<Vec<String>> {
    if values.len() != config.record_key_fields.len() || values.is_empty() || !writes_values_verbatim(config) {
        return None;
    }
    let named = |(field, value): (&String, &&str)| format!("{field}:{}", if value.is_empty() { "__empty__" } else { value });
    let named: Vec<String> = config.record_key_fields.iter().zip(values).map(named).collect();
    Some(match values {
        [single] => vec![(*single).to_owned(), named.join(",")],
        _ => vec![named.join(",")],
    })
}

/// The values, as texts, of the key and partition fields of a record whose record key and
/// partition path are `record_key` and `partition_path`, as far as the table's key generator
/// lets them be read back: key fields from the record key (every built-in generator writes a
/// key field's value as it is), partition fields from the path when its levels are the values
/// ([`partition_values`]; a timestamp-based generator's levels are formatted times and tell
/// nothing). A field in both is taken from the key, which holds it exactly. A field it cannot
/// tell is absent; one whose value was NULL is `None`. What a `D` row of a change read carries.
pub fn key_field_values(config: &TableConfig, record_key: &str, partition_path: Option<&str>) -> BTreeMap<String, Option<String>> {
    let mut values = partition_path.and_then(|path| partition_values(config, path)).unwrap_or_default();
    if let Some(keys) = record_key_values(config, record_key) {
        values.extend(config.record_key_fields.iter().cloned().zip(keys));
    }
    values
}

/// The values of the key fields a record key was made of, one per field of
/// `config.record_key_fields`: `None` for a NULL (`__null__`), `""` for `__empty__`. `None`
/// altogether when the key generator is one Hudi does not ship, or the key is not of the form
/// `f1:v1,f2:v2` that several fields make.
fn record_key_values(config: &TableConfig, record_key: &str) -> Option<Vec<Option<String>>> {
    let fields = &config.record_key_fields;
    let generator = generator_name(config);
    let known = matches!(
        generator.as_deref(),
        None | Some("SIMPLE" | "COMPLEX" | "NON_PARTITION" | "TIMESTAMP" | "CUSTOM")
    );
    if !known || fields.is_empty() {
        return None;
    }
    let named_value = |text: &str| match text {
        "__null__" => None,
        "__empty__" => Some(String::new()),
        text => Some(text.to_owned()),
    };
    if let [field] = fields.as_slice() {
        // The simple, time-based and non-partitioned generators write one field's value as it
        // is; the complex one `field:value` (Hudi 1.x may write the value alone).
        let named = record_key.strip_prefix(field.as_str()).and_then(|rest| rest.strip_prefix(':'));
        return Some(vec![match named {
            Some(text) if matches!(generator.as_deref(), None | Some("COMPLEX")) => named_value(text),
            _ => Some(record_key.to_owned()),
        }]);
    }
    // `f1:v1,f2:v2`: a value runs up to the next field's `,name:`.
    let mut rest = record_key.strip_prefix(fields[0].as_str())?.strip_prefix(':')?;
    let mut values = Vec::with_capacity(fields.len());
    for next in &fields[1..] {
        let separator = format!(",{next}:");
        let end = rest.find(&separator)?;
        values.push(named_value(&rest[..end]));
        rest = &rest[end + separator.len()..];
    }
    values.push(named_value(rest));
    Some(values)
}

/// The table's key generator as a type name (`SIMPLE`, `COMPLEX`, `NON_PARTITION`,
/// `TIMESTAMP`, `CUSTOM`), from `hoodie.table.keygenerator.type` or Hudi's class for it
/// (the Avro variants too); the class name itself, upper-cased, for one Hudi does not ship;
/// `None` when the table names none.
fn generator_name(config: &TableConfig) -> Option<String> {
    let generator = config.key_generator.as_deref()?;
    let name = generator.rsplit('.').next().unwrap_or(generator).to_ascii_uppercase();
    let builtin = !generator.contains('.') || generator.starts_with("org.apache.hudi.keygen.");
    Some(match name.trim_end_matches("KEYGENERATOR").trim_end_matches("AVRO").trim_end_matches('_') {
        "SIMPLE" if builtin => "SIMPLE".to_owned(),
        "COMPLEX" if builtin => "COMPLEX".to_owned(),
        "NONPARTITIONED" | "NON_PARTITION" if builtin => "NON_PARTITION".to_owned(),
        "TIMESTAMPBASED" | "TIMESTAMP" if builtin => "TIMESTAMP".to_owned(),
        "CUSTOM" if builtin => "CUSTOM".to_owned(),
        _ => name,
    })
}

/// The partition level of a NULL or empty value (Hive's convention, which Hudi follows).
pub const DEFAULT_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// What older Hudi versions wrote for NULL or empty values, indistinguishable from the value
/// "default" itself.
const LEGACY_DEFAULT_PARTITION: &str = "default";

/// Whether the table's key generator writes partition field values (and record key values) as
/// they are, so that a path level can be read back as its field's value: the simple, complex
/// and non-partitioned generators. Timestamp-based, custom and user-defined generators format or transform values
/// (`yyyy/MM/dd` of a timestamp, `field:type` specs), and their levels are not the values.
fn writes_values_verbatim(config: &TableConfig) -> bool {
    matches!(generator_name(config).as_deref(), None | Some("SIMPLE" | "COMPLEX" | "NON_PARTITION"))
}

/// The partition field values a partition path encodes: hive style (`f=v/g=w`) or plain
/// (`v/w`), one level per field, URL-decoded when the table encodes them. A value is `None`
/// when the level does not tell it (NULL, empty, or the legacy `default`). `None` altogether
/// when the levels are not the fields' values: the path does not have one level per field, or
/// the key generator formats values.
pub fn partition_values(config: &TableConfig, partition_path: &str) -> Option<BTreeMap<String, Option<String>>> {
    if config.partition_fields.is_empty() || !writes_values_verbatim(config) {
        return None;
    }
    let levels: Vec<&str> = partition_path.split('/').collect();
    if levels.len() != config.partition_fields.len() {
        return None;
    }
    let mut values = BTreeMap::new();
    for (field, level) in config.partition_fields.iter().zip(levels) {
        let text = if config.hive_style_partitioning {
            let (name, value) = level.split_once('=')?;
            if name != field {
                return None;
            }
            value
        } else {
            level
        };
        let value = if config.url_encode_partitions {
            percent_encoding::percent_decode_str(text).decode_utf8().ok()?.into_owned()
        } else {
            text.to_owned()
        };
        let known = value != DEFAULT_PARTITION && value != LEGACY_DEFAULT_PARTITION;
        values.insert(field.clone(), known.then_some(value));
    }
    Some(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &[(&str, &str)]) -> TableConfig {
        TableConfig::for_tests("city", extra)
    }

    fn value(config: &TableConfig, path: &str) -> Option<Option<String>> {
        partition_values(config, path).map(|v| v["city"].clone())
    }

    /// Keys of no fields, or of other columns than fields, are an error: an empty array
    /// would be indexed by row later.
    #[test]
    fn record_keys_need_one_column_per_field() {
        let ids: ArrayRef = std::sync::Arc::new(arrow::array::Int64Array::from(vec![1, 2]));
        for format in [KeyFormat::Value, KeyFormat::Named] {
            assert!(record_keys(&[], &[], format).is_err(), "{format:?}");
            assert!(record_keys(&[], std::slice::from_ref(&ids), format).is_err(), "{format:?}");
            assert!(record_keys(&["a".into(), "b".into()], std::slice::from_ref(&ids), format).is_err(), "{format:?}");
        }
        assert_eq!(record_keys(&["id".into()], &[ids], KeyFormat::Named).unwrap().value(1), "id:2");
    }

    /// As Hudi's complex generator writes them: NULL and empty parts have placeholders, and
    /// only a key with no part that has a value is NULL.
    #[test]
    fn composite_keys_name_null_and_empty_parts() {
        let ids: ArrayRef = std::sync::Arc::new(arrow::array::Int64Array::from(vec![Some(1), None, None, Some(4)]));
        let cities: ArrayRef = std::sync::Arc::new(StringArray::from(vec![None, Some(""), None, Some("")]));
        let keys = record_keys(&["id".into(), "city".into()], &[ids.clone(), cities], KeyFormat::Named).unwrap();
        assert_eq!(keys.value(0), "id:1,city:__null__");
        assert!(keys.is_null(1) && keys.is_null(2), "no part with a value");
        assert_eq!(keys.value(3), "id:4,city:__empty__");
        assert!(record_keys(&["id".into()], &[ids], KeyFormat::Value).unwrap().is_null(1));
    }

    #[test]
    fn verbatim_generators_give_values_back() {
        let plain = config(&[]);
        assert_eq!(value(&plain, "paris"), Some(Some("paris".into())));
        assert_eq!(value(&plain, DEFAULT_PARTITION), Some(None));
        assert_eq!(value(&plain, "default"), Some(None));
        assert_eq!(value(&plain, "a/b"), None, "one level per field");
        let hive = config(&[("hoodie.datasource.write.hive_style_partitioning", "true"), ("hoodie.table.keygenerator.type", "SIMPLE")]);
        assert_eq!(value(&hive, "city=a=b"), Some(Some("a=b".into())));
        assert_eq!(value(&hive, "town=paris"), None);
        let encoded = config(&[("hoodie.datasource.write.partitionpath.urlencode", "true")]);
        assert_eq!(value(&encoded, "a%2Fb%25"), Some(Some("a/b%".into())));
        let class = config(&[("hoodie.table.keygenerator.class", "org.apache.hudi.keygen.ComplexKeyGenerator")]);
        assert_eq!(value(&class, "x"), Some(Some("x".into())));
    }

    /// `D` rows read their key fields back from record keys of every built-in generator, and
    /// partition fields from paths whose levels are values.
    #[test]
    fn key_fields_are_read_back_from_keys_and_paths() {
        let values = |c: &TableConfig, key: &str, path: Option<&str>| {
            key_field_values(c, key, path).into_iter().collect::<Vec<(String, Option<String>)>>()
        };
        let some = |f: &str, v: &str| (f.to_owned(), Some(v.to_owned()));
        // Ours and Spark's simple generator: the value as it is, even one that looks named.
        let simple = TableConfig::for_tests("city", &[("hoodie.table.keygenerator.type", "SIMPLE")]);
        assert_eq!(values(&simple, "id:7", Some("paris")), [some("city", "paris"), some("id", "id:7")]);
        // The complex generator names one field or several; placeholders are NULL and empty.
        let complex = TableConfig::for_tests(
            "city",
            &[("hoodie.table.keygenerator.class", "org.apache.hudi.keygen.ComplexAvroKeyGenerator")],
        );
        assert_eq!(values(&complex, "id:7", None), [some("id", "7")]);
        assert_eq!(values(&complex, "7", None), [some("id", "7")], "Hudi 1.x's encoding of one field");
        let mut two = complex.clone();
        two.record_key_fields = vec!["id".into(), "city".into()];
        assert_eq!(values(&two, "id:7,city:a,city:b", Some("x")), [some("city", "a,city:b"), some("id", "7")]);
        assert_eq!(values(&two, "id:__null__,city:__empty__", None), [("city".into(), Some(String::new())), ("id".into(), None)]);
        assert_eq!(values(&two, "7|a", None), [], "not the form several fields make");
        // Time-based: the key is the value; the path's levels are formatted times.
        let timed = TableConfig::for_tests("city", &[("hoodie.table.keygenerator.type", "TIMESTAMP_AVRO")]);
        assert_eq!(values(&timed, "TXN-1", Some("2024/01/15/10")), [some("id", "TXN-1")]);
        let unknown = TableConfig::for_tests("city", &[("hoodie.table.keygenerator.class", "com.example.SimpleKeyGenerator")]);
        assert_eq!(values(&unknown, "7", Some("paris")), []);
    }

    #[test]
    fn formatting_generators_tell_nothing() {
        for generator in ["TIMESTAMP", "CUSTOM", "org.apache.hudi.keygen.TimestampBasedKeyGenerator", "com.example.MyKeyGen"] {
            let c = config(&[("hoodie.table.keygenerator.type", generator)]);
            assert_eq!(value(&c, "20240115"), None, "{generator}");
        }
    }
}
