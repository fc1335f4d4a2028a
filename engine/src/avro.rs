//! The `apache_avro` crate as the engine uses it: every schema it parses goes through
//! [`parse_schema`] or after [`init`], so that the crate's process-wide settings are the
//! engine's before its first parse.
//!
//! The crate checks each name of a schema (records, enums, fixed, aliases, type references)
//! with a name validator and *unwraps* the result (`apache_avro` 0.21, `Name::parse`): a name
//! outside the Avro specification's `[A-Za-z_][A-Za-z0-9_]*` panics instead of failing the
//! parse. Timeline files carry their writer's schema, so one changed byte in a damaged file, or
//! a name another writer allows (Java's Avro takes any Unicode letter), would panic a reader.
//! The engine's validator takes every name as it is; names are only labels to it.

use apache_avro::schema::Namespace;
use apache_avro::validator::{set_schema_name_validator, SchemaNameValidator};
use apache_avro::AvroResult;

/// Takes any name: `a.b.C` is name `C` in namespace `a.b`, as the specification splits it.
struct AnyName;

impl SchemaNameValidator for AnyName {
    fn validate(&self, schema_name: &str) -> AvroResult<(String, Namespace)> {
        Ok(match schema_name.rsplit_once('.') {
            Some((namespace, name)) => (name.to_owned(), Some(namespace.to_owned()).filter(|n| !n.is_empty())),
            None => (schema_name.to_owned(), None),
        })
    }
}

/// Installs the engine's name validator, once, before any schema is parsed. The crate keeps
/// the first validator it sees, its own when it parses a schema first: everything in the engine
/// that uses the crate calls this first (or [`parse_schema`]).
pub(crate) fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // Fails only when a validator was set already: the crate's own, when a schema was parsed
    // without this. Decoding timeline files still catches the crate's panics then.
    ONCE.call_once(|| drop(set_schema_name_validator(Box::new(AnyName))));
}

/// Parses a schema, after [`init`].
pub(crate) fn parse_schema(json: &str) -> AvroResult<apache_avro::Schema> {
    init();
    apache_avro::Schema::parse_str(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_name_splits_at_the_last_dot() {
        assert_eq!(AnyName.validate("a.b.C").unwrap(), ("C".to_owned(), Some("a.b".to_owned())));
        assert_eq!(AnyName.validate("bad-name").unwrap(), ("bad-name".to_owned(), None));
        assert_eq!(AnyName.validate(".x").unwrap(), ("x".to_owned(), None));
        assert_eq!(AnyName.validate("").unwrap(), (String::new(), None));
    }
}

/// An Avro decimal's unscaled value: big-endian two's complement bytes (at most 16),
/// sign-extended to 128 bits.
pub(crate) fn unscaled_decimal(bytes: &[u8]) -> Option<i128> {
    if bytes.len() > 16 {
        return None;
    }
    let fill = if bytes.first().is_some_and(|x| x & 0x80 != 0) { 0xff } else { 0 };
    let mut wide = [fill; 16];
    wide[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(wide))
}
