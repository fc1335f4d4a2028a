//! Avro schemas for tables this engine creates: the record schema Hudi stores in
//! `hoodie.table.create.schema` and in commit metadata, derived from an Arrow schema.

use arrow::datatypes::{DataType, Schema, TimeUnit};
use serde_json::{json, Value};

use crate::error::{Error, ErrorKind, Result};

fn avro_type(name: &str, data_type: &DataType) -> Result<Value> {
    Ok(match data_type {
        DataType::Boolean => json!("boolean"),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => json!("int"),
        DataType::Int64 => json!("long"),
        DataType::Float32 => json!("float"),
        DataType::Float64 => json!("double"),
        DataType::Utf8 | DataType::LargeUtf8 => json!("string"),
        DataType::Binary | DataType::LargeBinary => json!("bytes"),
        DataType::Decimal128(precision, scale) => {
            json!({"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale})
        }
        DataType::Date32 => json!({"type": "int", "logicalType": "date"}),
        DataType::Timestamp(unit, tz) => {
            let unit = match unit {
                TimeUnit::Millisecond | TimeUnit::Second => "millis",
                TimeUnit::Microsecond | TimeUnit::Nanosecond => "micros",
            };
            let kind = if tz.is_some() { "timestamp" } else { "local-timestamp" };
            json!({"type": "long", "logicalType": format!("{kind}-{unit}")})
        }
        other => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("column {name} of type {other} cannot be written to a Hudi table"),
            ))
        }
    })
}

/// The name Hudi gives a table's Avro record: the table name with every character other than
/// an ASCII letter, digit or `_`, and a leading digit, replaced by `__`
/// (`HoodieAvroUtils.sanitizeName`; its patterns match whole code points, so an emoji is one
/// `__`, an `e` with a combining accent `e__`). Spark-written tables of such names have records
/// named so, and readers that compare full names (older Avro) expect it.
pub fn avro_name(table: &str) -> String {
    let mut name = String::with_capacity(table.len());
    for (i, c) in table.chars().enumerate() {
        let allowed = c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit());
        if allowed {
            name.push(c);
        } else {
            name.push_str("__");
        }
    }
    name
}

/// The Avro record schema of `schema` (data columns only, no meta fields), every field a
/// nullable union as Spark writes them, named `<name>_record` in namespace `hoodie.<name>`
/// where `<name>` is the table's [`avro_name`].
pub fn avro_record_schema(table: &str, schema: &Schema) -> Result<String> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| Ok(json!({"name": f.name(), "type": [avro_type(f.name(), f.data_type())?, "null"], "default": null})))
        .collect::<Result<Vec<_>>>()?;
    let name = avro_name(table);
    Ok(json!({
        "type": "record",
        "name": format!("{name}_record"),
        "namespace": format!("hoodie.{name}"),
        "fields": fields,
    })
    .to_string())
}

/// Whether two Arrow types store the same values (timestamps: same unit, any UTC zone name).
pub fn same_type(a: &DataType, b: &DataType) -> bool {
    match (a, b) {
        (DataType::Timestamp(u1, z1), DataType::Timestamp(u2, z2)) => u1 == u2 && z1.is_some() == z2.is_some(),
        (DataType::Int8 | DataType::Int16 | DataType::Int32, DataType::Int8 | DataType::Int16 | DataType::Int32) => true,
        _ => a == b,
    }
}

/// The same record with the five meta fields first: the schema of records in log blocks.
pub fn with_meta_fields(avro_record: &str) -> Result<String> {
    let mut record: Value = serde_json::from_str(avro_record)
        .map_err(|e| Error::new(ErrorKind::Internal, "invalid Avro schema").with_source(e))?;
    let meta = crate::read::schema::META_FIELDS
        .iter()
        .map(|name| json!({"name": name, "type": ["null", "string"], "default": null}));
    let fields = record["fields"].as_array().cloned().unwrap_or_default();
    record["fields"] = Value::Array(meta.chain(fields).collect());
    Ok(record.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;

    /// What Hudi's `HoodieAvroUtils.sanitizeName` makes of these names (computed with its two
    /// patterns in Java 17): the record name and namespace of a table Spark creates.
    #[test]
    fn avro_names_are_hudis_sanitised_table_names() {
        for (table, java) in [
            ("trips", "trips"),
            ("t\u{1F600}", "t__"),
            ("e\u{301}te\u{301}", "e__te__"),
            ("\u{62C}\u{62F}\u{648}\u{644}", "________"),
            ("\u{8868}\u{683C}", "____"),
            ("my-table", "my__table"),
            ("1abc", "__abc"),
            ("\u{1F600}z", "__z"),
            ("a b.c", "a__b__c"),
            ("t?", "t__"),
            ("_x9", "_x9"),
        ] {
            assert_eq!(avro_name(table), java, "{table}");
        }
    }

    /// Whether `full` is a name the Avro specification allows: dotted components of
    /// `[A-Za-z_][A-Za-z0-9_]*`.
    fn is_spec_name(full: &str) -> bool {
        full.split('.').all(|part| {
            let mut chars = part.chars();
            chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    }

    /// The record schema of a table whose name is no Avro name has a name and namespace the
    /// specification allows (and strict readers take), the ones Hudi gives it.
    #[test]
    fn record_schemas_of_any_table_name_have_avro_names() {
        let schema = Schema::new(vec![Field::new("id", DataType::Int64, false)]);
        for table in ["t\u{1F600}", "my-table", "1abc", "a b.c", "\u{8868}\u{683C}", "t\n1"] {
            let avro = avro_record_schema(table, &schema).unwrap();
            crate::avro::parse_schema(&avro).unwrap();
            let json: Value = serde_json::from_str(&avro).unwrap();
            let (name, namespace) = (json["name"].as_str().unwrap(), json["namespace"].as_str().unwrap());
            assert!(is_spec_name(name) && is_spec_name(namespace), "{table}: {name} in {namespace}");
            let sanitised = avro_name(table);
            assert_eq!((name, namespace), (format!("{sanitised}_record").as_str(), format!("hoodie.{sanitised}").as_str()));
        }
    }

    #[test]
    fn arrow_round_trips_through_avro() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("amount", DataType::Decimal128(15, 2), true),
            Field::new("day", DataType::Date32, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
            Field::new("ok", DataType::Boolean, true),
            Field::new("blob", DataType::Binary, true),
            Field::new("x", DataType::Float64, true),
        ]);
        let avro = avro_record_schema("customers", &schema).unwrap();
        crate::avro::parse_schema(&avro).unwrap();
        let back = crate::read::schema::arrow_schema_of_avro(&avro).unwrap();
        for (a, b) in schema.fields().iter().zip(back.fields()) {
            assert_eq!(a.name(), b.name());
            let same = match (a.data_type(), b.data_type()) {
                (DataType::Timestamp(u1, _), DataType::Timestamp(u2, Some(_))) => u1 == u2,
                (x, y) => x == y,
            };
            assert!(same, "{a:?} vs {b:?}");
        }
        let meta = with_meta_fields(&avro).unwrap();
        let parsed: Value = serde_json::from_str(&meta).unwrap();
        assert_eq!(parsed["fields"][2]["name"], "_hoodie_record_key");
        assert_eq!(parsed["fields"][5]["name"], "id");
        assert!(avro_record_schema("t", &Schema::new(vec![Field::new("l", DataType::new_list(DataType::Int32, true), true)])).is_err());
    }
}
