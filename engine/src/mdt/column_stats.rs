//! The `column_stats` partition of a table's metadata table: each data file's minimum and
//! maximum per column, as Hudi's writers record them (`HoodieMetadataColumnStats`), so that a
//! scan skips the file slices a filter rules out without opening a file. A slice is skipped
//! only when every one of its files (base and logs) has statistics that rule the filter out:
//! each merged row is a version from one of them.

use std::collections::{HashMap, HashSet};

use apache_avro::types::Value;
use arrow::datatypes::{DataType, Schema, TimeUnit};

use super::files::METADATA_TABLE_PATH;
use super::partition::{self, Record};
use crate::error::Result;
use crate::ordering::OrderingValue;
use crate::read::filter::ScanFilter;
use crate::storage::Storage;
use crate::timeline::Timeline;
use crate::view::FileSlice;

/// The partition's name, as `hoodie.table.metadata.partitions` declares it.
pub const PARTITION: &str = "column_stats";
/// The scale of Hudi's `DecimalWrapper` values.
const WRAPPER_SCALE: u32 = 15;

/// A bound as the statistics record it: the wrapper says what the value is.
#[derive(Debug, Clone, PartialEq)]
enum Stat {
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
    Bytes(Vec<u8>),
    Date(i64),
    /// Unscaled, at [`WRAPPER_SCALE`].
    Decimal(i128),
    TimeMicros(i64),
    TimestampMicros(i64),
}

impl Stat {
    fn of(value: &Value) -> Option<Stat> {
        let Value::Union(_, inner) = value else { return None };
        let Value::Record(fields) = inner.as_ref() else { return None };
        let (_, value) = fields.iter().find(|(name, _)| name == "value")?;
        Some(match value {
            Value::Boolean(b) => Stat::Bool(*b),
            Value::Int(i) => Stat::Int(i64::from(*i)),
            Value::Long(i) => Stat::Int(*i),
            Value::Float(f) => Stat::Float(f64::from(*f)),
            Value::Double(f) => Stat::Float(*f),
            Value::String(s) => Stat::String(s.clone()),
            Value::Bytes(b) => Stat::Bytes(b.clone()),
            Value::Date(d) => Stat::Date(i64::from(*d)),
            Value::Decimal(d) => Stat::Decimal(crate::avro::unscaled_decimal(&<Vec<u8>>::try_from(d).ok()?)?),
            Value::TimeMicros(t) => Stat::TimeMicros(*t),
            Value::TimestampMicros(t) => Stat::TimestampMicros(*t),
            _ => return None,
        })
    }

    /// The value as a column of `data_type` holds it, where the statistic is of that kind.
    fn value_for(&self, data_type: &DataType) -> Option<OrderingValue> {
        Some(match (self, data_type) {
            (Stat::Bool(b), DataType::Boolean) => OrderingValue::Bool(*b),
            (Stat::Int(i), DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64) => OrderingValue::Int(*i),
            (Stat::Float(f), DataType::Float32 | DataType::Float64) => OrderingValue::Float(*f),
            (Stat::String(s), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => OrderingValue::String(s.clone()),
            (Stat::Bytes(b), DataType::Binary | DataType::LargeBinary) => OrderingValue::Bytes(b.clone()),
            (Stat::Date(d) | Stat::Int(d), DataType::Date32) => OrderingValue::Int(*d),
            (Stat::TimeMicros(t), DataType::Time64(TimeUnit::Microsecond)) => OrderingValue::Int(*t),
            (Stat::TimestampMicros(t), DataType::Timestamp(TimeUnit::Microsecond, _)) => OrderingValue::Int(*t),
            (Stat::Decimal(v), DataType::Decimal128(_, scale)) => {
                // Exactly at the column's scale, or not at all.
                let scale = u32::try_from(*scale).ok().filter(|s| *s <= WRAPPER_SCALE)?;
                let factor = 10i128.pow(WRAPPER_SCALE - scale);
                (v % factor == 0).then(|| OrderingValue::Decimal(v / factor, scale as i8))?
            }
            _ => return None,
        })
    }
}

/// One file's bounds of one column.
#[derive(Debug, Clone, PartialEq)]
struct Bounds {
    min: Option<Stat>,
    max: Option<Stat>,
}

/// The statistics of a table's data files, by file name and column.
#[derive(Debug, Default)]
pub struct ColumnStats {
    files: HashMap<String, HashMap<String, Bounds>>,
    /// File names that two partitions' statistics use (file names repeat across partitions
    /// with a bucket index): their statistics are not told apart, so not used.
    ambiguous: HashSet<String>,
}

impl ColumnStats {
    /// The statistics of the data files of the table at `storage` (timeline `data`) that its
    /// metadata table's `column_stats` partition holds.
    pub async fn load(storage: &Storage, data: &Timeline) -> Result<ColumnStats> {
        let metadata = storage.child(METADATA_TABLE_PATH)?;
        let config = crate::table::load_config(&metadata).await?;
        let timeline = Timeline::load(&metadata, &config).await?;
        let read = partition::read(&metadata, &timeline, PARTITION, data).await?;
        // The latest record of each key: a later one replaces it (a file's statistics do not
        // change; a deletion comes with a clean).
        let mut latest: HashMap<String, Option<(String, String, Bounds)>> = HashMap::new();
        for record in read.records {
            match record {
                Record::Put { key, value, schema } => {
                    let entry = partition::decode(&schema, &value)?
                        .into_iter()
                        .find(|(name, _)| name == "ColumnStatsMetadata")
                        .and_then(|(_, stats)| match stats {
                            Value::Union(_, inner) => match *inner {
                                Value::Record(fields) => Some(fields),
                                _ => None,
                            },
                            _ => None,
                        });
                    let Some(fields) = entry else { continue };
                    let field = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v);
                    let text = |name: &str| match field(name) {
                        Some(Value::Union(_, inner)) => match inner.as_ref() {
                            Value::String(s) => Some(s.clone()),
                            _ => None,
                        },
                        _ => None,
                    };
                    let deleted = matches!(field("isDeleted"), Some(Value::Boolean(true)));
                    let stats = match (text("fileName"), text("columnName")) {
                        (Some(file), Some(column)) if !deleted => {
                            let bounds = Bounds { min: field("minValue").and_then(Stat::of), max: field("maxValue").and_then(Stat::of) };
                            Some((file, column, bounds))
                        }
                        _ => None,
                    };
                    latest.insert(key, stats);
                }
                Record::Delete { key } => {
                    latest.insert(key, None);
                }
            }
        }
        let mut out = ColumnStats::default();
        for (file, column, bounds) in latest.into_values().flatten() {
            let columns = out.files.entry(file.clone()).or_default();
            if columns.insert(column, bounds).is_some() {
                out.ambiguous.insert(file);
            }
        }
        Ok(out)
    }

    /// Whether the rows of `slice` may satisfy `filter` (columns of `schema`): no when every
    /// file of the slice has bounds that rule one of its predicates out.
    pub fn may_match(&self, slice: &FileSlice, filter: &ScanFilter, schema: &Schema) -> bool {
        let mut names = slice.base_file.iter().map(|b| b.name.as_str()).chain(slice.log_files.iter().map(|l| l.name.as_str()));
        names.any(|name| {
            let Some(columns) = self.files.get(name).filter(|_| !self.ambiguous.contains(name)) else { return true };
            filter.may_match_bounds(schema, |column, data_type| {
                let bounds = columns.get(column)?;
                Some((bounds.min.as_ref()?.value_for(data_type)?, bounds.max.as_ref()?.value_for(data_type)?))
            })
        })
    }

    /// How many files have statistics.
    pub fn files(&self) -> usize {
        self.files.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_apply_only_to_columns_of_their_kind() {
        assert_eq!(Stat::Int(5).value_for(&DataType::Int64), Some(OrderingValue::Int(5)));
        assert_eq!(Stat::Int(5).value_for(&DataType::Utf8), None);
        assert_eq!(Stat::TimestampMicros(7).value_for(&DataType::Timestamp(TimeUnit::Millisecond, None)), None);
        assert_eq!(Stat::TimestampMicros(7).value_for(&DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))), Some(OrderingValue::Int(7)));
        // 12.34 at the wrapper's scale 15, for a numeric(10, 2) column; not exactly at scale 1.
        let decimal = Stat::Decimal(1234 * 10i128.pow(13));
        assert_eq!(decimal.value_for(&DataType::Decimal128(10, 2)), Some(OrderingValue::Decimal(1234, 2)));
        assert_eq!(decimal.value_for(&DataType::Decimal128(10, 1)), None);
    }
}
