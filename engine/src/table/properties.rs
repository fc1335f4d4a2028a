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
/// ends in an odd number of backslashes; the next line's leading whitespace is skipped. Lines
/// end at `\n`, `\r` or `\r\n` (one end, so a continuation goes on past it).
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current: Option<String> = None;
    let text = text.replace("\r\n", "\n");
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

/// Undoes `Properties.store`'s escaping. `\uXXXX` escapes are UTF-16 code units, as Java
/// writes them: a high surrogate followed by an escaped low one is one character outside the
/// Basic Multilingual Plane (Java writes an emoji as `\uD83D\uDE00`). A lone surrogate cannot
/// be a Rust `char`; it becomes `?`, which is what Java itself turns it into whenever it
/// encodes the string as UTF-8 (`String.getBytes`): so `hoodie.table.checksum`, a CRC of the
/// name's UTF-8 bytes, still matches the name read back. A malformed `\u` escape (Java's
/// `load` refuses the file) is kept as the letter `u` followed by what came after it.
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
            Some('u') => match utf16_escape(&mut chars) {
                Some(unit @ 0xD800..=0xDBFF) => {
                    // A high surrogate: one character with the low surrogate escaped next.
                    let mut ahead = chars.clone();
                    let low = match (ahead.next(), ahead.next()) {
                        (Some('\\'), Some('u')) => utf16_escape(&mut ahead).filter(|u| (0xDC00..=0xDFFF).contains(u)),
                        _ => None,
                    };
                    match low {
                        Some(low) => {
                            chars = ahead;
                            out.extend(char::decode_utf16([unit, low]).map(|c| c.unwrap_or(LONE_SURROGATE)));
                        }
                        None => out.push(LONE_SURROGATE),
                    }
                }
                Some(unit) => out.push(char::from_u32(u32::from(unit)).unwrap_or(LONE_SURROGATE)),
                None => out.push('u'),
            },
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// What a surrogate without its partner becomes (see [`unescape`]).
const LONE_SURROGATE: char = '?';

/// The UTF-16 code unit of the four hex digits after a `\u`, consumed from `chars`; `None`
/// (consuming nothing) unless exactly four hex digits follow.
fn utf16_escape(chars: &mut std::str::Chars<'_>) -> Option<u16> {
    let mut ahead = chars.clone();
    let mut unit = 0u16;
    for _ in 0..4 {
        let digit = ahead.next()?.to_digit(16)?;
        unit = unit << 4 | digit as u16;
    }
    *chars = ahead;
    Some(unit)
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

    /// Java's `Properties.store(OutputStream)` writes each UTF-16 unit above `~` as `\uXXXX`:
    /// the lines down to `lone_low` are what Java 17 wrote for these names (a lone surrogate
    /// is a Java `String` too); the rest are other spellings `Properties.load` reads alike,
    /// and a malformed escape, which it refuses.
    #[test]
    fn reads_what_java_writes_for_characters_outside_the_bmp() {
        let text = "#Updated at 2025-12-20T21:01:18Z\n\
            emoji=t\\uD83D\\uDE00\n\
            emoji_first=\\uD83D\\uDE00z\n\
            combining=e\\u0301te\\u0301\n\
            arabic=\\u062C\\u062F\\u0648\\u0644\n\
            cjk=\\u8868\\u683C\n\
            lone_high=t\\uD83D\n\
            lone_low=\\uDE00x\n\
            high_then_plain=\\uD83Dab\n\
            two_highs=\\uD83D\\uD83D\\uDE00\n\
            lowercase=\\ud83d\\ude00\n\
            malformed=\\u12\n";
        let p = Properties::parse(text);
        assert_eq!(p.get("emoji"), Some("t\u{1F600}"));
        assert_eq!(p.get("emoji_first"), Some("\u{1F600}z"));
        assert_eq!(p.get("combining"), Some("e\u{301}te\u{301}"));
        assert_eq!(p.get("arabic"), Some("\u{62C}\u{62F}\u{648}\u{644}"));
        assert_eq!(p.get("cjk"), Some("\u{8868}\u{683C}"));
        // Java's own UTF-8 encoding of a lone surrogate is `?`.
        assert_eq!(p.get("lone_high"), Some("t?"));
        assert_eq!(p.get("lone_low"), Some("?x"));
        assert_eq!(p.get("high_then_plain"), Some("?ab"));
        assert_eq!(p.get("two_highs"), Some("?\u{1F600}"));
        assert_eq!(p.get("lowercase"), Some("\u{1F600}"));
        assert_eq!(p.get("malformed"), Some("u12"));
    }

    #[test]
    fn any_unicode_round_trips_through_the_escapes() {
        let mut p = Properties::new();
        for (i, name) in ["t\u{1F600}", "\u{1F600}", "e\u{301}", "\u{5D8}\u{5D1}\u{5DC}\u{5D4} \u{200F}x", "\u{8868}\u{683C}", "\u{10FFFF}\u{FFFF}\u{E000}"]
            .iter()
            .enumerate()
        {
            p.set(format!("k{i}"), *name);
        }
        let text = p.to_text(&[]);
        assert!(text.contains("k0=t\\uD83D\\uDE00\n"), "{text}");
        assert_eq!(Properties::parse(&text), p);
    }

    /// `\r\n` is one line end (Java's `load`), also after a continuing backslash.
    #[test]
    fn crlf_ends_one_line() {
        let p = Properties::parse("a=x\\\r\n    y\r\nb=2\r\n");
        assert_eq!(p.get("a"), Some("xy"));
        assert_eq!(p.get("b"), Some("2"));
        assert_eq!(p.len(), 2);
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
