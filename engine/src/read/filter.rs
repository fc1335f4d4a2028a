//! Filters pushed into scans: conjunctions of `column op constant` and `column IN (...)`.
//! They only ever *skip* data that cannot match (partitions, file groups of other buckets,
//! Parquet row groups whose statistics exclude the value); the caller still evaluates every
//! filter on the rows it gets back.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow::array::Array;
use arrow::datatypes::{DataType, Schema, TimeUnit};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::{RowSelection, RowSelector};
use parquet::file::metadata::ParquetMetaData;
use parquet::schema::types::SchemaDescriptor;
use serde::{Deserialize, Serialize};

use crate::ordering::OrderingValue;
use crate::read::footers::{self, FooterKey};
use crate::read::schema::{META_FIELDS, RECORD_KEY_COLUMN};
use crate::table::keygen::{partition_values, possible_record_keys};
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
            // As SQL literals; a timestamp's instant in UTC (a timestamptz column's values are too).
            Scalar::Date(d) => match chrono::NaiveDate::from_ymd_opt(1970, 1, 1).and_then(|e| e.checked_add_signed(chrono::TimeDelta::days(i64::from(*d)))) {
                Some(date) => write!(f, "date '{}'", date.format("%Y-%m-%d")),
                None => write!(f, "date {d}"),
            },
            Scalar::TimestampMicros(t) => match chrono::DateTime::from_timestamp_micros(*t) {
                Some(at) => write!(f, "timestamp '{}'", at.naive_utc().format("%Y-%m-%d %H:%M:%S%.f")),
                None => write!(f, "timestamp {t}"),
            },
        }
    }
}

fn parse_decimal(text: &str) -> Option<OrderingValue> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = format!("{int}{frac}");
    Some(OrderingValue::Decimal(digits.parse().ok()?, i8::try_from(frac.len()).ok()?))
}

/// Exact comparison of a stored value with a constant; `None` when it cannot be exact (other
/// kinds, NaN, a decimal too wide to align).
fn compare_exactly(stored: &OrderingValue, constant: &OrderingValue) -> Option<Ordering> {
    use OrderingValue::*;
    let widen = |v: i128, from: i8, to: i8| v.checked_mul(10i128.checked_pow(u32::try_from(to - from).ok()?)?);
    match (stored, constant) {
        (Bool(a), Bool(b)) => Some(a.cmp(b)),
        (Int(a), Int(b)) => Some(a.cmp(b)),
        (Float(a), Float(b)) => a.partial_cmp(b),
        (String(a), String(b)) => Some(a.cmp(b)),
        (Decimal(..) | Int(_), Decimal(..) | Int(_)) => {
            let as_decimal = |v: &OrderingValue| match v {
                Int(i) => (i128::from(*i), 0),
                Decimal(v, s) => (*v, *s),
                _ => unreachable!("matched above"),
            };
            let ((a, sa), (b, sb)) = (as_decimal(stored), as_decimal(constant));
            let scale = sa.max(sb);
            Some(widen(a, sa, scale)?.cmp(&widen(b, sb, scale)?))
        }
        _ => None,
    }
}

/// How PostgreSQL sees a stored integer-like value: a date (days) or timestamp (microseconds)
/// stored in another unit reads as a converted value (the extension floors dates of
/// milliseconds, multiplies coarser timestamp units and truncates nanoseconds). `threshold(c)` is the smallest
/// stored value that reads as `c` or more: reading is monotone, so every comparison with `c`
/// is a comparison of the stored value with `threshold(c)` or `threshold(c + 1)`, exactly.
#[derive(Debug, Clone, Copy)]
enum Reading {
    /// The stored value is the value.
    Same,
    /// Read as `stored * factor`.
    Times(i64),
    /// Read as `floor(stored / divisor)`.
    Floor(i64),
    /// Read as `stored / divisor`, truncated toward zero.
    Truncate(i64),
}

impl Reading {
    fn threshold(self, c: i64) -> Option<i64> {
        match self {
            Reading::Same => Some(c),
            // The least s with s * f >= c.
            Reading::Times(f) => Some(c.div_euclid(f) + i64::from(c.rem_euclid(f) != 0)),
            // The least s with floor(s / d) >= c.
            Reading::Floor(d) => c.checked_mul(d),
            // The least s with trunc(s / d) >= c: from c * d up when c > 0; below zero the
            // values down to c * d - (d - 1) truncate up to c.
            Reading::Truncate(d) => if c > 0 { c.checked_mul(d) } else { c.checked_mul(d)?.checked_sub(d - 1) },
        }
    }

    /// Whether stored values in `[min, max]` may read as satisfying `value op c`.
    fn may_match(self, op: Op, c: i64, min: i64, max: i64) -> bool {
        let (Some(at), Some(above)) = (self.threshold(c), c.checked_add(1).and_then(|c1| self.threshold(c1))) else {
            return true;
        };
        match op {
            Op::Eq => at < above && max >= at && min < above,
            Op::NotEq => !(min >= at && max < above),
            Op::Lt => min < at,
            Op::LtEq => min < above,
            Op::Gt => max >= above,
            Op::GtEq => max >= at,
        }
    }
}

impl Scalar {
    /// The constant and how stored values of `data_type` read, when a stored value of that
    /// type can be compared with it exactly as PostgreSQL compares what it reads; `None`
    /// otherwise (the caller keeps the data).
    fn comparable_with(&self, data_type: &DataType) -> Option<Comparable> {
        use DataType as D;
        Some(match (self, data_type) {
            (Scalar::Bool(b), D::Boolean) => Comparable::Value(OrderingValue::Bool(*b)),
            (Scalar::Int(i), d) if d.is_integer() || matches!(d, D::Decimal128(..)) => Comparable::Value(OrderingValue::Int(*i)),
            (Scalar::Decimal(text), d) if d.is_integer() || matches!(d, D::Decimal128(..)) => Comparable::Value(parse_decimal(text)?),
            (Scalar::Float(x), D::Float32 | D::Float64) if !x.is_nan() => Comparable::Float(*x),
            (Scalar::String(s), D::Utf8 | D::LargeUtf8 | D::Utf8View) => Comparable::Value(OrderingValue::String(s.clone())),
            (Scalar::Date(d), D::Date32) => Comparable::Reading(Reading::Same, i64::from(*d)),
            (Scalar::Date(d), D::Date64) => Comparable::Reading(Reading::Floor(86_400_000), i64::from(*d)),
            (Scalar::TimestampMicros(t), D::Timestamp(unit, _)) => {
                let reading = match unit {
                    TimeUnit::Second => Reading::Times(1_000_000),
                    TimeUnit::Millisecond => Reading::Times(1000),
                    TimeUnit::Microsecond => Reading::Same,
                    TimeUnit::Nanosecond => Reading::Truncate(1000),
                };
                Comparable::Reading(reading, *t)
            }
            _ => return None,
        })
    }

    /// The value of partition-path text for a field of `data_type`, as stored values read.
    fn from_partition_text(text: &str, data_type: &DataType) -> Option<OrderingValue> {
        Some(match data_type {
            d if d.is_integer() => OrderingValue::Int(text.parse().ok()?),
            // Java writes a float as its shortest float text: read it back as a float.
            DataType::Float32 => OrderingValue::Float(f64::from(text.parse::<f32>().ok()?)),
            DataType::Float64 => OrderingValue::Float(text.parse().ok()?),
            DataType::Decimal128(..) => parse_decimal(text)?,
            DataType::Boolean => OrderingValue::Bool(text.parse().ok()?),
            // A date's ISO text, as Hudi and this extension write it: days, as dates are stored.
            DataType::Date32 => {
                let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?;
                OrderingValue::Int(chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?.signed_duration_since(epoch).num_days())
            }
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => OrderingValue::String(text.to_owned()),
            DataType::Timestamp(unit, zone) => OrderingValue::Int(timestamp_from_partition_text(text, *unit, zone.is_some())?),
            _ => return None,
        })
    }
}

/// A timestamp partition value, in the field's `unit`: the integer Hudi's key generators write
/// by default (the stored value itself), or ISO text as this extension writes it (Arrow's
/// text of the value: `2026-01-01T09:30:00.5Z`). Text is read only where it names one instant
/// whatever the time zone of the writer: with a zone for a `zoned` field, without one for a
/// local one (Hudi's "consistent logical timestamp" text is in the writer's zone, and reads as
/// neither). `None` also for a value finer than the unit.
fn timestamp_from_partition_text(text: &str, unit: TimeUnit, zoned: bool) -> Option<i64> {
    if let Ok(stored) = text.parse::<i64>() {
        return Some(stored);
    }
    let instant = match zoned {
        true => chrono::DateTime::parse_from_rfc3339(text).ok()?.to_utc(),
        false => chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").ok()?.and_utc(),
    };
    let exact = |per_second: i64| {
        let nanos = i64::from(instant.timestamp_subsec_nanos());
        (nanos % (1_000_000_000 / per_second) == 0).then(|| instant.timestamp().checked_mul(per_second)?.checked_add(nanos / (1_000_000_000 / per_second)))?
    };
    match unit {
        TimeUnit::Second => exact(1),
        TimeUnit::Millisecond => exact(1000),
        TimeUnit::Microsecond => exact(1_000_000),
        TimeUnit::Nanosecond => exact(1_000_000_000),
    }
}

/// A constant in the form its comparisons with stored values take.
enum Comparable {
    /// Compared as values ([`compare_exactly`]).
    Value(OrderingValue),
    /// A float: PostgreSQL sorts NaN above every number, and statistics may leave NaN out.
    Float(f64),
    /// An integer-like stored value that reads as another value ([`Reading`]).
    Reading(Reading, i64),
}

impl Comparable {
    /// Whether stored values in `[min, max]` (statistics, or one partition value) may satisfy
    /// `stored op constant`; `true` whenever that cannot be decided exactly.
    fn may_match(&self, op: Op, min: &OrderingValue, max: &OrderingValue, exact_bounds: bool) -> bool {
        use Ordering::*;
        let value_may_match = |constant: &OrderingValue| {
            let (Some(lo), Some(hi)) = (compare_exactly(min, constant), compare_exactly(max, constant)) else { return true };
            match op {
                Op::Eq => lo != Greater && hi != Less,
                Op::NotEq => !(lo == Equal && hi == Equal),
                Op::Lt => lo == Less,
                Op::LtEq => lo != Greater,
                Op::Gt => hi == Greater,
                Op::GtEq => hi != Less,
            }
        };
        match self {
            Comparable::Value(constant) => value_may_match(constant),
            // A NaN satisfies `>`, `>=` and `<>` of every number; statistics that may leave NaN
            // out cannot rule those out (a partition value is exact).
            Comparable::Float(_) if !exact_bounds && matches!(op, Op::Gt | Op::GtEq | Op::NotEq) => true,
            Comparable::Float(x) => value_may_match(&OrderingValue::Float(*x)),
            Comparable::Reading(reading, c) => match (min, max) {
                (OrderingValue::Int(min), OrderingValue::Int(max)) => reading.may_match(op, *c, *min, *max),
                _ => true,
            },
        }
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

    /// Whether stored values of `data_type` in `[min, max]` may satisfy the predicate as
    /// PostgreSQL evaluates it on what it reads. `exact_bounds`: `min` and `max` are values
    /// that occur (a partition value), not statistics. Anything not decidable exactly answers
    /// "maybe" (true).
    fn may_match(&self, data_type: &DataType, min: &OrderingValue, max: &OrderingValue, exact_bounds: bool) -> bool {
        let test = |op: Op, value: &Scalar| match value.comparable_with(data_type) {
            Some(constant) => constant.may_match(op, min, max, exact_bounds),
            None => true,
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

impl ScanFilter {
    pub fn is_empty(&self) -> bool {
        self.predicates.is_empty()
    }

    /// Whether values within the bounds `bounds(column, its type)` gives (a file's statistics;
    /// `None` where unknown) may satisfy every predicate on a column of `schema`.
    pub fn may_match_bounds(&self, schema: &Schema, bounds: impl Fn(&str, &DataType) -> Option<(OrderingValue, OrderingValue)>) -> bool {
        self.predicates.iter().all(|predicate| {
            let Ok(field) = schema.field_with_name(predicate.column()) else { return true };
            match bounds(predicate.column(), field.data_type()) {
                Some((min, max)) => predicate.may_match(field.data_type(), &min, &max, false),
                None => true,
            }
        })
    }

    /// Whether the partition at `partition_path` may hold matching rows.
    pub fn may_match_partition(&self, config: &TableConfig, schema: &Schema, partition_path: &str) -> bool {
        let Some(values) = partition_values(config, partition_path) else { return true };
        self.predicates.iter().all(|p| {
            let Some(value) = values.get(p.column()) else { return true };
            let Ok(field) = schema.field_with_name(p.column()) else { return true };
            let text = match value {
                Some(text) => text,
                // The default partition: of a string field it holds NULLs, empty strings and,
                // in old tables, the value "default"; of another type only NULLs, which
                // satisfy no comparison.
                None => return matches!(field.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View),
            };
            match Scalar::from_partition_text(text, field.data_type()) {
                Some(v) => p.may_match(field.data_type(), &v, &v, true),
                None => true,
            }
        })
    }

    /// The single bucket that `record key = constant` selects, when the key has one field and
    /// the bucket index hashes that field.
    pub fn bucket(&self, config: &TableConfig, buckets: u32) -> Option<u32> {
        let [key_field] = config.record_key_fields.as_slice() else { return None };
        let hash_field = config.properties.get("hoodie.bucket.index.hash.field").unwrap_or(key_field);
        if hash_field.trim() != key_field {
            return None;
        }
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

    /// The record keys that rows satisfying the filter can have, when its equalities fix them:
    /// a condition on `_hoodie_record_key` itself, or equalities (`=`, `IN`) on every record
    /// key field of an integer or string type, each value in every format the key generator
    /// may have written it in ([`possible_record_keys`]). `None` when they do not, or when the
    /// table stores no record keys. Every row with another key fails the filter, so a read may
    /// drop such rows and their log versions before merging: a key's merge only ever involves
    /// versions of that key.
    pub fn record_keys(&self, config: &TableConfig, schema: &Schema) -> Option<RecordKeys> {
        /// Cross products of IN lists larger than this are not worth matching key by key.
        const MAX_KEYS: usize = 4096;
        if !config.populate_meta_fields {
            return None;
        }
        let equal_values = |column: &str| {
            self.predicates.iter().find_map(|p| match p {
                Predicate::Compare { column: c, op: Op::Eq, value } if c == column => Some(std::slice::from_ref(value)),
                Predicate::In { column: c, values } if c == column && !values.is_empty() => Some(values.as_slice()),
                _ => None,
            })
        };
        let texts = |values: &[Scalar], data_type: &DataType| -> Option<Vec<String>> {
            values
                .iter()
                .map(|value| match (value, data_type) {
                    (Scalar::Int(i), d) if d.is_integer() => Some(i.to_string()),
                    (Scalar::String(s), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) => Some(s.clone()),
                    _ => None,
                })
                .collect()
        };
        let mut keys: Vec<String> = if let Some(values) = equal_values(META_FIELDS[RECORD_KEY_COLUMN]) {
            texts(values, &DataType::Utf8)?
        } else {
            // Every combination of the key fields' values, then each combination's formats.
            let mut combinations: Vec<Vec<String>> = vec![Vec::new()];
            for field in &config.record_key_fields {
                let values = texts(equal_values(field)?, schema.field_with_name(field).ok()?.data_type())?;
                if combinations.len() * values.len() > MAX_KEYS {
                    return None;
                }
                combinations = combinations
                    .iter()
                    .flat_map(|prefix| values.iter().map(move |v| [prefix.as_slice(), std::slice::from_ref(v)].concat()))
                    .collect();
            }
            let mut keys = Vec::new();
            for values in combinations {
                let values: Vec<&str> = values.iter().map(String::as_str).collect();
                keys.extend(possible_record_keys(config, &values)?);
            }
            keys
        };
        keys.sort_unstable();
        keys.dedup();
        Some(RecordKeys(keys))
    }

    /// The filter `_hoodie_record_key IN (keys)`.
    pub fn of_record_keys(keys: &RecordKeys) -> ScanFilter {
        let values = keys.0.iter().cloned().map(Scalar::String).collect();
        ScanFilter { predicates: vec![Predicate::In { column: META_FIELDS[RECORD_KEY_COLUMN].to_owned(), values }] }
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
                if *keep {
                    *keep = may_match_bounds(predicate, field.data_type(), &mins, &maxes, i);
                }
            }
        }
        keep.iter().enumerate().filter(|(_, k)| **k).map(|(i, _)| i).collect()
    }

    /// The rows of the row groups `groups` of a Parquet file (in that order, as a reader of
    /// those groups counts them) whose data pages' statistics in the page index admit
    /// matching rows; `None` when no page can be skipped, or the file has no page index.
    /// `kept`: the file's footer as kept by this process, with which the pages' bounds are
    /// kept once converted.
    pub(crate) fn row_selection(
        &self,
        metadata: &ParquetMetaData,
        groups: &[usize],
        file_schema: &Schema,
        parquet_schema: &SchemaDescriptor,
        kept: Option<&FooterKey>,
    ) -> Option<RowSelection> {
        let mut selection: Option<RowSelection> = None;
        for predicate in &self.predicates {
            let Ok(field) = file_schema.field_with_name(predicate.column()) else { continue };
            let bounds = match kept.and_then(|key| footers::page_bounds(key, predicate.column(), groups)) {
                Some(bounds) => bounds,
                None => {
                    let Some(bounds) = PageBounds::of(predicate.column(), metadata, groups, file_schema, parquet_schema) else { continue };
                    let bounds = Arc::new(bounds);
                    if let Some(key) = kept {
                        footers::put_page_bounds(key, predicate.column(), groups, bounds.clone());
                    }
                    bounds
                }
            };
            let pages = bounds.pages.iter().map(|(rows, bounds)| {
                let admitted = bounds.as_ref().is_none_or(|(min, max)| predicate.may_match(field.data_type(), min, max, false));
                match admitted {
                    true => RowSelector::select(*rows),
                    false => RowSelector::skip(*rows),
                }
            });
            let this = RowSelection::from(pages.collect::<Vec<_>>());
            selection = Some(match selection {
                Some(earlier) => earlier.intersection(&this),
                None => this,
            });
        }
        selection.filter(|s| s.skipped_row_count() > 0)
    }
}

/// A column's data-page statistics over some row groups of a Parquet file, from its page
/// index: each page's rows, and its minimum and maximum where known.
#[derive(Debug)]
pub(crate) struct PageBounds {
    pages: Vec<(usize, Option<(OrderingValue, OrderingValue)>)>,
}

impl PageBounds {
    /// The bounds of `column`'s pages in the row groups `groups`; `None` when the file's page
    /// index does not cover them.
    fn of(column: &str, metadata: &ParquetMetaData, groups: &[usize], file_schema: &Schema, parquet_schema: &SchemaDescriptor) -> Option<PageBounds> {
        let (column_index, offset_index) = (metadata.column_index()?, metadata.offset_index()?);
        let converter = StatisticsConverter::try_new(column, file_schema, parquet_schema).ok()?;
        let leaf = converter.parquet_column_index()?;
        // The converter indexes both indexes without checking: a file may have them for some
        // row groups or columns only.
        let indexed = groups.iter().all(|&g| {
            let pages = offset_index.get(g).and_then(|columns| columns.get(leaf)).map_or(0, |o| o.page_locations().len());
            pages > 0 && column_index.get(g).is_some_and(|columns| columns.len() > leaf)
        });
        if !indexed {
            return None;
        }
        let mins = converter.data_page_mins(column_index, offset_index, groups).ok()?;
        let maxes = converter.data_page_maxes(column_index, offset_index, groups).ok()?;
        let rows = converter.data_page_row_counts(offset_index, metadata.row_groups(), groups).ok()??;
        if mins.len() != rows.len() || maxes.len() != rows.len() {
            return None;
        }
        let pages = (0..rows.len())
            .map(|page| {
                let known = !mins.is_null(page) && !maxes.is_null(page);
                let bounds = known.then(|| (OrderingValue::from_array(&mins, page), OrderingValue::from_array(&maxes, page)));
                (rows.value(page) as usize, bounds)
            })
            .collect();
        Some(PageBounds { pages })
    }

    /// About the bytes the bounds take.
    pub(crate) fn bytes(&self) -> usize {
        let value = |v: &OrderingValue| {
            std::mem::size_of::<OrderingValue>()
                + match v {
                    OrderingValue::String(s) => s.len(),
                    OrderingValue::Bytes(b) => b.len(),
                    _ => 0,
                }
        };
        self.pages.iter().map(|(_, b)| 16 + b.as_ref().map_or(0, |(min, max)| value(min) + value(max))).sum()
    }
}

/// The record keys a read is limited to ([`ScanFilter::record_keys`]): sorted and distinct,
/// so that a row's key is found by a few comparisons (a point query's one or two keys),
/// without hashing every key of the rows it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordKeys(Vec<String>);

impl RecordKeys {
    /// These keys, sorted and distinct.
    pub fn new(mut keys: Vec<String>) -> RecordKeys {
        keys.sort_unstable();
        keys.dedup();
        RecordKeys(keys)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.0.binary_search_by(|k| k.as_str().cmp(key)).is_ok()
    }

    /// Which of the record keys `keys` are among these (a NULL key is not).
    pub fn mask(&self, keys: &arrow::array::StringArray) -> arrow::array::BooleanArray {
        keys.iter().map(|key| Some(key.is_some_and(|k| self.contains(k)))).collect()
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
}

/// Whether the statistics `mins[i]`, `maxes[i]` admit values that satisfy `predicate` (yes
/// when they are unknown).
fn may_match_bounds(predicate: &Predicate, data_type: &DataType, mins: &dyn Array, maxes: &dyn Array, i: usize) -> bool {
    if mins.is_null(i) || maxes.is_null(i) {
        return true;
    }
    let (min, max) = (OrderingValue::from_array(mins, i), OrderingValue::from_array(maxes, i));
    predicate.may_match(data_type, &min, &max, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;

    fn config(hive: bool, fields: &str) -> TableConfig {
        TableConfig::for_tests(fields, &[("hoodie.datasource.write.hive_style_partitioning", if hive { "true" } else { "false" })])
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
    fn prunes_date_partitions_and_the_default_partition() {
        let schema = Schema::new(vec![Field::new("day", DataType::Date32, true), Field::new("city", DataType::Utf8, true)]);
        let hive = config(true, "day,city");
        // 2024-01-05 is day 19727.
        let on = |op, day| ScanFilter { predicates: vec![cmp("day", op, Scalar::Date(day))] };
        assert!(on(Op::Eq, 19727).may_match_partition(&hive, &schema, "day=2024-01-05/city=x"));
        assert!(!on(Op::Eq, 19728).may_match_partition(&hive, &schema, "day=2024-01-05/city=x"));
        assert!(!on(Op::Gt, 19727).may_match_partition(&hive, &schema, "day=2024-01-05/city=x"));
        assert!(on(Op::GtEq, 19727).may_match_partition(&hive, &schema, "day=2024-01-05/city=x"));
        // NULL dates satisfy no comparison; the default partition of a string may hold ''.
        assert!(!on(Op::NotEq, 1).may_match_partition(&hive, &schema, "day=__HIVE_DEFAULT_PARTITION__/city=x"));
        let city = ScanFilter { predicates: vec![cmp("city", Op::Eq, Scalar::String("x".into()))] };
        assert!(city.may_match_partition(&hive, &schema, "day=2024-01-05/city=__HIVE_DEFAULT_PARTITION__"));
        assert!(!city.may_match_partition(&hive, &schema, "day=2024-01-05/city=y"));
        // Text that is not a date keeps the partition.
        assert!(on(Op::Eq, 19728).may_match_partition(&hive, &schema, "day=20240105/city=x"));
    }

    /// Timestamp partitions as this extension's writer writes them (the stored integer, as
    /// Hudi's key generators do by default) and as ISO text with the zone where the field has
    /// one: read back exactly. Local-time text for a zoned field, zoned text for a local one,
    /// and values finer than the unit keep the partition.
    #[test]
    fn prunes_timestamp_partitions_by_their_written_text() {
        use arrow::array::TimestampMicrosecondArray;
        use std::sync::Arc;
        let zoned = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let local = DataType::Timestamp(TimeUnit::Microsecond, None);
        let schema = Schema::new(vec![Field::new("at", zoned.clone(), true), Field::new("lts", local.clone(), true)]);
        let hive = config(true, "at,lts");
        // 2026-01-01 09:30:00.5 UTC, and the same wall-clock time as a local timestamp.
        let micros = 1_767_259_800_500_000;
        let value = |data_type: &DataType| Arc::new(TimestampMicrosecondArray::from(vec![micros]).with_data_type(data_type.clone())) as arrow::array::ArrayRef;
        let rows = arrow::record_batch::RecordBatch::try_new(Arc::new(schema.clone()), vec![value(&zoned), value(&local)]).unwrap();
        let written = crate::write::blocks::text_columns(&rows, &["at".into(), "lts".into()], "partition").unwrap();
        let text = |i: usize| arrow::array::AsArray::as_string::<i32>(&written[i]).value(0).to_owned();
        assert_eq!((text(0), text(1)), (micros.to_string(), micros.to_string()));
        let on = |column: &str, op, t| ScanFilter { predicates: vec![cmp(column, op, Scalar::TimestampMicros(t))] };
        let iso = ("2026-01-01T09:30:00.500Z", "2026-01-01T09:30:00.500");
        for path in [format!("at={}/lts={}", text(0), text(1)), format!("at={}/lts={}", iso.0, iso.1)] {
            for column in ["at", "lts"] {
                assert!(on(column, Op::Eq, micros).may_match_partition(&hive, &schema, &path), "{path}");
                assert!(!on(column, Op::Eq, micros + 1).may_match_partition(&hive, &schema, &path), "{path}");
                assert!(!on(column, Op::Gt, micros).may_match_partition(&hive, &schema, &path), "{path}");
                assert!(on(column, Op::LtEq, micros).may_match_partition(&hive, &schema, &path), "{path}");
            }
        }
        // Text that does not name one instant keeps the partition: a local time for a zoned
        // field (Hudi's "consistent logical timestamp" text is in the writer's zone), a zoned
        // one for a local field.
        for path in [format!("at={}/lts=x", iso.1), "at=2026-01-01 09:30:00.5/lts=x".into()] {
            assert!(on("at", Op::Eq, micros + 1).may_match_partition(&hive, &schema, &path), "{path}");
        }
        assert!(on("lts", Op::Eq, micros + 1).may_match_partition(&hive, &schema, &format!("at=x/lts={}", iso.0)));
        assert_eq!(timestamp_from_partition_text("2026-01-01T09:30:00.5001Z", TimeUnit::Millisecond, true), None);
        assert_eq!(timestamp_from_partition_text("2026-01-01T10:30:00.5+01:00", TimeUnit::Millisecond, true), Some(micros / 1000));
        assert_eq!(timestamp_from_partition_text("2026-01-01T09:30:00.5Z", TimeUnit::Nanosecond, true), Some(micros * 1000));
    }

    /// Page pruning selects the pages whose bounds admit the value, the same from bounds
    /// converted once and kept with the file's footer as from the page index itself.
    #[test]
    fn page_bounds_are_kept_with_the_footer() {
        let _alone = footers::TESTS.lock().unwrap_or_else(|e| e.into_inner());
        use arrow::array::Int64Array;
        use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
        use parquet::file::metadata::PageIndexPolicy;
        let rows = 3 * crate::write::BASE_PAGE_ROWS + 5;
        let ids: arrow::array::ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
        let batch = arrow::record_batch::RecordBatch::try_from_iter([("id", ids)]).unwrap();
        let bytes = bytes::Bytes::from(crate::write::parquet_bytes(&batch, crate::write::ParquetFile::BaseFile(Vec::new())).unwrap());
        let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required);
        let metadata = ArrowReaderMetadata::load(&bytes, options).unwrap();
        let key = FooterKey { access: 7, location: "mem://t/pages.parquet".into(), size: bytes.len() as u64 };
        footers::put(&key, &metadata, true);
        let at = (crate::write::BASE_PAGE_ROWS + 3) as i64;
        let filter = ScanFilter { predicates: vec![cmp("id", Op::Eq, Scalar::Int(at))] };
        let select = |kept| filter.row_selection(metadata.metadata(), &[0], metadata.schema(), metadata.parquet_schema(), kept).unwrap();
        let direct = select(None);
        assert!(footers::page_bounds(&key, "id", &[0]).is_none());
        let first = select(Some(&key));
        assert!(footers::page_bounds(&key, "id", &[0]).is_some());
        let again = select(Some(&key));
        assert_eq!((&direct, &first), (&again, &again));
        // The second page alone.
        assert_eq!(direct.row_count(), crate::write::BASE_PAGE_ROWS);
        assert_eq!(direct.iter().next().map(|s| (s.skip, s.row_count)), Some((true, crate::write::BASE_PAGE_ROWS)));
    }

    #[test]
    fn ranges_answer_maybe_unless_excluded() {
        let t = DataType::Int64;
        let (lo, hi) = (OrderingValue::Int(10), OrderingValue::Int(20));
        assert!(cmp("c", Op::Eq, Scalar::Int(15)).may_match(&t, &lo, &hi, false));
        assert!(!cmp("c", Op::Eq, Scalar::Int(25)).may_match(&t, &lo, &hi, false));
        assert!(!cmp("c", Op::Lt, Scalar::Int(10)).may_match(&t, &lo, &hi, false));
        assert!(cmp("c", Op::LtEq, Scalar::Int(10)).may_match(&t, &lo, &hi, false));
        assert!(!cmp("c", Op::Gt, Scalar::Int(20)).may_match(&t, &lo, &hi, false));
        assert!(cmp("c", Op::NotEq, Scalar::Int(15)).may_match(&t, &lo, &hi, false));
        let same = OrderingValue::Int(15);
        assert!(!cmp("c", Op::NotEq, Scalar::Int(15)).may_match(&t, &same, &same, false));
        // Timestamps compare in the column's unit.
        let ms = DataType::Timestamp(TimeUnit::Millisecond, None);
        let v = OrderingValue::Int(1_000);
        assert!(cmp("t", Op::Eq, Scalar::TimestampMicros(1_000_000)).may_match(&ms, &v, &v, false));
        // A string constant against an integer column cannot be compared: maybe.
        assert!(cmp("c", Op::Eq, Scalar::String("x".into())).may_match(&t, &lo, &hi, false));
    }

    /// Every comparison of every reading of integer-like stored values, against brute force:
    /// a stored range may match exactly when one of its values reads as matching.
    #[test]
    fn readings_of_other_units_prune_exactly() {
        let read = |reading: Reading, s: i64| match reading {
            Reading::Same => s,
            Reading::Times(f) => s * f,
            Reading::Floor(d) => s.div_euclid(d),
            Reading::Truncate(d) => s / d,
        };
        let holds = |op: Op, v: i64, c: i64| match op {
            Op::Eq => v == c,
            Op::NotEq => v != c,
            Op::Lt => v < c,
            Op::LtEq => v <= c,
            Op::Gt => v > c,
            Op::GtEq => v >= c,
        };
        for reading in [Reading::Same, Reading::Times(3), Reading::Floor(4), Reading::Truncate(4)] {
            for op in [Op::Eq, Op::NotEq, Op::Lt, Op::LtEq, Op::Gt, Op::GtEq] {
                for c in -14..=14 {
                    for min in -12..=12 {
                        for max in min..=(min + 6).min(12) {
                            let truth = (min..=max).any(|s| holds(op, read(reading, s), c));
                            assert_eq!(reading.may_match(op, c, min, max), truth, "{reading:?} {op:?} {c} in [{min}, {max}]");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sub_unit_constants_keep_the_rows_they_match() {
        let ms = DataType::Timestamp(TimeUnit::Millisecond, None);
        let one_ms = OrderingValue::Int(1);
        // A row at 1 ms (1000 µs) is below 1000.5 µs and differs from it.
        assert!(cmp("t", Op::Lt, Scalar::TimestampMicros(1_001)).may_match(&ms, &one_ms, &one_ms, false));
        assert!(cmp("t", Op::NotEq, Scalar::TimestampMicros(1_001)).may_match(&ms, &one_ms, &one_ms, false));
        assert!(!cmp("t", Op::Eq, Scalar::TimestampMicros(1_001)).may_match(&ms, &one_ms, &one_ms, false));
        assert!(!cmp("t", Op::GtEq, Scalar::TimestampMicros(1_001)).may_match(&ms, &one_ms, &one_ms, false));
        let ns = DataType::Timestamp(TimeUnit::Nanosecond, None);
        let v = OrderingValue::Int(1_500); // reads as 1 µs
        assert!(cmp("t", Op::Eq, Scalar::TimestampMicros(1)).may_match(&ns, &v, &v, false));
        assert!(!cmp("t", Op::Gt, Scalar::TimestampMicros(1)).may_match(&ns, &v, &v, false));
        let days = DataType::Date64;
        let noon = OrderingValue::Int(86_400_000 + 43_200_000); // day 1
        assert!(cmp("d", Op::Eq, Scalar::Date(1)).may_match(&days, &noon, &noon, false));
        assert!(!cmp("d", Op::Lt, Scalar::Date(1)).may_match(&days, &noon, &noon, false));
    }

    #[test]
    fn floats_keep_what_nan_and_single_precision_could_match() {
        let (lo, hi) = (OrderingValue::Float(1.0), OrderingValue::Float(2.0));
        // Statistics may leave NaN out, and NaN is above every number in PostgreSQL.
        assert!(cmp("f", Op::Gt, Scalar::Float(5.0)).may_match(&DataType::Float64, &lo, &hi, false));
        assert!(cmp("f", Op::NotEq, Scalar::Float(1.5)).may_match(&DataType::Float64, &hi, &hi, false));
        assert!(!cmp("f", Op::Lt, Scalar::Float(0.5)).may_match(&DataType::Float64, &lo, &hi, false));
        assert!(!cmp("f", Op::Gt, Scalar::Float(5.0)).may_match(&DataType::Float64, &lo, &hi, true));
        assert!(cmp("f", Op::Eq, Scalar::Float(f64::NAN)).may_match(&DataType::Float64, &lo, &hi, false));
        // A real partition value "0.1" is the float 0.1, not the double.
        let schema = Schema::new(vec![Field::new("r", DataType::Float32, true)]);
        let filter = ScanFilter { predicates: vec![cmp("r", Op::Eq, Scalar::Float(f64::from(0.1f32)))] };
        assert!(filter.may_match_partition(&config(true, "r"), &schema, "r=0.1"));
        assert!(!filter.may_match_partition(&config(true, "r"), &schema, "r=0.2"));
        // Integer columns are not compared with floats at all.
        assert!(cmp("c", Op::Eq, Scalar::Float(99.0)).may_match(&DataType::Int64, &lo, &hi, false));
    }

    #[test]
    fn decimals_compare_exactly_or_not_at_all() {
        let d = DataType::Decimal128(38, 2);
        let (lo, hi) = (OrderingValue::Decimal(1050, 2), OrderingValue::Decimal(2000, 2));
        assert!(!cmp("n", Op::Lt, Scalar::Decimal("10.5".into())).may_match(&d, &lo, &hi, false));
        assert!(cmp("n", Op::LtEq, Scalar::Decimal("10.500".into())).may_match(&d, &lo, &hi, false));
        assert!(!cmp("n", Op::Gt, Scalar::Int(20)).may_match(&d, &lo, &hi, false));
        // Too wide to align: kept.
        let huge = OrderingValue::Decimal(i128::MAX / 10, 0);
        assert!(cmp("n", Op::Gt, Scalar::Decimal("1.00000000000000000000000000000000000001".into())).may_match(&d, &huge, &huge, false));
    }

    #[test]
    fn record_keys_are_what_key_equalities_fix() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("score", DataType::Float64, true),
        ]);
        let keys = |config: &TableConfig, predicates: Vec<Predicate>| {
            ScanFilter { predicates }.record_keys(config, &schema).map(|keys| keys.as_slice().to_vec())
        };
        let simple = config(false, "");
        // One field: its value, or `field:value`, as generators differ.
        assert_eq!(keys(&simple, vec![cmp("id", Op::Eq, Scalar::Int(7))]), Some(vec!["7".to_owned(), "id:7".to_owned()]));
        let ids = Predicate::In { column: "id".into(), values: vec![Scalar::Int(2), Scalar::Int(1), Scalar::Int(2)] };
        assert_eq!(keys(&simple, vec![cmp("name", Op::Eq, Scalar::String("x".into())), ids]).unwrap(), ["1", "2", "id:1", "id:2"]);
        // The meta column itself is exact, and comes first.
        let meta = cmp("_hoodie_record_key", Op::Eq, Scalar::String("k1".into()));
        assert_eq!(keys(&simple, vec![cmp("id", Op::Eq, Scalar::Int(7)), meta]).unwrap(), ["k1"]);
        // Not fixed: ranges, other columns, constants of another type, no meta fields, a
        // generator that formats values.
        assert_eq!(keys(&simple, vec![cmp("id", Op::Gt, Scalar::Int(7))]), None);
        assert_eq!(keys(&simple, vec![cmp("name", Op::Eq, Scalar::String("x".into()))]), None);
        assert_eq!(keys(&simple, vec![cmp("id", Op::Eq, Scalar::String("7".into()))]), None);
        let virtual_keys = TableConfig::for_tests("", &[("hoodie.populate.meta.fields", "false")]);
        assert_eq!(keys(&virtual_keys, vec![cmp("id", Op::Eq, Scalar::Int(7))]), None);
        let custom = TableConfig::for_tests("", &[("hoodie.table.keygenerator.class", "com.example.MyKeyGenerator")]);
        assert_eq!(keys(&custom, vec![cmp("id", Op::Eq, Scalar::Int(7))]), None);
        // Several fields: every combination, named.
        let composite = TableConfig::for_tests("", &[("hoodie.table.recordkey.fields", "id,name")]);
        let names = Predicate::In { column: "name".into(), values: vec![Scalar::String("a".into()), Scalar::String(String::new())] };
        assert_eq!(
            keys(&composite, vec![cmp("id", Op::Eq, Scalar::Int(1)), names]).unwrap(),
            ["id:1,name:__empty__", "id:1,name:a"]
        );
        assert_eq!(keys(&composite, vec![cmp("id", Op::Eq, Scalar::Int(1))]), None);
        // Floats are not key texts pg_hudi can reproduce.
        let by_score = TableConfig::for_tests("", &[("hoodie.table.recordkey.fields", "score")]);
        assert_eq!(keys(&by_score, vec![cmp("score", Op::Eq, Scalar::Float(1.5))]), None);
    }

    #[test]
    fn filters_serialize_for_plans() {
        let filter = ScanFilter { predicates: vec![cmp("a", Op::GtEq, Scalar::Decimal("1.50".into()))] };
        let json = serde_json::to_string(&filter).unwrap();
        assert_eq!(serde_json::from_str::<ScanFilter>(&json).unwrap(), filter);
        assert_eq!(filter.predicates[0].to_string(), "a >= 1.50");
    }
}
