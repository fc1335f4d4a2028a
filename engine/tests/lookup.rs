//! The lookup cache against the table it caches: after every commit of seeded random writes
//! (upserts, late writes with older ordering values, deletes, join-key changes, compactions),
//! a refresh leaves the cache equal to the merged snapshot, by record key and by secondary key.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::Int64Type;
use common::customers::{local, rows, schema, spec, writer};
use engine::lookup::{CacheDefinition, CacheGenerations, Index, LookupCache, Projection};
use engine::ordering::OrderingValue;
use engine::read::TableReader;
use engine::services::clean::{clean, CleanOptions};
use engine::services::compaction::compact;
use engine::write::time::LockOptions;
use engine::write::{create_table, Transaction};

type Row = (i64, String, String);

/// Every cached column, for probes.
fn every_column(cache: &LookupCache) -> Projection {
    cache.projection(None).unwrap()
}

fn cached_rows(batch: &RecordBatch) -> Vec<Row> {
    let id = batch.column_by_name("id").unwrap().as_primitive::<Int64Type>().clone();
    let name = batch.column_by_name("name").unwrap().as_string::<i32>().clone();
    let country = batch.column_by_name("country").unwrap().as_string::<i32>().clone();
    let mut out: Vec<Row> =
        (0..batch.num_rows()).map(|i| (id.value(i), name.value(i).to_owned(), country.value(i).to_owned())).collect();
    out.sort();
    out
}

async fn snapshot_rows(reader: &TableReader) -> Vec<Row> {
    let mut out = Vec::new();
    for batch in reader.read_snapshot(None).await.unwrap() {
        out.extend(cached_rows(&batch));
    }
    out.sort();
    out
}

/// A small deterministic generator (xorshift), so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[tokio::test]
async fn a_refreshed_cache_equals_the_merged_snapshot() {
    let seed = common::seed();
    // (The generator needs a seed other than 0.)
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let storage = local(&dir.path().join("table"));
    let config = create_table(&storage, &spec()).await.unwrap();
    let definition = CacheDefinition { columns: Some(vec!["id".into(), "country".into()]), secondary: vec![vec!["name".into()]] };
    let generations = CacheGenerations::new(&dir.path().join("cache"));
    assert_eq!(generations.current().unwrap(), None);
    let names = ["ann", "bob", "cy", "di"];
    let countries = ["nl", "be"];
    // The latest ordering value written per (id, country): later writes below it are late.
    let mut newest: BTreeMap<(i64, &str), i64> = BTreeMap::new();
    let mut ts = 1_000;
    let mut last = Vec::new();
    for step in 0..24 {
        let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
        let mut upserts = Vec::new();
        for _ in 0..rng.below(6) + 1 {
            let id = rng.below(12) as i64 + 1;
            let country = countries[rng.below(2) as usize];
            ts += 10;
            // One write in four is late: older than the key's newest, so it changes nothing.
            let late = rng.below(4) == 0 && newest.contains_key(&(id, country));
            let at = if late { newest[&(id, country)] - 5 } else { ts };
            if !late {
                newest.insert((id, country), at);
            }
            if !upserts.iter().any(|(i, _, c, _)| *i == id && *c == country) {
                upserts.push((id, names[rng.below(4) as usize], country, at));
            }
        }
        tx.upsert(&rows(&upserts)).await.unwrap();
        if rng.below(3) == 0 {
            let id = rng.below(12) as i64 + 1;
            let country = countries[rng.below(2) as usize];
            tx.delete(vec![(id.to_string(), format!("country={country}"), OrderingValue::Int(0))]).await.unwrap();
            newest.remove(&(id, country));
            upserts.retain(|(i, _, c, _)| !(*i == id && *c == country));
        }
        tx.commit().await.unwrap();
        let compacted = step % 7 == 6;
        let reader = TableReader::open(storage.clone()).await.unwrap();
        // Loaded once; every later commit is applied to it (also after reopening it).
        let applied = generations.refresh(&definition, &schema(), &reader).await.unwrap();
        assert_eq!(applied.loaded_generation, (step == 0).then_some(1), "seed {seed}, step {step}");
        // A load leaves nothing of its staging (sorted runs, progress) behind.
        assert!(!generations.dir(1).join("load").exists(), "seed {seed}, step {step}");
        let cache = LookupCache::open(&generations.dir(1), &definition, &schema()).unwrap();
        let expected = snapshot_rows(&reader).await;
        let context = format!("seed {seed}, step {step}");
        // The cached rows: id, country and name (the index's column is always cached).
        assert_eq!(cached_rows(&cache.rows().unwrap()), expected, "{context}");
        for id in 1..=13 {
            let want: Vec<Row> = expected.iter().filter(|r| r.0 == id).cloned().collect();
            assert_eq!(cached_rows(&cache.probe(Index::RecordKey, &[Arc::new(Int64Array::from(vec![id])) as ArrayRef], &every_column(&cache)).unwrap()), want, "{context}, id {id}");
        }
        for name in names.iter().chain(&["nobody"]) {
            let want: Vec<Row> = expected.iter().filter(|r| r.1 == *name).cloned().collect();
            let key: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec![*name]))];
            assert_eq!(cached_rows(&cache.probe(Index::Secondary(0), &key, &every_column(&cache)).unwrap()), want, "{context}, name {name}");
        }
        let null: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec![None::<&str>]))];
        assert_eq!(cache.probe(Index::Secondary(0), &null, &every_column(&cache)).unwrap().num_rows(), 0);
        // Many keys at once, repeated, absent and NULL among them: each matching row once.
        assert_eq!(cache.record_key_fields(), Some(&["id".to_owned()][..]), "{context}");
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![Some(3), None, Some(3), Some(99), Some(5)]));
        let want: Vec<Row> = expected.iter().filter(|r| r.0 == 3 || r.0 == 5).cloned().collect();
        assert_eq!(cached_rows(&cache.probe(Index::RecordKey, &[ids.clone()], &every_column(&cache)).unwrap()), want, "{context}");
        // Only the columns asked for are decoded.
        let name = cache.projection(Some(&["name".to_owned()])).unwrap();
        let projected = cache.probe(Index::RecordKey, &[ids], &name).unwrap();
        assert_eq!(projected.schema().fields().len(), 1);
        let mut names: Vec<String> = projected.column(0).as_string::<i32>().iter().map(|n| n.unwrap().to_owned()).collect();
        names.sort();
        let mut want_names: Vec<String> = want.iter().map(|r| r.1.clone()).collect();
        want_names.sort();
        assert_eq!(names, want_names, "{context}");
        let names_asked: ArrayRef = Arc::new(StringArray::from(vec!["ann", "nobody", "ann", "cy"]));
        let want: Vec<Row> = expected.iter().filter(|r| r.1 == "ann" || r.1 == "cy").cloned().collect();
        assert_eq!(cached_rows(&cache.probe(Index::Secondary(0), &[names_asked], &every_column(&cache)).unwrap()), want, "{context}");
        assert!(applied.to.is_some() && applied.to != applied.from, "{context}: {applied:?}");
        assert_eq!(cache.position(), applied.to.as_deref());
        assert_eq!(applied.rows as usize, expected.len(), "{context}");
        drop(cache);
        if compacted {
            // A compaction alone changes no row: the next refresh writes nothing.
            compact(&storage, &writer(9), &LockOptions::default(), Duration::from_secs(60)).await.unwrap();
            let reader = TableReader::open(storage.clone()).await.unwrap();
            let again = generations.refresh(&definition, &schema(), &reader).await.unwrap();
            assert_eq!((again.upserts, again.deletes, again.loaded_generation), (0, 0, None), "{context}");
        }
        last = expected;
    }
    let keys: BTreeSet<i64> = last.into_iter().map(|r| r.0).collect();
    assert!(!keys.is_empty(), "seed {seed}: the test wrote nothing that stayed");
}

#[tokio::test]
async fn a_cache_refuses_another_definition() {
    let dir = tempfile::tempdir().unwrap();
    let one = CacheDefinition { columns: None, secondary: vec![vec!["name".into()]] };
    drop(LookupCache::open(dir.path(), &one, &schema()).unwrap());
    let other = CacheDefinition { columns: None, secondary: vec![] };
    let err = LookupCache::open(dir.path(), &other, &schema()).err().unwrap();
    assert!(err.to_string().contains("other columns or indexes"), "{err}");
    // Through the generations, another definition is a new generation.
    let storage = local(&dir.path().join("table"));
    create_table(&storage, &spec()).await.unwrap();
    let generations = CacheGenerations::new(&dir.path().join("generations"));
    let empty = TableReader::open(storage.clone()).await.unwrap();
    assert_eq!(generations.refresh(&one, &schema(), &empty).await.unwrap().loaded_generation, Some(1));
    // Loaded before the first commit, it takes the first commit as a change.
    let config = engine::table::load_config(&storage).await.unwrap();
    let mut tx = Transaction::begin(storage.clone(), config, writer(1), LockOptions::default()).await.unwrap();
    tx.upsert(&rows(&[(1, "ann", "nl", 1)])).await.unwrap();
    tx.commit().await.unwrap();
    let written = TableReader::open(storage.clone()).await.unwrap();
    let applied = generations.refresh(&one, &schema(), &written).await.unwrap();
    assert_eq!((applied.loaded_generation, applied.upserts), (None, 1));
    assert_eq!(generations.refresh(&other, &schema(), &written).await.unwrap().loaded_generation, Some(2));
    let cache = LookupCache::open(&generations.dir(2), &other, &schema()).unwrap();
    assert_eq!(cached_rows(&cache.rows().unwrap()), vec![(1, "ann".to_owned(), "nl".to_owned())]);
    let missing = CacheDefinition { columns: Some(vec!["nope".into()]), secondary: vec![] };
    let err = LookupCache::open(&dir.path().join("new"), &missing, &schema()).err().unwrap();
    assert!(err.to_string().contains("no column nope"), "{err}");
    // A load that fails leaves nothing behind: no directory, no progress, the same current.
    drop(cache);
    let err = generations.refresh(&missing, &schema(), &written).await.err().unwrap();
    assert!(err.to_string().contains("no column nope"), "{err}");
    assert!(!generations.dir(3).exists());
    assert_eq!(generations.loading().unwrap(), None);
    assert_eq!(generations.current().unwrap(), Some(2));
}

#[tokio::test]
async fn a_cache_whose_changes_were_cleaned_is_rebuilt_from_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(&dir.path().join("table"));
    let config = create_table(&storage, &spec()).await.unwrap();
    let commit = async |data: &[(i64, &str, &str, i64)], delete: Option<i64>| {
        let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
        tx.upsert(&rows(data)).await.unwrap();
        if let Some(id) = delete {
            tx.delete(vec![(id.to_string(), "country=nl".into(), OrderingValue::Int(0))]).await.unwrap();
        }
        tx.commit().await.unwrap();
    };
    let definition = CacheDefinition { columns: None, secondary: vec![vec!["name".into()]] };
    let generations = CacheGenerations::new(&dir.path().join("cache"));
    let all = |name: &'static str, ts: i64| (1..=8).map(move |id| (id, name, if id % 2 == 0 { "nl" } else { "be" }, ts)).collect::<Vec<_>>();
    commit(&all("first", 10), None).await;
    generations.refresh(&definition, &schema(), &TableReader::open(storage.clone()).await.unwrap()).await.unwrap();
    for (round, name) in ["second", "third", "fourth"].into_iter().enumerate() {
        commit(&all(name, 20 + round as i64), (round == 2).then_some(2)).await;
        compact(&storage, &writer(9), &LockOptions::default(), Duration::from_secs(60)).await.unwrap();
    }
    let options = CleanOptions { retain_commits: 1, ..Default::default() };
    assert!(clean(&storage, &writer(9), &LockOptions::default(), &options).await.unwrap().is_some());
    let reader = TableReader::open(storage.clone()).await.unwrap();
    // A reader of the first generation keeps it while the second is loaded.
    let mut old_reader = generations.open_reader(&dir.path().join("reader"), &schema()).unwrap().unwrap();
    let applied = generations.refresh(&definition, &schema(), &reader).await.unwrap();
    assert_eq!(applied.loaded_generation, Some(2), "{applied:?}");
    assert_eq!(generations.current().unwrap(), Some(2));
    old_reader.catch_up().unwrap();
    assert!(cached_rows(&old_reader.rows().unwrap()).iter().all(|r| r.1 == "first"));
    drop(old_reader);
    generations.remove_older().unwrap();
    assert!(!generations.dir(1).exists() && generations.dir(2).exists());
    let cache = LookupCache::open(&generations.dir(2), &definition, &schema()).unwrap();
    let expected = snapshot_rows(&reader).await;
    // Key 2 (in nl), which the cache held, was deleted in the last round: the new generation
    // does not have it.
    assert_eq!(expected.len(), 7);
    assert!(!expected.iter().any(|r| r.0 == 2));
    assert_eq!(cached_rows(&cache.rows().unwrap()), expected);
    for name in ["first", "second", "third", "fourth"] {
        let key: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec![name]))];
        let want: Vec<Row> = expected.iter().filter(|r| r.1 == name).cloned().collect();
        assert_eq!(cached_rows(&cache.probe(Index::Secondary(0), &key, &every_column(&cache)).unwrap()), want, "{name}");
    }
}

/// A reader (a RocksDB secondary, as a backend would open it) sees one whole commit at a time
/// while the writer refreshes: every commit renames all rows together, and no catch-up ever
/// shows two names at once, by record key or by secondary key.
#[tokio::test]
async fn readers_see_whole_commits_while_the_writer_refreshes() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(&dir.path().join("table"));
    let config = create_table(&storage, &spec()).await.unwrap();
    let definition = CacheDefinition { columns: None, secondary: vec![vec!["name".into()]] };
    let generations = CacheGenerations::new(&dir.path().join("cache"));
    let version = |v: usize| format!("v{v:03}");
    let commit = async |v: usize| {
        let name = version(v);
        let data: Vec<(i64, &str, &str, i64)> = (1..=8).map(|id| (id, name.as_str(), if id % 2 == 0 { "nl" } else { "be" }, v as i64)).collect();
        let mut tx = Transaction::begin(storage.clone(), config.clone(), writer(1), LockOptions::default()).await.unwrap();
        tx.upsert(&rows(&data)).await.unwrap();
        tx.commit().await.unwrap();
    };
    commit(0).await;
    let loaded = generations.refresh(&definition, &schema(), &TableReader::open(storage.clone()).await.unwrap()).await.unwrap();
    let mut reader = generations.open_reader(&dir.path().join("reader"), &schema()).unwrap().unwrap();
    assert_eq!(reader.position(), loaded.to.as_deref());
    let seen_at_open = cached_rows(&reader.rows().unwrap());
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut versions = BTreeSet::new();
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                reader.catch_up().unwrap();
                let rows = cached_rows(&reader.rows().unwrap());
                let names: BTreeSet<&str> = rows.iter().map(|r| r.1.as_str()).collect();
                assert_eq!((rows.len(), names.len()), (8, 1), "a torn read: {rows:?}");
                let name = names.into_iter().next().unwrap().to_owned();
                let key: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec![name.as_str()]))];
                assert_eq!(reader.probe(Index::Secondary(0), &key, &every_column(&reader)).unwrap().num_rows(), 8, "{name}");
                versions.insert(name);
                if finished {
                    return (versions, reader.position().map(str::to_owned));
                }
            }
        })
    };
    let mut last = loaded;
    for v in 1..=20 {
        commit(v).await;
        last = generations.refresh(&definition, &schema(), &TableReader::open(storage.clone()).await.unwrap()).await.unwrap();
        assert_eq!(last.loaded_generation, None);
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (versions, position) = checker.join().unwrap();
    assert_eq!(seen_at_open.iter().map(|r| r.1.as_str()).collect::<BTreeSet<_>>(), BTreeSet::from(["v000"]));
    // The last catch-up came after the last refresh: the reader ends at the writer's position.
    assert_eq!(position, last.to);
    assert!(versions.contains(&version(20)), "{versions:?}");
}

/// Every file below `dir`, by path.
fn files_below(dir: &std::path::Path) -> BTreeSet<std::path::PathBuf> {
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_type().unwrap().is_dir() {
            out.extend(files_below(&entry.path()));
        } else {
            out.insert(entry.path());
        }
    }
    out
}

/// A refresh with nothing to apply leaves the cache's files as they were: opening the
/// database for it would leave an info log and a write-ahead log behind every time (an idle
/// cache grew by about 60 files a minute). A commit is applied again afterwards.
#[tokio::test]
async fn refreshing_an_idle_cache_creates_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let storage = local(&dir.path().join("table"));
    let config = create_table(&storage, &spec()).await.unwrap();
    let definition = CacheDefinition { columns: None, secondary: vec![vec!["name".into()]] };
    let generations = CacheGenerations::new(&dir.path().join("cache"));
    let commit = |rows_: Vec<(i64, &'static str, &'static str, i64)>| {
        let (storage, config) = (storage.clone(), config.clone());
        async move {
            let mut tx = Transaction::begin(storage, config, writer(1), LockOptions::default()).await.unwrap();
            tx.upsert(&rows(&rows_)).await.unwrap();
            tx.commit().await.unwrap();
        }
    };
    commit(vec![(1, "ann", "nl", 10)]).await;
    let reader = TableReader::open(storage.clone()).await.unwrap();
    generations.refresh(&definition, &schema(), &reader).await.unwrap();
    let before = files_below(&dir.path().join("cache"));
    for _ in 0..5 {
        let reader = TableReader::open(storage.clone()).await.unwrap();
        let applied = generations.refresh(&definition, &schema(), &reader).await.unwrap();
        assert_eq!(applied.rows, 1);
        assert_eq!(applied.from, applied.to);
    }
    assert_eq!(files_below(&dir.path().join("cache")), before, "an idle refresh changed the cache's files");
    commit(vec![(2, "bob", "be", 20)]).await;
    let reader = TableReader::open(storage.clone()).await.unwrap();
    let applied = generations.refresh(&definition, &schema(), &reader).await.unwrap();
    assert_ne!(applied.from, applied.to);
    assert_eq!(applied.rows, 2);
    let cache = LookupCache::open(&generations.dir(1), &definition, &schema()).unwrap();
    assert_eq!(cache.rows().unwrap().num_rows(), 2);
}
