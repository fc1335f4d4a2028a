//! Scans shared by processes (PostgreSQL's parallel scans) split the file slices whose rows
//! need no merge into parts of their base files' rows ([`SlicePart`]), which the processes
//! claim one at a time. The parts of a slice read exactly its rows, in order and with their
//! positions: checked on every shipped fixture (files written by Spark), and under seeded
//! filters on a written table whose base file has a page index (then a part reads only its
//! own rows' pages). Two scans claiming the units of one table from one counter read its
//! snapshot once.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{AsArray, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{Int64Type, UInt64Type};
use common::customers::{local, rows, snapshot, spec, writer};
use engine::error::ErrorKind;
use engine::read::filter::{Op, Predicate, Scalar, ScanFilter};
use engine::read::prefetch::{ScanUnit, SliceScan};
use engine::read::{ScanOptions, ScanStats, SlicePart, SliceQuery, TableReader, ROW_POSITION_COLUMN};
use engine::services::compaction::compact;
use engine::storage::Storage;
use engine::timeline::ReadBound;
use engine::view::FileSlice;
use engine::write::time::LockOptions;
use engine::write::{create_table, NewTable, Transaction};
use rand::{Rng, SeedableRng};

/// Rows of the written table's one file group: four data pages (of 20,480 rows at most).
const ROWS: i64 = 65_000;

/// The rows of `part` of `slice`, and what the read counted.
async fn read_part(reader: &TableReader, slice: &FileSlice, part: SlicePart, options: &ScanOptions) -> (Option<RecordBatch>, ScanStats) {
    let mut stats = ScanStats::default();
    let query = SliceQuery::Snapshot(ReadBound::Latest);
    let rows = reader.fetch_slice_part(slice, part, &query, options, &mut stats).await.unwrap().run().unwrap();
    (rows, stats)
}

/// The rows of every part of `count`, one after the other, and what the reads counted in all.
async fn read_parts(reader: &TableReader, slice: &FileSlice, count: u32, options: &ScanOptions) -> (Vec<RecordBatch>, ScanStats, Vec<Vec<u64>>) {
    let (mut batches, mut total, mut positions) = (Vec::new(), ScanStats::default(), Vec::new());
    for index in 0..count {
        let (rows, stats) = read_part(reader, slice, SlicePart { index, count }, options).await;
        total.row_groups_total += stats.row_groups_total;
        total.row_groups_kept += stats.row_groups_kept;
        total.base_rows_total += stats.base_rows_total;
        total.base_rows_read += stats.base_rows_read;
        positions.push(rows.as_ref().map_or_else(Vec::new, positions_of));
        batches.extend(rows);
    }
    (batches, total, positions)
}

fn positions_of(rows: &RecordBatch) -> Vec<u64> {
    rows.column_by_name(ROW_POSITION_COLUMN).unwrap().as_primitive::<UInt64Type>().values().to_vec()
}

/// The batches as one (`None` for none or no rows).
fn joined(batches: &[RecordBatch]) -> Option<RecordBatch> {
    let schema = batches.first()?.schema();
    Some(concat_batches(&schema, batches).unwrap()).filter(|rows| rows.num_rows() > 0)
}

#[tokio::test]
async fn parts_of_every_fixture_slice_read_its_rows_in_order() {
    let mut split = 0;
    for zip in common::fixture_zips() {
        let (_dir, base) = common::unpack(&zip);
        let storage = local(&base);
        let reader = TableReader::open(storage).await.unwrap();
        let options = ScanOptions { row_positions: true, ..Default::default() };
        for slice in reader.slices(&ReadBound::Latest).await.unwrap() {
            if !slice.log_files.is_empty() {
                // A slice whose rows need merging is read whole.
                let query = SliceQuery::Snapshot(ReadBound::Latest);
                let part = SlicePart { index: 0, count: 2 };
                let error = reader.fetch_slice_part(&slice, part, &query, &options, &mut ScanStats::default()).await.unwrap_err();
                assert_eq!(error.kind(), ErrorKind::Internal, "{}: {error}", zip.display());
                continue;
            }
            let (whole, _) = read_part(&reader, &slice, SlicePart::WHOLE, &options).await;
            for count in [2, 3, 7] {
                let (parts, _, _) = read_parts(&reader, &slice, count, &options).await;
                assert_eq!(joined(&parts), whole, "{}: {} in {count} parts", zip.display(), slice.file_id);
                split += 1;
            }
        }
    }
    assert!(split > 0, "no fixture has a slice without logs");
}

/// A table of one file group whose base file (written by compaction) has a page index.
async fn compacted_table(storage: &Storage) {
    let config = create_table(storage, &NewTable { buckets: 1, ..spec() }).await.unwrap();
    let names: Vec<String> = (0..ROWS).map(|i| format!("c{i}")).collect();
    let data: Vec<(i64, &str, &str, i64)> = (0..ROWS).map(|i| (i, names[i as usize].as_str(), "nl", 10)).collect();
    let mut tx = Transaction::begin(storage.clone(), config, writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&data)).await.unwrap();
    tx.commit().await.unwrap();
    compact(storage, &writer(9), &LockOptions::default(), Duration::from_secs(60)).await.unwrap().pop().unwrap();
}

/// Rewrites the table's one base file in row groups of `GROUP_ROWS` rows, with a page index
/// or without one (as older writers did), keeping its footer's key-value metadata.
async fn in_row_groups(dir: &std::path::Path, page_index: bool) {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::{EnabledStatistics, WriterProperties};
    let slices = TableReader::open(local(dir)).await.unwrap().slices(&ReadBound::Latest).await.unwrap();
    let path = dir.join(slices[0].base_path().expect("a base file"));
    let builder = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap()).unwrap();
    let metadata = builder.metadata().file_metadata().key_value_metadata().cloned();
    let schema = builder.schema().clone();
    let batches: Vec<RecordBatch> = builder.build().unwrap().map(Result::unwrap).collect();
    let properties = WriterProperties::builder()
        .set_max_row_group_size(GROUP_ROWS as usize)
        .set_statistics_enabled(if page_index { EnabledStatistics::Page } else { EnabledStatistics::Chunk })
        .set_offset_index_disabled(!page_index)
        .set_key_value_metadata(metadata)
        .build();
    let mut writer = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, Some(properties)).unwrap();
    batches.iter().for_each(|batch| writer.write(batch).unwrap());
    writer.close().unwrap();
}

/// The most rows the writer puts in a data page.
const PAGE_ROWS: u64 = 20_480;

/// The first rows of the data pages of the Parquet file at `path`, of any column, by its
/// page index (none without one).
fn page_starts(path: &std::path::Path) -> std::collections::BTreeSet<u64> {
    use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};
    let file = std::fs::File::open(path).unwrap();
    let metadata = ParquetMetaDataReader::new().with_page_index_policy(PageIndexPolicy::Optional).parse_and_finish(&file).unwrap();
    let mut starts = std::collections::BTreeSet::new();
    let mut first = 0u64;
    for (group, columns) in metadata.offset_index().into_iter().flatten().enumerate() {
        for column in columns {
            starts.extend(column.page_locations().iter().map(|page| first + page.first_row_index as u64));
        }
        first += metadata.row_group(group).num_rows() as u64;
    }
    starts
}

/// Row groups of the rewritten base file.
const GROUP_ROWS: i64 = 10_000;

#[tokio::test]
async fn parts_read_their_own_rows_and_pages_under_filters() {
    let seed = common::seed();
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    compacted_table(&storage).await;
    check_parts(dir.path(), seed, true, 1).await;
    // Shares across row groups, read by pages, then by row groups.
    let groups = (ROWS as u64).div_ceil(GROUP_ROWS as u64) as usize;
    in_row_groups(dir.path(), true).await;
    check_parts(dir.path(), seed + 1, true, groups).await;
    in_row_groups(dir.path(), false).await;
    check_parts(dir.path(), seed + 2, false, groups).await;
}

/// Reads the table's one slice in parts under seeded filters: the parts read the slice's
/// rows, and each its share: the rows of its share of the file and only the pages that hold
/// them (`page_index`), or else the row groups that start in its share.
async fn check_parts(dir: &std::path::Path, seed: u64, page_index: bool, groups: usize) {
    let reader = TableReader::open(local(dir)).await.unwrap();
    let slices = reader.slices(&ReadBound::Latest).await.unwrap();
    let [slice] = slices.as_slice() else { panic!("one slice: {slices:?}") };
    assert!(slice.log_files.is_empty());
    let page_starts = page_starts(&dir.join(slice.base_path().unwrap()));
    assert_eq!(page_starts.is_empty(), !page_index);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for case in 0..24 {
        let count = rng.random_range(1..=8);
        // No filter, a range of ids (statistics rule out pages or row groups), or a value that
        // rules out none.
        let (low, high) = (rng.random_range(-10..ROWS), rng.random_range(0..ROWS + 10));
        let predicates = match case % 3 {
            0 => Vec::new(),
            1 => vec![
                Predicate::Compare { column: "id".into(), op: Op::GtEq, value: Scalar::Int(low.min(high)) },
                Predicate::Compare { column: "id".into(), op: Op::Lt, value: Scalar::Int(low.max(high)) },
            ],
            _ => vec![Predicate::Compare { column: "country".into(), op: Op::Eq, value: Scalar::String("nl".into()) }],
        };
        let columns = rng.random_bool(0.5).then(|| vec!["id".to_owned(), "name".to_owned()]);
        let options = ScanOptions { filter: ScanFilter { predicates }, columns, row_positions: true, ..Default::default() };
        let context = format!("seed {seed}, case {case}, page index {page_index}: {count} parts, {options:?}");

        let (whole, whole_stats) = read_part(&reader, slice, SlicePart::WHOLE, &options).await;
        let (parts, stats, positions) = read_parts(&reader, slice, count, &options).await;
        assert_eq!(joined(&parts), whole, "{context}");
        for (index, positions) in positions.iter().enumerate() {
            let share = SlicePart { index: index as u32, count }.rows(ROWS as u64);
            if page_index {
                // Shares end at the nearest page start of a column read: a part reads at most
                // a page more than its share, and starts at a page.
                assert!(positions.len() as u64 <= share.end - share.start + PAGE_ROWS, "{context}: part {index} read {positions:?}");
                if case % 3 != 1 {
                    assert!(positions.first().is_none_or(|p| page_starts.contains(p)), "{context}: part {index} starts off a page");
                }
            } else {
                let in_share = |&p: &u64| share.contains(&(p / GROUP_ROWS as u64 * GROUP_ROWS as u64));
                assert!(positions.iter().all(in_share), "{context}: part {index} read {positions:?}");
            }
        }
        // Together the parts read what the whole does, each its own rows (of the pages or row
        // groups the filter leaves) only.
        assert_eq!(stats.base_rows_read, whole_stats.base_rows_read, "{context}");
        assert_eq!((stats.row_groups_total, stats.row_groups_kept), (whole_stats.row_groups_total, whole_stats.row_groups_kept), "{context}");
        assert_eq!(stats.base_rows_total, whole_stats.base_rows_total, "{context}");
        if case % 3 != 1 {
            assert_eq!((stats.base_rows_read, stats.base_rows_total), (ROWS as u64, ROWS as u64), "{context}");
        }
    }
    let (_, stats) = read_part(&reader, slice, SlicePart::WHOLE, &ScanOptions::default()).await;
    assert_eq!(stats.row_groups_total, groups);
}

/// Two scans taking the units of one table from one counter, as a parallel scan's processes
/// do, read each row of the snapshot once; the slice with logs is one unit.
#[tokio::test]
async fn scans_claiming_shared_units_read_the_snapshot_once() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let config = create_table(&storage, &NewTable { buckets: 1, ..spec() }).await.unwrap();
    let names: Vec<String> = (0..ROWS).map(|i| format!("c{i}")).collect();
    let country = |i: i64| if i % 4 == 0 { "de" } else { "nl" };
    let data: Vec<(i64, &str, &str, i64)> = (0..ROWS).map(|i| (i, names[i as usize].as_str(), country(i), 10)).collect();
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&data)).await.unwrap();
    tx.commit().await.unwrap();
    compact(&storage, &writer(9), &LockOptions::default(), Duration::from_secs(60)).await.unwrap().pop().unwrap();
    // Logs in the "de" partition's slice only.
    let updates: Vec<(i64, &str, &str, i64)> = (0..ROWS).step_by(40).map(|i| (i, "updated", "de", 20)).collect();
    let mut tx = Transaction::begin(storage.clone(), config, writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&updates)).await.unwrap();
    tx.commit().await.unwrap();

    let reader = TableReader::open(storage.clone()).await.unwrap();
    let slices = reader.slices(&ReadBound::Latest).await.unwrap();
    let options = ScanOptions { columns: Some(vec!["id".into(), "name".into()]), ..Default::default() };
    let query = SliceQuery::Snapshot(ReadBound::Latest);
    let scan = || SliceScan::new(reader.clone(), query.clone(), options.clone(), slices.clone(), ScanStats::default(), 1);
    let units: Vec<ScanUnit> = scan().shared_units(3, 16);
    for (index, slice) in slices.iter().enumerate() {
        let parts = units.iter().filter(|u| u.slice == index).count();
        match slice.log_files.is_empty() {
            true => assert!(parts > 1, "{units:?}"),
            false => assert_eq!(parts, 1, "{units:?}"),
        }
    }
    let next = Arc::new(AtomicUsize::new(0));
    let claim = || {
        let next = next.clone();
        Box::new(move || Some(next.fetch_add(1, Ordering::Relaxed))) as engine::read::prefetch::Claim
    };
    let (mut first, mut second) = (scan(), scan());
    first.claiming(claim(), units.clone());
    second.claiming(claim(), units.clone());
    let mut read = Vec::new();
    let (mut first_done, mut second_done) = (false, false);
    while !(first_done && second_done) {
        for (scan, done) in [(&mut first, &mut first_done), (&mut second, &mut second_done)] {
            if *done {
                continue;
            }
            match scan.next().await {
                Some(rows) => {
                    if let Some(rows) = rows.unwrap() {
                        let ids = rows.column_by_name("id").unwrap().as_primitive::<Int64Type>().clone();
                        let names = rows.column_by_name("name").unwrap().as_string::<i32>().clone();
                        read.extend((0..rows.num_rows()).map(|i| (ids.value(i), names.value(i).to_owned())));
                    }
                }
                None => *done = true,
            }
        }
    }
    read.sort();
    assert_eq!(read, snapshot(&storage).await);
    assert!(read.iter().any(|(_, name)| name == "updated"));
}
