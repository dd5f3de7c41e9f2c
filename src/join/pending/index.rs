//! Finding a pending impression by its query: [`QueryIndex`].
//!
//! The table holds nothing but record ids (`hashbrown::HashTable<u32>`), hashed and compared by
//! the query key stored in the record, so a bucket costs 4 bytes and a control byte instead of
//! a key and a value. Every lookup therefore takes the [`Arena`] the ids point into.

use std::hash::BuildHasher;

use crate::join::expiry::KeyHasher;

use hashbrown::hash_table::{Entry, VacantEntry};
use hashbrown::HashTable;

use super::arena::Arena;
use crate::ids::QueryKey;

/// Ids of records, by the query key in each record.
#[derive(Default)]
pub(super) struct QueryIndex {
    /// Ids of all records, hashed by their query key.
    table: HashTable<u32>,
    /// Keys the hashes, randomly per shard, as a standard `HashMap` would: query keys come from
    /// outside, and a chosen set of them must not be able to pile into one probe sequence.
    hasher: KeyHasher,
}

impl QueryIndex {
    /// The hash a query is indexed under.
    #[inline]
    pub(super) fn hash(&self, query: QueryKey) -> u64 {
        self.hasher.hash_one(query)
    }

    /// The id of the record of this query.
    pub(super) fn find(&self, arena: &Arena, query: QueryKey) -> Option<u32> {
        self.table.find(self.hash(query), |&id| arena.query(id) == query).copied()
    }

    /// The place for an id of `query` (hashed to `hash`), found with a single probe; `None`
    /// if a record of `query` is indexed already.
    pub(super) fn vacancy(&mut self, arena: &Arena, hash: u64, query: QueryKey) -> Option<VacantEntry<'_, u32>> {
        let hasher = &self.hasher;
        match self.table.entry(hash, |&id| arena.query(id) == query, |&id| hasher.hash_one(arena.query(id))) {
            Entry::Occupied(_) => None,
            Entry::Vacant(slot) => Some(slot),
        }
    }

    /// Indexes `id`, whose query (hashed to `hash`) is known not to be indexed yet.
    pub(super) fn insert(&mut self, arena: &Arena, hash: u64, id: u32) {
        let hasher = &self.hasher;
        self.table.insert_unique(hash, id, |&id| hasher.hash_one(arena.query(id)));
    }

    /// Whether the next insertion would make the table grow, holding ids already (an empty
    /// one grows without reading a record: hashbrown's own growth serves it).
    pub(super) fn is_full(&self) -> bool {
        !self.table.is_empty() && self.table.len() == self.table.capacity()
    }

    /// Doubles the table and indexes exactly `ids` in it (every indexed id, in the order given),
    /// ahead of an insertion that would otherwise make hashbrown grow it. hashbrown rehashes in
    /// bucket order, reading each hash's query key from a record in random order: a cache miss
    /// per record once the arena outgrows the cache, which was 5% of `replay`'s merge thread.
    /// Given the ids in deadline order, which is mostly the order the records were allocated
    /// in, the keys are read front to back.
    pub(super) fn grow(&mut self, arena: &Arena, ids: impl Iterator<Item = u32>) {
        let mut table = HashTable::with_capacity(self.table.capacity().saturating_mul(2).max(4));
        let hasher = &self.hasher;
        for id in ids {
            // Room for every id: the closure that would rehash is never called.
            table.insert_unique(hasher.hash_one(arena.query(id)), id, |&id| hasher.hash_one(arena.query(id)));
        }
        debug_assert_eq!(table.len(), self.table.len(), "the ids are exactly those indexed");
        self.table = table;
    }

    /// Forgets `id`, the record of `query`.
    pub(super) fn remove(&mut self, query: QueryKey, id: u32) {
        self.table
            .find_entry(self.hash(query), |&other| other == id)
            .expect("every pending record is indexed")
            .remove();
    }

    /// Forgets every id, keeping the table's capacity.
    pub(super) fn clear(&mut self) {
        // Clearing writes every control byte: not for a table that is empty already (an advance
        // with nothing pending), which may have kept the capacity of a busy hour.
        if !self.table.is_empty() {
            self.table.clear();
        }
    }

    /// Indexes exactly `ids` (after the arena moved every record).
    pub(super) fn rebuild(&mut self, arena: &Arena, ids: &[u32]) {
        // Clearing keeps the table's capacity: the same ids go back in without growing it.
        self.clear();
        for &id in ids {
            self.insert(arena, self.hash(arena.query(id)), id);
        }
    }

    /// Every indexed id, in no particular order.
    #[cfg(test)]
    pub(super) fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.table.iter().copied()
    }
}
