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
    /// `f1:v1,f2:v2` (the complex generator; also Spark's for one field), an empty value
    /// written as `__empty__`.
    Named,
}

impl KeyFormat {
    /// What pg_hudi writes for a key of `fields` fields.
    pub fn written_for(fields: usize) -> KeyFormat {
        if fields == 1 { KeyFormat::Value } else { KeyFormat::Named }
    }
}

/// The record keys of rows whose key fields `fields` have the values `columns` (of any type
/// with a text form; NULLs make NULL keys). An error unless there is one column per field and
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
                if text.iter().any(|c| c.is_null(row)) {
                    keys.append_null();
                    continue;
                }
                for (i, (field, column)) in fields.iter().zip(&text).enumerate() {
                    let value = column.value(row);
                    let value = if value.is_empty() { "__empty__" } else { value };
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
    let Some(generator) = config.key_generator.as_deref() else { return true };
    let name = generator.rsplit('.').next().unwrap_or(generator).to_ascii_uppercase();
    matches!(
        name.as_str(),
        "SIMPLE"
            | "COMPLEX"
            | "NON_PARTITION"
            | "SIMPLEKEYGENERATOR"
            | "SIMPLEAVROKEYGENERATOR"
            | "COMPLEXKEYGENERATOR"
            | "COMPLEXAVROKEYGENERATOR"
            | "NONPARTITIONEDKEYGENERATOR"
            | "NONPARTITIONEDAVROKEYGENERATOR"
    )
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

    #[test]
    fn formatting_generators_tell_nothing() {
        for generator in ["TIMESTAMP", "CUSTOM", "org.apache.hudi.keygen.TimestampBasedKeyGenerator", "com.example.MyKeyGen"] {
            let c = config(&[("hoodie.table.keygenerator.type", generator)]);
            assert_eq!(value(&c, "20240115"), None, "{generator}");
        }
    }
}
