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

/// The Avro record schema of `schema` (data columns only, no meta fields), every field a
/// nullable union as Spark writes them, named `<table>_record` in namespace `hoodie.<table>`.
pub fn avro_record_schema(table: &str, schema: &Schema) -> Result<String> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| Ok(json!({"name": f.name(), "type": [avro_type(f.name(), f.data_type())?, "null"], "default": null})))
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({
        "type": "record",
        "name": format!("{table}_record"),
        "namespace": format!("hoodie.{table}"),
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
        apache_avro::Schema::parse_str(&avro).unwrap();
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
