//! Schema evolution on write ([`Transaction::change_schema`]): old files read in the new schema,
//! before and after compaction, and the commit that changes it is Hudi's `ALTER_SCHEMA`.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, Float64Array, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;

use crate::read::TableReader;
use crate::services::compaction::{run_compaction, schedule_compaction};
use crate::write::schema::{evolve, SchemaChange};
use crate::write::table::TestTable;
use crate::write::time::LockOptions;
use crate::write::{Transaction, WriterId};

fn writer() -> WriterId {
    WriterId { node: 8, process: 1 }
}

/// `(id, name, email, score)` of every row, sorted.
async fn rows(table: &TestTable) -> Vec<(i64, String, Option<String>, Option<f64>)> {
    let reader = TableReader::open(table.storage.clone()).await.unwrap();
    let mut out = Vec::new();
    for batch in reader.read_snapshot(None).await.unwrap() {
        let ids = batch.column_by_name("id").unwrap().as_any().downcast_ref::<Int64Array>().unwrap().clone();
        let names = batch.column_by_name("name").unwrap().as_any().downcast_ref::<StringArray>().unwrap().clone();
        let emails = batch.column_by_name("email").map(|c| c.as_any().downcast_ref::<StringArray>().unwrap().clone());
        let scores = batch.column_by_name("score").map(|c| arrow::compute::cast(c, &DataType::Float64).unwrap());
        let scores = scores.as_ref().map(|c| c.as_any().downcast_ref::<Float64Array>().unwrap().clone());
        for i in 0..batch.num_rows() {
            let email = emails.as_ref().and_then(|e| e.is_valid(i).then(|| e.value(i).to_owned()));
            let score = scores.as_ref().and_then(|s| s.is_valid(i).then(|| s.value(i)));
            out.push((ids.value(i), names.value(i).to_owned(), email, score));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test]
async fn old_files_read_in_the_evolved_schema_before_and_after_compaction() {
    let table = TestTable::new(2).await;
    table.upsert(vec![1, 2, 3], "old").await;
    let reader = TableReader::open(table.storage.clone()).await.unwrap();
    // Two changes, each its own commit: a column added, then one added as real and widened.
    let mut schema = reader.avro_schema().to_owned();
    for change in [
        SchemaChange::AddColumn { name: "email".into(), data_type: DataType::Utf8 },
        SchemaChange::AddColumn { name: "score".into(), data_type: DataType::Float32 },
    ] {
        schema = evolve(&schema, &change).unwrap().unwrap();
        let mut tx = Transaction::begin(table.storage.clone(), table.config.clone(), writer(), LockOptions::default()).await.unwrap();
        tx.change_schema(schema.clone()).unwrap();
        tx.commit().await.unwrap();
    }
    let reader = TableReader::open(table.storage.clone()).await.unwrap();
    assert_eq!(reader.avro_schema(), schema);
    let latest = reader.timeline().latest_completed_write().unwrap().clone();
    let metadata = crate::timeline::metadata::read_instant(&table.storage, reader.timeline(), &latest).await.unwrap();
    assert_eq!(metadata["operationType"], "ALTER_SCHEMA");
    assert_eq!(rows(&table).await, vec![(1, "old".into(), None, None), (2, "old".into(), None, None), (3, "old".into(), None, None)]);

    // A write in the new schema, then the widening, then one in the widest.
    let data = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("email", DataType::Utf8, true),
        Field::new("score", DataType::Float32, true),
    ]));
    let batch = RecordBatch::try_new(
        data.clone(),
        vec![
            Arc::new(Int64Array::from(vec![2, 4])),
            Arc::new(StringArray::from(vec!["new", "new"])),
            Arc::new(StringArray::from(vec![Some("b@x"), None])),
            Arc::new(arrow::array::Float32Array::from(vec![Some(1.5), Some(2.5)])),
        ],
    )
    .unwrap();
    let mut tx = Transaction::begin_in_schema(table.storage.clone(), table.config.clone(), writer(), LockOptions::default(), schema.clone()).await.unwrap();
    tx.upsert(&batch).await.unwrap();
    let err = tx.change_schema(schema.clone()).unwrap_err();
    assert_eq!(err.kind(), crate::error::ErrorKind::Unsupported, "no change after writes: {err}");
    tx.commit().await.unwrap();
    let widened = evolve(&schema, &SchemaChange::Widen { name: "score".into(), data_type: DataType::Float64 }).unwrap().unwrap();
    let mut tx = Transaction::begin(table.storage.clone(), table.config.clone(), writer(), LockOptions::default()).await.unwrap();
    tx.change_schema(widened.clone()).unwrap();
    tx.commit().await.unwrap();
    let expected = vec![
        (1, "old".to_owned(), None, None),
        (2, "new".into(), Some("b@x".into()), Some(1.5)),
        (3, "old".into(), None, None),
        (4, "new".into(), None, Some(2.5)),
    ];
    assert_eq!(rows(&table).await, expected);
    let reader = TableReader::open(table.storage.clone()).await.unwrap();
    assert_eq!(reader.schema().field_with_name("score").unwrap().data_type(), &DataType::Float64);

    let instant = schedule_compaction(&table.storage, &writer(), &LockOptions::default()).await.unwrap().unwrap();
    run_compaction(&table.storage, &instant, &writer(), &LockOptions::default(), Duration::from_secs(60)).await.unwrap();
    assert_eq!(rows(&table).await, expected);
    // The compacted base files are in the widest schema.
    let reader = TableReader::open(table.storage.clone()).await.unwrap();
    assert_eq!(reader.avro_schema(), widened, "the compaction records the table's schema");
}
