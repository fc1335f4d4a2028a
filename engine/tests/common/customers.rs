//! A small table written by the tests: customers(id, name, country, ts), keyed by id,
//! ordered by ts, partitioned by country, 4 buckets.

use std::sync::Arc;

use arrow::array::{AsArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit};
use engine::read::TableReader;
use engine::storage::Storage;
use engine::table::MergeMode;
use engine::write::{NewTable, WriterId};

pub fn schema() -> Schema {
    Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("country", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
    ])
}

pub fn spec() -> NewTable {
    NewTable {
        name: "customers".into(),
        schema: schema(),
        record_key_fields: vec!["id".into()],
        ordering_field: Some("ts".into()),
        partition_fields: vec!["country".into()],
        buckets: 4,
        merge_mode: MergeMode::EventTimeOrdering,
    }
}

pub fn rows(data: &[(i64, &str, &str, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(schema()),
        vec![
            Arc::new(Int64Array::from(data.iter().map(|r| r.0).collect::<Vec<_>>())),
            Arc::new(StringArray::from(data.iter().map(|r| r.1).collect::<Vec<_>>())),
            Arc::new(StringArray::from(data.iter().map(|r| r.2).collect::<Vec<_>>())),
            Arc::new(TimestampMicrosecondArray::from(data.iter().map(|r| r.3).collect::<Vec<_>>()).with_timezone("UTC")),
        ],
    )
    .unwrap()
}

pub async fn snapshot(storage: &Storage) -> Vec<(i64, String)> {
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let mut out = Vec::new();
    for batch in reader.read_snapshot(None).await.unwrap() {
        let id = batch.column_by_name("id").unwrap().as_primitive::<Int64Type>().clone();
        let name = batch.column_by_name("name").unwrap().as_string::<i32>().clone();
        out.extend((0..batch.num_rows()).map(|i| (id.value(i), name.value(i).to_owned())));
    }
    out.sort();
    out
}

pub fn writer(process: u32) -> WriterId {
    WriterId { node: 7, process }
}
