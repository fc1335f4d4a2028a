//! Record positions (header keys 5 and 8 of hudi-format.md §4.3): a data or delete block written for rows read from
//! a base file may name, per record, the row of that base file the record replaces. The
//! `RECORD_POSITIONS` header holds the positions as Base64 (standard alphabet) of a 64-bit
//! Roaring bitmap in the portable serialization (Java's `Roaring64NavigableMap
//! .serializePortable`, which the `roaring` crate's treemap reads and writes), and
//! `BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS` names the base file's instant. A bitmap is a
//! set in ascending order, so a block carries positions only when its records are sorted by
//! position and no two share one: the n-th record is at the n-th smallest position.

use base64::Engine;
use roaring::RoaringTreemap;

use crate::error::{Error, ErrorKind, Result};
use crate::log::block::{header, LogBlock};

/// Encodes ascending, distinct `positions` as a `RECORD_POSITIONS` header value; `None` when
/// they are not ascending and distinct (then the block cannot carry them).
pub fn encode_positions(positions: &[u64]) -> Option<String> {
    if positions.windows(2).any(|w| w[0] >= w[1]) {
        return None;
    }
    let bitmap: RoaringTreemap = positions.iter().copied().collect();
    let mut bytes = Vec::with_capacity(bitmap.serialized_size());
    bitmap.serialize_into(&mut bytes).expect("writing to a Vec cannot fail");
    Some(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Decodes a `RECORD_POSITIONS` header value: the positions in ascending order.
pub fn decode_positions(value: &str) -> Result<Vec<u64>> {
    let corrupt = |what: String| Error::new(ErrorKind::Corrupt, format!("invalid RECORD_POSITIONS header: {what}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .map_err(|e| corrupt(e.to_string()))?;
    let bitmap = RoaringTreemap::deserialize_from(bytes.as_slice()).map_err(|e| corrupt(e.to_string()))?;
    // By 32-bit bitmap: the treemap's own iterator costs more per position than the values.
    let mut positions = Vec::with_capacity(usize::try_from(bitmap.len()).unwrap_or_default());
    for (high, low) in bitmap.bitmaps() {
        positions.extend(low.iter().map(|low| u64::from(high) << 32 | u64::from(low)));
    }
    Ok(positions)
}

impl LogBlock {
    /// The base-file positions of this block's records, in record order, when the block
    /// carries them for the base file written at `base_instant`; `None` when it carries none
    /// or carries them for another base file (the reader then matches records by key).
    pub fn record_positions(&self, base_instant: &str) -> Result<Option<Vec<u64>>> {
        match self.header.get(&header::RECORD_POSITIONS) {
            Some(value) if self.has_positions_for(base_instant) => decode_positions(value).map(Some),
            _ => Ok(None),
        }
    }

    /// Whether this block carries positions for the base file written at `base_instant`
    /// (without decoding them).
    pub fn has_positions_for(&self, base_instant: &str) -> bool {
        self.header.contains_key(&header::RECORD_POSITIONS)
            && self.header.get(&header::BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS).is_some_and(|i| i.trim() == base_instant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Java's encoding of 1,000 positions up to 10^12 (apache/hudi's
    /// `hudi-common/src/test/resources/format/record_positions_header_v3.data` and
    /// `expected_record_positions.data`): a bitmap spanning many 32-bit high parts.
    #[test]
    fn decodes_the_positions_java_encoded() {
        let header = include_str!("../../tests/data/record_positions_header_v3.data");
        let expected = include_str!("../../tests/data/expected_record_positions.data");
        let mut expected: Vec<u64> = expected.trim().split(',').map(|p| p.trim().parse().unwrap()).collect();
        expected.sort_unstable();
        let decoded = decode_positions(header).unwrap();
        assert_eq!(decoded.len(), expected.len());
        assert_eq!(decoded, expected);
        // Encoding them again gives a header that decodes to the same positions.
        assert_eq!(decode_positions(&encode_positions(&decoded).unwrap()).unwrap(), expected);
    }

    #[test]
    fn only_ascending_distinct_positions_are_encoded() {
        assert!(encode_positions(&[3, 2]).is_none());
        assert!(encode_positions(&[2, 2]).is_none());
        let header = encode_positions(&[0, 1, 5, 1 << 40]).unwrap();
        assert_eq!(decode_positions(&header).unwrap(), vec![0, 1, 5, 1 << 40]);
    }

    #[test]
    fn damaged_headers_are_corrupt_not_panics() {
        for value in ["not base64!", "AAAA", "/////w==", ""] {
            let result = decode_positions(value);
            assert!(result.as_ref().is_err_and(|e| e.kind() == ErrorKind::Corrupt) || result.as_ref().is_ok_and(|p| p.is_empty()), "{value}: {result:?}");
        }
    }
}
