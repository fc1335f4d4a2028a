//! Contents of timeline files: commit metadata (JSON in layout 1, Avro object container files in
//! layout 2; hudi-format.md §2.5–2.6), read into `serde_json::Value` so both forms are handled
//! alike. Only the few fields readers need are interpreted here.

use std::collections::HashSet;

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
        Some(_) => {
            let reader = apache_avro::Reader::new(bytes)
                .map_err(|e| Error::new(ErrorKind::Corrupt, "invalid Avro timeline file").with_source(e))?;
            let mut records = Vec::new();
            for value in reader {
                let value = value
                    .map_err(|e| Error::new(ErrorKind::Corrupt, "invalid Avro record").with_source(e))?;
                records.push(avro_to_json(value));
            }
            match records.len() {
                1 => Ok(records.remove(0)),
                0 => Ok(Value::Null),
                n => Err(Error::new(ErrorKind::Corrupt, format!("expected one Avro record, found {n}"))),
            }
        }
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

/// `(partition path, file id)` of every file group replaced by a completed replacecommit
/// visible within `bound` (insert overwrite, clustering).
pub async fn replaced_file_groups(
    storage: &Storage,
    timeline: &Timeline,
    bound: &ReadBound,
) -> Result<HashSet<(String, String)>> {
    let mut replaced = HashSet::new();
    for instant in timeline.completed_writes() {
        if instant.action != "replacecommit" || !timeline.is_visible(&instant.timestamp, bound) {
            continue;
        }
        let metadata = read_instant(storage, timeline, instant).await?;
        if let Some(map) = metadata.get("partitionToReplaceFileIds").and_then(Value::as_object) {
            for (partition, ids) in map {
                for id in ids.as_array().into_iter().flatten().filter_map(Value::as_str) {
                    replaced.insert((partition.clone(), id.to_owned()));
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

    #[test]
    fn decodes_an_avro_container_with_one_record() {
        let schema = apache_avro::Schema::parse_str(
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
