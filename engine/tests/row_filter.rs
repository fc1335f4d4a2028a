//! A scan with a row filter ([`ScanOptions::row_filter`]) returns exactly the snapshot's rows
//! that satisfy it, on slices with and without log files (updates and deletes), with and
//! without reading ahead, and counts the rows it dropped: seeded random conditions against a
//! model of the snapshot filtered in Rust.

mod common;

use arrow::array::AsArray;
use arrow::datatypes::{Int64Type, TimestampMicrosecondType};
use common::customers::{local, rows, spec, writer};
use engine::read::aggregate::{Aggregate, AggregateQuery, Combine, Input};
use engine::read::condition::{Column, Condition, Operand};
use engine::read::filter::{Op, Scalar};
use engine::read::prefetch::SliceScan;
use engine::read::reading::Reading;
use engine::read::{ScanOptions, ScanStats, SliceQuery, TableReader};
use engine::services::compaction::compact;
use engine::timeline::ReadBound;
use engine::write::time::LockOptions;
use engine::write::{create_table, NewTable, Transaction};
use rand::{Rng, SeedableRng};
use std::time::Duration;

/// A row of the model: id, name, country, ts.
type Row = (i64, String, String, i64);

fn holds(op: Op, ordering: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    match op {
        Op::Eq => ordering == Equal,
        Op::NotEq => ordering != Equal,
        Op::Lt => ordering == Less,
        Op::LtEq => ordering != Greater,
        Op::Gt => ordering == Greater,
        Op::GtEq => ordering != Less,
    }
}

fn column(field: &str, reading: Reading) -> Column {
    Column { field: field.into(), reading }
}

/// A random condition and its value on a row of the model (`None`: unknown). No column of
/// the model is NULL, so only comparisons with NULL are unknown.
fn random_condition(rng: &mut rand::rngs::StdRng, depth: u32) -> (Condition, Box<dyn Fn(&Row) -> Option<bool>>) {
    let ops = [Op::Eq, Op::NotEq, Op::Lt, Op::LtEq, Op::Gt, Op::GtEq];
    let op = ops[rng.random_range(0..ops.len())];
    match rng.random_range(0..if depth == 0 { 5 } else { 8 }) {
        0 => {
            let value = rng.random_range(-5..1_300);
            let condition = Condition::Compare { column: column("id", Reading::Int), op, operand: Operand::Value(Scalar::Int(value)) };
            (condition, Box::new(move |r: &Row| Some(holds(op, r.0.cmp(&value)))))
        }
        1 => {
            let name = ["updated", "c7", "c700", "x"][rng.random_range(0..4)].to_owned();
            let op = [Op::Eq, Op::NotEq][rng.random_range(0..2)];
            let condition = Condition::Compare { column: column("name", Reading::Text), op, operand: Operand::Value(Scalar::String(name.clone())) };
            (condition, Box::new(move |r: &Row| Some(holds(op, r.1.cmp(&name)))))
        }
        2 => {
            let at = rng.random_range(0..30);
            let condition = Condition::Compare { column: column("ts", Reading::Timestamp), op, operand: Operand::Value(Scalar::TimestampMicros(at)) };
            (condition, Box::new(move |r: &Row| Some(holds(op, r.3.cmp(&at)))))
        }
        3 => {
            let values: Vec<i64> = (0..rng.random_range(1..6)).map(|_| rng.random_range(0..1_200)).collect();
            let condition = Condition::In { column: column("id", Reading::Int), values: values.iter().map(|v| Scalar::Int(*v)).collect() };
            (condition, Box::new(move |r: &Row| Some(values.contains(&r.0))))
        }
        4 => {
            let condition = Condition::Compare { column: column("country", Reading::Text), op: Op::Eq, operand: Operand::Null };
            (condition, Box::new(|_: &Row| None))
        }
        kind => {
            let (a, fa) = random_condition(rng, depth - 1);
            let (b, fb) = random_condition(rng, depth - 1);
            match kind {
                5 => (Condition::And(vec![a, b]), Box::new(move |r: &Row| match (fa(r), fb(r)) {
                    (Some(false), _) | (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                })),
                6 => (Condition::Or(vec![a, b]), Box::new(move |r: &Row| match (fa(r), fb(r)) {
                    (Some(true), _) | (_, Some(true)) => Some(true),
                    (Some(false), Some(false)) => Some(false),
                    _ => None,
                })),
                _ => (Condition::Not(Box::new(a)), Box::new(move |r: &Row| fa(r).map(|v| !v))),
            }
        }
    }
}

async fn scan(reader: &TableReader, options: ScanOptions, depth: usize) -> (Vec<Row>, u64) {
    let slices = reader.slices(&ReadBound::Latest).await.unwrap();
    let query = SliceQuery::Snapshot(ReadBound::Latest);
    let mut scan = SliceScan::new(reader.clone(), query, options, slices, ScanStats::default(), depth);
    let mut out = Vec::new();
    while let Some(rows) = scan.next().await {
        let Some(rows) = rows.unwrap() else { continue };
        let id = rows.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let name = rows.column_by_name("name").unwrap().as_string::<i32>();
        let country = rows.column_by_name("country").unwrap().as_string::<i32>();
        let ts = rows.column_by_name("ts").unwrap().as_primitive::<TimestampMicrosecondType>();
        out.extend((0..rows.num_rows()).map(|i| (id.value(i), name.value(i).to_owned(), country.value(i).to_owned(), ts.value(i))));
    }
    out.sort();
    (out, scan.rows_filtered())
}

#[tokio::test]
async fn row_filters_return_the_rows_that_satisfy_them() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &NewTable { buckets: 2, ..spec() }).await.unwrap();
    let names: Vec<String> = (0..1_000).map(|i| format!("c{i}")).collect();
    let country = |i: i64| if i % 3 == 0 { "de" } else { "nl" };
    let data: Vec<(i64, &str, &str, i64)> = (0..1_000).map(|i| (i, names[i as usize].as_str(), country(i), i % 20)).collect();
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&data)).await.unwrap();
    tx.commit().await.unwrap();
    compact(&storage, &writer(9), &LockOptions::default(), Duration::from_secs(60)).await.unwrap().pop().unwrap();
    // Logs: updates of every 7th row, new rows, and deletes of every 11th.
    let updates: Vec<(i64, &str, &str, i64)> =
        (0..1_200).step_by(7).map(|i| (i, "updated", country(i), 25)).collect();
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&updates)).await.unwrap();
    tx.commit().await.unwrap();
    let deleted: Vec<(i64, &str, &str, i64)> = (0..1_000).step_by(11).map(|i| (i, "", country(i), 26)).collect();
    let mut tx = Transaction::begin(storage.clone(), config, writer(1), LockOptions::default()).await.unwrap();
    tx.delete_rows(&rows(&deleted)).await.unwrap();
    tx.commit().await.unwrap();

    let reader = TableReader::open(storage.clone()).await.unwrap();
    let (all, none_dropped) = scan(&reader, ScanOptions::default(), 1).await;
    assert_eq!(none_dropped, 0);
    assert!(all.iter().any(|r| r.1 == "updated") && !all.iter().any(|r| r.0 == 11) && all.iter().any(|r| r.0 == 1_197));
    let seed: u64 = std::env::var("SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for case in 0..40 {
        let (condition, model) = random_condition(&mut rng, 2);
        let expected: Vec<Row> = all.iter().filter(|r| model(r) == Some(true)).cloned().collect();
        let options = ScanOptions { row_filter: Some(condition.clone()), ..Default::default() };
        for depth in [0, 2] {
            let (got, dropped) = scan(&reader, options.clone(), depth).await;
            assert_eq!(got, expected, "seed {seed} case {case}: {condition}");
            assert_eq!(dropped as usize, all.len() - expected.len(), "seed {seed} case {case}: {condition}");
        }
        // Reading `id` and the condition's columns, the others come back NULL in the filtered batches.
        let mut read: Vec<String> = vec!["id".into()];
        read.extend(condition.columns().into_iter().map(|c| c.field.clone()).filter(|f| f != "id"));
        let unread: Vec<&str> = ["name", "country", "ts"].into_iter().filter(|f| !read.iter().any(|r| r == f)).collect();
        let options = ScanOptions { columns: Some(read), row_filter: Some(condition.clone()), ..Default::default() };
        let (ids, values) = scan_ids(&reader, options, &unread).await;
        assert_eq!(ids, expected.iter().map(|r| r.0).collect::<Vec<_>>(), "seed {seed} case {case}: {condition}, some columns");
        assert_eq!(values, 0, "seed {seed} case {case}: {condition}: values of {unread:?}, not read");
        // Aggregated under the condition, by one integer-valued key and by two keys, with
        // partials per slice and on the caller: the model's groups.
        for keys in [&["ts"][..], &["country", "ts"][..]] {
            let mut model_groups = std::collections::BTreeMap::<(String, i64), (i64, i64)>::new();
            for r in &expected {
                let group = model_groups.entry((if keys.len() == 2 { r.2.clone() } else { String::new() }, r.3)).or_default();
                *group = (group.0 + 1, group.1 + r.0);
            }
            let model_groups: Vec<_> = model_groups.into_iter().map(|((c, ts), (n, sum))| (c, ts, n, sum.to_string())).collect();
            for combine in [Combine::PerSlice, Combine::OnCaller] {
                for depth in [0, 2] {
                    let got = aggregate(&reader, keys, Some(condition.clone()), depth, combine).await;
                    assert_eq!(got, model_groups, "seed {seed} case {case}: {condition} by {keys:?}, {combine:?}, depth {depth}");
                }
            }
        }
    }
}

/// The ids a scan returns, sorted, and how many values (not NULL) it returned of the columns
/// it was not asked to read (`unread`).
async fn scan_ids(reader: &TableReader, options: ScanOptions, unread: &[&str]) -> (Vec<i64>, usize) {
    let slices = reader.slices(&ReadBound::Latest).await.unwrap();
    let mut scan = SliceScan::new(reader.clone(), SliceQuery::Snapshot(ReadBound::Latest), options, slices, ScanStats::default(), 2);
    let (mut ids, mut values_read) = (Vec::new(), 0);
    while let Some(rows) = scan.next().await {
        let Some(rows) = rows.unwrap() else { continue };
        ids.extend(rows.column_by_name("id").unwrap().as_primitive::<Int64Type>().values().iter().copied());
        for &column in unread {
            let values = rows.column_by_name(column).unwrap();
            assert_eq!(values.len(), rows.num_rows());
            values_read += values.len() - values.logical_null_count();
        }
    }
    ids.sort();
    (ids, values_read)
}

/// `count(*), sum(id)` of the latest snapshot's rows under `condition`, by the `keys` (`ts`,
/// or `country, ts`): (country or "", ts, count, sum), sorted.
async fn aggregate(reader: &TableReader, keys: &[&str], condition: Option<Condition>, depth: usize, combine: Combine) -> Vec<(String, i64, i64, String)> {
    let reading = |field: &str| if field == "ts" { Reading::Timestamp } else { Reading::Text };
    let query = AggregateQuery {
        group_by: keys.iter().map(|&k| column(k, reading(k))).collect(),
        aggregates: vec![Aggregate::CountRows, Aggregate::Sum(Input::Column(column("id", Reading::Int)))],
        condition,
    };
    let options = ScanOptions { columns: Some(query.fields()), ..Default::default() };
    let (slices, stats) = reader.pruned_slices(&ReadBound::Latest, &options).await.unwrap();
    let (result, _) = reader.aggregate(&query, SliceQuery::Snapshot(ReadBound::Latest), options, slices, stats, depth, combine).await.unwrap();
    let at = keys.len();
    let ts = result.column(at - 1).as_primitive::<TimestampMicrosecondType>();
    let mut out: Vec<_> = (0..result.num_rows())
        .map(|i| {
            let country = if at == 2 { result.column(0).as_string::<i32>().value(i).to_owned() } else { String::new() };
            let sum = arrow::util::display::array_value_to_string(result.column(at + 1), i).unwrap();
            (country, ts.value(i), result.column(at).as_primitive::<Int64Type>().value(i), sum)
        })
        .collect();
    out.sort();
    out
}
