//! HFile version 3, as Hudi 1.x writes it for its metadata table: the base files of a metadata
//! table partition (`*.hfile`) and the content of every HFILE_DATA log block. Read whole (a
//! metadata table file is small): the trailer, the data index (one level or several), the file
//! info, then every cell of every data block in key order. Nothing here trusts a length or an
//! offset it reads: damaged bytes are a `Corrupt` error, never a panic.
//!
//! Layout (facts from Hudi's `hudi-io` reader and HBase's format, checked against the
//! fixtures' bytes): blocks follow each other — data blocks (with leaf index blocks between
//! them when the index has several levels), meta blocks, the root data index, the meta index,
//! the file info — then a 4096-byte trailer: `TRABLK"$`, a varint-length protobuf
//! `TrailerProto`, padding, a minor version byte and a 3-byte major version (3). Every block
//! has a 33-byte header (magic, on-disk size without the header, uncompressed size, previous
//! block offset, checksum type, bytes per checksum, on-disk size of header and data) and its
//! payload through the file's codec (none or gzip); checksum bytes, when present, follow the
//! payload and are skipped (their number varies by writer, so it is never computed).

use std::collections::BTreeMap;
use std::io::Read;

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};

pub(super) const TRAILER_SIZE: usize = 4096;
pub(super) const TRAILER_MAGIC: &[u8; 8] = b"TRABLK\"$";
pub(super) const HEADER_SIZE: usize = 33;
pub(super) const DATA_MAGIC: &[u8; 8] = b"DATABLK*";
pub(super) const ROOT_INDEX_MAGIC: &[u8; 8] = b"IDXROOT2";
const INTERMEDIATE_INDEX_MAGIC: &[u8; 8] = b"IDXINTE2";
const LEAF_INDEX_MAGIC: &[u8; 8] = b"IDXLEAF2";
pub(super) const FILE_INFO_MAGIC: &[u8; 8] = b"FILEINF2";
/// The most a block may inflate to: a metadata table block is at most a few MiB.
const MAX_BLOCK_SIZE: usize = 256 << 20;

fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Corrupt, format!("damaged HFile: {what}"))
}

/// Big-endian reads over a byte slice that fail softly.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.bytes.len()).ok_or_else(|| corrupt("a length runs past its block"))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }

    fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    /// A non-negative `i32` length or count.
    fn len(&mut self) -> Result<usize> {
        usize::try_from(self.i32()?).map_err(|_| corrupt("a negative length"))
    }

    /// Hadoop's `WritableUtils` variable-length long: one byte in [-112, 127], else a first
    /// byte giving the sign and the number of big-endian bytes that follow.
    fn hadoop_vlong(&mut self) -> Result<i64> {
        let first = self.u8()? as i8;
        if first >= -112 {
            return Ok(i64::from(first));
        }
        let (negative, n) = if first < -120 { (true, -120 - i32::from(first)) } else { (false, -112 - i32::from(first)) };
        let mut value: i64 = 0;
        for &b in self.take(n as usize)? {
            value = (value << 8) | i64::from(b);
        }
        Ok(if negative { !value } else { value })
    }

    /// A protobuf base-128 varint.
    fn varint(&mut self) -> Result<u64> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(corrupt("a varint longer than ten bytes"))
    }

    fn is_done(&self) -> bool {
        self.pos >= self.bytes.len()
    }
}

/// The fields of a protobuf message: field number → varint value, and the length-delimited
/// fields in order.
type ProtobufFields<'a> = (BTreeMap<u32, u64>, Vec<(u32, &'a [u8])>);

fn protobuf_fields(bytes: &[u8]) -> Result<ProtobufFields<'_>> {
    let mut reader = Reader::new(bytes);
    let (mut numbers, mut delimited) = (BTreeMap::new(), Vec::new());
    while !reader.is_done() {
        let tag = reader.varint()?;
        let field = u32::try_from(tag >> 3).map_err(|_| corrupt("a protobuf field number"))?;
        match tag & 7 {
            0 => {
                numbers.insert(field, reader.varint()?);
            }
            1 => drop(reader.take(8)?),
            2 => {
                let n = usize::try_from(reader.varint()?).map_err(|_| corrupt("a protobuf length"))?;
                delimited.push((field, reader.take(n)?));
            }
            5 => drop(reader.take(4)?),
            other => return Err(corrupt(format!("protobuf wire type {other}"))),
        }
    }
    Ok((numbers, delimited))
}

/// How the file's blocks are compressed (the trailer's codec ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    None,
    Gzip,
}

/// What the trailer says.
#[derive(Debug)]
struct Trailer {
    file_info_offset: usize,
    load_on_open_offset: usize,
    data_index_count: usize,
    index_levels: u32,
    entry_count: u64,
    codec: Codec,
}

impl Trailer {
    fn parse(file: &[u8]) -> Result<Trailer> {
        let start = file.len().checked_sub(TRAILER_SIZE).ok_or_else(|| corrupt("shorter than its trailer"))?;
        let trailer = &file[start..];
        if &trailer[..8] != TRAILER_MAGIC {
            return Err(corrupt("no trailer magic"));
        }
        let major = u32::from_be_bytes([0, trailer[4093], trailer[4094], trailer[4095]]);
        if major != 3 {
            return Err(Error::new(ErrorKind::Unsupported, format!("HFile version {major} (only version 3 is read)")));
        }
        let mut reader = Reader::new(&trailer[8..4092]);
        let length = usize::try_from(reader.varint()?).map_err(|_| corrupt("trailer length"))?;
        let (fields, _) = protobuf_fields(reader.take(length)?)?;
        let offset = |field: u32| -> Result<usize> {
            let value = fields.get(&field).copied().ok_or_else(|| corrupt(format!("trailer field {field} is missing")))?;
            usize::try_from(value).ok().filter(|&v| v < start).ok_or_else(|| corrupt(format!("trailer field {field} points past the file")))
        };
        let codec = match fields.get(&12).copied().unwrap_or(2) {
            1 => Codec::Gzip,
            2 => Codec::None,
            other => return Err(Error::new(ErrorKind::Unsupported, format!("HFile compression codec {other} (only none and gzip are read)"))),
        };
        Ok(Trailer {
            file_info_offset: offset(1)?,
            load_on_open_offset: offset(2)?,
            data_index_count: usize::try_from(fields.get(&5).copied().unwrap_or(0)).map_err(|_| corrupt("index count"))?,
            index_levels: u32::try_from(fields.get(&8).copied().unwrap_or(1)).map_err(|_| corrupt("index levels"))?,
            entry_count: fields.get(&7).copied().unwrap_or(0),
            codec,
        })
    }
}

/// One HFile, read whole.
pub struct HFile {
    bytes: Bytes,
    codec: Codec,
    /// `(offset, on-disk size)` of each data block, in key order.
    data_blocks: Vec<(usize, usize)>,
    file_info: BTreeMap<Vec<u8>, Vec<u8>>,
    entry_count: u64,
    /// Whether each cell ends with a memstore timestamp (`KEY_VALUE_VERSION` 1).
    memstore_timestamps: bool,
}

impl HFile {
    /// Reads the trailer, the data index and the file info of `bytes`.
    pub fn parse(bytes: Bytes) -> Result<HFile> {
        let trailer = Trailer::parse(&bytes)?;
        let mut file = HFile { bytes, codec: trailer.codec, data_blocks: Vec::new(), file_info: BTreeMap::new(), entry_count: trailer.entry_count, memstore_timestamps: false };
        let root = file.block(trailer.load_on_open_offset, ROOT_INDEX_MAGIC)?;
        let mut entries = root_index_entries(&root, trailer.data_index_count)?;
        for _ in 1..trailer.index_levels.max(1) {
            let mut lower = Vec::new();
            for (offset, _) in entries {
                let (payload, magic) = file.block_of(offset)?;
                if magic != *INTERMEDIATE_INDEX_MAGIC && magic != *LEAF_INDEX_MAGIC {
                    return Err(corrupt(format!("an index entry at {offset} points at a {} block", String::from_utf8_lossy(&magic))));
                }
                lower.extend(non_root_index_entries(&payload)?);
            }
            entries = lower;
        }
        file.data_blocks = entries;
        let info = file.block(trailer.file_info_offset, FILE_INFO_MAGIC)?;
        file.file_info = file_info_entries(&info)?;
        file.memstore_timestamps = file.file_info.get(&b"KEY_VALUE_VERSION"[..]).is_some_and(|v| v.as_slice() == 1i32.to_be_bytes());
        Ok(file)
    }

    /// The value of file info `key` (Hudi's `schema`, HBase's `hfile.LASTKEY`, ...).
    pub fn file_info(&self, key: &str) -> Option<&[u8]> {
        self.file_info.get(key.as_bytes()).map(Vec::as_slice)
    }

    /// Every cell, in key order: `(row, value)` (the row is the record key).
    pub fn cells(&self) -> Result<Vec<(Bytes, Bytes)>> {
        let mut cells = Vec::with_capacity(usize::try_from(self.entry_count).unwrap_or(0).min(1 << 20));
        for &(offset, _) in &self.data_blocks {
            let payload = Bytes::from(self.block(offset, DATA_MAGIC)?);
            let mut reader = Reader::new(&payload);
            while !reader.is_done() {
                let key_length = reader.len()?;
                let value_length = reader.len()?;
                let key_start = reader.pos;
                let mut key = Reader::new(reader.take(key_length)?);
                let row_length = usize::try_from(key.i16()?).map_err(|_| corrupt("a negative row length"))?;
                let row_start = key_start + key.pos;
                key.take(row_length)?;
                let value_start = reader.pos;
                reader.take(value_length)?;
                if self.memstore_timestamps {
                    reader.hadoop_vlong()?;
                }
                cells.push((payload.slice(row_start..row_start + row_length), payload.slice(value_start..value_start + value_length)));
            }
        }
        if cells.len() as u64 != self.entry_count {
            return Err(corrupt(format!("{} cells where the trailer counts {}", cells.len(), self.entry_count)));
        }
        Ok(cells)
    }

    /// The payload of the block at `offset`, which must be a `magic` block.
    fn block(&self, offset: usize, magic: &[u8; 8]) -> Result<Vec<u8>> {
        let (payload, found) = self.block_of(offset)?;
        if found != *magic {
            return Err(corrupt(format!("expected a {} block at {offset}, found {}", String::from_utf8_lossy(magic), String::from_utf8_lossy(&found))));
        }
        Ok(payload)
    }

    /// The payload (uncompressed) and the magic of the block at `offset`.
    fn block_of(&self, offset: usize) -> Result<(Vec<u8>, [u8; 8])> {
        let block = self.bytes.get(offset..).ok_or_else(|| corrupt(format!("a block offset {offset} past the file")))?;
        let mut header = Reader::new(block);
        let magic: [u8; 8] = header.take(8)?.try_into().expect("8 bytes");
        let _on_disk_without_header = header.len()?;
        let uncompressed = header.len()?;
        let _previous = header.i64()?;
        let _checksum_type = header.u8()?;
        let _bytes_per_checksum = header.i32()?;
        let on_disk_with_header = header.len()?;
        if uncompressed > MAX_BLOCK_SIZE {
            return Err(corrupt(format!("a block of {uncompressed} bytes")));
        }
        let payload = block.get(HEADER_SIZE..on_disk_with_header).ok_or_else(|| corrupt(format!("the block at {offset} runs past the file")))?;
        let out = match self.codec {
            Codec::None => payload.get(..uncompressed).ok_or_else(|| corrupt(format!("the block at {offset} is shorter than its size")))?.to_vec(),
            Codec::Gzip => {
                let mut out = Vec::with_capacity(uncompressed);
                flate2::read::GzDecoder::new(payload)
                    .take(uncompressed as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| corrupt(format!("the block at {offset} does not inflate: {e}")))?;
                out
            }
        };
        if out.len() != uncompressed {
            return Err(corrupt(format!("the block at {offset} inflates to {} bytes, not {uncompressed}", out.len())));
        }
        Ok((out, magic))
    }
}

/// The `count` entries of a root index block: `i64 offset | i32 on-disk size | vint key length
/// | key`, as `(offset, size)` (a multi-level root has 16 more bytes after them).
fn root_index_entries(payload: &[u8], count: usize) -> Result<Vec<(usize, usize)>> {
    let mut reader = Reader::new(payload);
    let mut entries = Vec::with_capacity(count.min(payload.len() / 13 + 1));
    for _ in 0..count {
        let offset = usize::try_from(reader.i64()?).map_err(|_| corrupt("a negative block offset"))?;
        let size = reader.len()?;
        let key_length = usize::try_from(reader.hadoop_vlong()?).map_err(|_| corrupt("a negative key length"))?;
        reader.take(key_length)?;
        entries.push((offset, size));
    }
    Ok(entries)
}

/// The entries of an intermediate or leaf index block: `i32 n | i32 offsets[n + 1] | n ×
/// (i64 offset | i32 on-disk size | key)`.
fn non_root_index_entries(payload: &[u8]) -> Result<Vec<(usize, usize)>> {
    let mut reader = Reader::new(payload);
    let count = reader.len()?;
    let mut secondary = Vec::with_capacity(count.min(payload.len() / 4) + 1);
    for _ in 0..=count {
        secondary.push(reader.len()?);
    }
    let base = reader.pos;
    let mut entries = Vec::with_capacity(count);
    for &at in &secondary[..count] {
        let mut entry = Reader::new(payload.get(base + at..).ok_or_else(|| corrupt("an index entry past its block"))?);
        let offset = usize::try_from(entry.i64()?).map_err(|_| corrupt("a negative block offset"))?;
        entries.push((offset, entry.len()?));
    }
    Ok(entries)
}

/// The file info block: `PBUF`, then a varint-length `InfoProto` of `(first, second)` pairs.
fn file_info_entries(payload: &[u8]) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut reader = Reader::new(payload);
    if reader.take(4)? != b"PBUF" {
        return Err(corrupt("file info without its PBUF mark"));
    }
    let length = usize::try_from(reader.varint()?).map_err(|_| corrupt("file info length"))?;
    let (_, entries) = protobuf_fields(reader.take(length)?)?;
    let mut info = BTreeMap::new();
    for (field, pair) in entries {
        if field != 1 {
            continue;
        }
        let (_, parts) = protobuf_fields(pair)?;
        let part = |n: u32| parts.iter().find(|(f, _)| *f == n).map(|(_, b)| b.to_vec());
        if let (Some(first), Some(second)) = (part(1), part(2)) {
            info.insert(first, second);
        }
    }
    Ok(info)
}
