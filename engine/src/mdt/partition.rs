//! One partition of a metadata table, as of the metadata table's latest completed instant: the
//! records of each file group's latest slice in the order they merge — the base HFile's, then
//! each log's HFILE_DATA and DELETE blocks — without the blocks written for data instants that
//! are still pending or that failed. What the record values mean is the partition's business
//! ([`super::files`], [`super::column_stats`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::log::block::{read_blocks, BlockType};
use crate::mdt::hfile::HFile;
use crate::storage::Storage;
use crate::timeline::{ReadBound, Timeline};
use crate::view::{FileSlice, FileSystemView};

/// Initialising a metadata table partition writes instants of these 14 zeros and a suffix.
pub(super) const INITIALISING: &str = "00000000000000";

pub(super) fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Corrupt, format!("damaged metadata table: {what}"))
}

/// One record of a partition, in merge order.
pub(super) enum Record {
    /// A value (Avro `HoodieMetadataRecord` in `schema`) for `key`.
    Put { key: String, value: Bytes, schema: Arc<apache_avro::Schema> },
    /// `key` deleted.
    Delete { key: String },
}

/// What [`read`] found.
pub(super) struct PartitionRecords {
    pub records: Vec<Record>,
    /// The latest slice of each file group.
    pub slices: Vec<FileSlice>,
    /// Whether a block was left out because its data instant is still pending.
    pub skipped_pending: bool,
}

/// Whether a block the metadata table wrote at `instant` counts for the data table of
/// timeline `data`: not for a data instant that is still pending or failed (its files are not
/// the table's); yes for completed (or archived) ones, and for the metadata table's own.
fn counts(instant: &str, data: &Timeline) -> bool {
    instant.starts_with(INITIALISING) || data.get(instant).is_none_or(|i| i.is_completed())
}

/// The records of partition `partition` of the metadata table at `metadata` (whose timeline is
/// `timeline`), for the data table's timeline `data`.
pub(super) async fn read(metadata: &Storage, timeline: &Timeline, partition: &str, data: &Timeline) -> Result<PartitionRecords> {
    let mut out = PartitionRecords { records: Vec::new(), slices: Vec::new(), skipped_pending: false };
    if timeline.latest_completion().is_none() {
        return Ok(out);
    }
    let listing = metadata.list_dir(partition).await?.into_iter().map(|(name, size)| (format!("{partition}/{name}"), size));
    let view = FileSystemView::from_listing(listing);
    let groups: Vec<(String, String)> = view.file_groups().map(|(p, f)| (p.to_owned(), f.to_owned())).collect();
    for (group_partition, file_id) in &groups {
        let Some(slice) = view.group_slices(group_partition, file_id, timeline, &ReadBound::Latest).pop() else { continue };
        if let Some(path) = slice.base_path() {
            hfile_records(&mut out.records, &metadata.get(&path).await?, None)?;
        }
        for log in &slice.log_files {
            let bytes = metadata.get(&slice.log_path(log)).await?;
            let blocks = read_blocks(&bytes);
            // A rollback command block cancels the blocks of its target instant before it.
            let cancelled: BTreeSet<&str> = blocks.iter().filter_map(|b| b.rollback_target()).collect();
            for block in &blocks {
                let instant = block.instant().unwrap_or_default();
                if cancelled.contains(instant) {
                    continue;
                }
                if !counts(instant, data) {
                    out.skipped_pending = true;
                    continue;
                }
                match block.block_type {
                    BlockType::HFileData => hfile_records(&mut out.records, &block.content, block.schema())?,
                    BlockType::Delete => {
                        let deletes = crate::log::data::decode_deletes(block)?;
                        out.records.extend(deletes.into_iter().map(|d| Record::Delete { key: d.record_key }));
                    }
                    BlockType::Corrupt => return Err(corrupt(format!("a damaged block in {}", log.name))),
                    _ => {}
                }
            }
        }
        out.slices.push(slice);
    }
    Ok(out)
}

/// The records of the HFile `bytes`, whose values are in the Avro schema `schema`, or the one
/// the file's info gives.
fn hfile_records(records: &mut Vec<Record>, bytes: &Bytes, schema: Option<&str>) -> Result<()> {
    let file = HFile::parse(bytes.clone())?;
    let schema = match schema {
        Some(schema) => schema.to_owned(),
        None => String::from_utf8(file.file_info("schema").ok_or_else(|| corrupt("an HFile without its schema"))?.to_vec())
            .map_err(|_| corrupt("a schema that is not UTF-8"))?,
    };
    let schema = Arc::new(crate::avro::parse_schema(&schema).map_err(|e| corrupt("an unusable schema").with_source(e))?);
    for (row, value) in file.cells()? {
        let key = String::from_utf8(row.to_vec()).map_err(|_| corrupt("a record key that is not UTF-8"))?;
        records.push(Record::Put { key, value, schema: schema.clone() });
    }
    Ok(())
}

/// Decodes one record value: the fields of the `HoodieMetadataRecord`.
pub(super) fn decode(schema: &apache_avro::Schema, value: &[u8]) -> Result<Vec<(String, apache_avro::types::Value)>> {
    // apache-avro trusts more of damaged bytes than it should.
    crate::error::corrupt_on_panic("damaged metadata table record", || {
        match apache_avro::from_avro_datum(schema, &mut std::io::Cursor::new(value), None) {
            Ok(apache_avro::types::Value::Record(fields)) => Ok(fields),
            Ok(_) => Err(corrupt("a record that is not a record")),
            Err(e) => Err(corrupt("an undecodable record").with_source(e)),
        }
    })
}
