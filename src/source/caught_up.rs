//! Idleness, confirmed: the consumer thread asks the brokers, for every input that has been
//! silent a while, whether it has anything unread, and tells the engine which have not
//! (`engine::watermark` lets only those go idle).
//!
//! Silence is not idleness. A consumer that cannot fetch (every broker down, a partition whose
//! leader is gone, a connection backing off after an outage) delivers nothing either, and if the
//! wall clock moved the watermark meanwhile, the backlog it finds afterwards would be counted
//! late. An input is caught up when its next offset (the consumer's position, or where the group
//! resumes it) is at its high watermark, as the brokers answer now; an input whose brokers do
//! not answer is not.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

use crate::engine::SharedEngine;
use crate::event::EventKind;

use super::rebalance::SourceContext;

/// The longest a round waits for the brokers' answer (the inputs it would confirm stay
/// unconfirmed): with at most two requests a round, this bounds how long the consumer thread
/// stops consuming for one.
const QUERY_TIMEOUT: Duration = Duration::from_secs(1);
/// Rounds are at most this far apart, whatever `join.idle_timeout`.
const LONGEST_INTERVAL: Duration = Duration::from_secs(5);
/// ... and at least this far.
const SHORTEST_INTERVAL: Duration = Duration::from_millis(100);

/// The consumer thread's confirmation rounds.
#[derive(Debug)]
pub(super) struct CaughtUp {
    /// How often silent inputs are asked about, and how long an input must have been silent to
    /// be: a quarter of `join.idle_timeout`, so a silent input's confirmations are always fresh.
    interval: Duration,
    /// `join.idle_timeout`: an unconfirmed input silent this long holds its watermark, which
    /// is reported.
    idle_timeout: Duration,
    /// When the next round is due.
    next_round: Instant,
    /// Whether a partition without a committed offset is read from its start
    /// (`auto.offset.reset`): where the consumer resumes an input with no position yet.
    from_earliest: bool,
    /// Inputs (topic index, partition) silent past the idle timeout and unconfirmed, with the
    /// rounds they have been so in a row: reported at the second (a message that reached the
    /// brokers just before a round is not worth a warning), and once, until confirmed or
    /// delivering again.
    held: BTreeMap<(usize, i32), u32>,
}

impl CaughtUp {
    /// Rounds for `engine`, from `now`; tells the engine that its inputs are idle only while
    /// confirmed, and how long a confirmation counts.
    pub fn start(engine: &SharedEngine, from_earliest: bool, now: Instant) -> Self {
        let mut engine = engine.lock();
        let idle_timeout = engine.idle_timeout();
        let interval = (idle_timeout / 4).clamp(SHORTEST_INTERVAL, LONGEST_INTERVAL);
        // A confirmation counts until a few rounds should have renewed it: rounds that stop
        // coming (the consumer thread held up) stop vouching. A round that cannot confirm an
        // input is what breaks its idleness, however long rounds take on a busy machine.
        engine.require_caught_up_confirmation(idle_timeout.max(4 * interval + QUERY_TIMEOUT));
        CaughtUp { interval, idle_timeout, next_round: now, from_earliest, held: BTreeMap::new() }
    }

    /// Runs a round if one is due: asks about every input silent for a round's interval.
    pub fn round_if_due(
        &mut self,
        consumer: &BaseConsumer<SourceContext>,
        engine: &SharedEngine,
        context: &SourceContext,
        topics: &[String; 2],
        now: Instant,
    ) {
        if now < self.next_round {
            return;
        }
        self.next_round = now + self.interval;
        let silent = engine.lock().silent_inputs(now, self.interval);
        if silent.is_empty() {
            self.held.clear();
            return;
        }
        // What each silent input would read next: taken before the brokers are asked, so that
        // a message consumed meanwhile makes the answer "unread", never the other way round.
        // The client's position is past the transaction markers it read (which the engine never
        // sees: a transactional producer's partition ends with one); the engine's is known
        // before the client has read anything since the assignment.
        let fetched = consumer.position().ok();
        let questions: Vec<Question> = {
            let state = context.state();
            silent
                .iter()
                .map(|&(partition, kind)| {
                    let consumed = state.tasks.get(&partition).is_some_and(|t| t.inputs[kind.index()]);
                    let in_state = state.positions.of(partition).and_then(|p| p[kind.index()]);
                    let by_client = fetched
                        .as_ref()
                        .and_then(|tpl| tpl.find_partition(&topics[kind.index()], partition))
                        .and_then(|e| match e.offset() {
                            Offset::Offset(offset) => Some(offset),
                            _ => None,
                        });
                    Question { partition, kind, consumed, next: in_state.max(by_client) }
                })
                .collect()
        };
        drop(fetched);
        let answer = self.ask(consumer, topics, &questions);
        let not_confirmed: Vec<(i32, EventKind)> =
            silent.iter().copied().filter(|input| !answer.confirmed.contains(input)).collect();
        engine.lock().caught_up(&answer.confirmed, &not_confirmed, now);
        self.report(engine, now, &silent, &answer, topics);
    }

    /// Answers what the client already knows, and asks the brokers the rest in one request.
    ///
    /// The client keeps each partition's high watermark as of its last fetch: an input behind it
    /// certainly has messages unread (the watermark only grows), so a consumer working through
    /// a backlog, whose inputs fall silent while the client's queue holds other partitions'
    /// messages, costs no request. An input at or past it may be stale (the brokers unreachable
    /// since that fetch): only the brokers' answer now confirms it.
    fn ask<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        topics: &[String; 2],
        questions: &[Question],
    ) -> Answer {
        let mut answer = Answer::default();
        // Where the group resumes the inputs nothing was consumed of yet, in one request.
        let mut unpositioned = TopicPartitionList::new();
        for q in questions.iter().filter(|q| q.consumed && q.next.is_none()) {
            unpositioned.add_partition(&topics[q.kind.index()], q.partition);
        }
        let committed = match unpositioned.count() {
            0 => Some(TopicPartitionList::new()),
            _ => consumer.committed_offsets(unpositioned, QUERY_TIMEOUT).map_err(|e| answer.failed(e)).ok(),
        };
        let mut asked = Vec::new();
        let (mut highs, mut lows) = (TopicPartitionList::new(), TopicPartitionList::new());
        for q in questions {
            // An input the task was not assigned (its topic has fewer partitions) has nothing to read.
            if !q.consumed {
                answer.confirmed.push((q.partition, q.kind));
                continue;
            }
            let topic = &topics[q.kind.index()];
            let next = match (q.next, &committed) {
                (Some(next), _) => Next::At(next),
                (None, Some(committed)) => match committed.find_partition(topic, q.partition).map(|e| e.offset()) {
                    Some(Offset::Offset(offset)) => Next::At(offset),
                    _ if self.from_earliest => Next::LowWatermark,
                    _ => Next::HighWatermark,
                },
                (None, None) => continue,
            };
            if let (Next::At(next), Some(high)) = (next, cached_high_watermark(consumer, topic, q.partition)) {
                if high > next {
                    answer.unread.push((q.partition, q.kind, high - next));
                    continue;
                }
            }
            // ListOffsets answers "latest" (-1) with the high watermark (the last stable offset
            // under read_committed, as a fetch would stop at) and "earliest" (-2) with the low.
            let _ = highs.add_partition_offset(topic, q.partition, Offset::End);
            if next == Next::LowWatermark {
                let _ = lows.add_partition_offset(topic, q.partition, Offset::Beginning);
            }
            asked.push((q, next));
        }
        if asked.is_empty() {
            return answer;
        }
        let query = |list: TopicPartitionList| match list.count() {
            0 => Ok(list),
            _ => consumer.offsets_for_times(list, QUERY_TIMEOUT),
        };
        let (highs, lows) = match query(highs).and_then(|highs| Ok((highs, query(lows)?))) {
            Ok(answers) => answers,
            Err(e) => {
                answer.failed(e);
                return answer;
            }
        };
        let offset_in = |list: &TopicPartitionList, topic: &str, partition: i32| {
            let element = list.find_partition(topic, partition)?;
            match (element.error(), element.offset()) {
                (Ok(()), Offset::Offset(offset)) => Some(offset),
                _ => None,
            }
        };
        for (q, next) in asked {
            let topic = &topics[q.kind.index()];
            // A partition the brokers did not answer for stays unconfirmed.
            let Some(high) = offset_in(&highs, topic, q.partition) else { continue };
            let next = match next {
                Next::At(next) => next,
                Next::HighWatermark => high,
                Next::LowWatermark => match offset_in(&lows, topic, q.partition) {
                    Some(low) => low,
                    None => continue,
                },
            };
            if next >= high {
                answer.confirmed.push((q.partition, q.kind));
            } else {
                answer.unread.push((q.partition, q.kind, high - next));
            }
        }
        answer
    }

    /// Says once, per input, that a silent input past the idle timeout holds its watermark
    /// because the brokers did not confirm it caught up; forgets inputs that were confirmed or
    /// delivered since.
    fn report(
        &mut self,
        engine: &SharedEngine,
        now: Instant,
        silent: &[(i32, EventKind)],
        answer: &Answer,
        topics: &[String; 2],
    ) {
        let confirmed: BTreeSet<(usize, i32)> = answer.confirmed.iter().map(|&(p, k)| (k.index(), p)).collect();
        let silent_set: BTreeSet<(usize, i32)> = silent.iter().map(|&(p, k)| (k.index(), p)).collect();
        self.held.retain(|input, _| silent_set.contains(input) && !confirmed.contains(input));
        let past_timeout = engine.lock().silent_inputs(now, self.idle_timeout);
        let mut newly_held = Vec::new();
        for input in past_timeout.iter().map(|&(p, k)| (k.index(), p)).filter(|i| !confirmed.contains(i)) {
            let rounds = self.held.entry(input).or_insert(0);
            *rounds = rounds.saturating_add(1);
            if *rounds == 2 {
                newly_held.push(input);
            }
        }
        let Some(&(kind, partition)) = newly_held.first() else { return };
        let topic = topics[kind].as_str();
        let idle_timeout_s = self.idle_timeout.as_secs_f64();
        let reason = match (&answer.error, answer.unread.iter().find(|u| u.0 == partition && u.1.index() == kind)) {
            (_, Some(&(_, _, unread))) => format!("{unread} messages wait that the consumer has not fetched"),
            (Some(error), None) => format!("the brokers did not answer: {error}"),
            (None, None) => "not asked yet".to_string(),
        };
        tracing::warn!(
            topic,
            partition,
            inputs = newly_held.len(),
            idle_timeout_s,
            "an input delivered nothing for join.idle_timeout, but is not idle: {reason}. Its watermark is held \
             (windows stay open) until it delivers or the brokers confirm it has nothing unread, rather than let the \
             wall clock pass what it has not delivered yet"
        );
    }
}

/// One silent input, as the round asks about it.
#[derive(Debug, Clone, Copy)]
struct Question {
    partition: i32,
    kind: EventKind,
    /// Whether the task was assigned this input (its topic has the partition).
    consumed: bool,
    /// The next offset the input is read from (the engine's position or the client's, the
    /// further); `None` before either read anything.
    next: Option<i64>,
}

/// Where a silent input is read from next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// This offset: the consumer's position or the group's committed offset.
    At(i64),
    /// Nothing consumed or committed: `auto.offset.reset` starts it at the low watermark ...
    LowWatermark,
    /// ... or at the high one.
    HighWatermark,
}

/// The partition's high watermark as of the client's last fetch from it, if it fetched one.
///
/// rust-rdkafka exposes only the query that asks the brokers; librdkafka's cached value
/// (`rd_kafka_get_watermark_offsets`, which takes the partition's lock and sends nothing) is
/// what lets a round skip the inputs a backlog keeps busy.
fn cached_high_watermark<C: ConsumerContext>(consumer: &BaseConsumer<C>, topic: &str, partition: i32) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is live for as long as `consumer` is borrowed; the topic is a
    // NUL-terminated string that outlives the call; `low` and `high` are valid for writes.
    let error = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    // Before the first fetch the value is librdkafka's "invalid" offset, below zero.
    (error == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

/// What a round learned.
#[derive(Debug, Default)]
struct Answer {
    /// Inputs with nothing unread.
    confirmed: Vec<(i32, EventKind)>,
    /// Inputs with messages not yet fetched, and how many.
    unread: Vec<(i32, EventKind, i64)>,
    /// Why the round stopped early, if it did.
    error: Option<String>,
}

impl Answer {
    fn failed(&mut self, error: rdkafka::error::KafkaError) {
        self.error.get_or_insert_with(|| error.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::ClientConfig;

    fn rounds() -> CaughtUp {
        let interval = Duration::from_millis(250);
        CaughtUp {
            interval,
            idle_timeout: 4 * interval,
            next_round: Instant::now(),
            from_earliest: true,
            held: BTreeMap::new(),
        }
    }

    fn question(kind: EventKind, next: i64) -> Question {
        Question { partition: 0, kind, consumed: true, next: Some(next) }
    }

    /// An input behind the client's cached high watermark is answered "unread" with every
    /// broker down (so without a request); an input at it is asked, unconfirmed while the
    /// brokers are down and confirmed once they answer.
    #[test]
    fn a_backlogged_input_is_answered_from_the_client_and_a_caught_up_one_by_the_brokers() {
        let cluster = MockCluster::new(1).unwrap();
        let topics = ["imp".to_string(), "eng".to_string()];
        for topic in &topics {
            cluster.create_topic(topic, 1, 1).unwrap();
        }
        let brokers = cluster.bootstrap_servers();
        let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &brokers).create().unwrap();
        for _ in 0..5 {
            producer.send(BaseRecord::<(), str>::to("imp").payload("x")).unwrap();
        }
        producer.flush(Duration::from_secs(10)).unwrap();
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("group.id", "caught-up")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut assignment = TopicPartitionList::new();
        for topic in &topics {
            assignment.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
        }
        consumer.assign(&assignment).unwrap();
        drop(assignment);
        // Two of the five read: the fetch that brought them told the client the watermark is 5.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut read = 0;
        while read < 2 {
            assert!(Instant::now() < deadline, "nothing consumed");
            if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
                read += 1;
            }
        }
        let (impressions, engagements) = (question(EventKind::Impression, 2), question(EventKind::Engagement, 0));

        cluster.broker_down(1).unwrap();
        let answer = rounds().ask(&consumer, &topics, &[impressions, engagements]);
        assert_eq!(answer.unread, vec![(0, EventKind::Impression, 3)]);
        assert!(answer.confirmed.is_empty(), "{answer:?}");
        assert!(answer.error.is_some(), "the brokers were down, yet an input was confirmed: {answer:?}");

        cluster.broker_up(1).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let answer = loop {
            let answer = rounds().ask(&consumer, &topics, &[impressions, engagements]);
            if answer.error.is_none() || Instant::now() > deadline {
                break answer;
            }
        };
        assert_eq!(answer.confirmed, vec![(0, EventKind::Engagement)], "{answer:?}");
        assert_eq!(answer.unread, vec![(0, EventKind::Impression, 3)]);

        // At the watermark: asked, and confirmed.
        let answer = rounds().ask(&consumer, &topics, &[question(EventKind::Impression, 5)]);
        assert_eq!(answer.confirmed, vec![(0, EventKind::Impression)], "{answer:?}");
    }
}
