//! Filters pushed into scans: conjunctions of `column op constant` and `column IN (...)`.
//! They only ever *skip* data that cannot match (partitions, file groups of other buckets,
//! Parquet row groups whose statistics exclude the value); the caller still evaluates every
//! filter on the rows it gets back.

use std::collections::BTreeMap;

use arrow::array::Array;
use arrow::datatypes::{DataType, Schema, TimeUnit};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::file::metadata::ParquetMetaData;
use parquet::schema::types::SchemaDescriptor;
use serde::{Deserialize, Serialize};

use crate::ordering::OrderingValue;
use crate::table::TableConfig;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl Op {
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::NotEq => "<>",
            Op::Lt => "<",
            Op::LtEq => "<=",
            Op::Gt => ">",
            Op::GtEq => ">=",
        }
    }

    /// The operator with its operands swapped (`c < x` ⇔ `x > c`).
    pub fn commuted(self) -> Op {
        match self {
            Op::Lt => Op::Gt,
            Op::LtEq => Op::GtEq,
            Op::Gt => Op::Lt,
            Op::GtEq => Op::LtEq,
            other => other,
        }
    }
}

/// A constant of a pushed filter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Exact decimal text, e.g. `"12.50"`.
    Decimal(String),
    String(String),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since 1970-01-01 UTC.
    TimestampMicros(i64),
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Decimal(d) => f.write_str(d),
            Scalar::String(s) => write!(f, "'{}'", s.replace('\'', "''")),
            Scalar::Date(d) => write!(f, "date {d}"),
            Scalar::TimestampMicros(t) => write!(f, "timestamp {t}"),
        }
    }
}

fn parse_decimal(text: &str) -> Option<OrderingValue> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = format!("{int}{frac}");
    Some(OrderingValue::Decimal(digits.parse().ok()?, i8::try_from(frac.len()).ok()?))
}

impl Scalar {
    /// The constant as a value comparable with values of `data_type` (units aligned).
    pub fn as_ordering(&self, data_type: &DataType) -> Option<OrderingValue> {
        Some(match (self, data_type) {
            (Scalar::Bool(b), _) => OrderingValue::Bool(*b),
            (Scalar::Int(i), _) => OrderingValue::Int(*i),
            (Scalar::Float(x), _) => OrderingValue::Float(*x),
            (Scalar::Decimal(d), _) => parse_decimal(d)?,
            (Scalar::String(s), _) => OrderingValue::String(s.clone()),
            (Scalar::Date(d), DataType::Date32) => OrderingValue::Int(i64::from(*d)),
            (Scalar::Date(d), DataType::Date64) => OrderingValue::Int(i64::from(*d) * 86_400_000),
            (Scalar::TimestampMicros(t), DataType::Timestamp(unit, _)) => OrderingValue::Int(match unit {
                TimeUnit::Second => t.div_euclid(1_000_000),
                TimeUnit::Millisecond => t.div_euclid(1000),
                TimeUnit::Microsecond => *t,
                TimeUnit::Nanosecond => t.checked_mul(1000)?,
            }),
            _ => return None,
        })
    }

    /// The constant parsed from partition-path text as a value of `data_type`.
    fn from_partition_text(text: &str, data_type: &DataType) -> Option<OrderingValue> {
        Some(match data_type {
            d if d.is_integer() => OrderingValue::Int(text.parse().ok()?),
            d if d.is_floating() => OrderingValue::Float(text.parse().ok()?),
            DataType::Decimal128(..) => parse_decimal(text)?,
            DataType::Boolean => OrderingValue::Bool(text.parse().ok()?),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => OrderingValue::String(text.to_owned()),
            _ => return None,
        })
    }
}

/// One pushed condition on a column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Predicate {
    Compare { column: String, op: Op, value: Scalar },
    In { column: String, values: Vec<Scalar> },
}

impl Predicate {
    pub fn column(&self) -> &str {
        match self {
            Predicate::Compare { column, .. } | Predicate::In { column, .. } => column,
        }
    }

    /// Whether a value (or a value range `[min, max]` of row-group statistics) can satisfy the
    /// predicate. Incomparable values answer "maybe" (true).
    fn may_match(&self, data_type: &DataType, min: &OrderingValue, max: &OrderingValue) -> bool {
        use std::cmp::Ordering::*;
        let test = |op: Op, value: &Scalar| -> bool {
            let Some(v) = value.as_ordering(data_type) else { return true };
            let (lo, hi) = (min.compare(&v), max.compare(&v));
            match op {
                Op::Eq => lo != Some(Greater) && hi != Some(Less),
                Op::NotEq => !(lo == Some(Equal) && hi == Some(Equal)),
                Op::Lt => lo != Some(Greater) && lo != Some(Equal),
                Op::LtEq => lo != Some(Greater),
                Op::Gt => hi != Some(Less) && hi != Some(Equal),
                Op::GtEq => hi != Some(Less),
            }
        };
        match self {
            Predicate::Compare { op, value, .. } => test(*op, value),
            Predicate::In { values, .. } => values.iter().any(|v| test(Op::Eq, v)),
        }
    }
}

impl std::fmt::Display for Predicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Predicate::Compare { column, op, value } => write!(f, "{column} {} {value}", op.symbol()),
            Predicate::In { column, values } => {
                let list: Vec<String> = values.iter().map(|v| v.to_string()).collect();
                write!(f, "{column} IN ({})", list.join(", "))
            }
        }
    }
}

/// A conjunction of predicates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScanFilter {
    pub predicates: Vec<Predicate>,
}

/// The partition field values encoded in a partition path: hive style (`f=v/g=w`) or plain
/// (`v/w`, one level per field). `None` when the path does not map one level per field (for
/// example a date-formatted path of a timestamp key generator).
pub fn partition_values(config: &TableConfig, partition_path: &str) -> Option<BTreeMap<String, String>> {
    if config.partition_fields.is_empty() {
        return None;
    }
    let levels: Vec<&str> = partition_path.split('/').collect();
    if levels.len() != config.partition_fields.len() {
        return None;
    }
    let mut values = BTreeMap::new();
    for (field, level) in config.partition_fields.iter().zip(levels) {
        let value = if config.hive_style_partitioning {
            let (name, value) = level.split_once('=')?;
            if name != field {
                return None;
            }
            value
        } else {
            level
        };
        values.insert(field.clone(), value.to_owned());
    }
    Some(values)
}

impl ScanFilter {
    pub fn is_empty(&self) -> bool {
        self.predicates.is_empty()
    }

    /// Whether the partition at `partition_path` may hold matching rows.
    pub fn may_match_partition(&self, config: &TableConfig, schema: &Schema, partition_path: &str) -> bool {
        let Some(values) = partition_values(config, partition_path) else { return true };
        self.predicates.iter().all(|p| {
            let Some(text) = values.get(p.column()) else { return true };
            let Ok(field) = schema.field_with_name(p.column()) else { return true };
            if text == "__HIVE_DEFAULT_PARTITION__" {
                return true;
            }
            match Scalar::from_partition_text(text, field.data_type()) {
                Some(v) => p.may_match(field.data_type(), &v, &v),
                None => true,
            }
        })
    }

    /// The single bucket that `record key = constant` selects, when the key has one field.
    pub fn bucket(&self, config: &TableConfig, buckets: u32) -> Option<u32> {
        let [key_field] = config.record_key_fields.as_slice() else { return None };
        self.predicates.iter().find_map(|p| match p {
            Predicate::Compare { column, op: Op::Eq, value } if column == key_field || column == "_hoodie_record_key" => {
                let key = match value {
                    Scalar::String(s) => s.clone(),
                    Scalar::Int(i) => i.to_string(),
                    _ => return None,
                };
                Some(crate::table::bucket::bucket_of_key(&key, buckets))
            }
            _ => None,
        })
    }

    /// Indices of the row groups of a Parquet file whose statistics admit matching rows.
    pub fn row_groups(&self, metadata: &ParquetMetaData, file_schema: &Schema, parquet_schema: &SchemaDescriptor) -> Vec<usize> {
        let groups = metadata.row_groups();
        let mut keep = vec![true; groups.len()];
        for predicate in &self.predicates {
            let Ok(field) = file_schema.field_with_name(predicate.column()) else { continue };
            let Ok(converter) = StatisticsConverter::try_new(predicate.column(), file_schema, parquet_schema) else {
                continue;
            };
            let (Ok(mins), Ok(maxes)) = (converter.row_group_mins(groups), converter.row_group_maxes(groups)) else {
                continue;
            };
            for (i, keep) in keep.iter_mut().enumerate() {
                if !*keep || mins.is_null(i) || maxes.is_null(i) {
                    continue;
                }
                let (min, max) = (OrderingValue::from_array(&mins, i), OrderingValue::from_array(&maxes, i));
                *keep = predicate.may_match(field.data_type(), &min, &max);
            }
        }
        keep.iter().enumerate().filter(|(_, k)| **k).map(|(i, _)| i).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Properties;
    use arrow::datatypes::Field;

    fn config(hive: bool, fields: &str) -> TableConfig {
        let mut p = Properties::new();
        for (k, v) in [
            ("hoodie.table.name", "t"),
            ("hoodie.table.type", "MERGE_ON_READ"),
            ("hoodie.table.version", "8"),
            ("hoodie.table.recordkey.fields", "id"),
            ("hoodie.table.partition.fields", fields),
            ("hoodie.datasource.write.hive_style_partitioning", if hive { "true" } else { "false" }),
        ] {
            p.set(k, v);
        }
        TableConfig::from_properties(p, "t").unwrap()
    }

    fn cmp(column: &str, op: Op, value: Scalar) -> Predicate {
        Predicate::Compare { column: column.into(), op, value }
    }

    #[test]
    fn prunes_hive_and_plain_partitions() {
        let schema = Schema::new(vec![Field::new("byteField", DataType::Int32, true), Field::new("city", DataType::Utf8, true)]);
        let hive = config(true, "byteField,city");
        let filter = ScanFilter { predicates: vec![cmp("byteField", Op::Gt, Scalar::Int(15))] };
        assert!(!filter.may_match_partition(&hive, &schema, "byteField=10/city=x"));
        assert!(filter.may_match_partition(&hive, &schema, "byteField=20/city=x"));
        let plain = config(false, "city");
        let filter = ScanFilter {
            predicates: vec![Predicate::In { column: "city".into(), values: vec![Scalar::String("a".into()), Scalar::String("b".into())] }],
        };
        assert!(filter.may_match_partition(&plain, &schema, "b"));
        assert!(!filter.may_match_partition(&plain, &schema, "c"));
        // Paths that do not map one level per field are never pruned.
        assert!(filter.may_match_partition(&plain, &schema, "2024/01/02"));
    }

    #[test]
    fn ranges_answer_maybe_unless_excluded() {
        let t = DataType::Int64;
        let (lo, hi) = (OrderingValue::Int(10), OrderingValue::Int(20));
        assert!(cmp("c", Op::Eq, Scalar::Int(15)).may_match(&t, &lo, &hi));
        assert!(!cmp("c", Op::Eq, Scalar::Int(25)).may_match(&t, &lo, &hi));
        assert!(!cmp("c", Op::Lt, Scalar::Int(10)).may_match(&t, &lo, &hi));
        assert!(cmp("c", Op::LtEq, Scalar::Int(10)).may_match(&t, &lo, &hi));
        assert!(!cmp("c", Op::Gt, Scalar::Int(20)).may_match(&t, &lo, &hi));
        assert!(cmp("c", Op::NotEq, Scalar::Int(15)).may_match(&t, &lo, &hi));
        let same = OrderingValue::Int(15);
        assert!(!cmp("c", Op::NotEq, Scalar::Int(15)).may_match(&t, &same, &same));
        // Timestamps compare in the column's unit.
        let ms = DataType::Timestamp(TimeUnit::Millisecond, None);
        let v = OrderingValue::Int(1_000);
        assert!(cmp("t", Op::Eq, Scalar::TimestampMicros(1_000_000)).may_match(&ms, &v, &v));
        // A string constant against an integer column cannot be compared: maybe.
        assert!(cmp("c", Op::Eq, Scalar::String("x".into())).may_match(&t, &lo, &hi));
    }

    #[test]
    fn filters_serialize_for_plans() {
        let filter = ScanFilter { predicates: vec![cmp("a", Op::GtEq, Scalar::Decimal("1.50".into()))] };
        let json = serde_json::to_string(&filter).unwrap();
        assert_eq!(serde_json::from_str::<ScanFilter>(&json).unwrap(), filter);
        assert_eq!(filter.predicates[0].to_string(), "a >= 1.50");
    }
}
