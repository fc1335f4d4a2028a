//! A small table written by the tests: customers(id, name, country, ts), keyed by id,
//! ordered by ts, partitioned by country, 4 buckets.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit, UInt64Type};
use engine::read::{ScanOptions, ScanStats, TableReader, ROW_POSITION_COLUMN};
use engine::storage::{Storage, StorageUri};
use engine::table::MergeMode;
use engine::timeline::ReadBound;
use engine::write::{BaseFileRef, BaseRow, NewTable, WriterId};

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
        metadata_table: false,
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
    snapshot_of(&TableReader::open(storage.clone()).await.unwrap()).await
}

/// `(id, name)` of the latest snapshot `reader` reads, sorted.
pub async fn snapshot_of(reader: &TableReader) -> Vec<(i64, String)> {
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

/// Storage for a table in a local directory.
pub fn local(dir: &std::path::Path) -> Storage {
    Storage::open(&StorageUri::parse(&format!("file://{}", dir.display())).unwrap(), &Default::default()).unwrap()
}

/// One row of a snapshot read with positions: id, name, and where it was read.
#[derive(Debug, Clone)]
pub struct ReadRow {
    pub id: i64,
    pub name: String,
    pub country: String,
    pub ts: i64,
    pub at: Option<BaseRow>,
}

/// The snapshot, slice by slice, with `columns` decoded and each row's base position.
pub async fn read_with_positions(storage: &Storage, columns: Option<&[&str]>) -> Vec<ReadRow> {
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let options = ScanOptions {
        columns: columns.map(|c| c.iter().map(|s| s.to_string()).collect()),
        row_positions: true,
        ..Default::default()
    };
    let mut out = Vec::new();
    for slice in reader.slices(&ReadBound::Latest).await.unwrap() {
        let base = slice.base_file.as_ref().map(|b| {
            Arc::new(BaseFileRef { partition: slice.partition.clone(), file_id: slice.file_id.clone(), instant: b.instant.clone() })
        });
        let Some(batch) = reader.read_slice(&slice, &ReadBound::Latest, &options, &mut ScanStats::default()).await.unwrap() else {
            continue;
        };
        out.extend(read_rows(&batch, base.as_ref()));
    }
    out.sort_by_key(|r| r.id);
    out
}

pub fn read_rows(batch: &RecordBatch, base: Option<&Arc<BaseFileRef>>) -> Vec<ReadRow> {
    let id = batch.column_by_name("id").unwrap().as_primitive::<Int64Type>();
    let name = batch.column_by_name("name").unwrap().as_string::<i32>();
    let country = batch.column_by_name("country").unwrap().as_string::<i32>();
    let ts = batch.column_by_name("ts").unwrap().as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
    let positions = batch.column_by_name(ROW_POSITION_COLUMN).unwrap().as_primitive::<UInt64Type>();
    (0..batch.num_rows())
        .map(|i| ReadRow {
            id: id.value(i),
            name: if name.is_valid(i) { name.value(i).to_owned() } else { String::new() },
            country: if country.is_valid(i) { country.value(i).to_owned() } else { String::new() },
            ts: if ts.is_valid(i) { ts.value(i) } else { 0 },
            at: (positions.is_valid(i)).then(|| BaseRow { base: base.expect("a position without a base file").clone(), position: positions.value(i) }),
        })
        .collect()
}
