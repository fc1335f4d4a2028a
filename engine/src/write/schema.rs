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

/// A change of a table's columns that Hudi expresses by committing the new schema (its schema
/// evolution on write): old files read NULL for an added column, and their values of a widened
/// one as the wider type.
#[derive(Debug, Clone, PartialEq)]
pub enum SchemaChange {
    /// A nullable column at the end.
    AddColumn { name: String, data_type: DataType },
    /// A column's type made wider: every old value has the same value in the new type.
    Widen { name: String, data_type: DataType },
}

/// Whether every value of `from` is the same value of `to`, in Hudi's schema evolution on
/// write and in readers that cast old files to the new type: integers to wider integers or
/// `double`, `float` to `double`, decimals to more digits before the point at the same scale.
fn widens(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    match (from, to) {
        (Int8 | Int16 | Int32, Int64 | Float64) => true,
        (Float32, Float64) => true,
        (Decimal128(p1, s1), Decimal128(p2, s2)) => s1 == s2 && p2 >= p1,
        _ => false,
    }
}

/// The Avro record schema `current` after `change`, or `None` when the table already has it
/// (another server's foreign table made the same change first). A change Hudi cannot express
/// is an `Unsupported` error with a hint, and a column that is not there (or is already there
/// with another type) an `InvalidArgument` one.
pub fn evolve(current: &str, change: &SchemaChange) -> Result<Option<String>> {
    let invalid = |e: serde_json::Error| Error::new(ErrorKind::Corrupt, "the table's Avro schema is not JSON").with_source(e);
    let mut record: Value = serde_json::from_str(current).map_err(invalid)?;
    let arrow = crate::read::schema::arrow_schema_of_avro(current)?;
    let fields = record["fields"].as_array_mut().ok_or_else(|| Error::new(ErrorKind::Corrupt, "the table's Avro schema is no record"))?;
    match change {
        SchemaChange::AddColumn { name, data_type } => {
            if crate::read::schema::is_reader_column(name) || crate::read::schema::META_FIELDS.contains(&name.as_str()) {
                return Err(Error::new(ErrorKind::InvalidArgument, format!("column {name} is one Hudi or pg_hudi fills itself")));
            }
            if let Ok(existing) = arrow.field_with_name(name) {
                if same_type(existing.data_type(), data_type) {
                    return Ok(None);
                }
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("the Hudi table already has a column {name}, of type {}", existing.data_type()),
                ));
            }
            fields.push(json!({"name": name, "type": ["null", avro_type(name, data_type)?], "default": null}));
        }
        SchemaChange::Widen { name, data_type } => {
            let existing = arrow
                .field_with_name(name)
                .map_err(|_| Error::new(ErrorKind::InvalidArgument, format!("the Hudi table has no column {name}")))?;
            // Avro has one `int` for 8, 16 and 32 bits: narrower is no change of the schema, but
            // a change old values may not fit.
            let narrower = matches!((existing.data_type(), data_type), (DataType::Int32, DataType::Int16 | DataType::Int8) | (DataType::Int16, DataType::Int8));
            if same_type(existing.data_type(), data_type) && !narrower {
                return Ok(None);
            }
            if !widens(existing.data_type(), data_type) {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!("Hudi cannot change column {name} from {} to {data_type}", existing.data_type()),
                )
                .with_hint("Hudi reads old files in a new type only when each old value is the same in it: smallint or integer to bigint or double precision, real to double precision, numeric to more digits of the same scale."));
            }
            let field = fields.iter_mut().find(|f| f["name"] == name.as_str()).ok_or_else(|| Error::new(ErrorKind::Corrupt, format!("no field {name}")))?;
            let new_type = avro_type(name, data_type)?;
            field["type"] = match field["type"].take() {
                Value::Array(members) => Value::Array(members.into_iter().map(|m| if m == "null" { m } else { new_type.clone() }).collect()),
                _ => new_type,
            };
        }
    }
    Ok(Some(record.to_string()))
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

    /// Added columns are nullable and last; widened ones keep their place and nullability;
    /// what Hudi cannot express is refused; what is there already is no change.
    #[test]
    fn schemas_evolve_as_hudi_evolves_them() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("amount", DataType::Decimal128(10, 2), true),
            Field::new("x", DataType::Float32, true),
        ]);
        let avro = avro_record_schema("t", &schema).unwrap();
        let add = SchemaChange::AddColumn { name: "email".into(), data_type: DataType::Utf8 };
        let added = evolve(&avro, &add).unwrap().unwrap();
        let widened = [("id", DataType::Int64), ("amount", DataType::Decimal128(20, 2)), ("x", DataType::Float64)]
            .into_iter()
            .fold(added.clone(), |avro, (name, to)| evolve(&avro, &SchemaChange::Widen { name: name.into(), data_type: to }).unwrap().unwrap());
        crate::avro::parse_schema(&widened).unwrap();
        let arrow = crate::read::schema::arrow_schema_of_avro(&widened).unwrap();
        let types: Vec<(&str, &DataType)> = arrow.fields().iter().map(|f| (f.name().as_str(), f.data_type())).collect();
        assert_eq!(
            types,
            vec![("id", &DataType::Int64), ("amount", &DataType::Decimal128(20, 2)), ("x", &DataType::Float64), ("email", &DataType::Utf8)]
        );
        assert_eq!(evolve(&added, &add).unwrap(), None, "already there");
        assert_eq!(evolve(&widened, &SchemaChange::Widen { name: "id".into(), data_type: DataType::Int64 }).unwrap(), None);
        for (name, to) in [("id", DataType::Int16), ("amount", DataType::Decimal128(20, 3)), ("amount", DataType::Decimal128(8, 2)), ("x", DataType::Utf8)] {
            let err = evolve(&avro, &SchemaChange::Widen { name: name.into(), data_type: to.clone() }).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{name} to {to}: {err}");
        }
        let err = evolve(&avro, &SchemaChange::AddColumn { name: "id".into(), data_type: DataType::Utf8 }).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert_eq!(evolve(&avro, &SchemaChange::AddColumn { name: "_hoodie_record_key".into(), data_type: DataType::Utf8 }).unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(evolve(&avro, &SchemaChange::Widen { name: "nope".into(), data_type: DataType::Int64 }).unwrap_err().kind(), ErrorKind::InvalidArgument);
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
