//! The group coordinator's own delay, measured with plain rdkafka consumers (the same assignor
//! and session timeout as the replicas) on the same cluster, so that a replica's pause can be
//! told apart from the coordinator's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::ClientContext;

use super::common::{wait_for, IMP_TOPIC};
use super::{PARTITIONS, RESTART_DELAY, SESSION_MS};

/// When a plain consumer gained or lost partitions: (when, consumer, owned from then on, which).
type OwnershipLog = Arc<Mutex<Vec<(Instant, usize, bool, Vec<i32>)>>>;

/// Records a plain consumer's assignments and revocations as librdkafka applies them.
struct Recorder {
    id: usize,
    log: OwnershipLog,
}

impl ClientContext for Recorder {}

impl ConsumerContext for Recorder {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let partitions = tpl.elements().iter().map(|e| e.partition()).collect();
            self.log.lock().unwrap().push((Instant::now(), self.id, false, partitions));
        }
    }
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let partitions = tpl.elements().iter().map(|e| e.partition()).collect();
            self.log.lock().unwrap().push((Instant::now(), self.id, true, partitions));
        }
    }
}

/// A plain consumer polling on a thread until `stop`; closing it (when the thread ends) sends
/// a LeaveGroup, as rankpulse's shutdown does.
fn plain_consumer(brokers: &str, id: usize, log: OwnershipLog, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let consumer: BaseConsumer<Recorder> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "plain")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", SESSION_MS.to_string())
        .set("heartbeat.interval.ms", "500")
        .set("auto.offset.reset", "earliest")
        .create_with_context(Recorder { id, log })
        .unwrap();
    consumer.subscribe(&[IMP_TOPIC]).unwrap();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let _ = consumer.poll(Duration::from_millis(100));
        }
        consumer.unsubscribe();
        // Let the unsubscribe's revoke and LeaveGroup go out before the client is destroyed.
        for _ in 0..5 {
            let _ = consumer.poll(Duration::from_millis(100));
        }
    })
}

/// Owners of each partition over time, from an ownership log: per partition, the intervals
/// (from, to) during which no consumer owned it, after `since`.
fn unowned_intervals(
    log: &[(Instant, usize, bool, Vec<i32>)],
    since: Instant,
    until: Instant,
) -> BTreeMap<i32, Duration> {
    let mut owners: BTreeMap<i32, BTreeSet<usize>> = BTreeMap::new();
    let mut unowned_since: BTreeMap<i32, Instant> = BTreeMap::new();
    let mut longest: BTreeMap<i32, Duration> = BTreeMap::new();
    for (at, id, owned, partitions) in log {
        for p in partitions {
            let set = owners.entry(*p).or_default();
            if *owned {
                set.insert(*id);
                if let Some(from) = unowned_since.remove(p) {
                    if *at >= since {
                        let gap = *at - from.max(since);
                        let e = longest.entry(*p).or_default();
                        *e = (*e).max(gap);
                    }
                }
            } else {
                set.remove(id);
                if set.is_empty() {
                    unowned_since.insert(*p, *at);
                }
            }
        }
    }
    for (p, from) in unowned_since {
        let e = longest.entry(p).or_default();
        *e = (*e).max(until.saturating_duration_since(from.max(since)));
    }
    longest
}

/// How long the coordinator alone leaves a partition unowned in one step of a rolling restart:
/// three plain consumers; one leaves cleanly and its replacement starts as a restarted
/// replica's process would, [`RESTART_DELAY`] later; measured until every member holds its
/// share. The longest time any partition had no owner.
pub fn coordinator_delay(brokers: &str) -> Duration {
    let log: OwnershipLog = Arc::default();
    let owned_by = |log: &OwnershipLog| {
        let mut owners: BTreeMap<i32, usize> = BTreeMap::new();
        for (_, id, owned, partitions) in log.lock().unwrap().iter() {
            for p in partitions {
                if *owned {
                    owners.insert(*p, *id);
                } else if owners.get(p) == Some(id) {
                    owners.remove(p);
                }
            }
        }
        owners
    };
    let settled = |log: &OwnershipLog, members: &[usize]| {
        let owners = owned_by(log);
        owners.len() == PARTITIONS as usize
            && members
                .iter()
                .all(|m| owners.values().filter(|o| *o == m).count() == PARTITIONS as usize / members.len())
    };
    let mut stops: Vec<Arc<AtomicBool>> = Vec::new();
    let mut threads = Vec::new();
    for id in 0..3 {
        let stop = Arc::new(AtomicBool::new(false));
        threads.push(plain_consumer(brokers, id, log.clone(), stop.clone()));
        stops.push(stop);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    wait_for(deadline, Duration::from_millis(50), "plain consumers never settled", || {
        settled(&log, &[0, 1, 2]).then_some(())
    });
    let left = Instant::now();
    stops[0].store(true, Ordering::Relaxed);
    threads.remove(0).join().unwrap();
    std::thread::sleep(RESTART_DELAY);
    let stop = Arc::new(AtomicBool::new(false));
    threads.push(plain_consumer(brokers, 3, log.clone(), stop.clone()));
    stops.push(stop);
    wait_for(deadline, Duration::from_millis(50), "the new consumer never got its share", || {
        settled(&log, &[1, 2, 3]).then_some(())
    });
    let done = Instant::now();
    for stop in &stops {
        stop.store(true, Ordering::Relaxed);
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let log = log.lock().unwrap().clone();
    unowned_intervals(&log, left, done).into_values().max().unwrap_or_default()
}
