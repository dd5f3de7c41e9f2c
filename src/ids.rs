//! The identities every stage passes around. Decoding turns the ids in the events into these
//! fixed-size hashes and dense numbers once, so no later stage keeps or compares the text.

/// The identity of a search response: the xxh3-128 hash of its `query_id`. 128 bits make a
/// collision between any two live impressions practically impossible.
pub type QueryKey = u128;

/// The identity of a result within one impression: the xxh3-64 hash of its id. Only compared
/// within a single result list, where 64 bits are far more than enough.
pub type DocKey = u64;

/// Dense id of an (experiment, variant) pair, assigned in order of first appearance.
pub type GroupId = u32;

/// Another engine's group ids to this engine's (`map[their id] = our id`), for state written by
/// another replica. A map, not a vector indexed by their ids: those come from the bytes read.
pub type GroupMap = std::collections::HashMap<GroupId, GroupId>;

/// The identity of an engagement for de-duplication: a 128-bit hash of its `event_id`, or of
/// its query, document, action and timestamp when it has none.
pub type EngagementId = u128;

/// The [`QueryKey`] of a `query_id`, as the impression and its engagements both compute it.
pub fn query_key(query_id: &str) -> QueryKey {
    xxhash_rust::xxh3::xxh3_128(query_id.as_bytes())
}

/// The [`DocKey`] of a result id, as the impression's list and an engagement's `doc_id` both compute it.
pub fn doc_key(doc_id: &str) -> DocKey {
    xxhash_rust::xxh3::xxh3_64(doc_id.as_bytes())
}
