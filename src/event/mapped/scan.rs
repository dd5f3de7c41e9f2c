//! The fast path of a mapped JSON event: the mapping's tree walked over the bytes with the
//! native scanner's cursor (`event/scan.rs`), no serde visitor per value. As there, the scanner
//! answers only for what it reads exactly as serde_json would (strings without escapes,
//! integers that fit, arrays without filters or indexes below them, nesting within a bound) and
//! declines anything else, which then goes the serde walk (`walk.rs`); what a value captures is
//! decided by the same code on both paths ([`Extracted::found`]), and a differential test
//! (`tests.rs`) checks that they agree wherever the scanner answers.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;

use super::plan::{Found, Node};
use super::walk::Extracted;
use crate::event::scan::Cursor;
use crate::event::ResultSink;

/// Deeper mapped nesting is left to serde_json; with the skipped values' own bound, anything the
/// scanner reads stays well within serde_json's recursion limit (128).
const MAX_DEPTH: u32 = 32;

/// Walks `text` (a JSON object) from `node`, filling `out` and `sink`; `None` where it declines,
/// leaving both to be reset by the caller.
pub(super) fn walk<'a, const N: usize, S: ResultSink<'a>>(
    text: &'a str,
    node: &Node,
    out: &mut Extracted<'a, N>,
    sink: &mut S,
) -> Option<()> {
    let mut cursor = Cursor::new(text);
    value(&mut cursor, node, 0, out, sink)?;
    // Only whitespace may follow, as serde_json's `end` requires.
    cursor.peek().is_none().then_some(())
}

fn value<'a, const N: usize, S: ResultSink<'a>>(
    c: &mut Cursor<'a>,
    node: &Node,
    depth: u32,
    out: &mut Extracted<'a, N>,
    sink: &mut S,
) -> Option<()> {
    if depth > MAX_DEPTH {
        return None;
    }
    match c.peek()? {
        b'"' => {
            let text = c.string()?;
            if !Extracted::<N>::result_id(node, text, sink) {
                out.found(node, Found::Text(Cow::Borrowed(text)), sink);
            }
        }
        b'{' => {
            out.found(node, Found::Object, sink);
            c.eat(b'{')?;
            if c.eat(b'}').is_none() {
                loop {
                    let key = c.string()?;
                    c.eat(b':')?;
                    match (node.member(key), node.each.as_deref()) {
                        (None, None) => c.skip_value(0)?,
                        (Some(child), None) | (None, Some(child)) => value(c, child, depth + 1, out, sink)?,
                        // Two readers of one value: the serde walk buffers it.
                        (Some(_), Some(_)) => return None,
                    }
                    if !c.more(b'}')? {
                        break;
                    }
                }
            }
        }
        b'[' => {
            if !node.filters.is_empty() || node.indexed {
                return None;
            }
            out.found(node, Found::Array, sink);
            c.eat(b'[')?;
            if c.eat(b']').is_none() {
                loop {
                    match node.each.as_deref() {
                        Some(child) => value(c, child, depth + 1, out, sink)?,
                        None => c.skip_value(0)?,
                    }
                    if !c.more(b']')? {
                        break;
                    }
                }
            }
        }
        b't' => {
            c.literal("true")?;
            out.found(node, Found::Bool(true), sink);
        }
        b'f' => {
            c.literal("false")?;
            out.found(node, Found::Bool(false), sink);
        }
        b'n' => {
            c.literal("null")?;
            out.found(node, Found::Null, sink);
        }
        b'-' | b'0'..=b'9' if node.captures.is_empty() => c.skip_number()?,
        b'-' | b'0'..=b'9' => {
            let number = c.integer()?;
            out.found(node, Found::Int(number.into()), sink);
        }
        _ => return None,
    }
    Some(())
}
