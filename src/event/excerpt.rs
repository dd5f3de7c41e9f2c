//! A short, safe quote of a message for a log line: whoever reads the log sees what the
//! producer sent, and a binary message or a terminal escape cannot garble the log.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::fmt::Write;

/// The first `max_chars` characters of `bytes` in double quotes. Control characters, invalid
/// UTF-8 and invisible formatting characters are escaped (`\n`, `\x00`, `\u{202e}`); JSON's own
/// quotes and backslashes are kept as they are, so a JSON line reads as itself. A quote that
/// stops before the end of the message (or of a message known to be longer, `more`) ends in `…`.
pub fn excerpt(bytes: &[u8], max_chars: usize, more: bool) -> String {
    let mut out = String::with_capacity(max_chars + 8);
    out.push('"');
    let mut chars = 0;
    let mut cut = more;
    'chunks: for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if chars == max_chars {
                cut = true;
                break 'chunks;
            }
            chars += 1;
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if c.is_ascii_control() => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if c.is_control() || is_invisible_format(c) => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for &b in chunk.invalid() {
            if chars == max_chars {
                cut = true;
                break 'chunks;
            }
            chars += 1;
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    if cut {
        out.push('…');
    }
    out.push('"');
    out
}

/// Characters that change how a terminal shows the text around them without showing
/// themselves: zero-width and bidirectional controls, the byte-order mark.
fn is_invisible_format(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::excerpt;

    #[test]
    fn quotes_short_text_whole_and_long_text_cut() {
        assert_eq!(excerpt(br#"{"query_id":"q1"}"#, 60, false), r#""{"query_id":"q1"}""#);
        assert_eq!(excerpt(b"not json at all", 8, false), "\"not json…\"");
        assert_eq!(excerpt(b"exactly8", 8, false), "\"exactly8\"");
        assert_eq!(excerpt(b"exactly8", 8, true), "\"exactly8…\"", "known to go on");
    }

    #[test]
    fn escapes_what_would_garble_a_log() {
        assert_eq!(excerpt(b"a\nb\tc\x00\x1b[31m", 60, false), r#""a\nb\tc\x00\x1b[31m""#);
        assert_eq!(excerpt(b"\xff\xfe ok \xc3\xa9", 60, false), "\"\\xff\\xfe ok é\"");
        assert_eq!(excerpt("a\u{202e}b\u{85}".as_bytes(), 60, false), r#""a\u{202e}b\u{85}""#);
        // Every byte of binary input counts as one character of the quote.
        assert_eq!(excerpt(&[0xff; 100], 3, false), "\"\\xff\\xff\\xff…\"");
    }
}
