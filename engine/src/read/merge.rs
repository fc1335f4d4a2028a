//! The one merge routine (hudi-format.md §7.4) for snapshot reads, incremental reads and
//! compaction: record versions of one file slice, oldest first, reduced to one per key.

use std::collections::HashMap;

use arrow::array::{Array, AsArray};
use arrow::compute::interleave_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, ErrorKind, Result};
use crate::log::DeleteRecord;
use crate::ordering::OrderingValue;
use crate::read::schema::RECORD_KEY_COLUMN;
use crate::table::MergeMode;

/// Record versions in the order they were written.
#[derive(Debug)]
pub enum MergeSource {
    /// Rows aligned to the table schema.
    Data(RecordBatch),
    Deletes(Vec<DeleteRecord>),
}

/// The surviving version of a key.
#[derive(Debug)]
struct Version {
    /// `(batch, row)` of the row, or `None` when the key is deleted.
    row: Option<(usize, usize)>,
    ordering: OrderingValue,
}

/// How versions of one key replace each other.
#[derive(Debug, Clone, Copy)]
pub struct MergeRule {
    pub mode: MergeMode,
}

impl MergeRule {
    /// Whether `newer` replaces `existing`. Event-time ordering: the newer version wins unless
    /// the existing one has a strictly greater ordering value; a delete with Hudi's default
    /// ordering value deletes regardless. Commit-time ordering: the newer always wins.
    fn replaces(&self, existing: &Version, newer: &Version) -> bool {
        match self.mode {
            MergeMode::CommitTimeOrdering | MergeMode::Custom => true,
            MergeMode::EventTimeOrdering => {
                let is_delete = newer.row.is_none();
                (is_delete && newer.ordering.is_default()) || !existing.ordering.greater_than(&newer.ordering)
            }
        }
    }
}

/// Merges the versions of one file slice into one row per surviving key, in order of each
/// key's first appearance. `ordering_column` indexes the ordering field in the schema.
pub fn merge(
    schema: &SchemaRef,
    sources: Vec<MergeSource>,
    ordering_column: Option<usize>,
    rule: MergeRule,
) -> Result<Option<RecordBatch>> {
    let mut batches: Vec<RecordBatch> = Vec::new();
    let mut order: Vec<String> = Vec::new();
    let mut versions: HashMap<String, Version> = HashMap::new();
    let mut offer = |key: String, version: Version| match versions.get(&key) {
        Some(existing) if !rule.replaces(existing, &version) => {}
        Some(_) => {
            versions.insert(key, version);
        }
        None => {
            order.push(key.clone());
            versions.insert(key, version);
        }
    };
    for source in sources {
        match source {
            MergeSource::Data(batch) => {
                let index = batches.len();
                let keys = batch.column(RECORD_KEY_COLUMN).as_string_opt::<i32>().ok_or_else(|| {
                    Error::new(ErrorKind::Internal, "record key column is not a string column")
                })?;
                let ordering = ordering_column.map(|c| batch.column(c).clone());
                for row in 0..batch.num_rows() {
                    if keys.is_null(row) {
                        return Err(Error::new(
                            ErrorKind::Corrupt,
                            "a record without _hoodie_record_key cannot be merged",
                        ));
                    }
                    let ordering = ordering
                        .as_ref()
                        .map_or(OrderingValue::Null, |c| OrderingValue::from_array(c.as_ref(), row));
                    offer(keys.value(row).to_owned(), Version { row: Some((index, row)), ordering });
                }
                batches.push(batch);
            }
            MergeSource::Deletes(deletes) => {
                for delete in deletes {
                    offer(delete.record_key, Version { row: None, ordering: delete.ordering });
                }
            }
        }
    }
    let indices: Vec<(usize, usize)> = order.iter().filter_map(|key| versions[key].row).collect();
    if indices.is_empty() {
        return Ok(None);
    }
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    let merged = interleave_record_batch(&refs, &indices)
        .map_err(|e| Error::new(ErrorKind::Internal, "cannot assemble merged rows").with_source(e))?;
    debug_assert_eq!(merged.schema(), *schema);
    Ok(Some(merged))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::schema::table_schema;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        let data = Schema::new(vec![Field::new("ts", DataType::Int64, true), Field::new("v", DataType::Utf8, true)]);
        table_schema(&data, true)
    }

    fn rows(schema: &SchemaRef, data: &[(&str, i64, &str)]) -> MergeSource {
        let nulls = || Arc::new(StringArray::from(vec![None::<&str>; data.len()])) as Arc<dyn Array>;
        let keys = StringArray::from(data.iter().map(|r| r.0).collect::<Vec<_>>());
        let ts = Int64Array::from(data.iter().map(|r| r.1).collect::<Vec<_>>());
        let v = StringArray::from(data.iter().map(|r| r.2).collect::<Vec<_>>());
        MergeSource::Data(
            RecordBatch::try_new(
                schema.clone(),
                vec![nulls(), nulls(), Arc::new(keys), nulls(), nulls(), Arc::new(ts), Arc::new(v)],
            )
            .unwrap(),
        )
    }

    fn delete(key: &str, ordering: OrderingValue) -> MergeSource {
        MergeSource::Deletes(vec![DeleteRecord { record_key: key.into(), partition_path: None, ordering }])
    }

    fn result(batch: Option<RecordBatch>) -> Vec<(String, String)> {
        let Some(batch) = batch else { return vec![] };
        let keys = batch.column(2).as_string::<i32>();
        let v = batch.column(6).as_string::<i32>();
        (0..batch.num_rows()).map(|i| (keys.value(i).to_owned(), v.value(i).to_owned())).collect()
    }

    const EVENT: MergeRule = MergeRule { mode: MergeMode::EventTimeOrdering };

    #[test]
    fn event_time_keeps_greater_ordering_and_newer_on_ties() {
        let s = schema();
        let merged = merge(
            &s,
            vec![
                rows(&s, &[("a", 10, "a-base"), ("b", 10, "b-base"), ("c", 10, "c-base")]),
                rows(&s, &[("a", 5, "a-older-event"), ("b", 10, "b-tie"), ("c", 11, "c-newer"), ("d", 1, "d-new")]),
            ],
            Some(5),
            EVENT,
        )
        .unwrap();
        assert_eq!(
            result(merged),
            [("a", "a-base"), ("b", "b-tie"), ("c", "c-newer"), ("d", "d-new")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn deletes_follow_the_ordering_rules() {
        let s = schema();
        let merged = merge(
            &s,
            vec![
                rows(&s, &[("a", 10, "a"), ("b", 10, "b"), ("c", 10, "c"), ("d", 10, "d")]),
                delete("a", OrderingValue::Int(0)),  // default ordering: deletes regardless
                delete("b", OrderingValue::Int(5)),  // lower ordering: ignored
                delete("c", OrderingValue::Int(20)), // higher ordering: deletes
                delete("d", OrderingValue::Int(10)), // equal ordering: the newer delete wins
                rows(&s, &[("c", 15, "c-late")]),    // lower than the delete: stays deleted
                rows(&s, &[("a", 1, "a-reinserted")]),
            ],
            Some(5),
            EVENT,
        )
        .unwrap();
        assert_eq!(
            result(merged),
            [("a", "a-reinserted"), ("b", "b")].map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn commit_time_takes_the_newest() {
        let s = schema();
        let merged = merge(
            &s,
            vec![rows(&s, &[("a", 10, "old")]), rows(&s, &[("a", 1, "new")]), delete("b", OrderingValue::Null)],
            Some(5),
            MergeRule { mode: MergeMode::CommitTimeOrdering },
        )
        .unwrap();
        assert_eq!(result(merged), [("a".to_owned(), "new".to_owned())]);
    }
}
