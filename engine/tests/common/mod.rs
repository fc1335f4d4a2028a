//! Helpers shared by the integration tests: finding and unpacking the Spark-written fixtures.

#![allow(dead_code)]

pub mod customers;
pub mod expected;
pub mod interleaving;

use std::fs;
use std::path::{Path, PathBuf};

/// The seed of a seeded random test: `$PG_HUDI_SEED`, or else the clock's; printed, so that a
/// failure can be run again with it.
pub fn seed() -> u64 {
    let seed = std::env::var("PG_HUDI_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("seed {seed}");
    seed
}

/// The repository's `tests/fixtures/hudi`, or `$HUDI_FIXTURES`.
pub fn fixtures_root() -> PathBuf {
    let root = std::env::var_os("HUDI_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hudi"));
    assert!(root.is_dir(), "fixtures not found at {} (set HUDI_FIXTURES)", root.display());
    root
}

/// Every fixture zip, as a path relative to the fixtures root (e.g. `sample_table/cow/v6_empty.zip`).
pub fn fixture_zips() -> Vec<PathBuf> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "zip") {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    let root = fixtures_root();
    let mut zips = Vec::new();
    walk(&root, &root, &mut zips);
    zips.sort();
    zips
}

/// Unzips a fixture into a fresh temporary directory; returns it and the table's base path.
pub fn unpack(relative_zip: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = fs::File::open(fixtures_root().join(relative_zip)).unwrap();
    let mut archive = zip::ZipArchive::new(file).unwrap();
    archive.extract(dir.path()).unwrap();
    let stem = relative_zip.file_stem().unwrap();
    let base = dir.path().join(stem);
    assert!(base.join(".hoodie").is_dir(), "{} has no {}/.hoodie", relative_zip.display(), stem.to_string_lossy());
    (dir, base)
}
