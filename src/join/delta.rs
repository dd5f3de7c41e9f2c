//! A shard's changes between two snapshots: what the changelog writes between two full
//! snapshots (bases), so that a checkpoint costs what changed rather than what is held.
//!
//! The big parts of a shard change at their ends: impressions and de-duplication keys are added
//! at their newest and leave, earliest first, as the watermark passes them (or the state limits
//! evict the earliest). So a delta names the latest entry that left each of them, which stands
//! for every one before it, and carries the entries added (or changed in place, for pending
//! impressions) whole: see `pending::changes` and [`super::expiry::SetDelta`]. The held
//! engagements, few unless impressions go missing, are written whole when they changed, and the
//! watermark and the engagement counts always (a few words).
//!
//! Applying the deltas written since a snapshot, in order, to that snapshot gives the shard
//! exactly as it was when the last of them was taken: the same pending impressions with the
//! same gains, the same keys with the same expiries, the same counts. The tests below check it
//! against a shard that never stopped, on random traffic, and that both go on alike.

use serde::{Deserialize, Serialize};

use super::expiry::{ExpiryQueue, SetDelta, SetDeltaV7};
use super::pending::{PendingDelta, PendingDeltaV7};
use super::{EngagementTally, HeldEngagement, JoinSettings, Shard};
use crate::checkpoint::Inconsistency;
use crate::ids::{GroupId, GroupMap, QueryKey};
use crate::time::EventTime;

/// The held engagements of a shard, whole.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct HeldState {
    /// Held engagements by query, in query order.
    lists: Vec<(QueryKey, Vec<HeldEngagement>)>,
    /// Their expiry queue, stale entries included (they decide which entry surfaces next).
    expiry: ExpiryQueue<QueryKey>,
}

/// What changed in a shard since its last snapshot or delta (format 10).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardDelta {
    /// The pending impressions.
    pending: PendingDelta,
    /// The engagement identities remembered for de-duplication.
    seen_engagements: SetDelta,
    /// The queries finalized within the last attribution window.
    finalized_recently: SetDelta,
    /// The held engagements, when they changed.
    held: Option<HeldState>,
    /// The shard's watermark.
    watermark: Option<EventTime>,
    /// The engagement counts.
    tally: EngagementTally,
}

/// A shard's delta as formats 6 and 7 wrote it: its pending impressions and de-duplication keys
/// in their layouts (`pending::changes`, `expiry`), the rest as today's.
#[derive(Deserialize)]
pub struct ShardDeltaV7 {
    pending: PendingDeltaV7,
    seen_engagements: SetDeltaV7,
    finalized_recently: SetDeltaV7,
    held: Option<HeldState>,
    watermark: Option<EventTime>,
    tally: EngagementTally,
}

impl ShardDelta {
    /// Its parts' encoded sizes, by name: where a delta's bytes go (the volume measurements).
    #[cfg(test)]
    pub fn parts(&self) -> Vec<(&'static str, usize)> {
        let size = |bytes: Vec<u8>| bytes.len();
        vec![
            ("pending", size(crate::checkpoint::encode(&self.pending))),
            ("pending records", self.pending.records()),
            ("pending updates", self.pending.updates()),
            ("seen_engagements", size(crate::checkpoint::encode(&self.seen_engagements))),
            ("finalized_recently", size(crate::checkpoint::encode(&self.finalized_recently))),
            ("held", size(crate::checkpoint::encode(&self.held))),
        ]
    }
}

impl ShardDeltaV7 {
    /// The same delta as this build's.
    pub fn upgrade(self) -> ShardDelta {
        let ShardDeltaV7 { pending, seen_engagements, finalized_recently, held, watermark, tally } = self;
        ShardDelta {
            pending: pending.into(),
            seen_engagements: seen_engagements.into(),
            finalized_recently: finalized_recently.into(),
            held,
            watermark,
            tally,
        }
    }
}

impl ShardDelta {
    /// The groups its pending impressions refer to (with repeats).
    pub fn pending_groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.pending.groups()
    }

    /// Renumbers its pending impressions' groups (`map[old] = new`), as
    /// [`Shard::remap_groups`] does for a snapshot.
    pub fn remap_groups(&mut self, map: &GroupMap) {
        self.pending.remap_groups(map);
    }

    /// What it writes entry by entry: pending impressions (whole or updated), de-duplication
    /// keys, held engagements (for the log and the benchmarks).
    pub fn entries(&self) -> [usize; 3] {
        let held = self.held.as_ref().map_or(0, |h| h.lists.iter().map(|(_, l)| l.len()).sum());
        [
            self.pending.records() + self.pending.updates(),
            self.seen_engagements.added() + self.finalized_recently.added(),
            held,
        ]
    }
}

impl Shard {
    /// Starts recording changes: the shard as it is now is in a snapshot (just written, or
    /// just restored from one and its deltas), and [`Shard::take_delta`] gives what changed
    /// since.
    pub fn record_changes(&mut self) {
        self.recording = true;
        self.held_changed = false;
        self.pending.record_changes();
        self.seen_engagements.record_changes();
        self.finalized_recently.record_changes();
    }

    /// Stops recording changes (the write that would have carried them failed: a snapshot of
    /// the whole shard must follow).
    pub fn stop_recording(&mut self) {
        self.recording = false;
        self.held_changed = false;
        self.pending.stop_recording();
        self.seen_engagements.stop_recording();
        self.finalized_recently.stop_recording();
    }

    /// What changed since [`Shard::record_changes`] or the last delta, and starts the next;
    /// `None` when the shard does not record changes (then only a snapshot of the whole shard
    /// can carry it).
    pub fn take_delta(&mut self) -> Option<ShardDelta> {
        if !self.recording {
            return None;
        }
        let held = std::mem::take(&mut self.held_changed).then(|| {
            let mut lists: Vec<(QueryKey, Vec<HeldEngagement>)> =
                self.held.iter().map(|(&query, list)| (query, list.clone())).collect();
            lists.sort_unstable_by_key(|(query, _)| *query);
            HeldState { lists, expiry: self.held_expiry.clone() }
        });
        Some(ShardDelta {
            pending: self.pending.take_delta(),
            seen_engagements: self.seen_engagements.take_delta(),
            finalized_recently: self.finalized_recently.take_delta(),
            held,
            watermark: self.watermark,
            tally: self.tally,
        })
    }

    /// Applies a delta to the shard as the snapshot or delta before it left it. The delta's
    /// bytes are untrusted: what it would make inconsistent is refused (the shard may then be
    /// partly changed, and the caller drops it). The shard as a whole ([`Shard::check`]) is
    /// checked once the chain's last delta is applied (the restore checks what it installs,
    /// `crate::engine`'s `check_compatible`), not after each: that visits every pending
    /// impression, and took a fifth of a restore of 197 deltas over 1M of them.
    pub fn apply_delta(&mut self, delta: ShardDelta, settings: &JoinSettings) -> Result<(), Inconsistency> {
        if delta.watermark < self.watermark {
            return Err(Inconsistency::Value { what: "a delta's watermark", expected: "at or after its snapshot's" });
        }
        self.pending.apply_delta(delta.pending, settings.attribution_window)?;
        self.seen_engagements.apply_delta(delta.seen_engagements)?;
        self.finalized_recently.apply_delta(delta.finalized_recently)?;
        if let Some(held) = delta.held {
            self.held_count = held.lists.iter().map(|(_, list)| list.len()).sum();
            self.held = held.lists.into_iter().collect();
            self.held_expiry = held.expiry;
        }
        self.watermark = delta.watermark;
        self.tally = delta.tally;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    const SETTINGS: JoinSettings = JoinSettings { attribution_window: 100 };

    /// Everything a shard holds, in a canonical order.
    fn contents(shard: &Shard) -> String {
        let bytes = postcard::to_allocvec(&shard.record()).unwrap();
        let mut copy = Shard::from_record(postcard::from_bytes(&bytes).unwrap());
        let mut held: Vec<_> = copy.held.drain().collect();
        held.sort_unstable_by_key(|(q, _)| *q);
        let sorted = |mut v: Vec<(EventTime, u128)>| {
            v.sort_unstable();
            v
        };
        let mut pending = Vec::new();
        copy.advance(EventTime::MAX, &SETTINGS, |f| {
            pending.push((f.query, f.timestamp, f.group, f.unit, f.gains.to_vec(), f.first_engagement_delay_ms))
        });
        format!(
            "pending {pending:?}\nheld {:?} {:?} {}\nseen {:?}\nfinalized {:?}\nwatermark {:?}\ntally {:?}",
            held.iter()
                .map(|(q, l)| (q, l.iter().map(|e| (e.timestamp, e.doc, e.gain)).collect::<Vec<_>>()))
                .collect::<Vec<_>>(),
            sorted(shard.held_expiry.entries()),
            shard.held_count,
            sorted(shard.seen_engagements.entries()),
            sorted(shard.finalized_recently.entries()),
            shard.watermark,
            shard.tally,
        )
    }

    /// One random step of traffic: impressions, engagements (some redelivered, some before
    /// their impression, some for none), watermark advances, evictions.
    fn step(shard: &mut Shard, rng: &mut SmallRng, clock: &mut EventTime, out: &mut Vec<(QueryKey, Vec<u8>)>) {
        *clock += rng.random_range(0..4);
        let query = rng.random_range(0..400u128);
        match rng.random_range(0..100) {
            0..40 => {
                let docs: Vec<u64> = (0..rng.random_range(1..6)).map(|d| d * 7 + (query as u64 % 5)).collect();
                let ts = *clock - rng.random_range(0..30);
                shard.offer_impression(query, ts, (query % 3) as GroupId, query as u32, &docs, &SETTINGS);
            }
            40..85 => {
                let identity = rng.random_range(0..2_000u128);
                let ts = *clock - rng.random_range(0..150);
                let doc = rng.random_range(0..8) * 7 + (query as u64 % 5);
                shard.offer_engagement(query, identity, ts, doc, rng.random_range(1..4), &SETTINGS);
            }
            85..96 => {
                let watermark = *clock - rng.random_range(10..60);
                shard.advance(watermark, &SETTINGS, |f| out.push((f.query, f.gains.to_vec())));
            }
            96 => {
                // An idle gap: the watermark passes everything held.
                *clock += 400;
                shard.advance(*clock, &SETTINGS, |f| out.push((f.query, f.gains.to_vec())));
            }
            97 => {
                shard.evict_oldest_pending(&SETTINGS, |f| out.push((f.query, f.gains.to_vec())));
            }
            98 => {
                shard.evict_oldest_held();
            }
            _ => {
                shard.evict_oldest_dedup_key();
            }
        }
    }

    #[test]
    fn a_snapshot_and_its_deltas_give_the_shard_back_and_it_goes_on_alike() {
        for seed in 0..40 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let (mut live, mut clock, mut out) = (Shard::default(), 1_000, Vec::new());
            for _ in 0..rng.random_range(0..300) {
                step(&mut live, &mut rng, &mut clock, &mut out);
            }
            let base = postcard::to_allocvec(&live.record()).unwrap();
            live.record_changes();
            let mut deltas = Vec::new();
            for _ in 0..rng.random_range(1..8) {
                for _ in 0..rng.random_range(0..400) {
                    step(&mut live, &mut rng, &mut clock, &mut out);
                }
                let delta = live.take_delta().unwrap();
                deltas.push(postcard::to_allocvec(&delta).unwrap());
            }
            let mut restored = Shard::from_record(postcard::from_bytes(&base).unwrap());
            for delta in &deltas {
                restored.apply_delta(postcard::from_bytes(delta).unwrap(), &SETTINGS).unwrap();
            }
            assert_eq!(contents(&restored), contents(&live), "seed {seed}");
            // Both go on alike: the same finalizations, the same state.
            let mut fork = rng.clone();
            let (mut clock_b, mut out_a, mut out_b) = (clock, Vec::new(), Vec::new());
            for _ in 0..300 {
                step(&mut live, &mut rng, &mut clock, &mut out_a);
                step(&mut restored, &mut fork, &mut clock_b, &mut out_b);
            }
            assert_eq!(out_a, out_b, "seed {seed}: finalizations after the restore");
            assert_eq!(contents(&restored), contents(&live), "seed {seed}: after going on");
        }
    }

    #[test]
    fn a_delta_is_what_changed_not_what_is_held() {
        let mut shard = Shard::default();
        for q in 0..1_000u128 {
            shard.offer_impression(q, 1_000 + q as EventTime / 10, 0, 0, &[1, 2, 3], &SETTINGS);
        }
        shard.record_changes();
        shard.offer_impression(5_000, 1_150, 0, 0, &[1], &SETTINGS);
        shard.offer_engagement(900, 1, 1_095, 2, 3, &SETTINGS);
        shard.advance(1_105, &SETTINGS, |_| {});
        let delta = shard.take_delta().unwrap();
        // The new impression and the one engaged with, one engagement identity, and the
        // queries finalized by the advance (remembered for de-duplication).
        let finalized = (0..1_000u128).filter(|q| 1_000 + *q as EventTime / 10 + 100 < 1_105).count();
        assert_eq!(delta.entries(), [2, 1 + finalized, 0]);
        let bytes = postcard::to_allocvec(&delta).unwrap().len();
        let whole = postcard::to_allocvec(&shard.record()).unwrap().len();
        assert!(bytes * 3 < whole, "delta {bytes} bytes, the shard {whole}");
        // Nothing changed since: an empty delta.
        assert_eq!(shard.take_delta().unwrap().entries(), [0, 0, 0]);
    }

    #[test]
    fn an_engagement_on_an_impression_held_before_is_written_as_an_update() {
        let mut shard = Shard::default();
        let docs: Vec<u64> = (0..10).map(|d| d * 7 + 1).collect();
        shard.offer_impression(1, 1_000, 0, 0, &docs, &SETTINGS);
        shard.record_changes();
        shard.offer_engagement(1, 9, 1_010, docs[3], 2, &SETTINGS);
        let delta = shard.take_delta().unwrap();
        assert_eq!((delta.pending.records(), delta.pending.updates()), (0, 1));
        // The key, the engagement's delay and ten gains, where the record takes 109 bytes.
        let update = postcard::to_allocvec(&delta.pending).unwrap().len();
        assert!(update <= 32, "an update of {update} bytes");
        // An impression inserted and engaged with since the last delta is written whole, once.
        shard.offer_impression(2, 1_020, 0, 0, &docs, &SETTINGS);
        shard.offer_engagement(2, 10, 1_025, docs[0], 1, &SETTINGS);
        shard.offer_engagement(1, 11, 1_026, docs[0], 1, &SETTINGS);
        let delta = shard.take_delta().unwrap();
        assert_eq!((delta.pending.records(), delta.pending.updates()), (1, 1));
    }

    #[test]
    fn a_forged_delta_is_refused() {
        let mut shard = Shard::default();
        shard.offer_impression(1, 1_000, 0, 0, &[1, 2], &SETTINGS);
        let base = postcard::to_allocvec(&shard.record()).unwrap();
        shard.record_changes();
        shard.offer_engagement(1, 9, 1_010, 2, 1, &SETTINGS);
        let delta = shard.take_delta().unwrap();
        // The engaged impression with another result count.
        let mut forged = delta.clone();
        forged.pending = {
            let mut other = Shard::default();
            other.offer_impression(1, 1_000, 0, 0, &[1, 2, 3], &SETTINGS);
            other.record_changes();
            other.offer_engagement(1, 9, 1_010, 2, 1, &SETTINGS);
            other.take_delta().unwrap().pending
        };
        let mut restored = Shard::from_record(postcard::from_bytes(&base).unwrap());
        let err = restored.apply_delta(forged, &SETTINGS).unwrap_err();
        assert_eq!(
            err,
            Inconsistency::Value {
                what: "the gains of a pending impression a delta updates",
                expected: "one per result"
            }
        );
        // A whole record (an impression new since) of one the snapshot holds, with another
        // result count: a damaged or forged delta, as format 7's whole records were checked.
        let mut forged = delta.clone();
        forged.pending = {
            let mut other = Shard::default();
            other.record_changes();
            other.offer_impression(1, 1_000, 0, 0, &[1, 2, 3], &SETTINGS);
            other.take_delta().unwrap().pending
        };
        assert_eq!((forged.pending.records(), forged.pending.updates()), (1, 0));
        let mut restored = Shard::from_record(postcard::from_bytes(&base).unwrap());
        let err = restored.apply_delta(forged, &SETTINGS).unwrap_err();
        assert!(
            matches!(err, Inconsistency::Value { what, .. } if what.contains("timestamp or result count")),
            "{err}"
        );
        // An update of an impression the snapshot does not hold.
        let mut forged = delta.clone();
        forged.pending = {
            let mut other = Shard::default();
            other.offer_impression(2, 1_000, 0, 0, &[1, 2], &SETTINGS);
            other.record_changes();
            other.offer_engagement(2, 9, 1_010, 2, 1, &SETTINGS);
            other.take_delta().unwrap().pending
        };
        let mut restored = Shard::from_record(postcard::from_bytes(&base).unwrap());
        let err = restored.apply_delta(forged, &SETTINGS).unwrap_err();
        assert_eq!(err, Inconsistency::Value { what: "a pending impression a delta updates", expected: "pending" });
        // A gain beyond 31, its byte forged in the encoded delta (the update's last byte).
        let mut bytes = postcard::to_allocvec(&delta.pending).unwrap();
        *bytes.last_mut().unwrap() = 32;
        let mut forged = delta.clone();
        forged.pending = postcard::from_bytes(&bytes).unwrap();
        let mut restored = Shard::from_record(postcard::from_bytes(&base).unwrap());
        let err = restored.apply_delta(forged, &SETTINGS).unwrap_err();
        assert_eq!(err, Inconsistency::Value { what: "a gain in a delta", expected: "at most 31" });
        // A watermark going back.
        let mut forged = delta;
        forged.watermark = Some(5);
        let mut restored = Shard::from_record(postcard::from_bytes(&base).unwrap());
        restored.watermark = Some(10);
        let err = restored.apply_delta(forged, &SETTINGS).unwrap_err();
        assert_eq!(err, Inconsistency::Value { what: "a delta's watermark", expected: "at or after its snapshot's" });
    }
}
