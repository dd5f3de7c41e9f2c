//! A steady event stream for the tests that restart replicas while traffic flows: generated
//! as it is produced, every message within a bound of its own timestamp, so every consumer
//! interleaving gives the same numbers, with the faults a join has to handle (redelivered
//! engagements, invalid JSON).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::series;

/// The input topics the stream is produced to.
pub const IMP_TOPIC: &str = "imp";
pub const ENG_TOPIC: &str = "eng";
/// Event time between two impressions.
pub const SPACING_MS: i64 = 10;
/// The most a message is delivered after its own timestamp's place in the stream: within
/// `join.max_out_of_orderness` (1 s in these tests), so every interleaving gives the same
/// numbers.
pub const BOUND_MS: i64 = 1_000;

/// A message waiting to be produced: delivery time, sequence number (ties go in generation
/// order), topic, partition, payload.
type Due = Reverse<(i64, u64, &'static str, i32, String)>;

/// The event stream, generated as it is produced: impressions at a fixed spacing with their
/// engagements (some duplicated, a few malformed messages), each message delivered at its
/// timestamp plus a random delay below [`BOUND_MS`]. Messages wait in a heap until no message
/// still to be generated can be due before them, so the order is the same as sorting the
/// whole stream by delivery time.
pub struct Stream {
    /// Seeded: a failing run's stream can be made again from the seed it printed.
    rng: SmallRng,
    /// The event time of impression 0.
    t0: i64,
    /// The next impression's number.
    pub next: usize,
    /// Generated, not yet produced, earliest delivery first.
    due: BinaryHeap<Due>,
    /// Tie breaker: generation order.
    sequence: u64,
    /// Messages produced per topic: impressions, engagements.
    pub produced: [usize; 2],
    /// Impression i goes to partition i modulo this.
    partitions: i32,
}

impl Stream {
    pub fn new(seed: u64, t0: i64, partitions: i32) -> Stream {
        Stream {
            rng: SmallRng::seed_from_u64(seed),
            t0,
            next: 0,
            due: BinaryHeap::new(),
            sequence: 0,
            produced: [0; 2],
            partitions,
        }
    }

    fn push(&mut self, at: i64, topic: &'static str, partition: i32, payload: String) {
        let delay = self.rng.random_range(0..BOUND_MS);
        self.sequence += 1;
        self.due.push(Reverse((at + delay, self.sequence, topic, partition, payload)));
    }

    fn generate_impression(&mut self) {
        let i = self.next;
        self.next += 1;
        let t = self.t0 + i as i64 * SPACING_MS;
        let query = format!("q{i}");
        let partition = (i % self.partitions as usize) as i32;
        let variant = ["control", "treatment"][i % 2];
        let docs: Vec<String> = (0..10).map(|r| format!("d{}", (i + r * 17) % 501)).collect();
        let imp = json!({"query_id": query, "timestamp": t, "results": docs, "experiment": "x", "variant": variant});
        self.push(t, IMP_TOPIC, partition, imp.to_string());
        for j in 0..self.rng.random_range(0..4) {
            let at = t + 1 + j * 300 + self.rng.random_range(0..300);
            let action = ["click", "click", "add_to_cart", "purchase"][self.rng.random_range(0..4)];
            let doc = &docs[self.rng.random_range(0..10)];
            let e = json!({"query_id": query, "timestamp": at, "doc_id": doc, "action": action, "event_id": format!("e{i}-{j}")});
            self.push(at, ENG_TOPIC, partition, e.to_string());
            if self.rng.random_bool(0.05) {
                self.push(at, ENG_TOPIC, partition, e.to_string());
            }
        }
        if self.rng.random_bool(0.01) {
            self.push(t, ENG_TOPIC, partition, "{not json".into());
        }
    }

    /// The next `impressions` impressions' worth of messages, in delivery order; at the end
    /// (`drain`), everything still held.
    pub fn batch(&mut self, impressions: usize, drain: bool) -> Vec<(&'static str, i32, String)> {
        for _ in 0..impressions {
            self.generate_impression();
        }
        // Every message generated later is due at or after the next impression's timestamp.
        let horizon = if drain { i64::MAX } else { self.t0 + self.next as i64 * SPACING_MS };
        let mut out = Vec::new();
        while self.due.peek().is_some_and(|Reverse(m)| m.0 < horizon) {
            let Reverse((_, _, topic, partition, payload)) = self.due.pop().unwrap();
            self.produced[usize::from(topic == ENG_TOPIC)] += 1;
            out.push((topic, partition, payload));
        }
        out
    }
}

pub fn consumed_total(m: &BTreeMap<String, f64>) -> f64 {
    [IMP_TOPIC, ENG_TOPIC]
        .iter()
        .filter_map(|t| m.get(&series("rankpulse_events_consumed_total", &[("topic", t)])))
        .sum()
}

/// Whether one exposition (or several summed) shows the whole stream consumed and final.
pub fn finished(m: &BTreeMap<String, f64>, produced: [usize; 2], impressions: usize) -> bool {
    let total = |topic: &str| m.get(&series("rankpulse_events_consumed_total", &[("topic", topic)])).copied();
    let finalized: f64 = ["control", "treatment"]
        .iter()
        .filter_map(|v| m.get(&series("rankpulse_impressions_total", &[("experiment", "x"), ("variant", v)])))
        .sum();
    total(IMP_TOPIC) == Some(produced[0] as f64)
        && total(ENG_TOPIC) == Some(produced[1] as f64)
        && finalized == impressions as f64
        && m.get("rankpulse_pending_impressions") == Some(&0.0)
}
