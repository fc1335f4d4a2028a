//! The metadata tables of the Spark-written fixtures (table versions 8 and 9): their `files`
//! partitions list exactly the data files in storage (none of the fixtures ran a clean, so every
//! file version is still there and listed), and their HFiles, damaged anywhere, are errors of
//! damage rather than panics.

mod common;

use bytes::Bytes;
use engine::error::ErrorKind;
use engine::mdt::files::{listing, METADATA_TABLE_PATH};
use engine::mdt::hfile::HFile;
use engine::storage::{Storage, StorageUri};
use engine::timeline::Timeline;
use engine::view::FileSystemView;

fn storage(base: &std::path::Path) -> Storage {
    Storage::open(&StorageUri::parse(&format!("file://{}", base.display())).unwrap(), &Default::default()).unwrap()
}

/// The fixtures whose table lists its files in a metadata table, unpacked.
fn with_files_partition() -> Vec<(String, tempfile::TempDir, std::path::PathBuf)> {
    let mut out = Vec::new();
    for zip in common::fixture_zips() {
        let (dir, base) = common::unpack(&zip);
        let properties = std::fs::read_to_string(base.join(".hoodie/hoodie.properties")).unwrap();
        let partitions = properties.lines().find_map(|l| l.strip_prefix("hoodie.table.metadata.partitions=")).unwrap_or("");
        if partitions.split(',').any(|p| p == "files") {
            out.push((zip.display().to_string(), dir, base));
        }
    }
    out
}

#[tokio::test]
async fn every_files_partition_lists_the_data_files_in_storage() {
    let tables = with_files_partition();
    assert!(tables.len() >= 5, "only {} fixtures with a metadata table", tables.len());
    for (name, _dir, base) in &tables {
        let storage = storage(base);
        let config = engine::table::load_config(&storage).await.unwrap();
        let timeline = Timeline::load(&storage, &config).await.unwrap();
        let listed = listing(&storage, &timeline).await.unwrap_or_else(|e| panic!("{name}: {e}")).expect("a metadata table");
        assert!(!listed.as_of.is_empty(), "{name}");
        let mut through_metadata = listed.files.clone();
        through_metadata.sort();
        let mut in_storage = FileSystemView::load(&storage).await.unwrap().listing();
        in_storage.sort();
        assert!(!in_storage.is_empty(), "{name}");
        assert_eq!(through_metadata, in_storage, "{name}");
    }
}

/// The base HFiles and log files of every fixture's metadata table `files` partition.
fn files_partition_files() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, _dir, base) in with_files_partition() {
        for entry in std::fs::read_dir(base.join(METADATA_TABLE_PATH).join("files")).unwrap() {
            let path = entry.unwrap().path();
            out.push((format!("{name}: {}", path.file_name().unwrap().to_string_lossy()), std::fs::read(&path).unwrap()));
        }
    }
    out
}

#[test]
fn damaged_hfiles_are_corrupt_not_panics() {
    let hfiles: Vec<(String, Vec<u8>)> = files_partition_files().into_iter().filter(|(n, _)| n.ends_with(".hfile")).collect();
    assert!(!hfiles.is_empty());
    let seed = common::seed();
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for (name, bytes) in hfiles.iter().take(4) {
        let file = HFile::parse(Bytes::from(bytes.clone())).unwrap_or_else(|e| panic!("{name}: {e}"));
        let cells = file.cells().unwrap();
        assert!(!cells.is_empty(), "{name}");
        assert!(file.file_info("schema").is_some(), "{name}");
        // Cut short anywhere, or bytes changed anywhere: an error or (for bytes that decode
        // all the same, such as padding) a result, never a panic.
        for cut in (0..bytes.len()).step_by(97) {
            let error = HFile::parse(Bytes::copy_from_slice(&bytes[..cut])).and_then(|f| f.cells().map(|_| ())).unwrap_err();
            assert!(matches!(error.kind(), ErrorKind::Corrupt | ErrorKind::Unsupported), "{name} cut at {cut}: {error}");
        }
        for _ in 0..2000 {
            let mut damaged = bytes.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % damaged.len() as u64) as usize;
                damaged[at] = next() as u8;
            }
            let outcome = std::panic::catch_unwind(|| HFile::parse(Bytes::from(damaged)).and_then(|f| f.cells().map(|_| ())));
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) => assert!(matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::Unsupported), "{name} (seed {seed}): {e}"),
                Err(_) => panic!("{name}: a damaged HFile panicked (seed {seed})"),
            }
        }
    }
}

/// Rows of the latest snapshot of the table at `base`, and where its files were listed.
async fn snapshot_rows(base: &std::path::Path) -> (usize, String) {
    let reader = engine::read::TableReader::open(storage(base)).await.unwrap();
    let rows = reader.read_snapshot(None).await.unwrap().iter().map(|b| b.num_rows()).sum();
    (rows, reader.listed_from().to_string())
}

#[tokio::test]
async fn a_table_with_a_metadata_table_is_read_through_it_and_a_stray_file_is_not_read() {
    for (name, _dir, base) in with_files_partition() {
        let (rows, listed_from) = snapshot_rows(&base).await;
        assert!(listed_from.starts_with("metadata table as of "), "{name}: {listed_from}");
        // A base file that no writer recorded (a copy of a listed one, as a new file group of
        // the same completed instant): a storage listing reads its rows twice.
        let storage = storage(&base);
        let listed = FileSystemView::load(&storage).await.unwrap().listing();
        let Some((path, _)) = listed.iter().find(|(p, _)| p.ends_with(".parquet")) else { continue };
        let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
        let (file_id, rest) = file.split_once('_').unwrap();
        let stray = format!("{}{}_{rest}", &file_id[..file_id.len() - 8], "5742a7f0");
        let stray = if dir.is_empty() { stray } else { format!("{dir}/{stray}") };
        std::fs::copy(base.join(path), base.join(&stray)).unwrap();
        assert_eq!(snapshot_rows(&base).await, (rows, listed_from.clone()), "{name}: {stray}");
        // Without its metadata table, the table is listed from storage, stray file and all.
        std::fs::remove_dir_all(base.join(METADATA_TABLE_PATH)).unwrap();
        let (rows_listed, from) = snapshot_rows(&base).await;
        assert_eq!(from, "storage", "{name}");
        assert!(rows_listed > rows, "{name}: the stray file's rows ({rows_listed} after, {rows} before)");
    }
}

/// A write and a compaction of a table Spark wrote with a metadata table are recorded in it:
/// listed through it afterwards, exactly as storage holds them; its other indexes are declared
/// unavailable. The fixtures have no bucket
/// index; one is declared for the write, which writes a row the snapshot reads back.
#[tokio::test]
async fn writes_and_compactions_of_a_spark_table_are_recorded_in_its_metadata_table() {
    use engine::write::time::LockOptions;
    use engine::write::Transaction;
    let (name, _dir, base) = with_files_partition().into_iter().find(|(n, _, _)| n.contains("mor")).expect("a merge-on-read fixture");
    let properties = base.join(".hoodie/hoodie.properties");
    let text = std::fs::read_to_string(&properties).unwrap();
    std::fs::write(&properties, format!("{text}hoodie.bucket.index.num.buckets=4\n")).unwrap();
    let storage = storage(&base);
    let config = engine::table::load_config(&storage).await.unwrap();
    let reader = engine::read::TableReader::open(storage.clone()).await.unwrap();
    let rows: usize = reader.read_snapshot(None).await.unwrap().iter().map(|b| b.num_rows()).sum();
    let batch = reader.read_snapshot(None).await.unwrap().into_iter().find(|b| b.num_rows() > 0).unwrap();
    let data_columns: Vec<usize> = (0..batch.num_columns()).filter(|&i| !batch.schema().field(i).name().starts_with("_hoodie_")).collect();
    let batch = batch.project(&data_columns).unwrap().slice(0, 1);
    // A new key (the fixture's is text): the table has no bucket index, so a key written again
    // would land in a bucket's file group beside Spark's.
    let key = batch.schema().index_of(&config.record_key_fields[0]).unwrap();
    let old: &arrow::array::StringArray = arrow::array::AsArray::as_string(batch.column(key));
    let mut columns = batch.columns().to_vec();
    columns[key] = std::sync::Arc::new(arrow::array::StringArray::from(vec![format!("{}-pg_hudi", old.value(0))]));
    let batch = arrow::array::RecordBatch::try_new(batch.schema(), columns).unwrap();
    let writer = common::customers::writer(1);
    let mut tx = Transaction::begin(storage.clone(), config, writer.clone(), LockOptions::default()).await.unwrap();
    tx.upsert(&batch).await.unwrap();
    let instant = tx.instant().to_owned();
    tx.commit().await.unwrap();
    let listed = |storage: Storage| async move {
        let config = engine::table::load_config(&storage).await.unwrap();
        let timeline = Timeline::load(&storage, &config).await.unwrap();
        let mut files = listing(&storage, &timeline).await.unwrap().unwrap().files;
        files.sort();
        let mut stored = FileSystemView::load(&storage).await.unwrap().listing();
        stored.sort();
        (files, stored)
    };
    let (through_metadata, in_storage) = listed(storage.clone()).await;
    assert!(through_metadata.iter().any(|(p, _)| p.contains(&instant)), "{name}: the write's log is listed");
    // The indexes this engine does not keep (column statistics, the record index) are no
    // longer declared: none of them misses the write's files and keys.
    let declared = engine::table::load_config(&storage).await.unwrap().metadata_partitions;
    assert_eq!(declared, ["files"], "{name}");
    assert_eq!(through_metadata, in_storage, "{name}");
    engine::services::compaction::compact(&storage, &writer, &LockOptions::default(), std::time::Duration::from_secs(60)).await.unwrap();
    let (through_metadata, in_storage) = listed(storage.clone()).await;
    assert_eq!(through_metadata, in_storage, "{name}: after a compaction");
    let after: usize = engine::read::TableReader::open(storage.clone()).await.unwrap().read_snapshot(None).await.unwrap().iter().map(|b| b.num_rows()).sum();
    assert_eq!(after, rows + 1, "{name}: one row written");
}

/// The metadata table commits before its data table: a data write that failed after that
/// (still pending on the data timeline) has a completed block in the files partition. Its
/// files are not listed; completed once more, they are.
#[tokio::test]
async fn a_block_of_a_data_write_still_pending_is_not_listed() {
    let (name, _dir, base) = with_files_partition().into_iter().find(|(n, _, _)| n.contains("v9_txns_simple_meta")).expect("the fixture");
    let storage = storage(&base);
    let config = engine::table::load_config(&storage).await.unwrap();
    let timeline_dir = base.join(&config.timeline_dir);
    let completed: Vec<std::path::PathBuf> = std::fs::read_dir(&timeline_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains("_") && p.extension().is_some_and(|e| e == "commit" || e == "deltacommit"))
        .collect();
    let latest = completed.iter().max().expect("a completed write").clone();
    let instant = latest.file_name().unwrap().to_string_lossy().split('_').next().unwrap().to_owned();
    let listed = |timeline: Timeline| {
        let storage = storage.clone();
        async move { listing(&storage, &timeline).await.unwrap().unwrap().files }
    };
    let before = listed(Timeline::load(&storage, &config).await.unwrap()).await;
    let written: Vec<&(String, u64)> = before.iter().filter(|(path, _)| path.contains(&instant)).collect();
    assert!(!written.is_empty(), "{name}: files of {instant}");
    // The data write's completion undone: pending again.
    let kept = std::fs::read(&latest).unwrap();
    std::fs::remove_file(&latest).unwrap();
    let pending = listed(Timeline::load(&storage, &config).await.unwrap()).await;
    assert!(pending.iter().all(|(path, _)| !path.contains(&instant)), "{name}: {instant} is pending: {pending:?}");
    assert_eq!(pending.len(), before.len() - written.len(), "{name}");
    std::fs::write(&latest, kept).unwrap();
    assert_eq!(listed(Timeline::load(&storage, &config).await.unwrap()).await, before);
}

/// The column statistics of Spark's metadata tables prune file slices: a filter on a column
/// keeps only the slices whose files' bounds admit it, and those slices hold every row the
/// filter matches in the whole table.
#[tokio::test]
async fn column_statistics_prune_slices_and_never_lose_a_row() {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::DataType;
    use engine::read::filter::{Op, Predicate, Scalar, ScanFilter};
    use engine::read::{ScanOptions, ScanStats, TableReader};
    use engine::timeline::ReadBound;
    let mut pruned = 0;
    let mut fixtures = 0;
    for (name, _dir, base) in with_files_partition() {
        let storage = storage(&base);
        let config = engine::table::load_config(&storage).await.unwrap();
        if !config.metadata_partitions.iter().any(|p| p == "column_stats") {
            continue;
        }
        fixtures += 1;
        let reader = TableReader::open(storage.clone()).await.unwrap();
        let all = reader.slices(&ReadBound::Latest).await.unwrap();
        let mut slice_rows = Vec::new();
        for slice in &all {
            let batch = reader.read_slice(slice, &ReadBound::Latest, &ScanOptions::default(), &mut ScanStats::default()).await.unwrap();
            slice_rows.push((slice.file_id.clone(), batch));
        }
        let schema = reader.schema().clone();
        for field in schema.fields().iter().filter(|f| !f.name().starts_with("_hoodie_")) {
            let as_scalar = |text: &str| match field.data_type() {
                DataType::Utf8 => Some(Scalar::String(text.to_owned())),
                DataType::Int32 | DataType::Int64 => text.parse().ok().map(Scalar::Int),
                _ => None,
            };
            // A few values the column holds, and one it does not.
            let mut values: Vec<String> = Vec::new();
            for (_, batch) in &slice_rows {
                let Some(batch) = batch else { continue };
                let column = arrow::compute::cast(batch.column_by_name(field.name()).unwrap(), &DataType::Utf8).unwrap();
                let column = column.as_string::<i32>();
                values.extend((0..column.len()).filter(|&i| !column.is_null(i)).take(1).map(|i| column.value(i).to_owned()));
            }
            values.push("999999999".into());
            for value in values.iter().take(4) {
                let Some(scalar) = as_scalar(value) else { continue };
                let predicate = Predicate::Compare { column: field.name().clone(), op: Op::Eq, value: scalar };
                let options = ScanOptions { filter: ScanFilter { predicates: vec![predicate] }, ..Default::default() };
                let (kept, stats) = reader.pruned_slices(&ReadBound::Latest, &options).await.unwrap();
                let kept_ids: Vec<&str> = kept.iter().map(|s| s.file_id.as_str()).collect();
                for (file_id, batch) in &slice_rows {
                    let Some(batch) = batch else { continue };
                    let column = arrow::compute::cast(batch.column_by_name(field.name()).unwrap(), &DataType::Utf8).unwrap();
                    let column = column.as_string::<i32>();
                    let matches = (0..column.len()).any(|i| !column.is_null(i) && column.value(i) == value);
                    assert!(!matches || kept_ids.contains(&file_id.as_str()), "{name}: {} = {value} pruned slice {file_id}", field.name());
                }
                if stats.slices_kept < stats.slices_total {
                    pruned += 1;
                }
            }
        }
    }
    assert!(fixtures >= 3, "{fixtures} fixtures with column statistics");
    assert!(pruned > 0, "no filter pruned a slice by column statistics");
}
