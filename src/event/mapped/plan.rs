//! A mapping's paths merged into one tree ([`Node`]), so that one pass over a message reads
//! every mapped field and skips everything else; and what is found at a path ([`Found`]).
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use std::borrow::Cow;

use crate::config::path::{FieldPath, Literal, Step};

/// What a node of the tree does with the value found there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Capture {
    /// Keeps it as the single value of a scalar field (the first one found, if a filter
    /// selects several).
    Scalar(usize),
    /// Appends it to a list field (each element a wildcard selects).
    Item(usize),
    /// The array a list field's wildcard walks: its presence tells an empty list from an absent
    /// one, and a value that is not an array is the list's type fault.
    ListArray(usize),
}

/// One node of the tree: what to capture here and where to go from here.
#[derive(Debug, Default, Clone)]
pub(super) struct Node {
    /// The fields read at this node.
    pub(super) captures: Vec<Capture>,
    /// Children by member name; on an array, a decimal name is an element's index.
    pub(super) members: Vec<Member>,
    /// The child for every element of an array (or member value of an object).
    pub(super) each: Option<Box<Node>>,
    /// Children for the elements of an array that pass a filter.
    pub(super) filters: Vec<Filter>,
    /// Some member's name is an index: an array's elements are then matched by position.
    pub(super) indexed: bool,
}

/// A named child.
#[derive(Debug, Clone)]
pub(super) struct Member {
    pub(super) name: Box<str>,
    /// The name as an array index, when it is one.
    pub(super) index: Option<usize>,
    pub(super) node: Node,
}

/// A child for the elements whose `member` path equals `equals`.
#[derive(Debug, Clone)]
pub(super) struct Filter {
    pub(super) member: Vec<String>,
    pub(super) equals: Literal,
    pub(super) node: Node,
}

impl Node {
    /// Adds a path ending in `capture`; a list's path without a wildcard reads the array at the
    /// path element by element (`/results` is `/results/*`).
    pub(super) fn add(&mut self, path: &FieldPath, capture: Capture) {
        let mut steps: Vec<&Step> = path.steps.iter().collect();
        let each = Step::Each;
        if let Capture::Item(_) = capture {
            if path.wildcards() == 0 {
                steps.push(&each);
            }
        }
        let mut node = self;
        for step in steps {
            if let (Capture::Item(list), Step::Each) = (capture, step) {
                node.captures.push(Capture::ListArray(list));
            }
            node = node.child(step);
        }
        node.captures.push(capture);
    }

    fn child(&mut self, step: &Step) -> &mut Node {
        match step {
            Step::Key(name) => {
                let at = match self.members.iter().position(|m| *m.name == **name) {
                    Some(at) => at,
                    None => {
                        let index = name.parse::<usize>().ok().filter(|_| !name.starts_with('+'));
                        self.indexed |= index.is_some();
                        self.members.push(Member { name: name.as_str().into(), index, node: Node::default() });
                        self.members.len() - 1
                    }
                };
                // `at` is in range: found, or just pushed.
                #[allow(clippy::indexing_slicing)]
                &mut self.members[at].node
            }
            Step::Each => self.each.get_or_insert_with(Default::default),
            Step::Filter { member, equals } => {
                let at = match self.filters.iter().position(|f| f.member == *member && f.equals == *equals) {
                    Some(at) => at,
                    None => {
                        self.filters.push(Filter {
                            member: member.clone(),
                            equals: equals.clone(),
                            node: Node::default(),
                        });
                        self.filters.len() - 1
                    }
                };
                #[allow(clippy::indexing_slicing)]
                &mut self.filters[at].node
            }
        }
    }

    /// The member child for an object key. Called for every key of every mapped object: the
    /// length and the first byte rule out most members before the bytes are compared (a
    /// `memcmp` call per member showed in profiles).
    #[inline]
    pub(super) fn member(&self, key: &str) -> Option<&Node> {
        let key = key.as_bytes();
        let first = key.first().copied();
        self.members
            .iter()
            .find(|m| {
                m.name.len() == key.len() && m.name.as_bytes().first().copied() == first && m.name.as_bytes() == key
            })
            .map(|m| &m.node)
    }

    /// How many children an array's element `index` goes to (by index and by wildcard); the
    /// filters are evaluated separately.
    pub(super) fn element_children(&self, index: usize) -> impl Iterator<Item = &Node> {
        self.members.iter().filter(move |m| m.index == Some(index)).map(|m| &m.node).chain(self.each.as_deref())
    }
}

/// A value found at a path, before it is checked as its field's type.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Found<'a> {
    /// A string, borrowed from the message when it has no escapes.
    Text(Cow<'a, str>),
    /// An integer.
    Int(i128),
    /// A number with a fraction or an exponent.
    Float(f64),
    Bool(bool),
    /// `null` (or an Avro null, an unset Protobuf field): absent.
    Null,
    Object,
    Array,
    /// Avro bytes (or a decimal, a duration): never an id.
    Bytes,
}

impl Found<'_> {
    /// What it is, for a rejection's detail.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Found::Text(_) => "a string",
            Found::Int(_) => "an integer",
            Found::Float(_) => "a fractional number",
            Found::Bool(_) => "a boolean",
            Found::Null => "null",
            Found::Object => "an object",
            Found::Array => "an array",
            Found::Bytes => "bytes",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::path::parse;

    #[test]
    fn paths_share_their_prefixes_and_lists_read_their_arrays() {
        let mut root = Node::default();
        root.add(&parse("/hits/hits/*/_id").unwrap(), Capture::Item(0));
        root.add(&parse("/hits/total").unwrap(), Capture::Scalar(1));
        root.add(&parse("/ids").unwrap(), Capture::Item(2));
        assert_eq!(root.members.len(), 2, "hits once, ids once");
        let hits = root.member("hits").unwrap();
        assert_eq!(hits.member("total").unwrap().captures, [Capture::Scalar(1)]);
        let array = hits.member("hits").unwrap();
        assert_eq!(array.captures, [Capture::ListArray(0)]);
        assert_eq!(array.each.as_ref().unwrap().member("_id").unwrap().captures, [Capture::Item(0)]);
        let ids = root.member("ids").unwrap();
        assert_eq!(ids.captures, [Capture::ListArray(2)]);
        assert_eq!(ids.each.as_ref().unwrap().captures, [Capture::Item(2)]);
        assert_eq!(hits.element_children(0).count(), 0);
    }
}
