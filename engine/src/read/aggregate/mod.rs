//! Aggregates computed in the engine: `count`, `sum`, `avg`, `min`, `max`, `bool_and` and
//! `bool_or`, grouped by columns, over the rows of a condition. Each file slice is read and
//! merged as any scan reads it ([`crate::read::SliceRead`]), then aggregated into a *partial*
//! (a row per group of the slice, with each aggregate's state) on the helper thread that merged
//! it; the caller combines the partials, so a backend holds the slices in flight and the
//! groups, never the table's rows. A slice without log files, in a query without a condition or
//! groups, is answered from its base file's Parquet statistics where every aggregate can be.
//!
//! Values are aggregated as the host reads them ([`Reading`]), with the host's arithmetic (see
//! [`accumulate`]); the host turns the result columns into its types.

mod accumulate;
mod groups;
mod statistics;

use std::sync::Arc;

use arrow::array::{make_array, Array, ArrayRef, BooleanArray};
use arrow::buffer::NullBuffer;
use arrow::compute::{and, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use self::accumulate::Accumulator;
pub use crate::read::condition::{Column, Condition, Operand};
use self::groups::{Groups, RowGroups};
pub use crate::read::reading::Reading;
use crate::error::{Error, ErrorKind, Result};
use crate::read::expression::Expression;
use crate::read::filter::Op;
use crate::read::prefetch::SliceScan;
use crate::read::slice::RowParts;
use crate::read::{ScanOptions, ScanStats, SliceQuery, TableReader};
use crate::view::FileSlice;

/// What an aggregate reads: a column, or a `numeric` expression of columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Input {
    Column(Column),
    Expression(Expression),
}

impl Input {
    /// How the input's values are read.
    pub fn reading(&self) -> Reading {
        match self {
            Input::Column(column) => column.reading,
            Input::Expression(expression) if expression.is_double() => Reading::Float8,
            Input::Expression(_) => Reading::Decimal,
        }
    }

    /// The column itself, for an input that is one.
    pub fn as_column(&self) -> Option<&Column> {
        match self {
            Input::Column(column) => Some(column),
            Input::Expression(_) => None,
        }
    }

    /// The columns the input reads.
    pub fn columns(&self) -> Vec<&Column> {
        match self {
            Input::Column(column) => vec![column],
            Input::Expression(expression) => expression.columns(),
        }
    }

    fn check(&self, schema: &Schema) -> Result<()> {
        match self {
            Input::Column(column) => column.check(schema),
            Input::Expression(expression) => expression.check(schema),
        }
    }

    /// The input's values in `rows` as read, to compare and find extremes: doubles made
    /// canonical as a column's are, values of an integer type as 64-bit integers.
    fn read(&self, rows: &RecordBatch) -> Result<ArrayRef> {
        match self {
            Input::Column(column) => column.read(rows),
            Input::Expression(expression) if expression.is_double() => Reading::Float8.read(&expression.evaluate(rows)?),
            Input::Expression(expression) if expression.is_integer() => {
                // Within the type's range: each operation checked its result against it.
                let values = expression.evaluate(rows)?;
                arrow::compute::cast(&values, &DataType::Int64).map_err(kernel)
            }
            Input::Expression(expression) => expression.evaluate(rows),
        }
    }

    /// The input's values in `rows` as read to add up ([`Reading::read_to_add`]).
    fn read_to_add(&self, rows: &RecordBatch) -> Result<ArrayRef> {
        match self {
            Input::Column(column) => column.reading.read_to_add(column.raw(rows)?),
            Input::Expression(expression) => expression.evaluate(rows),
        }
    }

    /// The type of the input's values as read, over the table's `schema`.
    fn data_type(&self, schema: &Schema) -> Option<DataType> {
        match self {
            Input::Column(column) => Some(column.reading.data_type(schema.field_with_name(&column.field).ok()?.data_type())),
            Input::Expression(expression) if expression.is_integer() => Some(DataType::Int64),
            Input::Expression(expression) => expression.data_type(schema),
        }
    }

    /// Whether each value has a display scale of its own ([`crate::read::expression::Decimals`]).
    fn has_scale_per_value(&self, schema: &Schema) -> bool {
        matches!(self, Input::Expression(e) if !e.is_double() && e.decimals(schema).is_ok_and(|d| d.per_value))
    }
}

impl std::fmt::Display for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Input::Column(column) => write!(f, "{column}"),
            Input::Expression(expression) => write!(f, "{expression}"),
        }
    }
}

/// One aggregate of a query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Aggregate {
    /// `count(*)`.
    CountRows,
    Count(Input),
    /// `count(DISTINCT input)`.
    CountDistinct(Input),
    Sum(Input),
    Avg(Input),
    Min(Input),
    Max(Input),
    BoolAnd(Input),
    BoolOr(Input),
}

impl Aggregate {
    fn input(&self) -> Option<&Input> {
        match self {
            Aggregate::CountRows => None,
            Aggregate::Count(c) | Aggregate::CountDistinct(c) | Aggregate::Sum(c) | Aggregate::Avg(c) | Aggregate::Min(c) | Aggregate::Max(c) => Some(c),
            Aggregate::BoolAnd(c) | Aggregate::BoolOr(c) => Some(c),
        }
    }

    /// Whether the aggregate's result is an exact sum and count for the host to divide
    /// (`avg` of integers and decimals): two result columns instead of one.
    pub fn is_exact_average(&self) -> bool {
        matches!(self, Aggregate::Avg(c) if matches!(c.reading(), Reading::Int | Reading::Decimal))
    }

    /// Checks that the aggregate applies to its input as read.
    fn check(&self, schema: &Schema) -> Result<()> {
        let Some(input) = self.input() else { return Ok(()) };
        input.check(schema)?;
        use Reading as R;
        let reading = input.reading();
        let fits = match self {
            Aggregate::CountRows | Aggregate::Count(_) | Aggregate::CountDistinct(_) => true,
            Aggregate::Sum(_) | Aggregate::Avg(_) => matches!(reading, R::Int | R::Float4 | R::Float8 | R::Decimal),
            Aggregate::Min(_) | Aggregate::Max(_) => reading != R::Bool,
            Aggregate::BoolAnd(_) | Aggregate::BoolOr(_) => reading == R::Bool,
        };
        if !fits {
            return Err(Error::new(ErrorKind::Unsupported, format!("{self} does not apply to values read as {reading:?}")));
        }
        // Extremes and distinct values of those are PostgreSQL's values of one scale or another.
        if input.has_scale_per_value(schema) && !matches!(self, Aggregate::Count(_) | Aggregate::Sum(_) | Aggregate::Avg(_)) {
            return Err(Error::new(ErrorKind::Unsupported, format!("{self} is of values with a display scale each")));
        }
        Ok(())
    }

    /// A new accumulator for inputs of `data_type` as read.
    fn accumulator(&self, data_type: Option<&DataType>) -> Result<Box<dyn Accumulator>> {
        use accumulate::*;
        use arrow::datatypes as t;
        let reading = self.input().map(Input::reading);
        Ok(match self {
            Aggregate::CountRows | Aggregate::Count(_) => Box::new(Count::default()),
            Aggregate::CountDistinct(_) => Box::new(CountDistinct::default()),
            Aggregate::Sum(_) if matches!(reading, Some(Reading::Float4 | Reading::Float8)) => {
                Box::new(FloatSum::new(reading.unwrap_or(Reading::Float8)))
            }
            Aggregate::Sum(_) => Box::new(ExactSum::for_input(data_type)),
            Aggregate::Avg(_) if self.is_exact_average() => Box::new(ExactAverage::for_input(data_type)),
            Aggregate::Avg(_) => Box::new(FloatAverage::default()),
            Aggregate::Min(_) | Aggregate::Max(_) => {
                let max = matches!(self, Aggregate::Max(_));
                let data_type = data_type.cloned().unwrap_or(DataType::Null);
                match &data_type {
                    DataType::Int64 => Box::new(Extreme::<t::Int64Type>::new(max, data_type)),
                    DataType::Float32 => Box::new(Extreme::<t::Float32Type>::new(max, data_type)),
                    DataType::Float64 => Box::new(Extreme::<t::Float64Type>::new(max, data_type)),
                    DataType::Decimal128(..) => Box::new(Extreme::<t::Decimal128Type>::new(max, data_type)),
                    DataType::Date32 => Box::new(Extreme::<t::Date32Type>::new(max, data_type)),
                    DataType::Timestamp(..) => Box::new(Extreme::<t::TimestampMicrosecondType>::new(max, data_type)),
                    DataType::Utf8 => Box::new(TextExtreme::new(max)),
                    other => return Err(Error::new(ErrorKind::Internal, format!("no min or max of {other}"))),
                }
            }
            Aggregate::BoolAnd(_) => Box::new(BoolAggregate::new(true)),
            Aggregate::BoolOr(_) => Box::new(BoolAggregate::new(false)),
        })
    }
}

impl std::fmt::Display for Aggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Aggregate::CountRows => return f.write_str("count(*)"),
            Aggregate::CountDistinct(input) => return write!(f, "count(DISTINCT {input})"),
            Aggregate::Count(_) => "count",
            Aggregate::Sum(_) => "sum",
            Aggregate::Avg(_) => "avg",
            Aggregate::Min(_) => "min",
            Aggregate::Max(_) => "max",
            Aggregate::BoolAnd(_) => "bool_and",
            Aggregate::BoolOr(_) => "bool_or",
        };
        match self.input() {
            Some(input) => write!(f, "{name}({input})"),
            None => write!(f, "{name}()"),
        }
    }
}

/// What to aggregate: the aggregates by the groups of `group_by`, over the rows that satisfy
/// `condition` (all when `None`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AggregateQuery {
    pub group_by: Vec<Column>,
    pub aggregates: Vec<Aggregate>,
    pub condition: Option<Condition>,
}

impl AggregateQuery {
    /// Checks the query against the columns a read produces (`schema`): fields, readings,
    /// constants and aggregates that apply.
    pub fn check(&self, schema: &Schema) -> Result<()> {
        self.group_by.iter().try_for_each(|c| c.check(schema))?;
        self.aggregates.iter().try_for_each(|a| a.check(schema))?;
        self.condition.as_ref().map_or(Ok(()), |c| c.check(schema))
    }

    /// The fields the query reads.
    pub fn fields(&self) -> Vec<String> {
        let mut fields: Vec<String> = Vec::new();
        let columns = self.group_by.iter().chain(self.aggregates.iter().filter_map(Aggregate::input).flat_map(Input::columns));
        for column in columns.chain(self.condition.iter().flat_map(Condition::columns)) {
            if !fields.contains(&column.field) {
                fields.push(column.field.clone());
            }
        }
        fields
    }

    /// The query with its condition's parameters bound ([`Condition::bind`]).
    pub fn bind(&self, params: &[Option<crate::read::filter::Scalar>]) -> Result<AggregateQuery> {
        let condition = self.condition.as_ref().map(|c| c.bind(params)).transpose()?;
        Ok(AggregateQuery { condition, ..self.clone() })
    }

    /// When the condition is `column = $n` and conditions without parameters, and the column
    /// is read as integers, text, dates, timestamps or booleans: `n`, and the query grouped by
    /// that column first, with the rest of the condition. Its groups answer the query for
    /// every value of `$n` at once ([`ParameterAnswers`]): what a correlated subquery, run once
    /// per outer row, needs.
    pub fn grouped_by_parameter(&self) -> Option<(usize, AggregateQuery)> {
        let items = match self.condition.as_ref()? {
            Condition::And(items) => items.clone(),
            one => vec![one.clone()],
        };
        let is_key = |c: &Condition| match c {
            Condition::Compare { column, op: Op::Eq, operand: Operand::Param(n) } if ParameterAnswers::keyed(column.reading) => {
                Some((*n, column.clone()))
            }
            _ => None,
        };
        let at = items.iter().position(|c| is_key(c).is_some())?;
        let (param, column) = is_key(&items[at])?;
        let rest: Vec<Condition> = items.into_iter().enumerate().filter(|(i, _)| *i != at).map(|(_, c)| c).collect();
        if rest.iter().any(Condition::has_params) {
            return None;
        }
        let group_by = std::iter::once(column).chain(self.group_by.iter().cloned()).collect();
        Some((param, AggregateQuery { group_by, aggregates: self.aggregates.clone(), condition: Condition::all(rest) }))
    }

    /// Whether slices without logs may be answered from Parquet statistics: no groups, no
    /// condition, and only aggregates that statistics hold exactly.
    pub fn may_use_statistics(&self) -> bool {
        self.group_by.is_empty() && self.condition.is_none() && self.aggregates.iter().all(statistics::answers)
    }
}

impl std::fmt::Display for AggregateQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let aggregates: Vec<String> = self.aggregates.iter().map(|a| a.to_string()).collect();
        f.write_str(&aggregates.join(", "))?;
        if !self.group_by.is_empty() {
            let keys: Vec<&str> = self.group_by.iter().map(|c| c.field.as_str()).collect();
            write!(f, " GROUP BY {}", keys.join(", "))?;
        }
        Ok(())
    }
}

/// The answers of a query for every value of its parameter ([`AggregateQuery::grouped_by_parameter`]):
/// the grouped query's result, indexed by the parameter's column.
pub struct ParameterAnswers {
    /// The grouped result without its first column, the parameter's.
    rows: RecordBatch,
    index: std::collections::HashMap<Key, Vec<usize>>,
    /// The query's answer where no row has the value.
    empty: RecordBatch,
}

/// A value of a parameter's column, to look answers up by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Int(i64),
    Text(String),
    Bool(bool),
}

impl ParameterAnswers {
    /// Whether values read this way can be looked up exactly (floats and decimals cannot: `-0`
    /// and scales make equal values of other bits).
    fn keyed(reading: Reading) -> bool {
        matches!(reading, Reading::Int | Reading::Text | Reading::Date | Reading::Timestamp | Reading::Bool)
    }

    /// Indexes `grouped`, the grouped query's result; `empty` is the query's answer over no
    /// rows.
    pub fn new(grouped: RecordBatch, empty: RecordBatch) -> Result<ParameterAnswers> {
        use arrow::array::AsArray;
        use arrow::datatypes::{Date32Type, Int64Type, TimestampMicrosecondType};
        let keys = grouped.column(0);
        let key = |row: usize| -> Option<Key> {
            if keys.is_null(row) {
                return None;
            }
            Some(match keys.data_type() {
                DataType::Int64 => Key::Int(keys.as_primitive::<Int64Type>().value(row)),
                DataType::Date32 => Key::Int(i64::from(keys.as_primitive::<Date32Type>().value(row))),
                DataType::Timestamp(..) => Key::Int(keys.as_primitive::<TimestampMicrosecondType>().value(row)),
                DataType::Utf8 => Key::Text(keys.as_string::<i32>().value(row).to_owned()),
                DataType::Boolean => Key::Bool(keys.as_boolean().value(row)),
                _ => return None,
            })
        };
        if !matches!(keys.data_type(), DataType::Int64 | DataType::Date32 | DataType::Timestamp(..) | DataType::Utf8 | DataType::Boolean) {
            return Err(Error::new(ErrorKind::Internal, format!("a parameter's column of type {}", keys.data_type())));
        }
        let mut index: std::collections::HashMap<Key, Vec<usize>> = std::collections::HashMap::new();
        for row in 0..grouped.num_rows() {
            if let Some(key) = key(row) {
                index.entry(key).or_default().push(row);
            }
        }
        let rest: Vec<usize> = (1..grouped.num_columns()).collect();
        Ok(ParameterAnswers { rows: grouped.project(&rest).map_err(kernel)?, index, empty })
    }

    /// The query's answer for the parameter's value (`None`: NULL, which no row equals).
    pub fn answer(&self, value: Option<&crate::read::filter::Scalar>) -> Result<RecordBatch> {
        use crate::read::filter::Scalar;
        let key = match value {
            Some(Scalar::Int(i)) | Some(Scalar::TimestampMicros(i)) => Some(Key::Int(*i)),
            Some(Scalar::Date(d)) => Some(Key::Int(i64::from(*d))),
            Some(Scalar::String(s)) => Some(Key::Text(s.clone())),
            Some(Scalar::Bool(b)) => Some(Key::Bool(*b)),
            _ => None,
        };
        match key.and_then(|k| self.index.get(&k)) {
            Some(rows) => {
                let rows = arrow::array::UInt32Array::from(rows.iter().map(|&r| r as u32).collect::<Vec<_>>());
                arrow::compute::take_record_batch(&self.rows, &rows).map_err(kernel)
            }
            None => Ok(self.empty.clone()),
        }
    }
}

/// The groups and accumulators of a query, fed rows or partials.
pub(crate) struct Aggregation {
    query: Arc<AggregateQuery>,
    groups: Groups,
    key_types: Vec<DataType>,
    /// Built at the first input, when the inputs' types as read are known.
    accumulators: Option<Vec<Box<dyn Accumulator>>>,
}

fn kernel(e: arrow::error::ArrowError) -> Error {
    Error::new(ErrorKind::Internal, "cannot aggregate rows").with_source(e)
}

impl Aggregation {
    /// An aggregation whose keys have the `key_types` as read.
    fn new(query: Arc<AggregateQuery>, key_types: Vec<DataType>) -> Result<Aggregation> {
        Ok(Aggregation { groups: Groups::new(&key_types)?, key_types, query, accumulators: None })
    }

    fn accumulators(&mut self, input_types: &[Option<DataType>]) -> Result<&mut Vec<Box<dyn Accumulator>>> {
        if self.accumulators.is_none() {
            let built = self.query.aggregates.iter().zip(input_types).map(|(a, t)| a.accumulator(t.as_ref())).collect::<Result<_>>()?;
            self.accumulators = Some(built);
        }
        Ok(self.accumulators.as_mut().expect("built above"))
    }

    /// Adds the rows of a read (the columns of [`AggregateQuery::fields`], as stored) that
    /// satisfy the condition, of those `belonging` selects (all when `None`).
    fn add_rows(&mut self, rows: &RecordBatch, belonging: Option<&BooleanArray>) -> Result<()> {
        // Only the query's columns are filtered below (a slice's rows have every column).
        let schema = rows.schema();
        let used: Vec<usize> = self.query.fields().iter().filter_map(|f| schema.index_of(f).ok()).collect();
        let rows = &rows.project(&used).map_err(kernel)?;
        let selection = match (&self.query.condition, belonging) {
            (Some(condition), Some(belonging)) => Some(and(&condition.evaluate(rows)?, belonging).map_err(kernel)?),
            (Some(condition), None) => Some(condition.evaluate(rows)?),
            (None, belonging) => belonging.cloned(),
        };
        // Without groups, rows not selected are masked as NULLs (which every aggregate skips)
        // rather than copied out; count(*) counts the selection. Not under an expression: it
        // may raise an error (an integer's range, a division by zero) that PostgreSQL, which
        // filters first, never raises for rows the condition drops.
        let expressions = self.query.aggregates.iter().any(|a| matches!(a.input(), Some(Input::Expression(_))));
        let (rows, mask) = match selection {
            Some(selection) if self.query.group_by.is_empty() && !expressions => {
                // (A NULL condition does not select its row.)
                let selected = match selection.nulls() {
                    Some(nulls) => selection.values() & nulls.inner(),
                    None => selection.values().clone(),
                };
                (rows.clone(), Some(NullBuffer::new(selected)))
            }
            Some(selection) => (filter_record_batch(rows, &selection).map_err(kernel)?, None),
            None => (rows.clone(), None),
        };
        let query = self.query.clone();
        let keys = query.group_by.iter().map(|c| c.read(&rows)).collect::<Result<Vec<_>>>()?;
        let masked = |input: ArrayRef| -> Result<ArrayRef> {
            let Some(mask) = &mask else { return Ok(input) };
            let nulls = NullBuffer::union(input.nulls(), Some(mask));
            Ok(make_array(input.to_data().into_builder().nulls(nulls).build().map_err(kernel)?))
        };
        let inputs = query
            .aggregates
            .iter()
            .map(|a| match (a, a.input()) {
                (Aggregate::Sum(_) | Aggregate::Avg(_), Some(input)) => input.read_to_add(&rows).and_then(masked).map(Some),
                (_, Some(input)) => input.read(&rows).and_then(masked).map(Some),
                (_, None) => Ok(None),
            })
            .collect::<Result<Vec<Option<ArrayRef>>>>()?;
        let ids = self.groups.assign(&keys)?;
        let groups = RowGroups { ids: ids.as_deref(), count: self.groups.len() };
        let types: Vec<Option<DataType>> = inputs.iter().map(|i| i.as_ref().map(|i| i.data_type().clone())).collect();
        let row_count = mask.as_ref().map_or(rows.num_rows(), |m| m.len() - m.null_count());
        for (accumulator, input) in self.accumulators(&types)?.iter_mut().zip(&inputs) {
            accumulator.update(input.as_ref(), row_count, groups)?;
        }
        Ok(())
    }

    /// Adds a partial ([`Self::partial`] of another aggregation of the same query).
    fn add_partial(&mut self, partial: &RecordBatch) -> Result<()> {
        let keys = partial.columns()[..self.key_types.len()].to_vec();
        let ids = self.groups.assign(&keys)?;
        let groups = RowGroups { ids: ids.as_deref(), count: self.groups.len() };
        let input_types: Vec<Option<DataType>> = partial_input_types(&self.query, partial.schema_ref());
        let mut at = self.key_types.len();
        let widths: Vec<usize> = partial_widths(&self.query);
        for (accumulator, width) in self.accumulators(&input_types)?.iter_mut().zip(widths) {
            accumulator.merge(&partial.columns()[at..at + width], groups)?;
            at += width;
        }
        Ok(())
    }

    fn batch(&self, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
        let fields: Vec<Field> =
            columns.iter().enumerate().map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true)).collect();
        let options = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(self.groups.len()));
        RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options).map_err(kernel)
    }

    /// Accumulators for every group, also where no input came (then their types come from
    /// the table's `schema`).
    fn ensure_accumulators(&mut self, schema: &Schema) -> Result<()> {
        let types: Vec<Option<DataType>> = self
            .query
            .aggregates
            .iter()
            .map(|a| a.input()?.data_type(schema))
            .collect();
        let groups = self.groups.len();
        self.accumulators(&types)?.iter_mut().for_each(|a| a.grow(groups));
        Ok(())
    }

    /// The key columns and every accumulator's state, a row per group.
    fn partial(self, schema: &Schema) -> Result<RecordBatch> {
        self.columns(schema, |a| a.state())
    }

    /// The key columns and every aggregate's result columns, a row per group.
    fn finish(self, schema: &Schema) -> Result<RecordBatch> {
        self.columns(schema, |a| a.finish())
    }

    fn columns(mut self, schema: &Schema, of: impl Fn(&dyn Accumulator) -> Result<Vec<ArrayRef>>) -> Result<RecordBatch> {
        self.ensure_accumulators(schema)?;
        let mut columns = self.groups.keys()?;
        for accumulator in self.accumulators.iter().flatten() {
            columns.extend(of(accumulator.as_ref())?);
        }
        self.batch(columns)
    }
}

/// How many state columns each aggregate's partial has.
fn partial_widths(query: &AggregateQuery) -> Vec<usize> {
    query
        .aggregates
        .iter()
        .map(|a| match a {
            Aggregate::Avg(_) if a.is_exact_average() => 2,
            Aggregate::Avg(_) => 3,
            _ => 1,
        })
        .collect()
}

/// The input types as read that the accumulators of a partial's aggregates were built for,
/// from the partial's own columns (a min's state is its input's type; a sum's scale is its
/// state's).
fn partial_input_types(query: &AggregateQuery, partial: &SchemaRef) -> Vec<Option<DataType>> {
    let mut at = query.group_by.len();
    query
        .aggregates
        .iter()
        .zip(partial_widths(query))
        .map(|(a, width)| {
            let state = partial.field(at).data_type().clone();
            at += width;
            match (a, state) {
                (Aggregate::CountRows, _) => None,
                (_, DataType::Decimal256(_, s)) => Some(DataType::Decimal128(38, s)),
                (_, state) => Some(state),
            }
        })
        .collect()
}

/// What an aggregate read did, for EXPLAIN ANALYZE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AggregateStats {
    pub scan: ScanStats,
    /// Of the slices kept, those answered from statistics.
    pub from_statistics: usize,
}

/// Where the rows of the slices that are read are aggregated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// Each slice's rows into a partial, on the thread that read them; the caller combines
    /// the partials. For groups far fewer than a slice's rows.
    PerSlice,
    /// Every row on the caller's thread; the helpers read, merge and filter. Where a slice has
    /// about as many groups as rows, its partial costs what its rows cost to aggregate, and
    /// the memory of a group index besides (a `GROUP BY` of an order key, 4 lines an order).
    OnCaller,
}

impl Combine {
    /// [`Combine::OnCaller`] when `groups_per_row` (the planner's estimate of groups over input
    /// rows) leaves a slice's partial more than half as many rows as the slice, for a read of
    /// `slices` slices of about equal size.
    pub fn for_estimate(groups_per_row: f64, slices: usize) -> Combine {
        if groups_per_row * slices as f64 * 2.0 > 1.0 {
            Combine::OnCaller
        } else {
            Combine::PerSlice
        }
    }
}

impl TableReader {
    /// Computes `query` over the `slices` read as `slice_query` asks (their merged rows), with
    /// `depth` slices read ahead on helper threads, aggregated where `combine` says: the key
    /// columns (as read) and each aggregate's result columns ([`Aggregate::is_exact_average`]:
    /// two), a row per group. `options` are the read's pruning filter; `stats` what pruning kept.
    #[allow(clippy::too_many_arguments)]
    pub async fn aggregate(
        &self,
        query: &AggregateQuery,
        slice_query: SliceQuery,
        options: ScanOptions,
        slices: Vec<FileSlice>,
        stats: ScanStats,
        depth: usize,
        combine: Combine,
    ) -> Result<(RecordBatch, AggregateStats)> {
        let schema = match &slice_query {
            SliceQuery::Snapshot(_) => self.schema().clone(),
            SliceQuery::Changes { .. } => self.changes_schema().clone(),
        };
        query.check(&schema)?;
        let query = Arc::new(query.clone());
        let key_types: Vec<DataType> = query
            .group_by
            .iter()
            .map(|c| Ok(c.reading.data_type(schema.field_with_name(&c.field).map_err(|e| Error::new(ErrorKind::Internal, "no key field").with_source(e))?.data_type())))
            .collect::<Result<_>>()?;
        let mut result = Aggregation::new(query.clone(), key_types.clone())?;
        let mut report = AggregateStats::default();
        let mut to_read = Vec::new();
        for slice in slices {
            let answered = match (&slice_query, query.may_use_statistics() && slice.log_files.is_empty()) {
                (SliceQuery::Snapshot(_), true) => self.statistics_partial(&query, &slice, &schema).await?,
                _ => None,
            };
            match answered {
                Some(partial) => {
                    report.from_statistics += 1;
                    result.add_partial(&partial)?;
                }
                None => to_read.push(slice),
            }
        }
        let options = ScanOptions { columns: Some(query.fields()), row_positions: false, ..options };
        if combine == Combine::OnCaller && report.from_statistics == 0 {
            // The scan filters the rows (on the helpers); the caller adds those that pass.
            let options = ScanOptions { row_filter: query.condition.clone(), ..options };
            let unfiltered = Arc::new(AggregateQuery { condition: None, ..(*query).clone() });
            let mut all = Aggregation::new(unfiltered, key_types)?;
            let mut scan = SliceScan::new(self.clone(), slice_query, options, to_read, stats, depth);
            while let Some(rows) = scan.next().await {
                if let Some(rows) = rows? {
                    all.add_rows(&rows, None)?;
                }
            }
            report.scan = *scan.stats();
            return Ok((all.finish(&schema)?, report));
        }
        let per_slice = {
            let (query, schema) = (query.clone(), schema.clone());
            move |parts: RowParts| -> Result<Option<RecordBatch>> {
                let mut partial = Aggregation::new(query.clone(), key_types.clone())?;
                for (rows, belonging) in &parts {
                    partial.add_rows(rows, belonging.as_ref())?;
                }
                partial.partial(&schema).map(Some)
            }
        };
        let mut scan = SliceScan::new(self.clone(), slice_query, options, to_read, stats, depth).with_transform(Arc::new(per_slice));
        while let Some(partial) = scan.next().await {
            if let Some(partial) = partial? {
                result.add_partial(&partial)?;
            }
        }
        report.scan = *scan.stats();
        Ok((result.finish(&schema)?, report))
    }

    /// The partial of a slice without logs from its base file's statistics, when they answer
    /// every aggregate (see [`statistics`]).
    async fn statistics_partial(&self, query: &Arc<AggregateQuery>, slice: &FileSlice, schema: &Schema) -> Result<Option<RecordBatch>> {
        let Some(metadata) = self.base_file_metadata(slice).await? else { return Ok(None) };
        let Some(states) = statistics::states(query, &metadata, schema)? else { return Ok(None) };
        Aggregation::new(query.clone(), Vec::new())?.batch(states).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::filter::{Op, Scalar};
    use arrow::array::{Array, AsArray, Float64Array, Int32Array, StringArray};

    fn column(field: &str, reading: Reading) -> Column {
        Column { field: field.into(), reading }
    }

    fn rows(regions: Vec<Option<&str>>, qty: Vec<Option<i32>>, price: Vec<Option<f64>>) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("region", DataType::Utf8, true),
            Field::new("qty", DataType::Int32, true),
            Field::new("price", DataType::Float64, true),
        ]);
        let columns: Vec<ArrayRef> =
            vec![Arc::new(StringArray::from(regions)), Arc::new(Int32Array::from(qty)), Arc::new(Float64Array::from(price))];
        RecordBatch::try_new(Arc::new(schema), columns).unwrap()
    }

    /// The result of `query` (grouped by one text column) over the partials of `parts`, each
    /// aggregated apart as a slice is.
    fn combined(query: &Arc<AggregateQuery>, parts: &[&RecordBatch]) -> RecordBatch {
        let schema = parts[0].schema();
        let mut total = Aggregation::new(query.clone(), vec![DataType::Utf8]).unwrap();
        for part in parts {
            let mut partial = Aggregation::new(query.clone(), vec![DataType::Utf8]).unwrap();
            partial.add_rows(part, None).unwrap();
            total.add_partial(&partial.partial(&schema).unwrap()).unwrap();
        }
        total.finish(&schema).unwrap()
    }

    /// Partials of two "slices" combined give what one aggregation of all rows gives.
    #[test]
    fn partials_combine_to_the_whole() {
        let query = Arc::new(AggregateQuery {
            group_by: vec![column("region", Reading::Text)],
            aggregates: vec![
                Aggregate::CountRows,
                Aggregate::Sum(Input::Column(column("qty", Reading::Int))),
                Aggregate::Avg(Input::Column(column("qty", Reading::Int))),
                Aggregate::Avg(Input::Column(column("price", Reading::Float8))),
                Aggregate::Max(Input::Column(column("price", Reading::Float8))),
            ],
            condition: Some(Condition::Compare { column: column("qty", Reading::Int), op: Op::GtEq, operand: Operand::Value(Scalar::Int(0)) }),
        });
        let a = rows(vec![Some("x"), Some("y"), Some("x")], vec![Some(1), Some(2), Some(-1)], vec![Some(1.0), None, Some(f64::NAN)]);
        let b = rows(vec![Some("y"), None, Some("x")], vec![Some(4), Some(5), Some(6)], vec![Some(3.0), Some(2.0), Some(4.0)]);
        let result = combined(&query, &[&a, &b]);
        let keys: Vec<Option<&str>> = result.column(0).as_string::<i32>().iter().collect();
        assert_eq!(keys, vec![Some("x"), Some("y"), None]);
        let counts = result.column(1).as_primitive::<arrow::datatypes::Int64Type>().values().to_vec();
        assert_eq!(counts, vec![2, 2, 1]);
        let sums: Vec<String> = (0..3).map(|i| arrow::util::display::array_value_to_string(result.column(2), i).unwrap()).collect();
        assert_eq!(sums, vec!["7", "6", "5"]);
        // avg(qty): the exact sum and count, for the host to divide.
        assert_eq!(arrow::util::display::array_value_to_string(result.column(3), 1).unwrap(), "6");
        assert_eq!(result.column(4).as_primitive::<arrow::datatypes::Int64Type>().value(1), 2);
        let averages = result.column(5).as_primitive::<arrow::datatypes::Float64Type>();
        assert_eq!((averages.value(0), averages.is_null(1), averages.value(2)), (2.5, false, 2.0));
        assert_eq!(averages.value(1), 3.0);
        let max = result.column(6).as_primitive::<arrow::datatypes::Float64Type>();
        assert_eq!(max.value(0), 4.0);
    }

    /// Sums and averages of quotients (values with a display scale each) through partials:
    /// PostgreSQL's results (1 / 4.0 has 20 decimals, 6 / 4.0 has 16, a sum the most of its
    /// values'); extremes of them are refused.
    #[test]
    fn quotients_sum_at_their_largest_scale() {
        use crate::read::expression::{ArithmeticOp, NumberType};
        let quarter = Input::Expression(Expression::Arithmetic {
            op: ArithmeticOp::Divide,
            left: Box::new(Expression::Column(column("qty", Reading::Decimal))),
            right: Box::new(Expression::Constant { unscaled: 40, scale: 1 }),
            result: NumberType::Numeric,
        });
        let query = Arc::new(AggregateQuery {
            group_by: vec![column("region", Reading::Text)],
            aggregates: vec![Aggregate::Sum(quarter.clone()), Aggregate::Avg(quarter.clone())],
            condition: Some(Condition::Compare { column: column("qty", Reading::Int), op: Op::GtEq, operand: Operand::Value(Scalar::Int(0)) }),
        });
        let a = rows(vec![Some("x"), Some("y"), Some("x")], vec![Some(1), Some(2), Some(-1)], vec![None; 3]);
        let b = rows(vec![Some("y"), None, Some("x")], vec![Some(4), Some(5), Some(6)], vec![None; 3]);
        let schema = a.schema();
        query.check(&schema).unwrap();
        assert!(Aggregate::Max(quarter).check(&schema).is_err());
        let result = combined(&query, &[&a, &b]);
        let sums: Vec<Option<&str>> = result.column(1).as_string::<i32>().iter().collect();
        assert_eq!(sums, [Some("1.75000000000000000000"), Some("1.50000000000000000000"), Some("1.2500000000000000")]);
        // avg: the sum at its scale and the count, which the host divides.
        assert_eq!(result.column(2).as_string::<i32>().value(1), "1.50000000000000000000");
        assert_eq!(result.column(3).as_primitive::<arrow::datatypes::Int64Type>().value(1), 2);
    }

    /// min and max of integer and double expressions come in PostgreSQL's types: 64-bit
    /// integers (the host narrows them to the expression's type) and doubles compared as a
    /// double column's are (NaN above every number, -0 as 0).
    #[test]
    fn extremes_of_expressions_keep_their_types() {
        use crate::read::expression::{ArithmeticOp, NumberType};
        let expression = |left: Expression, op, right: Expression, result| Expression::Arithmetic { op, left: Box::new(left), right: Box::new(right), result };
        let tripled = expression(Expression::Column(column("qty", Reading::Int)), ArithmeticOp::Multiply, Expression::Constant { unscaled: 3, scale: 0 }, NumberType::Integer);
        let halved = expression(Expression::Column(column("price", Reading::Float8)), ArithmeticOp::Divide, Expression::Double(-2.0), NumberType::Double);
        let query = Arc::new(AggregateQuery {
            group_by: vec![],
            aggregates: vec![Aggregate::Max(Input::Expression(tripled.clone())), Aggregate::Min(Input::Expression(tripled)), Aggregate::Max(Input::Expression(halved))],
            condition: None,
        });
        let batch = rows(vec![None; 4], vec![Some(5), None, Some(-7), Some(2)], vec![Some(0.0), Some(f64::NAN), Some(4.0), None]);
        query.check(&batch.schema()).unwrap();
        let mut aggregation = Aggregation::new(query, vec![]).unwrap();
        aggregation.add_rows(&batch, None).unwrap();
        let result = aggregation.finish(&batch.schema()).unwrap();
        let integers = |i: usize| result.column(i).as_primitive::<arrow::datatypes::Int64Type>().value(0);
        assert_eq!((integers(0), integers(1)), (15, -21));
        assert!(result.column(2).as_primitive::<arrow::datatypes::Float64Type>().value(0).is_nan());
    }

    /// The answers of a query grouped by its parameter's column are, for every value (one that
    /// no row has, and NULL, among them), what the query bound to that value computes.
    #[test]
    fn parameter_answers_are_the_bound_querys() {
        let batch = rows(
            vec![Some("x"), Some("y"), None, Some("x"), Some("y"), Some("x")],
            vec![Some(1), Some(2), Some(3), Some(-4), None, Some(6)],
            vec![Some(1.5), Some(2.0), None, Some(-1.0), Some(0.5), Some(9.0)],
        );
        let schema = batch.schema();
        let run = |query: &AggregateQuery| {
            let mut aggregation = Aggregation::new(Arc::new(query.clone()), vec![DataType::Utf8; query.group_by.len()]).unwrap();
            aggregation.add_rows(&batch, None).unwrap();
            aggregation.finish(&schema).unwrap()
        };
        let empty = |query: &AggregateQuery| Aggregation::new(Arc::new(query.clone()), vec![DataType::Utf8; query.group_by.len()]).unwrap().finish(&schema).unwrap();
        let query = AggregateQuery {
            group_by: vec![],
            aggregates: vec![Aggregate::CountRows, Aggregate::Sum(Input::Column(column("qty", Reading::Int))), Aggregate::Max(Input::Column(column("price", Reading::Float8)))],
            condition: Some(Condition::And(vec![
                Condition::Compare { column: column("qty", Reading::Int), op: Op::GtEq, operand: Operand::Value(Scalar::Int(0)) },
                Condition::Compare { column: column("region", Reading::Text), op: Op::Eq, operand: Operand::Param(0) },
            ])),
        };
        let (param, grouped) = query.grouped_by_parameter().unwrap();
        assert_eq!((param, grouped.group_by.len()), (0, 1));
        let answers = ParameterAnswers::new(run(&grouped.bind(&[]).unwrap()), empty(&query.bind(&[None]).unwrap())).unwrap();
        for value in [Some("x"), Some("y"), Some("none"), None] {
            let value = value.map(|v| Scalar::String(v.into()));
            let expected = run(&query.bind(&[value.clone()]).unwrap());
            // Columns by position, as the host reads them.
            assert_eq!(answers.answer(value.as_ref()).unwrap().columns(), expected.columns(), "{value:?}");
        }
        // A second parameter, or a parameter of a float column, is not grouped by.
        let mut two = query.clone();
        two.condition = Some(Condition::And(vec![
            Condition::Compare { column: column("qty", Reading::Int), op: Op::Eq, operand: Operand::Param(1) },
            Condition::Compare { column: column("region", Reading::Text), op: Op::Eq, operand: Operand::Param(0) },
        ]));
        assert!(two.grouped_by_parameter().is_none());
        let float = AggregateQuery {
            condition: Some(Condition::Compare { column: column("price", Reading::Float8), op: Op::Eq, operand: Operand::Param(0) }),
            ..query.clone()
        };
        assert!(float.grouped_by_parameter().is_none());
    }

    /// Rows added with a mask of those that belong aggregate as the selected rows alone, with
    /// and without a condition and groups.
    #[test]
    fn rows_masked_aggregate_as_the_rows_selected() {
        let regions = vec![Some("x"), Some("y"), None, Some("x"), Some("y"), Some("x"), Some("z")];
        let qty = vec![Some(1), None, Some(3), Some(-4), Some(5), Some(6), Some(7)];
        let price = vec![Some(1.5), Some(2.0), None, Some(-1.0), Some(0.5), Some(9.0), Some(3.0)];
        let batch = rows(regions, qty, price);
        let belonging = BooleanArray::from(vec![true, true, false, true, false, true, true]);
        let aggregates = vec![
            Aggregate::CountRows,
            Aggregate::Count(Input::Column(column("qty", Reading::Int))),
            Aggregate::Sum(Input::Column(column("qty", Reading::Int))),
            Aggregate::Avg(Input::Column(column("price", Reading::Float8))),
            Aggregate::Min(Input::Column(column("region", Reading::Text))),
            Aggregate::Max(Input::Column(column("qty", Reading::Int))),
        ];
        let condition = Condition::Compare { column: column("qty", Reading::Int), op: Op::Lt, operand: Operand::Value(Scalar::Int(6)) };
        for (group_by, condition) in [(vec![], None), (vec![], Some(condition.clone())), (vec![column("region", Reading::Text)], None), (vec![column("region", Reading::Text)], Some(condition))] {
            let query = Arc::new(AggregateQuery { group_by, aggregates: aggregates.clone(), condition });
            let key_types = vec![DataType::Utf8; query.group_by.len()];
            let finish = |aggregation: Aggregation| {
                let result = aggregation.finish(&batch.schema()).unwrap();
                (0..result.num_columns())
                    .map(|c| (0..result.num_rows()).map(|r| arrow::util::display::array_value_to_string(result.column(c), r).unwrap()).collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            };
            let mut masked = Aggregation::new(query.clone(), key_types.clone()).unwrap();
            masked.add_rows(&batch, Some(&belonging)).unwrap();
            let mut selected = Aggregation::new(query.clone(), key_types).unwrap();
            selected.add_rows(&filter_record_batch(&batch, &belonging).unwrap(), None).unwrap();
            assert_eq!(finish(masked), finish(selected), "{query}");
        }
    }

    #[test]
    fn no_groups_and_no_rows_is_one_row() {
        let query = Arc::new(AggregateQuery {
            aggregates: vec![Aggregate::CountRows, Aggregate::Sum(Input::Column(column("qty", Reading::Int))), Aggregate::Min(Input::Column(column("region", Reading::Text)))],
            ..Default::default()
        });
        let empty = rows(vec![], vec![], vec![]);
        let mut aggregation = Aggregation::new(query.clone(), vec![]).unwrap();
        aggregation.add_rows(&empty, None).unwrap();
        // A slice that had no rows at all adds a partial of no values.
        aggregation.add_partial(&Aggregation::new(query, vec![]).unwrap().partial(&empty.schema()).unwrap()).unwrap();
        let result = aggregation.finish(&empty.schema()).unwrap();
        assert_eq!(result.num_rows(), 1);
        assert_eq!(result.column(0).as_primitive::<arrow::datatypes::Int64Type>().value(0), 0);
        assert!(result.column(1).is_null(0) && result.column(2).is_null(0));
    }
}
