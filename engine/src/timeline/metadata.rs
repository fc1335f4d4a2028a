//! Contents of timeline files: commit metadata (JSON in layout 1, Avro object container files in
//! layout 2; hudi-format.md §2.5–2.6), read into `serde_json::Value` so both forms are handled
//! alike. Only the few fields readers need are interpreted here.

use std::collections::HashMap;

use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Storage;
use crate::timeline::{Instant, ReadBound, Timeline};

/// Reads the content of `instant`'s timeline file as JSON (`Null` for an empty file).
pub async fn read_instant(storage: &Storage, timeline: &Timeline, instant: &Instant) -> Result<Value> {
    let path = format!("{}/{}", timeline.dir(), instant.file_name);
    let bytes = storage.get(&path).await?;
    decode(&bytes).map_err(|e| e.context(format!("decoding {}/{path}", storage.uri())))
}

/// JSON text or an Avro object container file holding one record.
pub fn decode(bytes: &[u8]) -> Result<Value> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        None => Ok(Value::Null),
        Some(b'{') => serde_json::from_slice(bytes)
            .map_err(|e| Error::new(ErrorKind::Corrupt, "invalid JSON commit metadata").with_source(e)),
        Some(_) => crate::error::corrupt_on_panic("invalid Avro timeline file", || decode_avro(bytes)),
    }
}

/// An Avro object container file holding one record. The crate's name checks panic, not fail,
/// on names outside the specification: [`crate::avro::init`] makes it take any name, and a
/// panic from elsewhere in it is caught by the caller.
fn decode_avro(bytes: &[u8]) -> Result<Value> {
    crate::avro::init();
    let reader = apache_avro::Reader::new(bytes)
        .map_err(|e| Error::new(ErrorKind::Corrupt, "invalid Avro timeline file").with_source(e))?;
    // Two records at most: one more tells the file is wrong. A damaged block count (a
    // negative one reads as a huge one) would otherwise have the reader yield records of
    // nothing for ever.
    let mut records = Vec::new();
    for value in reader.take(2) {
        let value = value.map_err(|e| Error::new(ErrorKind::Corrupt, "invalid Avro record").with_source(e))?;
        records.push(avro_to_json(value));
    }
    match records.len() {
        1 => Ok(records.remove(0)),
        0 => Ok(Value::Null),
        _ => Err(Error::new(ErrorKind::Corrupt, "expected one Avro record, found more")),
    }
}

/// Avro values as JSON: unions collapse to their branch, bytes become arrays of numbers.
fn avro_to_json(value: apache_avro::types::Value) -> Value {
    use apache_avro::types::Value as Avro;
    match value {
        Avro::Null => Value::Null,
        Avro::Boolean(b) => Value::Bool(b),
        Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i) => Value::from(i),
        Avro::Long(l)
        | Avro::TimeMicros(l)
        | Avro::TimestampMillis(l)
        | Avro::TimestampMicros(l)
        | Avro::TimestampNanos(l)
        | Avro::LocalTimestampMillis(l)
        | Avro::LocalTimestampMicros(l)
        | Avro::LocalTimestampNanos(l) => Value::from(l),
        Avro::Float(f) => Value::from(f64::from(f)),
        Avro::Double(d) => Value::from(d),
        Avro::String(s) | Avro::Enum(_, s) => Value::String(s),
        Avro::Uuid(u) => Value::String(u.to_string()),
        Avro::Bytes(b) | Avro::Fixed(_, b) => Value::from(b),
        Avro::Union(_, inner) => avro_to_json(*inner),
        Avro::Array(items) => Value::Array(items.into_iter().map(avro_to_json).collect()),
        Avro::Map(map) => Value::Object(map.into_iter().map(|(k, v)| (k, avro_to_json(v))).collect()),
        Avro::Record(fields) => {
            Value::Object(fields.into_iter().map(|(k, v)| (k, avro_to_json(v))).collect())
        }
        other => Value::String(format!("{other:?}")),
    }
}

/// File groups replaced by completed replacecommits: `(partition path, file id)` → the
/// replacecommit's instant.
pub type ReplacedGroups = HashMap<(String, String), String>;

/// Every file group replaced by a completed replacecommit visible within `bound` (insert
/// overwrite, clustering), with the instant that replaced it.
pub async fn replaced_file_groups(storage: &Storage, timeline: &Timeline, bound: &ReadBound) -> Result<ReplacedGroups> {
    let mut replaced = ReplacedGroups::new();
    for instant in timeline.completed_writes() {
        if instant.action != "replacecommit" || !timeline.is_visible(&instant.timestamp, bound) {
            continue;
        }
        let metadata = read_instant(storage, timeline, instant).await?;
        if let Some(map) = metadata.get("partitionToReplaceFileIds").and_then(Value::as_object) {
            for (partition, ids) in map {
                for id in ids.as_array().into_iter().flatten().filter_map(Value::as_str) {
                    replaced.insert((partition.clone(), id.to_owned()), instant.timestamp.clone());
                }
            }
        }
    }
    Ok(replaced)
}

/// The writer schema (Avro JSON, without meta fields) of the latest completed write that
/// recorded one in `extraMetadata.schema`.
pub async fn latest_schema(storage: &Storage, timeline: &Timeline) -> Result<Option<String>> {
    for instant in timeline.completed_writes().rev() {
        let metadata = read_instant(storage, timeline, instant).await?;
        let schema = metadata.pointer("/extraMetadata/schema").and_then(Value::as_str);
        if let Some(schema) = schema.filter(|s| !s.trim().is_empty()) {
            return Ok(Some(schema.to_owned()));
        }
    }
    Ok(None)
}

/// The table's schema (Avro, data columns): the one its latest completed write records, as
/// Hudi's `TableSchemaResolver` takes it, or else its create schema.
pub async fn table_schema(storage: &Storage, config: &crate::table::TableConfig, timeline: &Timeline) -> Result<String> {
    match latest_schema(storage, timeline).await? {
        Some(schema) => Ok(schema),
        None => config.create_schema.clone().ok_or_else(|| {
            crate::error::Error::new(crate::error::ErrorKind::Corrupt, "the table has neither a create schema nor a commit schema")
        }),
    }
}

/// [`table_schema`] of the table as its timeline is now (one listing, and a read of the latest
/// commit's metadata).
pub async fn latest_table_schema(storage: &Storage, config: &crate::table::TableConfig) -> Result<String> {
    let timeline = Timeline::load(storage, config).await?;
    table_schema(storage, config, &timeline).await
}

/// What the cleans kept: `(clean instant, earliest commit to retain)` of the clean that kept
/// the least, pending cleans included (one deleting now already removed, or may have, what its
/// plan lets go). Every file slice that a read as of that commit or later needs is there;
/// older ones may be gone. `None` when the table was never cleaned (or every clean kept
/// everything).
pub async fn retained_by_clean(storage: &Storage, timeline: &Timeline) -> Result<Option<(String, String)>> {
    let mut kept: Option<(String, String)> = None;
    for clean in timeline.instants().iter().filter(|i| i.action == "clean") {
        let earliest = if clean.is_completed() {
            read_instant(storage, timeline, clean).await?["earliestCommitToRetain"].as_str().map(str::to_owned)
        } else {
            let plan = format!("{}/{}.clean.requested", timeline.dir(), clean.timestamp);
            match storage.get_if_exists(&plan).await? {
                Some(bytes) => decode(&bytes)?["earliestInstantToRetain"]["timestamp"].as_str().map(str::to_owned),
                None => None,
            }
        };
        if let Some(earliest) = earliest.filter(|e| !e.is_empty()) {
            if kept.as_ref().is_none_or(|(_, k)| earliest > *k) {
                kept = Some((clean.timestamp.clone(), earliest));
            }
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_json_and_empty_files() {
        assert_eq!(decode(b"").unwrap(), Value::Null);
        let v = decode(br#"{"partitionToReplaceFileIds":{"30":["a-0"]}}"#).unwrap();
        assert_eq!(v["partitionToReplaceFileIds"]["30"][0], "a-0");
        assert_eq!(decode(b"garbage").unwrap_err().kind(), ErrorKind::Corrupt);
    }

    /// An Avro object container file with `schema` and no blocks, framed by hand (a schema
    /// the `apache_avro` crate refuses cannot be written with it).
    fn container_with_schema(schema: &str) -> Vec<u8> {
        fn long(out: &mut Vec<u8>, n: i64) {
            let mut z = ((n << 1) ^ (n >> 63)) as u64;
            while z >= 0x80 {
                out.push((z as u8) | 0x80);
                z >>= 7;
            }
            out.push(z as u8);
        }
        let mut out = b"Obj\x01".to_vec();
        long(&mut out, 1);
        for text in ["avro.schema", schema] {
            long(&mut out, text.len() as i64);
            out.extend_from_slice(text.as_bytes());
        }
        long(&mut out, 0);
        out.extend_from_slice(&[7; 16]);
        out
    }

    /// A timeline file whose Avro schema has names the Avro specification does not allow (a
    /// record name with a dash, a type reference to no name) is read or refused, never a panic:
    /// the `apache_avro` crate unwraps its name check.
    #[test]
    fn avro_files_with_invalid_schema_names_do_not_panic() {
        for schema in [
            r#"{"type":"record","name":"bad-name","fields":[]}"#,
            r#"{"type":"record","name":"M","namespace":"a-b","fields":[]}"#,
            r#"{"type":"record","name":"M","fields":[{"name":"f","type":"no such-type"}]}"#,
            r#"{"type":"record","name":"M","aliases":["x y"],"fields":[]}"#,
            r#"{"type":"enum","name":"1E","symbols":["A"]}"#,
        ] {
            let bytes = container_with_schema(schema);
            match std::panic::catch_unwind(|| decode(&bytes)) {
                Ok(Ok(value)) => assert_eq!(value, Value::Null, "{schema}"),
                Ok(Err(e)) => assert_eq!(e.kind(), ErrorKind::Corrupt, "{schema}: {e}"),
                Err(_) => panic!("decoding a container with schema {schema} panicked"),
            }
        }
    }

    /// Every truncation of a commit metadata file, and every one-byte change of it, decodes or
    /// is Corrupt; none panics, and none reads for ever (a changed block count once did).
    #[test]
    fn damaged_avro_commit_metadata_is_corrupt_not_a_panic() {
        let mut metadata = crate::write::commit::CommitMetadata { operation_type: "UPSERT".into(), ..Default::default() };
        metadata.extra_metadata.insert("schema".into(), "{}".into());
        let bytes = metadata.to_avro().unwrap();
        let mut damaged: Vec<Vec<u8>> = (0..bytes.len()).map(|n| bytes[..n].to_vec()).collect();
        for i in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut copy = bytes.clone();
                copy[i] ^= flip;
                damaged.push(copy);
            }
        }
        for (i, bytes) in damaged.iter().enumerate() {
            if let Err(panic) = std::panic::catch_unwind(|| decode(bytes)) {
                panic!("damaged file {i} panicked: {:?}", panic.downcast_ref::<String>());
            }
        }
    }

    #[test]
    fn decodes_an_avro_container_with_one_record() {
        let schema = crate::avro::parse_schema(
            r#"{"type":"record","name":"M","fields":[
                {"name":"extraMetadata","type":["null",{"type":"map","values":"string"}],"default":null}]}"#,
        )
        .unwrap();
        let mut writer = apache_avro::Writer::new(&schema, Vec::new());
        let mut record = apache_avro::types::Record::new(&schema).unwrap();
        let map = [("schema".to_owned(), apache_avro::types::Value::String("{}".into()))].into();
        record.put("extraMetadata", apache_avro::types::Value::Union(1, Box::new(apache_avro::types::Value::Map(map))));
        writer.append(record).unwrap();
        let bytes = writer.into_inner().unwrap();
        assert_eq!(decode(&bytes).unwrap()["extraMetadata"]["schema"], "{}");
    }
}
