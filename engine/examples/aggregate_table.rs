//! Times an aggregate computed by the engine alone (no PostgreSQL) over a table's latest
//! snapshot, as the extension's pushed aggregate computes it: for profiling the read and merge
//! path of bench/scan's pushed `sum` (`perf record -g -- <this>`).
//!
//!     cargo run --release -p engine --example aggregate_table -- <table dir> <column> [rounds]
//!
//! Prints `sum(<column>)` (an integer column) and each round's seconds.

use arrow::util::display::array_value_to_string;
use engine::read::aggregate::{Aggregate, AggregateQuery, Column, Input, Reading};
use engine::read::{ScanOptions, SliceQuery, TableReader};
use engine::storage::{Storage, StorageUri};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, column, rest @ ..] = args.as_slice() else {
        eprintln!("usage: aggregate_table <table dir> <integer column> [rounds]");
        std::process::exit(2);
    };
    let rounds: usize = rest.first().map_or(5, |r| r.parse().expect("rounds is a number"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let dir = std::fs::canonicalize(dir).expect("a table directory");
        let uri = StorageUri::parse(&format!("file://{}", dir.display())).expect("a table directory");
        let storage = Storage::open(&uri, &Default::default()).expect("storage");
        let reader = TableReader::open(storage).await.expect("a Hudi table");
        let query = AggregateQuery {
            aggregates: vec![Aggregate::Sum(Input::Column(Column { field: column.clone(), reading: Reading::Int }))],
            ..Default::default()
        };
        for _ in 0..rounds {
            let started = std::time::Instant::now();
            let bound = TableReader::snapshot_bound(None);
            let options = ScanOptions { columns: Some(query.fields()), ..Default::default() };
            let (slices, stats) = reader.pruned_slices(&bound, &options).await.expect("slices");
            let (result, _) = reader
                .aggregate(&query, SliceQuery::Snapshot(bound), options, slices, stats, 2, engine::read::aggregate::Combine::PerSlice)
                .await
                .expect("the aggregate");
            let sum = array_value_to_string(result.column(0), 0).expect("a sum");
            println!("sum({column}) = {sum}: {:.4} s", started.elapsed().as_secs_f64());
        }
    });
}
