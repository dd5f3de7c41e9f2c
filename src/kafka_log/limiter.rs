//! The pure part of the Kafka client logs: which repeated conditions deserve a line, and when.
//!
//! No I/O and no clock of its own (every call is given `now`), so every rule is unit-tested.

use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// What a message says about the cluster, which decides how it is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// No broker is reachable (librdkafka's `AllBrokersDown`): starts or continues an outage.
    Outage,
    /// One broker's connection failed (transport failure, refused, name resolution): part of
    /// an outage while one lasts, a condition of its own otherwise (one broker of three down).
    Connectivity,
    /// A request that timed out on a broker connection (librdkafka's `REQTMOUT`): while an
    /// outage lasts, and for a period after it ended, the outage's own (a request queued while
    /// no broker answered, timing out as the connections come back), so counted into it;
    /// otherwise a condition of its own, as [`Class::Other`].
    RequestTimeout,
    /// Anything else: limited per condition.
    Other,
}

/// What to do with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first of its condition: log it as is (for an outage, the line that it started).
    Emit,
    /// A repeat within the period: counted, not logged.
    Suppress,
    /// A repeat once the period has passed since the condition's last line: log a summary.
    Summary {
        /// The summary is of the outage ("still no broker reachable"), not of one condition.
        outage: bool,
        /// Since the condition's first line.
        lasting: Duration,
        /// Messages suppressed since its last line.
        suppressed: u64,
    },
}

/// An outage is over: the one line that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Since the outage's first line.
    pub lasted: Duration,
    /// Messages suppressed since its last line.
    pub suppressed: u64,
}

/// One condition's reporting state.
#[derive(Debug, Clone, Copy)]
struct Episode {
    /// When its first line was logged.
    since: Instant,
    /// When its last line (first or summary) was logged: the next summary is due a period later.
    reported: Instant,
    /// Its latest message: a condition quiet for a whole period is over.
    last_seen: Instant,
    /// Messages suppressed since its last line.
    suppressed: u64,
}

impl Episode {
    fn new(now: Instant) -> Self {
        Episode { since: now, reported: now, last_seen: now, suppressed: 0 }
    }

    /// One more message of this condition.
    fn repeat(&mut self, now: Instant, period: Duration, outage: bool) -> Verdict {
        self.last_seen = now;
        if now.saturating_duration_since(self.reported) < period {
            self.suppressed += 1;
            return Verdict::Suppress;
        }
        // This message is in the summary: the count includes it.
        let verdict = Verdict::Summary { outage, lasting: now - self.since, suppressed: self.suppressed + 1 };
        self.reported = now;
        self.suppressed = 0;
        verdict
    }

    fn quiet_for(&self, now: Instant, period: Duration) -> bool {
        now.saturating_duration_since(self.last_seen) >= period
    }
}

/// At most this many distinct conditions are tracked at once (beyond it the quietest is
/// forgotten, and logs again if it recurs): bounds memory whatever librdkafka says.
const MAX_CONDITIONS: usize = 64;

/// Rate limiting and de-duplication of one client's log lines: the first message of a
/// condition passes, repeats are counted, a summary follows every `period` while it lasts, and
/// an outage ends with one recovery line.
#[derive(Debug)]
pub struct Limiter {
    /// How often a lasting condition gets a summary line.
    period: Duration,
    /// The current outage (no broker reachable), until a recovery signal or a quiet period.
    outage: Option<Episode>,
    /// Other conditions, by [`condition_key`], until quiet for a period.
    conditions: Vec<(u64, Episode)>,
    /// When the last outage was reported over: request timeouts within a period of it are its
    /// aftermath, not news.
    recovered_at: Option<Instant>,
}

impl Limiter {
    pub fn new(period: Duration) -> Self {
        Limiter { period, outage: None, conditions: Vec::new(), recovered_at: None }
    }

    /// Whether an outage is being reported (a recovery signal then has something to end).
    pub fn in_outage(&self) -> bool {
        self.outage.is_some()
    }

    /// One message of `class` whose condition is `key` ([`condition_key`] of its text).
    pub fn observe(&mut self, class: Class, key: u64, now: Instant) -> Verdict {
        let period = self.period;
        // An outage nothing has mentioned for a whole period ended unnoticed (an idle client
        // sends nothing that could prove recovery): the next one is news, not a continuation.
        if self.outage.is_some_and(|o| o.quiet_for(now, period)) {
            self.outage = None;
        }
        self.conditions.retain(|(_, c)| !c.quiet_for(now, period));
        let aftermath = self.recovered_at.is_some_and(|at| now.saturating_duration_since(at) < period);
        match (class, self.outage.as_mut()) {
            (Class::Outage | Class::Connectivity | Class::RequestTimeout, Some(outage)) => {
                outage.repeat(now, period, true)
            }
            (Class::Outage, None) => {
                self.outage = Some(Episode::new(now));
                Verdict::Emit
            }
            // The recovery line has told the outage's end; what it left queued timing out is
            // not a new condition.
            (Class::RequestTimeout, None) if aftermath => Verdict::Suppress,
            (Class::Connectivity | Class::RequestTimeout | Class::Other, _) => {
                if let Some((_, condition)) = self.conditions.iter_mut().find(|(k, _)| *k == key) {
                    return condition.repeat(now, period, false);
                }
                if self.conditions.len() == MAX_CONDITIONS {
                    let quietest = (0..self.conditions.len()).min_by_key(|&i| self.conditions[i].1.last_seen);
                    self.conditions.swap_remove(quietest.expect("the list is full"));
                }
                self.conditions.push((key, Episode::new(now)));
                Verdict::Emit
            }
        }
    }

    /// A signal that the cluster answers again (a message consumed or delivered): ends the
    /// outage, once. Connection conditions end with it, so a later failure is logged again.
    pub fn recovered(&mut self, now: Instant) -> Option<Recovery> {
        let outage = self.outage.take()?;
        self.conditions.clear();
        self.recovered_at = Some(now);
        Some(Recovery { lasted: now.saturating_duration_since(outage.since), suppressed: outage.suppressed })
    }
}

/// The words of a message that name its condition: without librdkafka's thread prefix
/// (`[thrd:...]: `) and the names before the text (`GroupCoordinator: 10.0.0.7:9092/2: `),
/// without its `(after 12ms in state UP, 3 identical error(s) suppressed)` suffix, and with
/// every word holding a digit (a broker address, a port, a count) as `#`.
pub fn condition_words(message: &str) -> impl Iterator<Item = &str> {
    let message = match message.strip_prefix("[thrd:").and_then(|rest| rest.split_once("]: ")) {
        Some((_, rest)) => rest,
        None => message,
    };
    let message = message.split(" (after ").next().unwrap_or(message);
    message.split_whitespace().skip_while(|word| word.ends_with(':')).map(|word| {
        if word.bytes().any(|b| b.is_ascii_digit()) {
            "#"
        } else {
            word
        }
    })
}

/// A condition's key: the hash of its [`condition_words`], so that the same failure on
/// another broker, or after another delay, is the same condition. No allocation.
pub fn condition_key(message: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for word in condition_words(message) {
        word.hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_secs(30);

    fn at(start: Instant, millis: u64) -> Instant {
        start + Duration::from_millis(millis)
    }

    #[test]
    fn the_varying_parts_of_a_message_do_not_change_its_condition() {
        let first = "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)";
        let again = "[thrd:kafka-2:9092/2]: kafka-2:9092/2: Connect to ipv4#10.0.0.7:9092 failed: Connection refused (after 1532ms in state CONNECT, 4 identical error(s) suppressed)";
        let words: Vec<&str> = condition_words(first).collect();
        assert_eq!(words, ["Connect", "to", "#", "failed:", "Connection", "refused"]);
        assert_eq!(condition_key(first), condition_key(again));
        let coordinator = "[thrd:GroupCoordinator]: GroupCoordinator: 127.0.0.1:41243: Connect to ipv4#127.0.0.1:41243 failed: Connection refused (after 0ms in state CONNECT)";
        assert_eq!(condition_key(first), condition_key(coordinator), "the same failure on the coordinator connection");
        let reason = "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)";
        assert_eq!(condition_key(first), condition_key(reason), "the error callback's reason, without a thread prefix");
        assert_eq!(condition_key("1/1 brokers are down"), condition_key("3/3 brokers are down"));
        assert_ne!(
            condition_key(first),
            condition_key("127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection timed out")
        );
    }

    #[test]
    fn the_first_occurrence_passes_and_repeats_are_suppressed_and_counted() {
        let start = Instant::now();
        let mut limiter = Limiter::new(PERIOD);
        let key = condition_key("Offset commit failed: Broker: Not coordinator");
        assert_eq!(limiter.observe(Class::Other, key, start), Verdict::Emit);
        for i in 1..=9u64 {
            assert_eq!(limiter.observe(Class::Other, key, at(start, i * 1000)), Verdict::Suppress);
        }
        // Another condition is news of its own.
        assert_eq!(
            limiter.observe(Class::Other, condition_key("Subscribed topic not available"), at(start, 9_500)),
            Verdict::Emit
        );
        // A period after the first line: a summary that counts this message too.
        assert_eq!(
            limiter.observe(Class::Other, key, at(start, 30_000)),
            Verdict::Summary { outage: false, lasting: Duration::from_secs(30), suppressed: 10 }
        );
        assert_eq!(limiter.observe(Class::Other, key, at(start, 31_000)), Verdict::Suppress);
        // Quiet for a whole period: the condition is over, a recurrence is news.
        assert_eq!(limiter.observe(Class::Other, key, at(start, 62_000)), Verdict::Emit);
    }

    #[test]
    fn an_outage_is_one_line_then_a_summary_per_period_then_one_recovery() {
        let start = Instant::now();
        let mut limiter = Limiter::new(PERIOD);
        let refused = condition_key("127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused");
        let down = condition_key("1/1 brokers are down");
        assert_eq!(limiter.recovered(start), None, "nothing to recover from");
        // The first broker's failure is news; another broker's same failure is not.
        assert_eq!(limiter.observe(Class::Connectivity, refused, start), Verdict::Emit);
        assert_eq!(limiter.observe(Class::Connectivity, refused, at(start, 50)), Verdict::Suppress);
        assert!(!limiter.in_outage());
        assert_eq!(limiter.observe(Class::Outage, down, at(start, 100)), Verdict::Emit);
        assert!(limiter.in_outage());
        // Every broker message of the outage is counted into it, whatever its condition.
        let mut lines = 0;
        for tenth in 2..=700u64 {
            let class = if tenth % 3 == 0 { Class::Connectivity } else { Class::Outage };
            match limiter.observe(class, down, at(start, tenth * 100)) {
                Verdict::Suppress => {}
                Verdict::Summary { outage: true, lasting, suppressed } => {
                    lines += 1;
                    assert_eq!(lasting, Duration::from_secs(30 * lines), "one summary per period");
                    assert_eq!(suppressed, 300);
                }
                other => panic!("{other:?} during the outage"),
            }
        }
        assert_eq!(lines, 2, "70 s of outage: two summaries");
        let recovery = limiter.recovered(at(start, 70_500)).expect("the outage ends");
        assert_eq!(recovery, Recovery { lasted: Duration::from_millis(70_400), suppressed: 99 });
        assert_eq!(limiter.recovered(at(start, 70_600)), None, "one recovery line");
        // After recovery a new failure is logged again.
        assert_eq!(limiter.observe(Class::Connectivity, refused, at(start, 71_000)), Verdict::Emit);
    }

    #[test]
    fn request_timeouts_are_the_outage_s_while_it_lasts_and_for_a_period_after() {
        let start = Instant::now();
        let mut limiter = Limiter::new(PERIOD);
        let timed_out = condition_key(
            "127.0.0.1:1/1: Timed out 0 in-flight, 0 retry-queued, 1 out-queue, 0 partially-sent requests",
        );
        let refused = condition_key("127.0.0.1:1/1: Connect to ipv4#127.0.0.1:1 failed: Connection refused");
        // Outside any outage, a request timeout is a condition of its own.
        assert_eq!(limiter.observe(Class::RequestTimeout, timed_out, start), Verdict::Emit);
        assert_eq!(limiter.observe(Class::Outage, 1, at(start, 40_000)), Verdict::Emit);
        assert_eq!(limiter.observe(Class::RequestTimeout, timed_out, at(start, 41_000)), Verdict::Suppress);
        assert!(limiter.recovered(at(start, 50_000)).is_some());
        // Requests the outage left queued, timing out after its recovery line: not news.
        assert_eq!(limiter.observe(Class::RequestTimeout, timed_out, at(start, 51_500)), Verdict::Suppress);
        assert_eq!(limiter.observe(Class::RequestTimeout, timed_out, at(start, 53_000)), Verdict::Suppress);
        // A connection failing again is, as is another outage.
        assert_eq!(limiter.observe(Class::Connectivity, refused, at(start, 54_000)), Verdict::Emit);
        // A period after the recovery, a request timeout is news again.
        assert_eq!(limiter.observe(Class::RequestTimeout, timed_out, at(start, 80_000)), Verdict::Emit);
        assert_eq!(limiter.observe(Class::Outage, 1, at(start, 81_000)), Verdict::Emit);
    }

    #[test]
    fn an_outage_quiet_for_a_period_ended_unnoticed_and_the_next_one_is_news() {
        let start = Instant::now();
        let mut limiter = Limiter::new(PERIOD);
        assert_eq!(limiter.observe(Class::Outage, 1, start), Verdict::Emit);
        assert_eq!(limiter.observe(Class::Outage, 1, at(start, 1_000)), Verdict::Suppress);
        assert_eq!(limiter.observe(Class::Outage, 1, at(start, 3_600_000)), Verdict::Emit);
    }

    #[test]
    fn the_tracked_conditions_are_bounded() {
        let start = Instant::now();
        let mut limiter = Limiter::new(PERIOD);
        for key in 0..1000 {
            assert_eq!(limiter.observe(Class::Other, key, at(start, key)), Verdict::Emit);
        }
        assert_eq!(limiter.conditions.len(), MAX_CONDITIONS);
        assert_eq!(limiter.observe(Class::Other, 999, at(start, 1_000)), Verdict::Suppress, "the latest are kept");
    }
}
