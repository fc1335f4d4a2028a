//! Byte ranges of a Parquet file fetched on their own, read as the file.

use bytes::Bytes;
use parquet::file::reader::{ChunkReader, Length};

/// Byte ranges of a file in memory, each `(file offset, bytes)`, as a [`ChunkReader`] of the
/// file for readers that ask for those ranges only.
#[derive(Debug)]
pub struct ChunkBytes(pub Vec<(u64, Bytes)>);

impl ChunkBytes {
    fn range(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let found = self.0.iter().find(|(at, bytes)| *at <= start && start + length as u64 <= at + bytes.len() as u64);
        let (at, bytes) = found.ok_or_else(|| parquet::errors::ParquetError::EOF(format!("bytes {start}+{length} were not fetched")))?;
        let from = (start - at) as usize;
        Ok(bytes.slice(from..from + length))
    }
}

impl Length for ChunkBytes {
    fn len(&self) -> u64 {
        self.0.iter().map(|(at, bytes)| at + bytes.len() as u64).max().unwrap_or(0)
    }
}

impl ChunkReader for ChunkBytes {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        let (at, bytes) = self.0.iter().find(|(at, bytes)| *at <= start && start < at + bytes.len() as u64).ok_or_else(|| {
            parquet::errors::ParquetError::EOF(format!("offset {start} was not fetched"))
        })?;
        Ok(bytes.slice((start - at) as usize..).reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.range(start, length)
    }
}
