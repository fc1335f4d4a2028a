//! Hudi's simple bucket index (hudi-format.md §3.4, §6): which bucket, and so which file
//! group, a record key belongs to. Every writer computes the same answer without coordination.

/// Java `String.hashCode`: over UTF-16 code units, wrapping.
fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

/// Java `List<String>.hashCode` (a `None` element hashes as 0).
fn java_list_hash<'a>(items: impl IntoIterator<Item = Option<&'a str>>) -> i32 {
    items.into_iter().fold(1i32, |h, item| h.wrapping_mul(31).wrapping_add(item.map_or(0, java_string_hash)))
}

/// The hash values of a record key string: the key itself for a simple key; the values of
/// `field:value` pairs of a complex key (`__null__` → null, `__empty__` → "").
fn hash_values(record_key: &str) -> Vec<Option<&str>> {
    if !record_key.contains(',') || !record_key.contains(':') {
        return vec![Some(record_key)];
    }
    record_key
        .split(',')
        .map(|pair| {
            let value = pair.split_once(':').map_or(pair, |(_, v)| v);
            match value {
                "__null__" => None,
                "__empty__" => Some(""),
                v => Some(v),
            }
        })
        .collect()
}

/// The most buckets a table can have: file ids carry the bucket in their first eight digits
/// ([`file_id_of_bucket`], Hudi's `BucketIdentifier`), and bucket 100000000 would need nine.
pub const MAX_BUCKETS: u32 = 99_999_999;

/// The bucket of `record_key` among `buckets`: `(List.hashCode & 0x7fffffff) % buckets`.
pub fn bucket_of_key(record_key: &str, buckets: u32) -> u32 {
    let hash = java_list_hash(hash_values(record_key)) & 0x7fff_ffff;
    (hash as u32) % buckets.max(1)
}

/// The bucket a bucket-index file id encodes in its first eight characters.
pub fn bucket_of_file_id(file_id: &str) -> Option<u32> {
    file_id.get(..8)?.parse().ok()
}

/// The fixed file id of `bucket` used under non-blocking concurrency control.
pub fn file_id_of_bucket(bucket: u32) -> String {
    format!("{bucket:08}-0000-0000-0000-000000000000-0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_values_checked_against_java() {
        assert_eq!(java_string_hash("hello"), 99162322);
        assert_eq!(java_list_hash([Some("334e26e9-8355-45cc-97c6-c31daf0df330")]), 1880221155);
        assert_eq!(bucket_of_key("334e26e9-8355-45cc-97c6-c31daf0df330", 4), 3);
        assert_eq!(java_list_hash([Some("TXN-005"), Some("ACC-D")]), -798672985);
        assert_eq!(bucket_of_key("txn_id:TXN-005,account_id:ACC-D", 8), 7);
    }

    #[test]
    fn file_ids_carry_the_bucket() {
        assert_eq!(file_id_of_bucket(3), "00000003-0000-0000-0000-000000000000-0");
        assert_eq!(bucket_of_file_id(&file_id_of_bucket(12)), Some(12));
        assert_eq!(bucket_of_file_id("6e1d5cc4-c487-487d-abbe-fe9b30b1c0cc-0"), None);
    }
}
