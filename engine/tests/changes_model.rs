//! Snapshots and incremental reads against a model: seeded random upserts and deletes (some
//! written with record positions, as UPDATE and DELETE write them), with compactions run
//! between commits and across a commit; every range's changes must be the model's difference
//! between the states at its two ends.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use common::customers::{local, read_with_positions, rows, spec, writer};
use engine::ordering::OrderingValue;
use engine::read::{ChangeRange, TableReader};
use engine::services::compaction::{compact, run_compaction, schedule_compaction};
use engine::storage::Storage;
use engine::write::time::LockOptions;
use engine::write::{create_table, BaseRow, Transaction};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: i64 = 40;
const STEPS: usize = 10;
const EXPIRY: Duration = Duration::from_secs(60);

/// A key's partition never changes (the table's index is not global).
fn country(id: i64) -> &'static str {
    ["nl", "be", "fr"][(id % 3) as usize]
}

/// The table after each step: id → (name, step that wrote it); step 0 is the empty table.
/// Also, per step, the ids it deleted.
#[derive(Default)]
struct Model {
    states: Vec<BTreeMap<i64, (String, usize)>>,
    deletes: Vec<BTreeSet<i64>>,
}

/// One row of a change read: (id, operation, name, step of its commit time).
type Change = (i64, String, Option<String>, usize);

impl Model {
    /// The changes of the steps in `(start, end]`: each key alive at `end` last written inside
    /// the range, `I` or `U` by whether it was alive at `start`; each key alive at `start` and
    /// not at `end`, `D` at its last delete inside the range.
    fn changes(&self, start: usize, end: usize) -> Vec<Change> {
        let (before, after) = (&self.states[start], &self.states[end]);
        let mut out: Vec<Change> = after
            .iter()
            .filter(|(_, (_, step))| *step > start)
            .map(|(id, (name, step))| (*id, if before.contains_key(id) { "U" } else { "I" }.to_owned(), Some(name.clone()), *step))
            .collect();
        for id in before.keys().filter(|id| !after.contains_key(id)) {
            let step = (start + 1..=end).rev().find(|s| self.deletes[*s].contains(id)).expect("a key that went was deleted");
            out.push((*id, "D".to_owned(), None, step));
        }
        out.sort();
        out
    }
}

/// Runs `STEPS` random commits on a new table, checking the snapshot after each, and returns
/// the model, each step's requested instant and completion time.
async fn random_history(storage: &Storage, seed: u64) -> (Model, Vec<String>, Vec<String>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let config = create_table(storage, &spec()).await.unwrap();
    let mut model = Model { states: vec![BTreeMap::new()], deletes: vec![BTreeSet::new()] };
    let (mut requested, mut completed) = (Vec::new(), Vec::new());
    for step in 1..=STEPS {
        let mut state = model.states[step - 1].clone();
        let mut touched = BTreeSet::new();
        let upserts: Vec<i64> = (0..rng.random_range(1..10)).map(|_| rng.random_range(0..KEYS)).filter(|id| touched.insert(*id)).collect();
        let deletes: Vec<i64> = (0..rng.random_range(0..5)).map(|_| rng.random_range(0..KEYS)).filter(|id| touched.insert(*id)).collect();
        // As UPDATE and DELETE write them, with the positions a snapshot read gave, or by key.
        let by_position = rng.random_bool(0.5);
        let read: BTreeMap<i64, Option<BaseRow>> =
            if by_position { read_with_positions(storage, None).await.into_iter().map(|r| (r.id, r.at)).collect() } else { BTreeMap::new() };

        // A compaction planned before this step's commit and run after it.
        let across = step > 1 && rng.random_bool(0.2);
        let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
        requested.push(tx.instant().to_owned());
        let planned = match across {
            true => schedule_compaction(storage, &writer(9), &LockOptions::default()).await.unwrap(),
            false => None,
        };
        let names: Vec<String> = upserts.iter().map(|id| format!("c{id}-{step}")).collect();
        let data: Vec<(i64, &str, &str, i64)> = upserts.iter().zip(&names).map(|(id, name)| (*id, name.as_str(), country(*id), step as i64)).collect();
        let positions: Vec<Option<BaseRow>> = upserts.iter().map(|id| read.get(id).cloned().flatten()).collect();
        tx.upsert_with_positions(&rows(&data), &positions).await.unwrap();
        let (read_deletes, other_deletes): (Vec<i64>, Vec<i64>) = deletes.iter().partition(|id| read.contains_key(id));
        let data: Vec<(i64, &str, &str, i64)> = read_deletes.iter().map(|id| (*id, "", country(*id), 0)).collect();
        let positions: Vec<Option<BaseRow>> = read_deletes.iter().map(|id| read[id].clone()).collect();
        tx.delete_rows_with_positions(&rows(&data), &positions).await.unwrap();
        let keys = other_deletes.iter().map(|id| (id.to_string(), format!("country={}", country(*id)), OrderingValue::Int(0)));
        tx.delete(keys.collect()).await.unwrap();
        completed.push(tx.commit().await.unwrap());
        if let Some(instant) = planned {
            run_compaction(storage, &instant, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap();
        } else if rng.random_bool(0.3) {
            compact(storage, &writer(9), &LockOptions::default(), EXPIRY).await.unwrap();
        }

        for (id, name) in upserts.iter().zip(names) {
            state.insert(*id, (name, step));
        }
        for id in &deletes {
            state.remove(id);
        }
        let read: Vec<(i64, String)> = read_with_positions(storage, None).await.into_iter().map(|r| (r.id, r.name)).collect();
        let expected: Vec<(i64, String)> = state.iter().map(|(id, (name, _))| (*id, name.clone())).collect();
        assert_eq!(read, expected, "seed {seed}: the snapshot after step {step}");
        model.states.push(state);
        model.deletes.push(deletes.into_iter().collect());
    }
    (model, requested, completed)
}

/// The changes of `range` with deletes, as [`Change`]s.
async fn read_changes(reader: &TableReader, range: &ChangeRange, requested: &[String]) -> Vec<Change> {
    let mut out = Vec::new();
    for batch in reader.read_changes(range, true).await.unwrap() {
        let text = |name: &str, row: usize| {
            let column = batch.column_by_name(name).unwrap().as_string::<i32>();
            column.is_valid(row).then(|| column.value(row).to_owned())
        };
        for row in 0..batch.num_rows() {
            let commit_time = text("_hoodie_commit_time", row).unwrap();
            let step = 1 + requested.iter().position(|r| *r == commit_time).unwrap_or_else(|| panic!("{commit_time} is no step's instant"));
            let id = text("_hoodie_record_key", row).unwrap().parse().unwrap();
            let operation = text("_hoodie_operation", row).unwrap();
            let ids = batch.column_by_name("id").unwrap().as_primitive::<Int64Type>();
            if operation != "D" {
                assert_eq!(ids.value(row), id);
            }
            out.push((id, operation, text("name", row), step));
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn every_range_of_random_histories_reads_as_the_model() {
    for seed in 1..=6 {
        let dir = tempfile::tempdir().unwrap();
        let storage = local(dir.path());
        let (model, requested, completed) = random_history(&storage, seed).await;
        let reader = TableReader::open(storage.clone()).await.unwrap();
        let bound = |step: usize| (step > 0).then(|| completed[step - 1].clone());
        for start in 0..STEPS {
            for end in start + 1..=STEPS {
                let range = ChangeRange { start: bound(start), end: bound(end) };
                let got = read_changes(&reader, &range, &requested).await;
                assert_eq!(got, model.changes(start, end), "seed {seed}: changes after step {start} up to step {end}");
            }
        }
    }
}
