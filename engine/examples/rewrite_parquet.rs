//! The baseline of bench/compact: reads every Parquet file below a directory with arrow-rs and
//! writes each back out (Snappy, as pg_hudi's base files) into another directory, one file at a
//! time, with no merging — the least a compaction of those files can cost.
//!
//! Usage: rewrite_parquet <input dir> <output dir>; prints the files, rows and seconds.

use std::fs::File;
use std::path::{Path, PathBuf};

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

fn parquet_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable input directory").flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() && !name.starts_with('.') {
            parquet_files(&path, out);
        } else if name.ends_with(".parquet") {
            out.push(path);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (input, output) = (Path::new(&args[1]), Path::new(&args[2]));
    std::fs::create_dir_all(output).expect("output directory");
    let mut files = Vec::new();
    parquet_files(input, &mut files);
    let started = std::time::Instant::now();
    let mut rows = 0;
    for (i, path) in files.iter().enumerate() {
        let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap();
        let schema = builder.schema().clone();
        let properties = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let out = File::create(output.join(format!("{i}.parquet"))).unwrap();
        let mut writer = ArrowWriter::try_new(out, schema, Some(properties)).unwrap();
        for batch in builder.build().unwrap() {
            let batch = batch.unwrap();
            rows += batch.num_rows();
            writer.write(&batch).unwrap();
        }
        writer.close().unwrap();
    }
    println!("{} files {} rows {:.3} s", files.len(), rows, started.elapsed().as_secs_f64());
}
