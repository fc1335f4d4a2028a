//! Record positions: updates and deletes of rows read from base files name those rows in their
//! log blocks, and readers merge such blocks by position; blocks without positions, or with
//! positions for another base file, are merged by key. Every read is checked against a model.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Int64Type, UInt64Type};
use common::customers::{local, read_with_positions, rows, spec, writer, ReadRow};
use engine::log::block::header;
use engine::log::read_blocks;
use engine::read::{ScanOptions, ScanStats, TableReader, ROW_POSITION_COLUMN};
use engine::timeline::ReadBound;
use engine::services::compaction::compact;
use engine::storage::Storage;
use engine::write::time::LockOptions;
use engine::write::{create_table, BaseRow, Transaction};

/// The whole snapshot as (id, name), sorted: what the model must equal.
async fn snapshot(storage: &Storage, columns: Option<&[&str]>) -> Vec<(i64, String)> {
    read_with_positions(storage, columns).await.into_iter().map(|r| (r.id, r.name)).collect()
}

/// [`snapshot`] merged by key, ignoring the blocks' positions.
async fn snapshot_by_key(storage: &Storage, columns: Option<&[&str]>) -> Vec<(i64, String)> {
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let columns = columns.map(|c| c.iter().map(|s| s.to_string()).collect());
    let by_key = ScanOptions { ignore_record_positions: true, columns, ..Default::default() };
    let mut rows = Vec::new();
    for slice in reader.slices(&ReadBound::Latest).await.unwrap() {
        if let Some(batch) = reader.read_slice(&slice, &ReadBound::Latest, &by_key, &mut ScanStats::default()).await.unwrap() {
            let ids = batch.column_by_name("id").unwrap().as_primitive::<Int64Type>();
            let names = batch.column_by_name("name").unwrap().as_string::<i32>();
            rows.extend((0..batch.num_rows()).map(|i| (ids.value(i), names.value(i).to_owned())));
        }
    }
    rows.sort();
    rows
}

/// Updates and deletes `rows` as an UPDATE and a DELETE read them: with their positions.
async fn update_and_delete(storage: &Storage, updates: &[ReadRow], deletes: &[ReadRow], suffix: &str) {
    let config = engine::table::load_config(storage).await.unwrap();
    let mut tx = Transaction::begin(storage.clone(), config, writer(1), LockOptions::default()).await.unwrap();
    let names: Vec<String> = updates.iter().map(|r| format!("{}{suffix}", r.name)).collect();
    let data: Vec<(i64, &str, &str, i64)> =
        updates.iter().zip(&names).map(|(r, n)| (r.id, n.as_str(), r.country.as_str(), r.ts + 1)).collect();
    // Rows arrive in any order: the writer sorts each block by position.
    let positions: Vec<Option<BaseRow>> = updates.iter().map(|r| r.at.clone()).collect();
    tx.upsert_with_positions(&rows(&data), &positions).await.unwrap();
    let data: Vec<(i64, &str, &str, i64)> = deletes.iter().map(|r| (r.id, r.name.as_str(), r.country.as_str(), r.ts)).collect();
    let positions: Vec<Option<BaseRow>> = deletes.iter().map(|r| r.at.clone()).collect();
    tx.delete_rows_with_positions(&rows(&data), &positions).await.unwrap();
    tx.commit().await.unwrap();
}

/// The table's log files.
async fn log_files(storage: &Storage) -> HashSet<String> {
    storage.list_recursive("").await.unwrap().into_iter().map(|(p, _)| p).filter(|p| p.contains(".log.")).collect()
}

/// `(blocks, blocks with positions)` of the log `files`.
async fn blocks_with_positions(storage: &Storage, files: impl IntoIterator<Item = &String>) -> (usize, usize) {
    let (mut blocks, mut positioned) = (0, 0);
    for path in files {
        for block in read_blocks(&storage.get(path).await.unwrap()) {
            blocks += 1;
            let has = block.header.contains_key(&header::RECORD_POSITIONS);
            assert_eq!(has, block.header.contains_key(&header::BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS));
            positioned += usize::from(has);
        }
    }
    (blocks, positioned)
}

/// A customers table of `n` rows (id `i`, name `c<i>`, country `countries[i % len]`), written
/// by one commit and compacted: every file group has a base file. Returns the rows' names.
async fn compacted_table(storage: &Storage, n: usize, countries: &[&str]) -> BTreeMap<i64, String> {
    let config = create_table(storage, &spec()).await.unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let data: Vec<(i64, &str, &str, i64)> = (0..n).map(|i| (i as i64, names[i].as_str(), countries[i % countries.len()], 10)).collect();
    let mut tx = Transaction::begin(storage.clone(), config, writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&data)).await.unwrap();
    tx.commit().await.unwrap();
    compact(storage, &writer(9), &LockOptions::default(), Duration::from_secs(60)).await.unwrap().pop().unwrap();
    data.iter().map(|r| (r.0, r.1.to_owned())).collect()
}

#[tokio::test]
async fn updates_and_deletes_by_position_read_as_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let mut model = compacted_table(&storage, 300, &["nl", "be", "fr"]).await;
    let config = engine::table::load_config(&storage).await.unwrap();

    // Compacted: every row has a position, distinct within its base file.
    let read = read_with_positions(&storage, None).await;
    assert_eq!(read.len(), 300);
    let places: HashSet<(String, String, u64)> = read
        .iter()
        .map(|r| r.at.as_ref().unwrap())
        .map(|at| (at.base.partition.clone(), at.base.file_id.clone(), at.position))
        .collect();
    assert_eq!(places.len(), 300);

    // An UPDATE of every third row and a DELETE of every seventh, in reverse read order.
    let updates: Vec<ReadRow> = read.iter().rev().filter(|r| r.id % 3 == 0 && r.id % 7 != 0).cloned().collect();
    let deletes: Vec<ReadRow> = read.iter().rev().filter(|r| r.id % 7 == 0).cloned().collect();
    let before = log_files(&storage).await;
    update_and_delete(&storage, &updates, &deletes, "-u1").await;
    let written: Vec<String> = log_files(&storage).await.difference(&before).cloned().collect();
    let (blocks, positioned) = blocks_with_positions(&storage, &written).await;
    assert!(blocks >= 2 && positioned == blocks, "{positioned} of {blocks} blocks carry positions");
    for r in &updates {
        model.insert(r.id, format!("{}-u1", r.name));
    }
    for r in &deletes {
        model.remove(&r.id);
    }
    let expected: Vec<(i64, String)> = model.clone().into_iter().collect();
    assert_eq!(snapshot(&storage, None).await, expected);
    // Without the record key column decoded: the merge matches by position alone.
    assert_eq!(snapshot(&storage, Some(&["id", "name"])).await, expected);
    // Merged by key instead, ignoring the positions: the same rows.
    assert_eq!(snapshot_by_key(&storage, None).await, expected);

    // Updated rows keep their base positions: a second UPDATE of them is by position too.
    let read = read_with_positions(&storage, None).await;
    assert!(read.iter().all(|r| r.at.is_some()));
    let again: Vec<ReadRow> = read.iter().filter(|r| r.id % 2 == 0).cloned().collect();
    update_and_delete(&storage, &again, &[], "-u2").await;
    for r in &again {
        model.insert(r.id, format!("{}-u2", r.name));
    }
    let expected: Vec<(i64, String)> = model.clone().into_iter().collect();
    assert_eq!(snapshot(&storage, Some(&["id", "name"])).await, expected);

    // A plain upsert (an INSERT) in some file groups: those slices merge by key.
    let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
    let before = log_files(&storage).await;
    tx.upsert(&rows(&[(1, "one", "be", 99), (1000, "new", "nl", 1)])).await.unwrap();
    tx.commit().await.unwrap();
    let written: Vec<String> = log_files(&storage).await.difference(&before).cloned().collect();
    assert_eq!(blocks_with_positions(&storage, &written).await.1, 0, "rows not read from the table have no positions");
    model.insert(1, "one".into());
    model.insert(1000, "new".into());
    let expected: Vec<(i64, String)> = model.clone().into_iter().collect();
    assert_eq!(snapshot(&storage, Some(&["id", "name"])).await, expected);
    assert!(read_with_positions(&storage, None).await.iter().any(|r| r.id == 1000 && r.at.is_none()), "a key only the logs have");

    // Positions read before another compaction name the old base files: merged by key.
    let stale = read_with_positions(&storage, None).await;
    compact(&storage, &writer(9), &LockOptions::default(), Duration::from_secs(60)).await.unwrap().pop().unwrap();
    let stale_updates: Vec<ReadRow> = stale.iter().filter(|r| r.id % 5 == 0 && r.at.is_some()).cloned().collect();
    let before = log_files(&storage).await;
    update_and_delete(&storage, &stale_updates, &[], "-stale").await;
    let written: Vec<String> = log_files(&storage).await.difference(&before).cloned().collect();
    let (blocks, positioned) = blocks_with_positions(&storage, &written).await;
    assert_eq!(positioned, blocks, "the positions name the base files they were read from");
    for r in &stale_updates {
        model.insert(r.id, format!("{}-stale", r.name));
    }
    let expected: Vec<(i64, String)> = model.into_iter().collect();
    assert_eq!(snapshot(&storage, Some(&["id", "name"])).await, expected);
    assert_eq!(snapshot(&storage, None).await, expected);
}

/// A key's state in a model of event-time merging: its name, ordering value and whether a
/// delete won.
type Versions = BTreeMap<i64, (String, i64, bool)>;

/// Writes by position in one commit: `updates` (row, new name, new ordering value) and
/// `deletes`, applied to `model` as event-time ordering merges them: an update replaces the
/// current version unless that has a greater ordering value; a delete replaces any (it has
/// Hudi's default ordering value, as SQL DELETE writes it).
async fn versions_by_position(storage: &Storage, model: &mut Versions, updates: &[(&ReadRow, String, i64)], deletes: &[&ReadRow]) {
    let config = engine::table::load_config(storage).await.unwrap();
    let mut tx = Transaction::begin(storage.clone(), config, writer(1), LockOptions::default()).await.unwrap();
    let data: Vec<(i64, &str, &str, i64)> = updates.iter().map(|(r, name, ts)| (r.id, name.as_str(), r.country.as_str(), *ts)).collect();
    let positions: Vec<Option<BaseRow>> = updates.iter().map(|(r, ..)| r.at.clone()).collect();
    tx.upsert_with_positions(&rows(&data), &positions).await.unwrap();
    let data: Vec<(i64, &str, &str, i64)> = deletes.iter().map(|r| (r.id, r.name.as_str(), r.country.as_str(), r.ts)).collect();
    let positions: Vec<Option<BaseRow>> = deletes.iter().map(|r| r.at.clone()).collect();
    tx.delete_rows_with_positions(&rows(&data), &positions).await.unwrap();
    tx.commit().await.unwrap();
    let versions = updates.iter().map(|(r, name, ts)| (r.id, name.clone(), *ts, true)).chain(deletes.iter().map(|r| (r.id, String::new(), i64::MIN, false)));
    for (id, name, ts, alive) in versions {
        let current = model.get_mut(&id).unwrap();
        if current.1 <= ts || !alive {
            *current = (name, ts, alive);
        }
    }
}

/// A compacted table of rows `i` (name `c<i>`, ordering value `1000 + 3i`), as many as it
/// returns, with its model: enough rows per base file for the writer to judge the ordering
/// values distinct (no dictionary).
async fn distinct_ordering_table(storage: &Storage) -> (usize, Versions) {
    let config = create_table(storage, &spec()).await.unwrap();
    let n = 6000;
    let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
    let data: Vec<(i64, &str, &str, i64)> = (0..n).map(|i| (i as i64, names[i].as_str(), "nl", 1000 + 3 * i as i64)).collect();
    let mut tx = Transaction::begin(storage.clone(), config, writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&data)).await.unwrap();
    tx.commit().await.unwrap();
    compact(storage, &writer(9), &LockOptions::default(), Duration::from_secs(60)).await.unwrap().pop().unwrap();
    (n, data.iter().map(|r| (r.0, (r.1.to_owned(), r.3, true))).collect())
}

/// Writes by position, in one commit, updates of the `read` rows 1 lower than, equal to and 1
/// greater than their base rows' ordering values (by id % 4), and deletes of some rows not
/// updated: one version per base row.
async fn one_version_per_base_row(storage: &Storage, model: &mut Versions, read: &[ReadRow]) {
    let updates: Vec<(&ReadRow, String, i64)> =
        read.iter().filter(|r| r.id % 4 != 3).map(|r| (r, format!("{}-u1", r.name), r.ts + r.id % 4 - 1)).collect();
    let deletes: Vec<&ReadRow> = read.iter().filter(|r| r.id % 4 == 3 && r.id % 9 == 0).collect();
    versions_by_position(storage, model, &updates, &deletes).await;
}

/// Versions by position with ordering values lower than, equal to and greater than their base
/// rows' (each base row's own: no two alike), in two commits. Read with the ordering field
/// decoded, with its values read in place for the rows the logs name only (a read without the
/// field), and merged by key, the rows are the model's.
#[tokio::test]
async fn versions_by_position_win_by_ordering_value_however_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let (n, mut model) = distinct_ordering_table(&storage).await;

    // The ordering field's chunks are not dictionary-encoded: its values can be read in place.
    let bases: Vec<String> = storage.list_recursive("").await.unwrap().into_iter().map(|(p, _)| p).filter(|p| p.ends_with(".parquet")).collect();
    assert_eq!(bases.len(), 4);
    for base in bases {
        let footer = parquet::file::serialized_reader::SerializedFileReader::new(storage.get(&base).await.unwrap()).unwrap();
        let metadata = parquet::file::reader::FileReader::metadata(&footer);
        let ts = metadata.row_group(0).columns().iter().find(|c| c.column_path().string() == "ts").unwrap();
        assert!(ts.dictionary_page_offset().is_none(), "{base}: {:?}", ts.encodings().collect::<Vec<_>>());
    }

    let read = read_with_positions(&storage, None).await;
    let at = |id: i64| read.iter().find(|r| r.id == id).unwrap();
    one_version_per_base_row(&storage, &mut model, &read).await;
    assert_reads_as(&storage, &model, "one version per base row").await;
    // Again, every fifth row by versions 1 lower, equal and 1 greater than the base row's
    // value, by id % 3: some over a delete, some over the first update.
    let again: Vec<(&ReadRow, String, i64)> = (0..n as i64).step_by(5).map(|id| (at(id), format!("c{id}-u2"), at(id).ts + id % 3 - 1)).collect();
    versions_by_position(&storage, &mut model, &again, &[]).await;

    assert_reads_as(&storage, &model, "several versions of some base rows").await;
}

/// Versions by position whose ordering values are all at least every base row's (the usual
/// update: a later event time), one equal to the greatest: the base files' and log blocks'
/// statistics show that no base row can win, and the base rows' values are not read. Then one
/// version lower than its base row's value: they are read again. Either way the rows are the
/// model's.
#[tokio::test]
async fn versions_later_than_every_base_row_read_as_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let (n, mut model) = distinct_ordering_table(&storage).await;
    let greatest = model.values().map(|v| v.1).max().unwrap();

    let read = read_with_positions(&storage, None).await;
    let at = |id: i64| read.iter().find(|r| r.id == id).unwrap();
    let later: Vec<(&ReadRow, String, i64)> = (0..n as i64)
        .filter(|id| id % 7 == 0 || *id == n as i64 - 1)
        .map(|id| (at(id), format!("c{id}-u1"), if id == n as i64 - 1 { greatest } else { greatest + id % 3 }))
        .collect();
    let before = log_files(&storage).await;
    versions_by_position(&storage, &mut model, &later, &[]).await;
    assert_eq!(model[&(n as i64 - 1)].0, format!("c{}-u1", n - 1), "a tie goes to the later version");
    // What the bound needs: every block states the least ordering value exactly, and no NULLs.
    let written: Vec<String> = log_files(&storage).await.difference(&before).cloned().collect();
    assert!(!written.is_empty());
    for path in &written {
        for block in read_blocks(&storage.get(path).await.unwrap()) {
            let footer = parquet::file::metadata::ParquetMetaDataReader::new().parse_and_finish(&block.content).unwrap();
            for group in footer.row_groups() {
                let ts = group.columns().iter().find(|c| c.column_path().string() == "ts").unwrap();
                let statistics = ts.statistics().unwrap();
                assert!(statistics.min_is_exact() && statistics.null_count_opt() == Some(0), "{path}: {statistics:?}");
            }
        }
    }
    assert_reads_as(&storage, &model, "versions later than every base row").await;
    // One version lower than its base row's value, which keeps its row.
    let lower = [(at(1), "c1-u2".to_owned(), at(1).ts - 1), (at(2), "c2-u2".to_owned(), greatest + 5)];
    versions_by_position(&storage, &mut model, &lower, &[]).await;
    assert_eq!(model[&1].0, "c1");
    assert_reads_as(&storage, &model, "and one version lower than its base row").await;
}

/// Reads of the whole snapshot return `model`'s live keys: with the ordering values read in
/// place (a read without the ordering field), with the field decoded, with every column, and
/// merged by key.
async fn assert_reads_as(storage: &Storage, model: &Versions, case: &str) {
    let expected: Vec<(i64, String)> = model.iter().filter(|(_, v)| v.2).map(|(id, v)| (*id, v.0.clone())).collect();
    assert!(expected.iter().any(|(_, name)| name.ends_with("-u1")) && expected.iter().any(|(id, name)| *name == format!("c{id}")));
    assert_eq!(snapshot(storage, Some(&["id", "name"])).await, expected, "{case}: the ordering values read in place");
    assert_eq!(snapshot(storage, Some(&["id", "name", "ts"])).await, expected, "{case}: the ordering field decoded");
    assert_eq!(snapshot(storage, None).await, expected, "{case}: every column");
    assert_eq!(snapshot_by_key(storage, Some(&["id", "name"])).await, expected, "{case}: merged by key");
}

#[tokio::test]
async fn positions_count_the_row_groups_that_statistics_skip() {
    use engine::read::filter::{Op, Predicate, Scalar, ScanFilter};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    compacted_table(&storage, 400, &["nl"]).await;

    // Each base file rewritten in id order with row groups of 10 rows, so that a filter on
    // id skips most of them.
    let bases: Vec<String> =
        storage.list_recursive("").await.unwrap().into_iter().map(|(p, _)| p).filter(|p| p.ends_with(".parquet")).collect();
    for path in &bases {
        let bytes = storage.get(path).await.unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap().build().unwrap();
        let schema = arrow::record_batch::RecordBatchReader::schema(&reader);
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        let all = arrow::compute::concat_batches(&schema, &batches).unwrap();
        let ids = all.column_by_name("id").unwrap();
        let order = arrow::compute::sort_to_indices(ids, None, None).unwrap();
        let sorted = arrow::compute::take_record_batch(&all, &order).unwrap();
        let mut out = Vec::new();
        let properties = WriterProperties::builder().set_max_row_group_size(10).build();
        let mut writer = ArrowWriter::try_new(&mut out, schema, Some(properties)).unwrap();
        writer.write(&sorted).unwrap();
        writer.close().unwrap();
        storage.put(path, out.into()).await.unwrap();
    }

    let reader = TableReader::open(storage.clone()).await.unwrap();
    let filter = ScanFilter { predicates: vec![Predicate::Compare { column: "id".into(), op: Op::GtEq, value: Scalar::Int(350) }] };
    let options = ScanOptions { filter, columns: Some(vec!["id".into()]), row_positions: true, ..Default::default() };
    let mut stats = ScanStats::default();
    let mut checked = 0;
    for slice in reader.slices(&ReadBound::Latest).await.unwrap() {
        let Some(batch) = reader.read_slice(&slice, &ReadBound::Latest, &options, &mut stats).await.unwrap() else { continue };
        // The id at each returned position of the base file is the row's id.
        let bytes = storage.get(&slice.base_path().unwrap()).await.unwrap();
        let file: Vec<RecordBatch> = ParquetRecordBatchReaderBuilder::try_new(bytes).unwrap().build().unwrap().map(Result::unwrap).collect();
        let file = arrow::compute::concat_batches(&file[0].schema(), &file).unwrap();
        let file_ids = file.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let ids = batch.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let positions = batch.column_by_name(ROW_POSITION_COLUMN).unwrap().as_primitive::<UInt64Type>();
        for row in 0..batch.num_rows() {
            assert_eq!(file_ids.value(positions.value(row) as usize), ids.value(row));
            checked += 1;
        }
    }
    assert!(stats.row_groups_kept < stats.row_groups_total / 2, "{stats:?}");
    assert!(checked >= 50, "the rows with id >= 350 and the rest of their row groups: {checked}");
}

#[tokio::test]
async fn a_block_with_a_wrong_number_of_positions_is_corrupt() {
    use engine::log::block::encode_block;
    use engine::log::positions::{decode_positions, encode_positions};

    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    compacted_table(&storage, 40, &["nl"]).await;
    let before = log_files(&storage).await;
    let read = read_with_positions(&storage, None).await;
    update_and_delete(&storage, &read, &[], "-u").await;

    // One update block loses its last position.
    let path = log_files(&storage).await.difference(&before).next().unwrap().clone();
    let block = read_blocks(&storage.get(&path).await.unwrap()).remove(0);
    let positions = decode_positions(&block.header[&header::RECORD_POSITIONS]).unwrap();
    let mut damaged = block.header.clone();
    damaged.insert(header::RECORD_POSITIONS, encode_positions(&positions[..positions.len() - 1]).unwrap());
    storage.put(&path, encode_block(block.block_type, &damaged, &block.content).into()).await.unwrap();

    let reader = TableReader::open(storage.clone()).await.unwrap();
    let mut errors = Vec::new();
    for slice in reader.slices(&ReadBound::Latest).await.unwrap() {
        if let Err(e) = reader.read_slice(&slice, &ReadBound::Latest, &ScanOptions::default(), &mut ScanStats::default()).await {
            errors.push(e);
        }
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].kind(), engine::error::ErrorKind::Corrupt);
    assert!(errors[0].to_string().contains(&path), "{}", errors[0]);
}

/// The whole snapshot as of `bound`, as (id, name, base position), sorted, with what the
/// reads of its slices did.
async fn snapshot_as_of(storage: &Storage, bound: &ReadBound, columns: Option<&[&str]>) -> (Vec<(i64, String, Option<u64>)>, ScanStats) {
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let columns = columns.map(|c| c.iter().map(|s| s.to_string()).collect());
    let options = ScanOptions { columns, row_positions: true, ..Default::default() };
    let (mut rows, mut stats) = (Vec::new(), ScanStats::default());
    for slice in reader.slices(bound).await.unwrap() {
        if let Some(batch) = reader.read_slice(&slice, bound, &options, &mut stats).await.unwrap() {
            let ids = batch.column_by_name("id").unwrap().as_primitive::<Int64Type>();
            let names = batch.column_by_name("name").unwrap().as_string::<i32>();
            let positions = batch.column_by_name(ROW_POSITION_COLUMN).unwrap().as_primitive::<UInt64Type>();
            rows.extend((0..batch.num_rows()).map(|i| (ids.value(i), names.value(i).to_owned(), positions.is_valid(i).then(|| positions.value(i)))));
        }
    }
    rows.sort();
    (rows, stats)
}

/// A read of slices with logs keeps what their merge decided; a read of the same versions
/// again, of any columns, assembles its rows by it without merging (counted in
/// `merges_reused`) and returns the model's rows at the same base positions. A new commit's
/// blocks are new versions: those slices merge again, while a read as of the earlier
/// instant still reuses the earlier outcome. Aggregates reuse outcomes too.
#[tokio::test]
async fn repeated_reads_reuse_the_merge_of_the_same_versions() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(dir.path());
    let (n, mut model) = distinct_ordering_table(&storage).await;
    let read = read_with_positions(&storage, None).await;
    let at = |id: i64| read.iter().find(|r| r.id == id).unwrap();
    one_version_per_base_row(&storage, &mut model, &read).await;
    let first = TableReader::open(storage.clone()).await.unwrap().latest_instant().unwrap().to_owned();
    let live = |model: &Versions| -> Vec<(i64, String)> { model.iter().filter(|(_, v)| v.2).map(|(id, v)| (*id, v.0.clone())).collect() };
    let names = |rows: &[(i64, String, Option<u64>)]| -> Vec<(i64, String)> { rows.iter().map(|r| (r.0, r.1.clone())).collect() };

    let (merged, stats) = snapshot_as_of(&storage, &ReadBound::Latest, Some(&["id", "name"])).await;
    assert_eq!(names(&merged), live(&model));
    assert_eq!(stats.merges_reused, 0, "the first read merges every slice");
    let slices = TableReader::open(storage.clone()).await.unwrap().slices(&ReadBound::Latest).await.unwrap().len();
    for columns in [Some(&["id", "name"][..]), Some(&["id", "name", "ts"][..]), None] {
        let (again, stats) = snapshot_as_of(&storage, &ReadBound::Latest, columns).await;
        assert_eq!(again, merged, "reading {columns:?} again: the same rows at the same positions");
        assert_eq!(stats.merges_reused, slices, "reading {columns:?} again");
    }
    // Merged by key, the versions are matched otherwise: merged once more, to the same rows.
    assert_eq!(snapshot_by_key(&storage, Some(&["id", "name"])).await, live(&model));

    // Aggregates over the merged rows, merged afresh (a new table reader shares the outcomes,
    // so the first is forced by a new commit's blocks) and then reused, give the model's.
    let sum_ids = || async {
        use engine::read::aggregate::{Aggregate, AggregateQuery, Column, Reading};
        let reader = TableReader::open(storage.clone()).await.unwrap();
        let query = AggregateQuery {
            aggregates: vec![Aggregate::CountRows, Aggregate::Sum(engine::read::aggregate::Input::Column(Column { field: "id".into(), reading: Reading::Int }))],
            ..Default::default()
        };
        let bound = TableReader::snapshot_bound(None);
        let options = ScanOptions { columns: Some(query.fields()), ..Default::default() };
        let (slices, stats) = reader.pruned_slices(&bound, &options).await.unwrap();
        let (result, stats) = reader.aggregate(&query, engine::read::SliceQuery::Snapshot(bound), options, slices, stats, 2, engine::read::aggregate::Combine::PerSlice).await.unwrap();
        let count = result.column(0).as_primitive::<Int64Type>().value(0);
        let sum = arrow::util::display::array_value_to_string(result.column(1), 0).unwrap();
        (count, sum, stats.scan.merges_reused)
    };
    let again: Vec<(&ReadRow, String, i64)> = (0..n as i64).step_by(5).map(|id| (at(id), format!("c{id}-u2"), at(id).ts + id % 3 - 1)).collect();
    versions_by_position(&storage, &mut model, &again, &[]).await;
    let expected = live(&model);
    let (count, sum) = (expected.len() as i64, expected.iter().map(|r| r.0).sum::<i64>().to_string());
    assert_eq!(sum_ids().await, (count, sum.clone(), 0), "aggregated after a new commit");
    assert_eq!(sum_ids().await, (count, sum, slices), "aggregated again");
    let (latest, stats) = snapshot_as_of(&storage, &ReadBound::Latest, Some(&["id", "name"])).await;
    assert_eq!((names(&latest), stats.merges_reused), (expected, slices), "read after the aggregates");

    // As of the first commit, the versions are those of the first read: its outcomes serve.
    let (as_of, stats) = snapshot_as_of(&storage, &TableReader::snapshot_bound(Some(&first)), Some(&["id", "name"])).await;
    assert_eq!((as_of, stats.merges_reused), (merged, slices), "read as of the first commit");
}
