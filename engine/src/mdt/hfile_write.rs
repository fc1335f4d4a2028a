//! Writing HFile version 3 as Hudi 1.x's own writer (`hudi-io` `HFileWriterImpl`) does, for the
//! metadata table's base files and HFILE_DATA log blocks: gzip data blocks of sorted cells, an
//! empty meta index, the file info (with the records' Avro `schema`, which readers require of a
//! base file) and the 4096-byte trailer. Facts in docs/metadata-table.md §1; [`super::hfile`]
//! reads what this writes.

use std::io::Write;

use super::hfile::{DATA_MAGIC, FILE_INFO_MAGIC, HEADER_SIZE, ROOT_INDEX_MAGIC, TRAILER_MAGIC, TRAILER_SIZE};
use crate::error::{Error, ErrorKind, Result};

/// The data block size Hudi uses for the metadata table (1 MiB): a block is cut before the cell
/// that would take it past this.
const BLOCK_SIZE: usize = 1 << 20;
/// Checksum bytes are counted per this many bytes of block; their content is zero (type NULL).
const BYTES_PER_CHECKSUM: usize = 16384;
/// The key comparator Java's readers expect to find named.
const COMPARATOR: &str = "org.apache.hudi.io.storage.HoodieHBaseKVComparator";
/// The trailer's codec id of gzip.
const GZIP: u64 = 1;

fn internal(e: std::io::Error) -> Error {
    Error::new(ErrorKind::Internal, "cannot compress an HFile block").with_source(e)
}

/// A protobuf base-128 varint.
fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A length-delimited protobuf field.
fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    varint(out, u64::from(field << 3 | 2));
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn number_field(out: &mut Vec<u8>, field: u32, value: u64) {
    varint(out, u64::from(field << 3));
    varint(out, value);
}

/// The number of checksum chunks of a block whose header and payload take `data` bytes, as the
/// readers count them: from the on-disk size that already includes the checksum bytes (the
/// smallest fixed point, so that Java's and hudi-rs's readers find the payload's end where it is).
fn checksum_chunks(data: usize) -> usize {
    let mut n = data.div_ceil(BYTES_PER_CHECKSUM);
    while (data + 4 * n).div_ceil(BYTES_PER_CHECKSUM) != n {
        n += 1;
    }
    n
}

/// One block: the 33-byte header, the gzip payload, zero checksum bytes.
fn block(out: &mut Vec<u8>, magic: &[u8; 8], payload: &[u8]) -> Result<usize> {
    let start = out.len();
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(payload).map_err(internal)?;
    let compressed = gzip.finish().map_err(internal)?;
    let checksums = 4 * checksum_chunks(HEADER_SIZE + compressed.len());
    let size = |n: usize| i32::try_from(n).map_err(|_| Error::new(ErrorKind::Internal, "an HFile block over 2 GiB"));
    out.extend_from_slice(magic);
    out.extend_from_slice(&size(compressed.len() + checksums)?.to_be_bytes());
    out.extend_from_slice(&size(payload.len())?.to_be_bytes());
    out.extend_from_slice(&(-1i64).to_be_bytes());
    out.push(0);
    out.extend_from_slice(&(BYTES_PER_CHECKSUM as i32).to_be_bytes());
    out.extend_from_slice(&size(HEADER_SIZE + compressed.len())?.to_be_bytes());
    out.extend_from_slice(&compressed);
    out.resize(out.len() + checksums, 0);
    Ok(start)
}

/// The HFile of `cells` — `(row, value)` pairs, rows unique and in ascending byte order — with
/// the file info `schema`.
pub fn write_hfile(cells: &[(Vec<u8>, Vec<u8>)], schema: &str) -> Result<Vec<u8>> {
    if cells.is_empty() {
        return Err(Error::new(ErrorKind::Internal, "an HFile needs a cell"));
    }
    if cells.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(Error::new(ErrorKind::Internal, "HFile rows out of order"));
    }
    let row_length = |row: &[u8]| i16::try_from(row.len()).map_err(|_| Error::new(ErrorKind::InvalidArgument, "a metadata table key over 32 KiB"));
    let mut out = Vec::new();
    // (offset, on-disk size, first row) of each data block.
    let mut index: Vec<(usize, usize, &[u8])> = Vec::new();
    let mut payload = Vec::new();
    let mut first: &[u8] = &[];
    let mut uncompressed_data = 0usize;
    let (mut key_bytes, mut value_bytes) = (0usize, 0usize);
    for (i, (row, value)) in cells.iter().enumerate() {
        if !payload.is_empty() && payload.len() + row.len() + value.len() + 9 > BLOCK_SIZE {
            let offset = block(&mut out, DATA_MAGIC, &payload)?;
            index.push((offset, out.len() - offset, first));
            uncompressed_data += payload.len();
            payload.clear();
        }
        if payload.is_empty() {
            first = &cells[i].0;
        }
        // Key: row length, row, an empty family, the latest timestamp, type Put; then the
        // value, then a zero memstore timestamp.
        payload.extend_from_slice(&(row.len() as i32 + 12).to_be_bytes());
        payload.extend_from_slice(&(value.len() as i32).to_be_bytes());
        payload.extend_from_slice(&row_length(row)?.to_be_bytes());
        payload.extend_from_slice(row);
        payload.push(0);
        payload.extend_from_slice(&i64::MAX.to_be_bytes());
        payload.push(4);
        payload.extend_from_slice(value);
        payload.push(0);
        key_bytes += row.len();
        value_bytes += value.len();
    }
    let offset = block(&mut out, DATA_MAGIC, &payload)?;
    index.push((offset, out.len() - offset, first));
    uncompressed_data += payload.len();

    let mut root = Vec::new();
    for &(offset, size, row) in &index {
        root.extend_from_slice(&(offset as i64).to_be_bytes());
        root.extend_from_slice(&(size as i32).to_be_bytes());
        varint(&mut root, row.len() as u64 + 2);
        root.extend_from_slice(&row_length(row)?.to_be_bytes());
        root.extend_from_slice(row);
    }
    let load_on_open = block(&mut out, ROOT_INDEX_MAGIC, &root)?;
    // The meta index, empty (no bloom filter): readers expect it after the data index.
    block(&mut out, ROOT_INDEX_MAGIC, &[])?;

    let last = &cells[cells.len() - 1].0;
    let mut last_key = row_length(last)?.to_be_bytes().to_vec();
    last_key.extend_from_slice(last);
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
    let info: [(&str, Vec<u8>); 7] = [
        ("MAX_MEMSTORE_TS_KEY", 0i64.to_be_bytes().to_vec()),
        ("KEY_VALUE_VERSION", 1i32.to_be_bytes().to_vec()),
        ("hfile.LASTKEY", last_key),
        ("hfile.AVG_KEY_LEN", ((key_bytes / cells.len()) as i32).to_be_bytes().to_vec()),
        ("hfile.AVG_VALUE_LEN", ((value_bytes / cells.len()) as i32).to_be_bytes().to_vec()),
        ("hfile.CREATE_TIME_TS", now_ms.to_be_bytes().to_vec()),
        ("schema", schema.as_bytes().to_vec()),
    ];
    let mut entries = Vec::new();
    for (key, value) in &info {
        let mut pair = Vec::new();
        bytes_field(&mut pair, 1, key.as_bytes());
        bytes_field(&mut pair, 2, value);
        bytes_field(&mut entries, 1, &pair);
    }
    let mut file_info = b"PBUF".to_vec();
    varint(&mut file_info, entries.len() as u64);
    file_info.extend_from_slice(&entries);
    let file_info_offset = block(&mut out, FILE_INFO_MAGIC, &file_info)?;

    let mut trailer = Vec::new();
    number_field(&mut trailer, 1, file_info_offset as u64);
    number_field(&mut trailer, 2, load_on_open as u64);
    number_field(&mut trailer, 3, uncompressed_data as u64);
    number_field(&mut trailer, 5, index.len() as u64);
    number_field(&mut trailer, 6, 0);
    number_field(&mut trailer, 7, cells.len() as u64);
    number_field(&mut trailer, 8, 1);
    number_field(&mut trailer, 9, 0);
    number_field(&mut trailer, 10, index[index.len() - 1].0 as u64);
    bytes_field(&mut trailer, 11, COMPARATOR.as_bytes());
    number_field(&mut trailer, 12, GZIP);
    let start = out.len();
    out.extend_from_slice(TRAILER_MAGIC);
    varint(&mut out, trailer.len() as u64);
    out.extend_from_slice(&trailer);
    out.resize(start + TRAILER_SIZE - 4, 0);
    // Minor version 0, major version 3 (three bytes).
    out.extend_from_slice(&[0, 0, 0, 3]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mdt::hfile::HFile;

    fn cells(n: usize, value_size: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n).map(|i| (format!("key{i:08}").into_bytes(), vec![(i % 251) as u8; value_size])).collect()
    }

    #[test]
    fn reads_back_what_it_wrote() {
        for (n, size) in [(1, 0), (3, 13), (1000, 100), (40, 100_000)] {
            let written = cells(n, size);
            let file = HFile::parse(bytes::Bytes::from(write_hfile(&written, "{\"type\":\"null\"}").unwrap())).unwrap();
            let read: Vec<(Vec<u8>, Vec<u8>)> = file.cells().unwrap().into_iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            assert_eq!(read, written, "{n} cells of {size} bytes");
            assert_eq!(file.file_info("schema"), Some(&b"{\"type\":\"null\"}"[..]));
        }
    }

    #[test]
    fn cuts_blocks_at_a_mebibyte() {
        // 40 cells of 100 kB: four blocks (a block takes cells while it stays under 1 MiB).
        let bytes = write_hfile(&cells(40, 100_000), "{}").unwrap();
        let blocks = bytes.windows(8).filter(|w| w == DATA_MAGIC).count();
        assert_eq!(blocks, 4);
    }

    #[test]
    fn checksum_space_is_what_readers_compute() {
        for data in [33, 16383, 16384, 16380, 16385, 16384 * 3 - 8, 16384 * 3 - 12, 16384 * 3 - 13, 1 << 20] {
            let n = checksum_chunks(data);
            assert_eq!((data + 4 * n).div_ceil(BYTES_PER_CHECKSUM), n, "{data}");
        }
    }

    #[test]
    fn refuses_unsorted_or_empty_input() {
        assert!(write_hfile(&[], "{}").is_err());
        let mut unsorted = cells(3, 1);
        unsorted.swap(0, 2);
        assert!(write_hfile(&unsorted, "{}").is_err());
    }
}
