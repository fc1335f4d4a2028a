//! The one merge routine (hudi-format.md §7.4) for snapshot reads, incremental reads and
//! compaction: record versions of one file slice, oldest first, reduced to one per key.

use std::collections::{HashMap, HashSet};

use arrow::array::{Array, AsArray};
use arrow::compute::interleave_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::{Error, ErrorKind, Result};
use crate::log::DeleteRecord;
use crate::ordering::OrderingValue;
use crate::read::schema::{COMMIT_TIME_COLUMN, RECORD_KEY_COLUMN};
use crate::table::MergeMode;

/// Record versions in the order they were written.
#[derive(Debug)]
pub enum MergeSource {
    /// Rows aligned to the table schema.
    Data(RecordBatch),
    /// Deleted keys, with the instant that wrote them.
    Deletes { records: Vec<DeleteRecord>, instant: String },
}

/// One version of a key.
#[derive(Debug)]
struct Version {
    /// `(batch, row)` of the row, or `None` when the key is deleted.
    row: Option<(usize, usize)>,
    ordering: OrderingValue,
    /// The instant that wrote this version (tracked for change queries only).
    instant: Option<String>,
    partition_path: Option<String>,
}

/// The surviving version of a key and, for change queries, whether the key was alive before
/// the first version written inside the range.
#[derive(Debug)]
struct KeyState {
    winner: Version,
    alive_before_range: Option<bool>,
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

/// What the merge of one file slice produced.
#[derive(Debug, Default)]
pub struct Merged {
    /// One row per surviving key, in order of each key's first appearance.
    pub rows: Option<RecordBatch>,
    /// Change queries only: per row of `rows`, whether the key was alive before the range.
    pub alive_before_range: Vec<bool>,
    /// Change queries only: keys alive before the range and deleted by a delete inside it.
    pub deleted: Vec<DeletedKey>,
}

/// A key removed by a delete inside a change range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedKey {
    pub record_key: String,
    pub partition_path: Option<String>,
    pub instant: String,
}

/// Merges the versions of one file slice into one row per surviving key. `ordering_column`
/// indexes the ordering field in the schema. With `change_range` (the requested instants of
/// the commits in an incremental range) the merge also records, per key, whether it was alive
/// before the first version written in the range, and which keys the range deleted.
pub fn merge(
    schema: &SchemaRef,
    sources: Vec<MergeSource>,
    ordering_column: Option<usize>,
    rule: MergeRule,
    change_range: Option<&HashSet<String>>,
) -> Result<Merged> {
    let mut batches: Vec<RecordBatch> = Vec::new();
    let mut order: Vec<String> = Vec::new();
    let mut keys: HashMap<String, KeyState> = HashMap::new();
    let mut offer = |key: String, version: Version| {
        let in_range = change_range.is_some_and(|r| version.instant.as_ref().is_some_and(|i| r.contains(i)));
        match keys.get_mut(&key) {
            Some(state) => {
                if in_range && state.alive_before_range.is_none() {
                    state.alive_before_range = Some(state.winner.row.is_some());
                }
                if rule.replaces(&state.winner, &version) {
                    state.winner = version;
                }
            }
            None => {
                order.push(key.clone());
                let alive_before_range = in_range.then_some(false);
                keys.insert(key, KeyState { winner: version, alive_before_range });
            }
        }
    };
    for source in sources {
        match source {
            MergeSource::Data(batch) => {
                let index = batches.len();
                let string_column = |i: usize| {
                    batch.column(i).as_string_opt::<i32>().ok_or_else(|| {
                        Error::new(ErrorKind::Internal, "meta columns are not string columns")
                    })
                };
                let record_keys = string_column(RECORD_KEY_COLUMN)?;
                let commit_times = string_column(COMMIT_TIME_COLUMN)?;
                let ordering = ordering_column.map(|c| batch.column(c).clone());
                for row in 0..batch.num_rows() {
                    if record_keys.is_null(row) {
                        return Err(Error::new(
                            ErrorKind::Corrupt,
                            "a record without _hoodie_record_key cannot be merged",
                        ));
                    }
                    let ordering = ordering
                        .as_ref()
                        .map_or(OrderingValue::Null, |c| OrderingValue::from_array(c.as_ref(), row));
                    let instant = (change_range.is_some() && commit_times.is_valid(row))
                        .then(|| commit_times.value(row).to_owned());
                    let version = Version { row: Some((index, row)), ordering, instant, partition_path: None };
                    offer(record_keys.value(row).to_owned(), version);
                }
                batches.push(batch);
            }
            MergeSource::Deletes { records, instant } => {
                for delete in records {
                    let version = Version {
                        row: None,
                        ordering: delete.ordering,
                        instant: Some(instant.clone()),
                        partition_path: delete.partition_path,
                    };
                    offer(delete.record_key, version);
                }
            }
        }
    }

    let mut merged = Merged::default();
    let mut indices = Vec::new();
    for key in &order {
        let state = &keys[key];
        match state.winner.row {
            Some(row) => {
                indices.push(row);
                if change_range.is_some() {
                    merged.alive_before_range.push(state.alive_before_range.unwrap_or(false));
                }
            }
            None if state.alive_before_range == Some(true) => {
                let instant = state.winner.instant.clone().unwrap_or_default();
                if change_range.is_some_and(|r| r.contains(&instant)) {
                    merged.deleted.push(DeletedKey {
                        record_key: key.clone(),
                        partition_path: state.winner.partition_path.clone(),
                        instant,
                    });
                }
            }
            None => {}
        }
    }
    if !indices.is_empty() {
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        let rows = interleave_record_batch(&refs, &indices)
            .map_err(|e| Error::new(ErrorKind::Internal, "cannot assemble merged rows").with_source(e))?;
        debug_assert_eq!(rows.schema(), *schema);
        merged.rows = Some(rows);
    }
    Ok(merged)
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
        rows_at(schema, None, data)
    }

    fn rows_at(schema: &SchemaRef, instant: Option<&str>, data: &[(&str, i64, &str)]) -> MergeSource {
        let nulls = || Arc::new(StringArray::from(vec![None::<&str>; data.len()])) as Arc<dyn Array>;
        let commit_time = Arc::new(StringArray::from(vec![instant; data.len()])) as Arc<dyn Array>;
        let keys = StringArray::from(data.iter().map(|r| r.0).collect::<Vec<_>>());
        let ts = Int64Array::from(data.iter().map(|r| r.1).collect::<Vec<_>>());
        let v = StringArray::from(data.iter().map(|r| r.2).collect::<Vec<_>>());
        MergeSource::Data(
            RecordBatch::try_new(
                schema.clone(),
                vec![commit_time, nulls(), Arc::new(keys), nulls(), nulls(), Arc::new(ts), Arc::new(v)],
            )
            .unwrap(),
        )
    }

    fn delete(key: &str, ordering: OrderingValue) -> MergeSource {
        MergeSource::Deletes {
            records: vec![DeleteRecord { record_key: key.into(), partition_path: None, ordering }],
            instant: "1".into(),
        }
    }

    fn result(merged: Merged) -> Vec<(String, String)> {
        let Some(batch) = merged.rows else { return vec![] };
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
            None,
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
            None,
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
            None,
        )
        .unwrap();
        assert_eq!(result(merged), [("a".to_owned(), "new".to_owned())]);
    }

    #[test]
    fn change_tracking_knows_inserts_updates_and_deletes_in_range() {
        let s = schema();
        let in_range: HashSet<String> = ["2".to_owned()].into();
        let merged = merge(
            &s,
            vec![
                rows_at(&s, Some("1"), &[("a", 1, "a1"), ("b", 1, "b1"), ("c", 1, "c1")]),
                rows_at(&s, Some("2"), &[("a", 2, "a2"), ("d", 2, "d2")]),
                MergeSource::Deletes {
                    records: vec![DeleteRecord { record_key: "b".into(), partition_path: Some("p".into()), ordering: OrderingValue::Int(0) }],
                    instant: "2".into(),
                },
                rows_at(&s, Some("2"), &[("e", 2, "e2")]),
                MergeSource::Deletes {
                    records: vec![DeleteRecord { record_key: "e".into(), partition_path: None, ordering: OrderingValue::Int(0) }],
                    instant: "2".into(),
                },
            ],
            Some(5),
            EVENT,
            Some(&in_range),
        )
        .unwrap();
        assert_eq!(merged.alive_before_range, [true, false, false]); // a, c, d
        assert_eq!(
            merged.deleted,
            [DeletedKey { record_key: "b".into(), partition_path: Some("p".into()), instant: "2".into() }],
            "e was inserted and deleted inside the range: no change to report"
        );
        assert_eq!(result(merged).len(), 3);
    }
}
