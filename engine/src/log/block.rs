//! Block framing of log files (hudi-format.md §4.1–4.3, §4.8): a log file is a sequence of
//! blocks `#HUDI#`, length, version, type, header, content, footer, reverse pointer. Damaged or
//! truncated regions become [`BlockType::Corrupt`] entries and are stepped over, never fatal.

use std::collections::BTreeMap;

use bytes::Bytes;

/// `#HUDI#`, the start of every block.
pub const MAGIC: &[u8; 6] = b"#HUDI#";

/// Block type ordinals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockType {
    Command,
    Delete,
    Corrupt,
    AvroData,
    HFileData,
    ParquetData,
    CdcData,
}

impl BlockType {
    fn from_ordinal(ordinal: i32) -> Option<BlockType> {
        Some(match ordinal {
            0 => BlockType::Command,
            1 => BlockType::Delete,
            2 => BlockType::Corrupt,
            3 => BlockType::AvroData,
            4 => BlockType::HFileData,
            5 => BlockType::ParquetData,
            6 => BlockType::CdcData,
            _ => return None,
        })
    }

    pub fn ordinal(self) -> i32 {
        match self {
            BlockType::Command => 0,
            BlockType::Delete => 1,
            BlockType::Corrupt => 2,
            BlockType::AvroData => 3,
            BlockType::HFileData => 4,
            BlockType::ParquetData => 5,
            BlockType::CdcData => 6,
        }
    }
}

/// Header and footer keys.
pub mod header {
    pub const INSTANT_TIME: i32 = 0;
    pub const TARGET_INSTANT_TIME: i32 = 1;
    pub const SCHEMA: i32 = 2;
    pub const COMMAND_BLOCK_TYPE: i32 = 3;
    /// Base-file positions of the block's records ([`crate::log::positions`]).
    pub const RECORD_POSITIONS: i32 = 5;
    /// The instant of the base file that `RECORD_POSITIONS` refers to.
    pub const BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS: i32 = 8;
}

/// One block of a log file.
#[derive(Debug, Clone)]
pub struct LogBlock {
    pub block_type: BlockType,
    pub header: BTreeMap<i32, String>,
    pub content: Bytes,
    /// Offset of the block in its file.
    pub offset: usize,
    /// Offset of the content in its file.
    pub content_offset: usize,
}

impl LogBlock {
    /// The instant that wrote this block (`INSTANT_TIME` header).
    pub fn instant(&self) -> Option<&str> {
        self.header.get(&header::INSTANT_TIME).map(String::as_str)
    }

    pub fn schema(&self) -> Option<&str> {
        self.header.get(&header::SCHEMA).map(String::as_str)
    }

    /// For a rollback command block: the instant whose blocks it cancels.
    pub fn rollback_target(&self) -> Option<&str> {
        let is_rollback = self.header.get(&header::COMMAND_BLOCK_TYPE).is_some_and(|t| t.trim() == "0");
        if self.block_type == BlockType::Command && is_rollback {
            self.header.get(&header::TARGET_INSTANT_TIME).map(String::as_str)
        } else {
            None
        }
    }
}

/// A cursor over big-endian integers that fails softly.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.pos.checked_add(n)?;
        let slice = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(slice)
    }

    fn int(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn long(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    fn metadata(&mut self) -> Option<BTreeMap<i32, String>> {
        let count = self.int()?;
        if !(0..=1024).contains(&count) {
            return None;
        }
        let mut map = BTreeMap::new();
        for _ in 0..count {
            let key = self.int()?;
            let len = usize::try_from(self.int()?).ok()?;
            let value = String::from_utf8(self.take(len)?.to_vec()).ok()?;
            map.insert(key, value);
        }
        Some(map)
    }
}

/// Parses the block starting at `start` (at a magic). `None` when it is damaged; otherwise the
/// block and the offset after it.
fn parse_block(file: &Bytes, start: usize) -> Option<(LogBlock, usize)> {
    let mut cursor = Cursor { bytes: file, pos: start };
    if cursor.take(6)? != MAGIC {
        return None;
    }
    let length = usize::try_from(cursor.long()?).ok()?;
    let body_start = cursor.pos;
    let end = body_start.checked_add(length)?;
    if length < 8 || end > file.len() {
        return None;
    }
    // The reverse pointer (last 8 bytes) counts the block up to itself: length + 6.
    let reverse = i64::from_be_bytes(file[end - 8..end].try_into().ok()?);
    if usize::try_from(reverse).ok()? != length + 6 {
        return None;
    }
    if end < file.len() && file.get(end..end + 6) != Some(MAGIC.as_slice()) {
        return None;
    }
    let mut body = Cursor { bytes: &file[..end - 8], pos: body_start };
    let version = body.int()?;
    if version < 1 {
        // Version 0 (no type, header or footer) predates table version 6.
        return None;
    }
    let block_type = BlockType::from_ordinal(body.int()?)?;
    let header = body.metadata()?;
    let content_length = usize::try_from(body.long()?).ok()?;
    let content_start = body.pos;
    body.take(content_length)?;
    let _footer = body.metadata()?;
    let content = file.slice(content_start..content_start + content_length);
    Some((LogBlock { block_type, header, content, offset: start, content_offset: content_start }, end))
}

/// All blocks of a log file, in order. A damaged region is reported once as a `Corrupt` block
/// (with empty content) and reading resumes at the next magic.
pub fn read_blocks(file: &Bytes) -> Vec<LogBlock> {
    let mut blocks = Vec::new();
    let mut pos = 0;
    while pos < file.len() {
        match parse_block(file, pos) {
            Some((block, next)) => {
                blocks.push(block);
                pos = next;
            }
            None => {
                blocks.push(LogBlock {
                    block_type: BlockType::Corrupt,
                    header: BTreeMap::new(),
                    content: Bytes::new(),
                    offset: pos,
                    content_offset: pos,
                });
                pos = next_magic(file, pos + 1).unwrap_or(file.len());
            }
        }
    }
    blocks
}

fn next_magic(file: &[u8], from: usize) -> Option<usize> {
    file.get(from..)?.windows(MAGIC.len()).position(|w| w == MAGIC).map(|p| p + from)
}

/// Frames one block: the inverse of [`read_blocks`] (used by writers and tests).
pub fn encode_block(block_type: BlockType, header: &BTreeMap<i32, String>, content: &[u8]) -> Vec<u8> {
    fn metadata(out: &mut Vec<u8>, map: &BTreeMap<i32, String>) {
        out.extend_from_slice(&(map.len() as i32).to_be_bytes());
        for (key, value) in map {
            out.extend_from_slice(&key.to_be_bytes());
            out.extend_from_slice(&(value.len() as i32).to_be_bytes());
            out.extend_from_slice(value.as_bytes());
        }
    }
    let mut body = Vec::new();
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&block_type.ordinal().to_be_bytes());
    metadata(&mut body, header);
    body.extend_from_slice(&(content.len() as i64).to_be_bytes());
    body.extend_from_slice(content);
    metadata(&mut body, &BTreeMap::new());
    let length = body.len() + 8;
    let mut out = Vec::with_capacity(14 + length);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(length as i64).to_be_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&((length + 6) as i64).to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(instant: &str, content: &[u8]) -> Vec<u8> {
        let header = [(header::INSTANT_TIME, instant.to_owned())].into();
        encode_block(BlockType::AvroData, &header, content)
    }

    #[test]
    fn round_trips_and_reads_consecutive_blocks() {
        let mut file = block("001", b"abc");
        let rollback: BTreeMap<i32, String> = [
            (header::INSTANT_TIME, "003".to_owned()),
            (header::TARGET_INSTANT_TIME, "002".to_owned()),
            (header::COMMAND_BLOCK_TYPE, "0".to_owned()),
        ]
        .into();
        file.extend(encode_block(BlockType::Command, &rollback, b""));
        let blocks = read_blocks(&Bytes::from(file));
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].instant(), Some("001"));
        assert_eq!(&blocks[0].content[..], b"abc");
        assert_eq!(blocks[1].rollback_target(), Some("002"));
    }

    #[test]
    fn truncated_and_garbage_regions_become_corrupt_blocks() {
        // garbage, a good block, then a truncated block
        let mut file = b"garbage bytes".to_vec();
        file.extend(block("001", b"good"));
        let truncated = block("002", b"cut short");
        file.extend_from_slice(&truncated[..truncated.len() - 5]);
        let blocks = read_blocks(&Bytes::from(file));
        let types: Vec<_> = blocks.iter().map(|b| b.block_type).collect();
        assert_eq!(types, [BlockType::Corrupt, BlockType::AvroData, BlockType::Corrupt]);
        assert_eq!(&blocks[1].content[..], b"good");
    }

    #[test]
    fn a_wrong_reverse_pointer_is_corrupt() {
        let mut file = block("001", b"x");
        let n = file.len();
        file[n - 1] ^= 1;
        file.extend(block("002", b"y"));
        let blocks = read_blocks(&Bytes::from(file));
        assert_eq!(blocks[0].block_type, BlockType::Corrupt);
        assert_eq!(blocks.last().unwrap().instant(), Some("002"));
    }
}
