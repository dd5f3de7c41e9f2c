//! The fast path of event decoding: a strict, allocation-free scanner for the shape almost every
//! message has (an object of plain strings, integers and a result array).
//!
//! serde_json stays the reference. The scanner answers only when it understood every byte the
//! way serde_json would; anything else gives `None`, and then serde_json decodes the message
//! and words any rejection. That includes escapes, numbers with a fraction or exponent or more
//! than 18 digits, a known field of an unexpected type, deep nesting and every syntax error. So
//! the scanner can be simple and conservative, and the differential test below checks that the
//! two paths agree wherever it answers.
//!
//! Why it exists: serde_json's visitor machinery spent about 7,000 instructions on a 280-byte
//! impression (callgrind), more than the join and all the metrics together. This scanner walks
//! the bytes once.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;

use super::json::{ClusterId, EngagementFields, ImpressionFields, RawTimestamp, Text};
use super::ResultSink;

/// Deeper nesting inside an unknown field is left to serde_json, which has its own limit.
const MAX_SKIP_DEPTH: u32 = 32;
/// More digits might not fit in an i64; serde_json decides those.
const MAX_INTEGER_DIGITS: usize = 18;

/// Bytes that end the plain part of a JSON string: the closing quote, an escape, or a control
/// character (which JSON forbids raw).
fn is_string_stop(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The offset of the first string-stopping byte in `b` (or `b.len()`), eight bytes at a time:
/// result ids and query ids are most of a message's bytes.
fn string_stop(b: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let quote = u64::from_ne_bytes([b'"'; 8]);
    let backslash = u64::from_ne_bytes([b'\\'; 8]);
    let mut at = 0;
    while let Some(chunk) = b.get(at..at + 8) {
        let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        // The classic zero-byte test, on w ^ '"', w ^ '\\' and (for bytes below 0x20) w itself.
        // Borrows only spill into bytes above a true match, so the lowest flagged byte is exact.
        let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
        let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
        let found = zero(w ^ quote) | zero(w ^ backslash) | below_space;
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    let rest = b.get(at..).unwrap_or_default();
    at + rest.iter().position(|&c| is_string_stop(c)).unwrap_or(rest.len())
}

/// A position in a message already known to be valid UTF-8 (the mapped scanner walks with it
/// too, `mapped/scan.rs`).
pub(super) struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Cursor { text, at: 0 }
    }

    /// The offset of the next byte.
    pub(super) fn position(&self) -> usize {
        self.at
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn skip_whitespace(&mut self) {
        let b = self.bytes();
        // Compact JSON has none: one comparison in the common case.
        if b.get(self.at).is_some_and(|&c| c > b' ') {
            return;
        }
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace, not consumed.
    pub(super) fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.bytes().get(self.at).copied()
    }

    pub(super) fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// A string without escapes, borrowed. Slicing at the quotes (ASCII) keeps it valid UTF-8.
    pub(super) fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let b = self.bytes();
        let start = self.at;
        let end = start + string_stop(b.get(start..)?);
        if b.get(end) != Some(&b'"') {
            return None;
        }
        self.at = end + 1;
        self.text.get(start..end)
    }

    /// An integer as serde_json reads one into an i64: an optional minus, then `0` or digits
    /// without a leading zero, and no fraction or exponent after it.
    pub(super) fn integer(&mut self) -> Option<i64> {
        self.skip_whitespace();
        let b = self.bytes();
        let negative = b.get(self.at) == Some(&b'-');
        let start = self.at + usize::from(negative);
        let rest = b.get(start..)?;
        let digits = rest.iter().take_while(|d| d.is_ascii_digit()).count();
        let (number, after) = rest.split_at_checked(digits)?;
        if digits == 0 || digits > MAX_INTEGER_DIGITS || (number.first() == Some(&b'0') && digits > 1) {
            return None;
        }
        if matches!(after.first(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        // At most 18 digits: no overflow.
        let magnitude = number.iter().fold(0i64, |n, &d| n * 10 + i64::from(d - b'0'));
        if negative && magnitude == 0 {
            // serde_json reads `-0` as the float -0.0.
            return None;
        }
        self.at = start + digits;
        Some(if negative { -magnitude } else { magnitude })
    }

    /// After a list element: a comma (another element follows: true) or the list's closing
    /// byte (false), consumed; anything else fails.
    pub(super) fn more(&mut self, close: u8) -> Option<bool> {
        let next = self.peek()?;
        if next != b',' && next != close {
            return None;
        }
        self.at += 1;
        Some(next == b',')
    }

    pub(super) fn literal(&mut self, word: &str) -> Option<()> {
        self.skip_whitespace();
        let found = self.bytes().get(self.at..).is_some_and(|rest| rest.starts_with(word.as_bytes()));
        found.then(|| self.at += word.len())
    }

    /// `null`, consumed, or nothing consumed.
    pub(super) fn null(&mut self) -> bool {
        self.peek() == Some(b'n') && self.literal("null").is_some()
    }

    /// A number by the full JSON grammar, value unused.
    pub(super) fn skip_number(&mut self) -> Option<()> {
        let b = self.bytes();
        let digits = |at: &mut usize| {
            let from = *at;
            while b.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at > from
        };
        let mut at = self.at;
        at += usize::from(b.get(at) == Some(&b'-'));
        let int_start = at;
        if !digits(&mut at) || (b.get(int_start) == Some(&b'0') && at - int_start > 1) {
            return None;
        }
        if b.get(at) == Some(&b'.') {
            at += 1;
            digits(&mut at).then_some(())?;
        }
        if matches!(b.get(at), Some(b'e' | b'E')) {
            at += 1;
            at += usize::from(matches!(b.get(at), Some(b'+' | b'-')));
            digits(&mut at).then_some(())?;
        }
        self.at = at;
        Some(())
    }

    /// Any JSON value, unused (an unknown field).
    pub(super) fn skip_value(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_SKIP_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => {
                self.at += 1;
                if self.eat(b'}').is_some() {
                    return Some(());
                }
                loop {
                    self.string()?;
                    self.eat(b':')?;
                    self.skip_value(depth + 1)?;
                    if !self.more(b'}')? {
                        return Some(());
                    }
                }
            }
            b'[' => {
                self.at += 1;
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.skip_value(depth + 1)?;
                    if !self.more(b']')? {
                        return Some(());
                    }
                }
            }
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => None,
        }
    }

    /// An optional string field: `null` is absent, as for serde's `Option`.
    fn optional_text(&mut self) -> Option<Option<Text<'a>>> {
        if self.null() {
            return Some(None);
        }
        Some(Some(Text(Cow::Borrowed(self.string()?))))
    }

    /// A timestamp: integer milliseconds or a string (resolved later, by the shared code).
    fn timestamp(&mut self) -> Option<Option<RawTimestamp<'a>>> {
        match self.peek()? {
            b'n' => self.null().then_some(None),
            b'"' => Some(Some(RawTimestamp::Text(Text(Cow::Borrowed(self.string()?))))),
            _ => Some(Some(RawTimestamp::Millis(self.integer()?))),
        }
    }

    /// `client_id` / `session_id` when a string; other types are rare and left to serde_json.
    fn cluster_id(&mut self) -> Option<Option<ClusterId<'a>>> {
        if self.null() {
            return Some(None);
        }
        let id = self.string()?;
        Some(Some(ClusterId((!id.is_empty()).then_some(Cow::Borrowed(id)))))
    }

    /// Walks an object, handing each key to `field`, which consumes the value (or fails).
    pub(super) fn object(&mut self, mut field: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.eat(b'}').is_none() {
            loop {
                let key = self.string()?;
                self.eat(b':')?;
                field(self, key)?;
                if !self.more(b'}')? {
                    break;
                }
            }
        }
        // Only whitespace may follow, as serde_json's `end` requires.
        (self.peek().is_none()).then_some(())
    }
}

/// An impression's fields; result ids go to `results` exactly as on the serde path.
pub(super) fn impression<'a, S: ResultSink<'a>>(text: &'a str, results: &mut S) -> Option<ImpressionFields<'a>> {
    let mut fields = ImpressionFields::default();
    Cursor { text, at: 0 }.object(|c, key| {
        match key {
            "query_id" => fields.query_id = c.optional_text()?,
            "timestamp" => fields.timestamp = c.timestamp()?,
            "experiment" => fields.experiment = c.optional_text()?,
            "variant" => fields.variant = c.optional_text()?,
            "client_id" => fields.client_id = c.cluster_id()?,
            "session_id" => fields.session_id = c.cluster_id()?,
            "query" => fields.query = c.cluster_id()?,
            "segment" => fields.segment = c.cluster_id()?,
            "dimensions" => {
                c.peek()?;
                let start = c.at;
                c.skip_value(0)?;
                fields.dimensions = c.text.get(start..c.at).filter(|&d| d != "null");
            }
            "results" => {
                results.clear();
                fields.saw_results = !c.null();
                if fields.saw_results {
                    c.eat(b'[')?;
                    if c.eat(b']').is_none() {
                        loop {
                            let id = c.string()?;
                            fields.empty_result_id |= id.is_empty();
                            results.push_borrowed(id);
                            if !c.more(b']')? {
                                break;
                            }
                        }
                    }
                }
            }
            // Interleaved impressions are rare enough for serde_json, which checks them.
            "interleaving" | "teams" => return None,
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    Some(fields)
}

/// An engagement's fields.
pub(super) fn engagement(text: &str) -> Option<EngagementFields<'_>> {
    let mut fields = EngagementFields::default();
    Cursor { text, at: 0 }.object(|c, key| {
        match key {
            "query_id" => fields.query_id = c.optional_text()?,
            "timestamp" => fields.timestamp = c.timestamp()?,
            "doc_id" => fields.doc_id = c.optional_text()?,
            "action" => fields.action = c.optional_text()?,
            "event_id" => fields.event_id = c.optional_text()?,
            "position" => fields.position = if c.null() { None } else { Some(c.integer()?) },
            _ => c.skip_value(0)?,
        }
        Some(())
    })?;
    Some(fields)
}

#[cfg(test)]
mod tests {
    use super::super::{decode_engagement_with, decode_impression_with, Path};
    use proptest::prelude::*;

    /// Both paths on one message: where the scanner answers, the decoded event or rejection
    /// (reason and wording) must be serde_json's. Tells whether the impression and the engagement
    /// scanner answered.
    fn agree(json: &str) -> (bool, bool) {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let fast = decode_impression_with(json.as_bytes(), &mut a, Path::ScanOnly);
        let answered = fast.is_some();
        if let Some(fast) = fast {
            let reference = decode_impression_with(json.as_bytes(), &mut b, Path::Serde).unwrap();
            assert_eq!(fast, reference, "impression {json:?}");
            if fast.is_ok() {
                assert_eq!(a, b, "result ids of {json:?}");
            }
        }
        let fast = decode_engagement_with(json.as_bytes(), Path::ScanOnly);
        let engagement_answered = fast.is_some();
        if let Some(fast) = fast {
            assert_eq!(fast, decode_engagement_with(json.as_bytes(), Path::Serde).unwrap(), "engagement {json:?}");
        }
        (answered, engagement_answered)
    }

    #[test]
    fn string_stops_are_found_at_every_offset() {
        for stop in [b'"', b'\\', 0x00, 0x1f] {
            for len in 0..20 {
                for at in 0..=len {
                    let mut bytes = vec![b'a'; len];
                    // Bytes around the stop that must not be taken for one.
                    for (i, c) in bytes.iter_mut().enumerate() {
                        *c = [b'a', 0x21, 0x7f, 0xc3, 0x5d, b'#'][i % 6];
                    }
                    if at < len {
                        bytes[at] = stop;
                    }
                    assert_eq!(super::string_stop(&bytes), at, "stop {stop:#x} at {at} of {len}");
                }
            }
        }
    }

    #[test]
    fn the_common_shapes_take_the_fast_path() {
        for json in [
            r#"{"query_id":"q1","timestamp":1700000000000,"results":["a","b"],"experiment":"e","variant":"v"}"#,
            r#" { "query_id" : "q1" , "timestamp" : "2026-11-22T10:05:00Z" , "results" : [ ] } "#,
            r#"{"query_id":"q","timestamp":1,"results":null,"client_id":"c","session_id":""}"#,
            r#"{"query_id":"q","timestamp":1,"results":["a"],"query":"Red  shoes"}"#,
            r#"{"query_id":"q","timestamp":1,"results":["a"],"query":null}"#,
            r#"{"query_id":"q","timestamp":-5,"doc_id":"d","action":"purchase","event_id":null,"position":3}"#,
            r#"{"query_id":"q","timestamp":1,"extra":{"a":[1,-2.5e+3,true,false,null,{"b":"é"}]},"results":[]}"#,
            "{}",
        ] {
            assert_eq!(agree(json), (true, true), "both scanners should answer {json}");
        }
    }

    #[test]
    fn what_the_scanner_leaves_to_serde_json() {
        for json in [
            r#"{"query_id":"q\u0031","timestamp":1,"results":[]}"#,
            r#"{"query_id":"q","timestamp":1.5,"results":[]}"#,
            r#"{"query_id":"q","timestamp":18446744073709551615,"results":[]}"#,
            r#"{"query_id":"q","timestamp":01,"results":[]}"#,
            r#"{"query_id":"q","timestamp":-0,"results":[]}"#,
            r#"{"query_id":7,"timestamp":1,"results":[]}"#,
            r#"{"query_id":"q","timestamp":1,"results":["a",3]}"#,
            r#"{"query_id":"q","timestamp":1,"results":[]} trailing"#,
            r#"{"query_id":"q","timestamp":1,"client_id":7,"results":[]}"#,
            r#"{"query_id":"q","timestamp":1,"query":12,"results":[]}"#,
            "{\"query_id\":\"q\tx\",\"timestamp\":1,\"results\":[]}",
            r#"{"query_id":"q","timestamp":1,"results":[],}"#,
            r#"{"query_id":"q","timestamp":1,"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#,
            r#"{"query_id":"q""#,
        ] {
            assert!(!agree(json).0, "the impression scanner should leave {json} to serde_json");
        }
    }

    /// JSON-ish values, valid or not, for the fields of both event kinds.
    fn value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|f| format!("{f:?}")),
            "[0-9]{1,20}",
            "-?0[0-9]{0,3}(\\.[0-9]{0,2})?([eE][+-]?[0-9]{0,2})?",
            "\"[a-zé\\\\\"\\t0-9:TZ-]{0,12}\"",
            Just("\"2026-11-22T10:05:00.123+01:00\"".to_string()),
            Just("\"\"".to_string()),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(("[a-z_]{0,10}", inner), 0..4).prop_map(|v| {
                    let fields: Vec<String> = v.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", fields.join(","))
                }),
            ]
        })
    }

    fn field_name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("query_id"),
            Just("timestamp"),
            Just("results"),
            Just("experiment"),
            Just("variant"),
            Just("client_id"),
            Just("session_id"),
            Just("query"),
            Just("segment"),
            Just("doc_id"),
            Just("action"),
            Just("event_id"),
            Just("position"),
            Just("other"),
        ]
        .prop_map(str::to_string)
    }

    /// Plausible events: known fields (some repeated) with plausible or odd values, extra fields,
    /// whitespace in odd places.
    fn event() -> impl Strategy<Value = String> {
        let plausible = prop_oneof![
            "\"[a-z0-9-]{0,8}\"",
            (0i64..2_000_000_000_000).prop_map(|n| n.to_string()),
            prop::collection::vec("\"[a-z0-9]{0,4}\"", 0..6).prop_map(|v| format!("[{}]", v.join(" , "))),
        ];
        let ws = prop_oneof![Just(""), Just(" "), Just("\n\t"), Just("\r ")];
        prop::collection::vec((field_name(), prop_oneof![3 => plausible, 1 => value()], ws), 0..9).prop_map(|fields| {
            let body: Vec<String> = fields.into_iter().map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}")).collect();
            format!("{{{}}}", body.join(","))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn scanner_and_serde_json_agree_on_events(json in event()) {
            agree(&json);
        }

        /// One byte of a plausible event deleted, replaced or inserted: mostly syntax errors,
        /// which the scanner must never accept.
        #[test]
        fn scanner_and_serde_json_agree_on_damaged_events(
            json in event(), at in any::<prop::sample::Index>(), byte in prop_oneof![
                Just(b'"'), Just(b','), Just(b':'), Just(b'{'), Just(b'}'), Just(b'['), Just(b']'),
                Just(b'\\'), Just(b'-'), Just(b'0'), Just(b'e'), Just(b'.'), Just(b' '), Just(b'n'),
            ], edit in 0..3u8,
        ) {
            let mut bytes = json.into_bytes();
            let i = at.index(bytes.len() + 1);
            match edit {
                0 if i < bytes.len() => { bytes.remove(i); }
                1 if i < bytes.len() => bytes[i] = byte,
                _ => bytes.insert(i, byte),
            }
            if let Ok(text) = String::from_utf8(bytes) {
                agree(&text);
            }
        }
    }
}
