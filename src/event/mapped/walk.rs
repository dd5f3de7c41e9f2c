//! One pass over a message guided by the mapping's tree ([`Node`]): a serde visitor that
//! descends only into mapped members and skips the rest without building anything, so a mapped
//! JSON event borrows its strings from the message as the native decoder does. The same
//! visitor walks a decoded Avro or Protobuf record (as a `serde_json::Value`), and the element
//! of an array a filter has to look at whole.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::plan::{Capture, Found, Node};
use super::LIST_FIELDS;
use crate::config::path::Literal;
use crate::event::{RejectReason, Rejection, ResultSink};

/// The list field whose items go to the result sink; the others are kept in [`Extracted`].
pub(super) const RESULTS: usize = 0;

/// What one pass found.
#[derive(Debug, PartialEq)]
pub(super) struct Extracted<'a, const N: usize> {
    /// Each scalar field's value, by slot.
    pub(super) scalars: [Option<Found<'a>>; N],
    /// Whether each list field's array was present.
    pub(super) lists_seen: [bool; LIST_FIELDS],
    /// The items of the list fields other than the results (interleaving rankers, teams).
    pub(super) lists: [Vec<Found<'a>>; LIST_FIELDS],
    /// The first fault found in a list (an id of the wrong type, an empty id): the message's
    /// rejection.
    pub(super) fault: Option<Rejection>,
}

impl<const N: usize> Default for Extracted<'_, N> {
    fn default() -> Self {
        Extracted {
            scalars: std::array::from_fn(|_| None),
            lists_seen: [false; LIST_FIELDS],
            lists: Default::default(),
            fault: None,
        }
    }
}

/// How a string from the walked value is kept: borrowed when the value is the message itself,
/// copied when it is a temporary (a decoded record, a buffered array element).
pub(super) trait Keep<'de, 'a> {
    fn text(s: &'de str) -> Cow<'a, str>;
    fn result<S: ResultSink<'a>>(sink: &mut S, id: &'de str);
}

/// Strings borrow from the message.
pub(super) struct Borrow;
impl<'de: 'a, 'a> Keep<'de, 'a> for Borrow {
    fn text(s: &'de str) -> Cow<'a, str> {
        Cow::Borrowed(s)
    }
    fn result<S: ResultSink<'a>>(sink: &mut S, id: &'de str) {
        sink.push_borrowed(id);
    }
}

/// Strings are copied (the hashing sink hashes without a copy).
pub(super) struct Own;
impl<'a> Keep<'_, 'a> for Own {
    fn text(s: &str) -> Cow<'a, str> {
        Cow::Owned(s.to_owned())
    }
    fn result<S: ResultSink<'a>>(sink: &mut S, id: &str) {
        sink.push_copied(id);
    }
}

/// Walks `de` from `node`, filling `out` and `sink`.
pub(super) fn walk<'de, 'a, const N: usize, S, K, D>(
    node: &Node,
    de: D,
    out: &mut Extracted<'a, N>,
    sink: &mut S,
) -> Result<(), D::Error>
where
    S: ResultSink<'a>,
    K: Keep<'de, 'a>,
    D: Deserializer<'de>,
{
    Seed::<N, S, K> { node, out, sink, keep: PhantomData }.deserialize(de)
}

/// Walks a decoded value from `node`, copying what it keeps.
pub(super) fn walk_value<'a, const N: usize, S: ResultSink<'a>>(
    node: &Node,
    value: &serde_json::Value,
    out: &mut Extracted<'a, N>,
    sink: &mut S,
) {
    // Deserializing from a `Value` reports no error of its own, and the visitor raises none.
    let _ = walk::<N, S, Own, _>(node, value, out, sink);
}

struct Seed<'p, 'x, 'a, const N: usize, S, K> {
    node: &'p Node,
    out: &'x mut Extracted<'a, N>,
    sink: &'x mut S,
    keep: PhantomData<K>,
}

impl<'de, 'a, const N: usize, S: ResultSink<'a>, K: Keep<'de, 'a>> DeserializeSeed<'de> for Seed<'_, '_, 'a, N, S, K> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'a, const N: usize> Extracted<'a, N> {
    /// Records a value found at `node` in every field that reads it: the one rule of what a
    /// path captures, for the serde walk and the scanner alike.
    pub(super) fn found<S: ResultSink<'a>>(&mut self, node: &Node, found: Found<'a>, sink: &mut S) {
        for &capture in &node.captures {
            match capture {
                Capture::Scalar(slot) => {
                    if let Some(s @ None) = self.scalars.get_mut(slot) {
                        *s = Some(found.clone());
                    }
                }
                Capture::Item(list) => self.item(list, &found, sink),
                Capture::ListArray(list) => match found {
                    Found::Array => set(&mut self.lists_seen, list),
                    Found::Null => {}
                    ref other => {
                        self.fault(RejectReason::WrongType, format!("a list is {}, not an array", other.kind()))
                    }
                },
            }
        }
    }

    /// A result id borrowed from the message, where the node reads nothing else: hashed
    /// straight into the sink (the hot path). False where the node does more.
    pub(super) fn result_id<S: ResultSink<'a>>(node: &Node, id: &'a str, sink: &mut S) -> bool {
        if node.captures == [Capture::Item(RESULTS)] && !id.is_empty() {
            sink.push_borrowed(id);
            return true;
        }
        false
    }

    fn item<S: ResultSink<'a>>(&mut self, list: usize, found: &Found<'a>, sink: &mut S) {
        match found {
            Found::Text(t) if t.is_empty() => {
                self.fault(RejectReason::InvalidValue, "an id in a list is an empty string")
            }
            Found::Text(t) if list == RESULTS => sink.push(t.clone()),
            Found::Int(i) if list == RESULTS => sink.push(Cow::Owned(i.to_string())),
            Found::Text(_) | Found::Int(_) => {
                if let Some(items) = self.lists.get_mut(list) {
                    items.push(found.clone());
                }
            }
            other => self.fault(RejectReason::WrongType, format!("an item of a list is {}, not an id", other.kind())),
        }
    }

    fn fault(&mut self, reason: RejectReason, detail: impl Into<String>) {
        if self.fault.is_none() {
            self.fault = Some(Rejection::new(reason, detail));
        }
    }
}

impl<'a, const N: usize, S: ResultSink<'a>, K> Seed<'_, '_, 'a, N, S, K> {
    fn found(&mut self, found: Found<'a>) {
        self.out.found(self.node, found, self.sink);
    }

    fn child<'q>(&'q mut self, node: &'q Node) -> Seed<'q, 'q, 'a, N, S, K> {
        Seed { node, out: self.out, sink: self.sink, keep: PhantomData }
    }
}

fn set<const L: usize>(flags: &mut [bool; L], at: usize) {
    if let Some(flag) = flags.get_mut(at) {
        *flag = true;
    }
}

/// Whether an array element passes a filter: its `member` path is the literal.
fn passes(element: &serde_json::Value, member: &[String], equals: &Literal) -> bool {
    let mut v = element;
    for name in member {
        match v.get(name.as_str()) {
            Some(next) => v = next,
            None => return false,
        }
    }
    match (v, equals) {
        (serde_json::Value::String(s), Literal::Text(t)) => s == t,
        (serde_json::Value::Number(n), Literal::Number(x)) => n.as_f64() == Some(*x),
        _ => false,
    }
}

impl<'de, 'a, const N: usize, S: ResultSink<'a>, K: Keep<'de, 'a>> Visitor<'de> for Seed<'_, '_, 'a, N, S, K> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_borrowed_str<E: de::Error>(mut self, v: &'de str) -> Result<(), E> {
        // The results' ids go to the sink without a `Cow` where they borrow (the hot path).
        if self.node.captures == [Capture::Item(RESULTS)] && !v.is_empty() {
            K::result(self.sink, v);
            return Ok(());
        }
        self.found(Found::Text(K::text(v)));
        Ok(())
    }
    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<(), E> {
        self.found(Found::Text(Cow::Owned(v.to_owned())));
        Ok(())
    }
    fn visit_i64<E: de::Error>(mut self, v: i64) -> Result<(), E> {
        self.found(Found::Int(v.into()));
        Ok(())
    }
    fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<(), E> {
        self.found(Found::Int(v.into()));
        Ok(())
    }
    fn visit_i128<E: de::Error>(mut self, v: i128) -> Result<(), E> {
        self.found(Found::Int(v));
        Ok(())
    }
    fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<(), E> {
        self.found(Found::Float(v));
        Ok(())
    }
    fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<(), E> {
        self.found(Found::Bool(v));
        Ok(())
    }
    fn visit_bytes<E: de::Error>(mut self, _: &[u8]) -> Result<(), E> {
        self.found(Found::Bytes);
        Ok(())
    }
    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.found(Found::Null);
        Ok(())
    }
    fn visit_none<E: de::Error>(mut self) -> Result<(), E> {
        self.found(Found::Null);
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.found(Found::Object);
        let node = self.node;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let named = node.member(&key);
            match (named, node.each.as_deref()) {
                (None, None) => {
                    map.next_value::<IgnoredAny>()?;
                }
                (Some(child), None) | (None, Some(child)) => map.next_value_seed(self.child(child))?,
                (Some(named), Some(each)) => {
                    // Two readers of one value: buffered, and walked by both.
                    let value: serde_json::Value = map.next_value()?;
                    walk_value(named, &value, self.out, self.sink);
                    walk_value(each, &value, self.out, self.sink);
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.found(Found::Array);
        let node = self.node;
        if node.filters.is_empty() && !node.indexed {
            // The common case: each element to the wildcard's child, or skipped.
            match node.each.as_deref() {
                Some(child) => while seq.next_element_seed(self.child(child))?.is_some() {},
                None => while seq.next_element::<IgnoredAny>()?.is_some() {},
            }
            return Ok(());
        }
        for index in 0.. {
            let mut children = node.element_children(index);
            let (first, second) = (children.next(), children.next());
            if node.filters.is_empty() && second.is_none() {
                let more = match first {
                    Some(child) => seq.next_element_seed(self.child(child))?.is_some(),
                    None => seq.next_element::<IgnoredAny>()?.is_some(),
                };
                if !more {
                    break;
                }
                continue;
            }
            // A filter looks at the element whole, or two children read it: buffered.
            let Some(element) = seq.next_element::<serde_json::Value>()? else { break };
            for child in node.element_children(index) {
                walk_value(child, &element, self.out, self.sink);
            }
            for filter in &node.filters {
                if passes(&element, &filter.member, &filter.equals) {
                    walk_value(&filter.node, &element, self.out, self.sink);
                }
            }
        }
        Ok(())
    }
}

/// An object's key, borrowed when it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}
