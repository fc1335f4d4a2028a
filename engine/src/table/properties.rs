//! Java `.properties` text, as Hudi writes `hoodie.properties`: comments, `key=value` lines,
//! backslash escapes (`\:`, `\=`, `\\`, `\uXXXX`, ...) and continuation lines. Reading undoes
//! the escaping exactly as `java.util.Properties.load`; writing produces what
//! `java.util.Properties.store` would, so Java readers get back the same strings.

use std::collections::BTreeMap;

/// Key/value pairs of a properties file. Keys are unique; a later duplicate wins, as in Java.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    entries: BTreeMap<String, String>,
}

impl Properties {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses the text of a properties file (`Properties.load` semantics).
    pub fn parse(text: &str) -> Properties {
        let mut entries = BTreeMap::new();
        for line in logical_lines(text) {
            let (key, value) = split_key_value(&line);
            entries.insert(unescape(key), unescape(value));
        }
        Properties { entries }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.entries.insert(key.into(), value.into());
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The file text, escaped like `Properties.store`, keys sorted, after `comment` lines.
    pub fn to_text(&self, comments: &[&str]) -> String {
        let mut out = String::new();
        for comment in comments {
            out.push('#');
            out.push_str(comment);
            out.push('\n');
        }
        for (key, value) in &self.entries {
            escape_into(&mut out, key, true);
            out.push('=');
            escape_into(&mut out, value, false);
            out.push('\n');
        }
        out
    }
}

/// Joins continuation lines and drops blank and comment lines. A natural line continues when it
/// ends in an odd number of backslashes; the next line's leading whitespace is skipped.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current: Option<String> = None;
    for natural in text.split(['\n', '\r']) {
        let continuing = current.is_some();
        let trimmed = natural.trim_start_matches([' ', '\t', '\x0c']);
        if !continuing && (trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!')) {
            continue;
        }
        let trailing_backslashes = trimmed.chars().rev().take_while(|&c| c == '\\').count();
        let (body, continues) = if trailing_backslashes % 2 == 1 {
            (&trimmed[..trimmed.len() - 1], true)
        } else {
            (trimmed, false)
        };
        let mut line = current.take().unwrap_or_default();
        line.push_str(body);
        if continues {
            current = Some(line);
        } else {
            lines.push(line);
        }
    }
    if let Some(line) = current {
        lines.push(line);
    }
    lines
}

/// Splits at the first unescaped `=`, `:` or whitespace; the separator may be whitespace around
/// one `=` or `:`. Both halves stay escaped.
fn split_key_value(line: &str) -> (&str, &str) {
    let bytes = line.as_bytes();
    let mut i = 0;
    let mut key_end = line.len();
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'=' | b':' | b' ' | b'\t' | b'\x0c' => {
                key_end = i;
                break;
            }
            _ => i += 1,
        }
    }
    let key_end = key_end.min(line.len());
    let rest = &line[key_end..];
    let rest = rest.trim_start_matches([' ', '\t', '\x0c']);
    let rest = rest.strip_prefix(['=', ':']).unwrap_or(rest);
    let value = rest.trim_start_matches([' ', '\t', '\x0c']);
    (&line[..key_end], value)
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.clone().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().filter(|_| hex.len() == 4) {
                    Some(code) => {
                        for _ in 0..4 {
                            chars.next();
                        }
                        // Java stores UTF-16 units; a lone surrogate cannot be a Rust char.
                        out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                    }
                    None => out.push('u'),
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

fn escape_into(out: &mut String, text: &str, is_key: bool) {
    for (i, c) in text.chars().enumerate() {
        match c {
            ' ' if is_key || i == 0 => out.push_str("\\ "),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\x0c' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hudi_style_file_with_escapes_and_comments() {
        let text = "#Updated at 2025-12-20T21:01:18Z\n#Sat Dec 20 21:01:18 UTC 2025\n\
            hoodie.table.name=trips\n\
            hoodie.table.create.schema={\"type\"\\:\"record\",\"a\\=b\"\\:1}\n\
            hoodie.keygen.timebased.output.dateformat=yyyy-MM-dd'T'HH\\:mm\\:ss.SSSZ\n\
            \n   ! bang comment\n";
        let p = Properties::parse(text);
        assert_eq!(p.len(), 3);
        assert_eq!(p.get("hoodie.table.name"), Some("trips"));
        assert_eq!(p.get("hoodie.table.create.schema"), Some("{\"type\":\"record\",\"a=b\":1}"));
        assert_eq!(
            p.get("hoodie.keygen.timebased.output.dateformat"),
            Some("yyyy-MM-dd'T'HH:mm:ss.SSSZ")
        );
    }

    #[test]
    fn separators_continuations_and_unicode() {
        let text = "a : 1\nb   two\nc=x\\\n    y\\\\\nd=\\u00e9t\\u00E9\ne\n  f= trailing \r\n";
        let p = Properties::parse(text);
        assert_eq!(p.get("a"), Some("1"));
        assert_eq!(p.get("b"), Some("two"));
        assert_eq!(p.get("c"), Some("xy\\"));
        assert_eq!(p.get("d"), Some("été"));
        assert_eq!(p.get("e"), Some(""));
        assert_eq!(p.get("f"), Some("trailing "));
    }

    #[test]
    fn write_then_read_round_trips_awkward_strings() {
        let mut p = Properties::new();
        p.set("k", "{\"type\":\"record\"} a=b #c !d \\e");
        p.set("key with space", " leading space, ünïcödé, tab\there\nnewline");
        p.set("empty", "");
        let text = p.to_text(&["Updated by pg_hudi"]);
        assert!(text.starts_with("#Updated by pg_hudi\n"));
        assert!(text.contains("k={\"type\"\\:\"record\"} a\\=b \\#c \\!d \\\\e\n"), "{text}");
        assert!(text.is_ascii(), "non-ASCII must be written as \\uXXXX");
        assert_eq!(Properties::parse(&text), p);
    }
}
