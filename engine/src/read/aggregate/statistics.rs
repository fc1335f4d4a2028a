//! Aggregates of a base file from its Parquet footer: `count(*)` from the row counts,
//! `count(column)` from the null counts, `min`/`max` of integers, decimals, dates and
//! timestamps and `bool_and`/`bool_or` from the row groups' exact minimums and maximums. Not
//! floats (statistics leave NaN out) nor text (they may be truncated). A file without a field
//! (added to the table later) holds only NULLs of it. Whatever a footer does not say exactly
//! leaves the slice to be read.

use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, Int64Array};
use arrow::datatypes::{DataType, Schema};
use parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use parquet::basic::ColumnOrder;

use super::groups::RowGroups;
use super::{Aggregate, AggregateQuery, Reading};
use crate::error::Result;

/// Whether statistics can answer `aggregate` (when the footer has them).
pub(super) fn answers(aggregate: &Aggregate) -> bool {
    match aggregate {
        Aggregate::CountRows => true,
        Aggregate::Count(c) | Aggregate::BoolAnd(c) | Aggregate::BoolOr(c) => c.as_column().is_some(),
        Aggregate::Min(c) | Aggregate::Max(c) => {
            c.as_column().is_some_and(|c| matches!(c.reading, Reading::Int | Reading::Decimal | Reading::Date | Reading::Timestamp))
        }
        Aggregate::CountDistinct(_) | Aggregate::Sum(_) | Aggregate::Avg(_) => false,
    }
}

/// The partial states of `query`'s aggregates (each one row, none of them an average) for the
/// file of `metadata`, or `None` when its statistics do not answer them all. `schema`: the
/// table's, for fields the file lacks.
pub(super) fn states(query: &AggregateQuery, metadata: &ArrowReaderMetadata, schema: &Schema) -> Result<Option<Vec<ArrayRef>>> {
    let parquet = metadata.metadata();
    let groups = parquet.row_groups();
    let rows: i64 = groups.iter().map(|g| g.num_rows()).sum();
    let file_schema = metadata.schema();
    let mut states = Vec::new();
    for aggregate in &query.aggregates {
        let Some(input) = aggregate.input() else {
            states.push(Arc::new(Int64Array::from(vec![rows])) as ArrayRef);
            continue;
        };
        let Some(column) = input.as_column() else { return Ok(None) };
        let converter = match StatisticsConverter::try_new(&column.field, file_schema, parquet.file_metadata().schema_descr()) {
            Ok(converter) => converter.parquet_column_index().map(|index| (converter, index)),
            Err(_) => None,
        };
        let Some((converter, index)) = converter else {
            // The file does not have the field: every row is NULL.
            let state: ArrayRef = match aggregate {
                Aggregate::Count(_) => Arc::new(Int64Array::from(vec![0])),
                _ => {
                    let Ok(field) = schema.field_with_name(&column.field) else { return Ok(None) };
                    new_null_array(&column.reading.data_type(field.data_type()), 1)
                }
            };
            states.push(state);
            continue;
        };
        // Every row group must say how many NULLs it has, and, unless it has nothing else,
        // exact bounds.
        let mut null_count = 0i64;
        for group in groups {
            let Some(statistics) = group.column(index).statistics() else { return Ok(None) };
            let Some(nulls) = statistics.null_count_opt() else { return Ok(None) };
            null_count += nulls as i64;
            let only_nulls = nulls as i64 == group.num_rows();
            let bounded = statistics.min_bytes_opt().is_some() && statistics.min_is_exact() && statistics.max_is_exact();
            if !matches!(aggregate, Aggregate::Count(_)) && !only_nulls && !bounded {
                return Ok(None);
            }
        }
        if matches!(aggregate, Aggregate::Count(_)) {
            states.push(Arc::new(Int64Array::from(vec![rows - null_count])));
            continue;
        }
        let Ok(field) = file_schema.field_with_name(&column.field) else { return Ok(None) };
        // Older writers ordered every column as signed values: right for signed integers (and
        // the dates, timestamps and booleans stored as them), wrong for unsigned ones and decimals.
        let ordered = matches!(parquet.file_metadata().column_order(index), ColumnOrder::TYPE_DEFINED_ORDER(_));
        let signed = matches!(
            field.data_type(),
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) | DataType::Boolean
        );
        if !column.reading.reads(field.data_type()) || !(ordered || signed) {
            return Ok(None);
        }
        let bounds = match aggregate {
            Aggregate::Min(_) | Aggregate::BoolAnd(_) => converter.row_group_mins(groups),
            _ => converter.row_group_maxes(groups),
        };
        let Ok(bounds) = bounds else { return Ok(None) };
        let bounds = column.reading.read(&bounds)?;
        // The extreme of the row groups' bounds (NULL for groups of NULLs only).
        let mut accumulator = aggregate.accumulator(Some(bounds.data_type()))?;
        accumulator.update(Some(&bounds), bounds.len(), RowGroups { ids: None, count: 1 })?;
        states.extend(accumulator.state()?);
    }
    Ok(Some(states))
}
