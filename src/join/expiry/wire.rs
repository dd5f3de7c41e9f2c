//! How changelog format 10 writes an [`ExpiringSet`]'s keys, in a snapshot and in a delta:
//! [`KeysByExpiry`], the (expiry, key) entries in order, their expiry times as differences and
//! their keys fixed-width in one byte string.
//!
//! The keys are 128-bit hashes (engagement identities, query keys): postcard's varints took 19
//! bytes for a uniform one, where 16 hold it. Their expiry times, in order, differ by a few
//! milliseconds: a difference is one or two bytes where the absolute time took six or seven.
//! Format 7 and before wrote a snapshot's set twice over, the keys with their expiry and then the
//! expiry order (`ExpiringSetRecordV7`): 49 bytes a key, where format 10 takes about 18.
//!
//! A record's bytes are untrusted: this file is under the no-panic rule (crate documentation,
//! "Hostile input"). Entries out of order, a key twice, times that leave i64's range or a byte
//! string that is not whole keys are refused as the record is read.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]

use serde::de::Error as _;
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::checkpoint::{deserialize_byte_string, ByteString};
use crate::time::EventTime;

/// Bytes of one key in the byte string.
const KEY_BYTES: usize = 16;

/// (expiry, key) entries in increasing order, each key once: an [`ExpiringSet`]'s keys as a
/// snapshot holds them, or those a delta adds.
///
/// [`ExpiringSet`]: super::ExpiringSet
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::join) struct KeysByExpiry(pub(in crate::join) Vec<(EventTime, u128)>);

impl Serialize for KeysByExpiry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // In order, so a difference is not negative; the first is the time itself.
        let mut previous = 0;
        let differences: Vec<EventTime> = self
            .0
            .iter()
            .map(|&(expires, _)| {
                let difference = expires.wrapping_sub(previous);
                previous = expires;
                difference
            })
            .collect();
        let keys: Vec<u8> = self.0.iter().flat_map(|(_, key)| key.to_le_bytes()).collect();
        let mut tuple = serializer.serialize_tuple(2)?;
        tuple.serialize_element(&differences)?;
        tuple.serialize_element(&ByteString(&keys))?;
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for KeysByExpiry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (differences, Keys(keys)) = <(Vec<EventTime>, Keys)>::deserialize(deserializer)?;
        if keys.len() != differences.len() {
            return Err(D::Error::custom(format!(
                "{} expiry times for {} keys of an expiring set",
                differences.len(),
                keys.len()
            )));
        }
        let mut entries = Vec::with_capacity(keys.len());
        let mut expires: EventTime = 0;
        for (difference, key) in differences.into_iter().zip(keys) {
            expires = expires.checked_add(difference).ok_or_else(|| D::Error::custom("an expiry time beyond i64"))?;
            let entry = (expires, key);
            if entries.last().is_some_and(|last| *last >= entry) {
                return Err(D::Error::custom("an expiring set's keys out of expiry order"));
            }
            entries.push(entry);
        }
        Ok(KeysByExpiry(entries))
    }
}

/// The keys' byte string read back.
struct Keys(Vec<u128>);

impl<'de> Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_byte_string(deserializer, "the 16-byte keys of an expiring set", |bytes| {
            let keys = bytes.chunks_exact(KEY_BYTES);
            if !keys.remainder().is_empty() {
                return None;
            }
            // Each chunk is 16 bytes: the conversion cannot fail.
            Some(Keys(keys.map(|key| <[u8; KEY_BYTES]>::try_from(key).map_or(0, u128::from_le_bytes)).collect()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_and_take_a_fraction_of_format_7_s_bytes() {
        let mut rng_state = 0x9e37_79b9_7f4a_7c15_u128;
        let mut next = || {
            rng_state = rng_state.wrapping_mul(0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645).wrapping_add(1);
            rng_state
        };
        let mut entries: Vec<(EventTime, u128)> =
            (0..10_000).map(|i| (1_780_000_000_000 + i * 3 + (next() % 5) as i64, next())).collect();
        entries.sort_unstable();
        let keys = KeysByExpiry(entries.clone());
        let bytes = postcard::to_allocvec(&keys).unwrap();
        assert_eq!(postcard::from_bytes::<KeysByExpiry>(&bytes).unwrap(), keys);
        let format_7 = postcard::to_allocvec(&entries).unwrap().len();
        // 16 bytes a key and one or two a difference, where format 7 took 25 (and twice over in
        // a snapshot).
        assert!(bytes.len() < 10_000 * 18 + 16, "{} bytes", bytes.len());
        assert!(bytes.len() * 4 < format_7 * 3, "{} bytes against {format_7}", bytes.len());
        assert_eq!(
            postcard::from_bytes::<KeysByExpiry>(&postcard::to_allocvec(&KeysByExpiry::default()).unwrap()).unwrap(),
            KeysByExpiry::default()
        );
    }

    #[test]
    fn entries_out_of_order_twice_or_not_whole_are_refused() {
        let write = |times: &[EventTime], keys: &[u8]| {
            let mut tuple = postcard::to_allocvec(&times).unwrap();
            tuple.extend(postcard::to_allocvec(&serde_bytes_like(keys)).unwrap());
            tuple
        };
        let key = |k: u128| k.to_le_bytes().to_vec();
        let two = [key(1), key(2)].concat();
        assert!(postcard::from_bytes::<KeysByExpiry>(&write(&[5, 0], &two)).is_ok(), "same time, keys in order");
        for (times, keys, what) in [
            (vec![5, -1], two.clone(), "a time going back"),
            (vec![5, 0], [key(2), key(1)].concat(), "keys out of order at one time"),
            (vec![5, 0], [key(1), key(1)].concat(), "a key twice"),
            (vec![5], two.clone(), "fewer times than keys"),
            (vec![5, 1], two[..31].to_vec(), "a key cut short"),
            (vec![i64::MAX, 1], two.clone(), "a time beyond i64"),
        ] {
            assert!(postcard::from_bytes::<KeysByExpiry>(&write(&times, &keys)).is_err(), "{what}");
        }
    }

    /// A byte string as postcard writes one (its length, then the bytes).
    fn serde_bytes_like(bytes: &[u8]) -> impl Serialize + '_ {
        ByteString(bytes)
    }
}
