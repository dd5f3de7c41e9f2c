//! The Prometheus text exposition of the engine's state.
//!
//! Metric families are built at scrape time from the engine's accumulators by one custom
//! [`Collector`], instead of updating `prometheus` vectors per event: the hot path then touches
//! no label maps and no atomics, and a scrape costs one short lock.
//!
//! Every total (a `_sum`, `_count`, `_bucket` or `_total` series) is exported once per
//! partition the replica holds, with a `partition` label. A partition's totals move between
//! replicas with its state, so on a handover the old owner's series of that partition ends and
//! the new owner's starts at the carried value: to `rate()` and `increase()` that is one counter
//! changing hands, neither a reset nor a jump, and `sum without (instance, partition)` over all
//! replicas is what one replica owning every partition would export. What describes a replica
//! rather than the partitions' data (state sizes, watermarks, processing time, checkpoints, the
//! window and A/B gauges) has no `partition` label.

use prometheus::core::{Collector, Desc};
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary,
};
use prometheus::{Encoder, Registry, TextEncoder};

use crate::accumulate::{FoldedLabel, GroupStats, Groups};
use crate::engine::{Counters, Distribution, Engine, SharedEngine};
use crate::event::{EventKind, RejectReason};
use crate::experiments::{Span, CUMULATIVE};
use crate::ids::GroupId;
use crate::join::EngagementTally;
use crate::metrics::{recall_level_label, MetricKey, MetricKind};

/// The contract's name and help text for each per-impression metric kind.
fn summary_family(kind: MetricKind) -> Option<(&'static str, &'static str)> {
    Some(match kind {
        MetricKind::ReciprocalRank => ("rankpulse_reciprocal_rank", "Reciprocal rank of the first relevant result per finalized impression (trec_eval recip_rank); _sum/_count is MRR."),
        MetricKind::Hit => ("rankpulse_hit", "1 if a relevant result is in the top k (trec_eval success.k); _sum/_count is the hit rate."),
        MetricKind::Precision => ("rankpulse_precision", "Relevant results in the top k divided by k (trec_eval P.k)."),
        MetricKind::Recall => ("rankpulse_recall", "Relevant results in the top k divided by all relevant results (trec_eval recall.k)."),
        MetricKind::AveragePrecision => ("rankpulse_average_precision", "Average precision cut at k (trec_eval map_cut.k); _sum/_count is MAP@k."),
        MetricKind::Ndcg | MetricKind::NdcgExp => ("rankpulse_ndcg", "Normalized discounted cumulative gain at k (trec_eval ndcg_cut.k); gain linear (g) or exponential (2^g - 1)."),
        MetricKind::F1 => ("rankpulse_f1", "Harmonic mean of precision@k and recall@k (0 when both are 0)."),
        MetricKind::Err => (
            "rankpulse_err",
            "Expected reciprocal rank at k, stopping probability (2^g - 1) / 2^g_max with g_max the largest action gain.",
        ),
        MetricKind::RPrecision => ("rankpulse_r_precision", "Relevant results in the top |R| divided by |R| (trec_eval Rprec)."),
        MetricKind::InterpolatedPrecision => (
            "rankpulse_interpolated_precision",
            "Largest precision at any rank whose recall reaches the recall label (trec_eval iprec_at_recall): the 11-point curve.",
        ),
        MetricKind::Abandonment => return None,
    })
}

pub(super) fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_string());
    l.set_value(value.to_string());
    l
}

pub(super) fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(kind);
    f.set_metric(metrics);
    f
}

pub(super) fn counter(labels: Vec<LabelPair>, value: f64) -> Metric {
    let mut c = Counter::default();
    c.set_value(value);
    let mut m = Metric::from_label(labels);
    m.set_counter(c);
    m
}

pub(super) fn gauge(labels: Vec<LabelPair>, value: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(value);
    let mut m = Metric::from_label(labels);
    m.set_gauge(g);
    m
}

pub(super) fn summary(labels: Vec<LabelPair>, sum: f64, count: u64, quantiles: Vec<Quantile>) -> Metric {
    let mut s = Summary::default();
    s.set_sample_sum(sum);
    s.set_sample_count(count);
    s.set_quantile(quantiles);
    let mut m = Metric::from_label(labels);
    m.set_summary(s);
    m
}

/// The `partition` label of a per-partition total.
fn partition_label(partition: i32) -> LabelPair {
    label("partition", &partition.to_string())
}

/// `labels` followed by the partition's label.
pub(super) fn with_partition(mut labels: Vec<LabelPair>, partition: i32) -> Vec<LabelPair> {
    labels.push(partition_label(partition));
    labels
}

/// Upper bounds of the first-engagement delay buckets, in seconds: from a fast click to the
/// longest attribution windows anyone configures (the default window is 30 minutes).
const DELAY_BUCKETS_SECONDS: [f64; 14] =
    [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];

/// A distribution kept in milliseconds as a histogram in seconds, with the
/// [`DELAY_BUCKETS_SECONDS`] buckets (`+Inf` is added by the encoder).
///
/// A histogram, not a summary with quantiles: quantiles of one partition cannot be combined
/// with another's, whereas bucket counts add up across partitions and replicas like any other
/// counter, so `histogram_quantile` over `sum by (le)` is the fleet's quantile over any range
/// and carries on through a handover. Bucket counts come from the hdrhistogram (three
/// significant digits), so a delay within 0.1 % of a bound may land in the neighbouring bucket;
/// `_sum` and `_count` are exact.
fn delay_histogram(labels: Vec<LabelPair>, d: &Distribution) -> Metric {
    let buckets = DELAY_BUCKETS_SECONDS
        .iter()
        .map(|&upper| {
            let mut bucket = Bucket::default();
            bucket.set_upper_bound(upper);
            // Recorded values are at least 1 ms (see `Distribution::record`).
            bucket.set_cumulative_count(d.histogram.count_between(1, (upper * 1000.0) as u64));
            bucket
        })
        .collect();
    let mut h = Histogram::default();
    h.set_sample_sum(d.sum as f64 * 1e-3);
    h.set_sample_count(d.histogram.len());
    h.set_bucket(buckets);
    let mut m = Metric::from_label(labels);
    m.set_histogram(h);
    m
}

/// A latency distribution as a summary with quantiles, in seconds.
fn distribution_summary(d: &Distribution, seconds_per_unit: f64) -> Metric {
    let quantiles = [0.5, 0.9, 0.99, 0.999]
        .into_iter()
        .filter(|_| !d.histogram.is_empty())
        .map(|q| {
            let mut quantile = Quantile::default();
            quantile.set_quantile(q);
            quantile.set_value(d.histogram.value_at_quantile(q) as f64 * seconds_per_unit);
            quantile
        })
        .collect();
    summary(vec![], d.sum as f64 * seconds_per_unit, d.histogram.len(), quantiles)
}

/// Builds every metric family from the engine's current state.
///
/// Families without a single series are left out: the text format has no use for a bare
/// `# HELP`, and an absent family reads better in Prometheus than an empty one.
pub fn gather(engine: &Engine) -> Vec<MetricFamily> {
    let mut families = metric_summaries(engine);
    families.extend(impression_counters(engine));
    families.extend(event_counters(engine));
    families.extend(outcome_counters(engine));
    families.extend(routing_families(engine));
    families.extend(checkpoint_families(engine));
    families.extend(super::rebalance_families::families(engine));
    families.extend(label_families(engine));
    families.extend(state_gauges(engine));
    families.extend(window_gauges(engine));
    families.extend(ab_families(engine));
    families.extend(super::interleaving_families::counters(engine));
    families.extend(super::interleaving_families::gauges(engine));
    families.extend(super::judged_families::sums(engine));
    families.extend(super::judged_families::comparisons(engine));
    families.extend(super::judged_families::source(engine));
    families.extend(latency_summaries(engine));
    families.retain(|f| !f.get_metric().is_empty());
    families
}

/// The `experiment` and `variant` labels of a group, as its series carry them.
pub(super) fn group_labels(groups: &Groups, id: GroupId) -> Vec<LabelPair> {
    let (experiment, variant) = groups.name(id);
    vec![label("experiment", experiment), label("variant", variant)]
}

/// The labels that tell the series of one metric name apart within a group: the cutoff `k`
/// (or the `recall` level of the interpolated-precision curve) and the nDCG `gain`.
fn key_labels(key: &MetricKey) -> Vec<LabelPair> {
    let mut labels = Vec::new();
    match (key.kind, key.k) {
        (MetricKind::InterpolatedPrecision, Some(level)) => labels.push(label("recall", &recall_level_label(level))),
        (_, Some(k)) => labels.push(label("k", &k.to_string())),
        (_, None) => {}
    }
    match key.kind {
        MetricKind::Ndcg => labels.push(label("gain", "linear")),
        MetricKind::NdcgExp => labels.push(label("gain", "exponential")),
        _ => {}
    }
    labels
}

/// Per-impression metric values, cumulative: one summary family per metric name, one series per
/// group × k (× gain) × partition, with `_sum` and `_count` only (quantiles of per-impression
/// values that are mostly 0 or 1 would say nothing).
fn metric_summaries(engine: &Engine) -> Vec<MetricFamily> {
    let groups = engine.groups();
    let cumulative: Vec<(i32, GroupId, &GroupStats)> = engine
        .partition_totals()
        .flat_map(|(p, totals, _)| totals.accumulators.cumulative.iter().map(move |(g, s)| (p, g, s)))
        .collect();
    // Several metric keys (k = 1, 3, 10 ...) share one family; families keep the layout's order.
    let mut by_name: Vec<(&str, &str, Vec<Metric>)> = Vec::new();
    for (slot, key) in engine.layout().keys().iter().enumerate() {
        let Some((name, help)) = summary_family(key.kind) else {
            continue;
        };
        let metrics = match by_name.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, _, m)) => m,
            None => {
                by_name.push((name, help, Vec::new()));
                &mut by_name.last_mut().expect("just pushed").2
            }
        };
        for &(partition, group, stats) in &cumulative {
            let mut labels = group_labels(groups, group);
            labels.extend(key_labels(key));
            metrics.push(summary(with_partition(labels, partition), stats.sum(slot), stats.impressions, vec![]));
        }
    }
    by_name.into_iter().map(|(name, help, metrics)| family(name, help, MetricType::SUMMARY, metrics)).collect()
}

/// Finalized and engaged impressions per group and partition, cumulative.
fn impression_counters(engine: &Engine) -> Vec<MetricFamily> {
    let groups = engine.groups();
    let (mut impressions, mut engaged) = (Vec::new(), Vec::new());
    for (partition, totals, _) in engine.partition_totals() {
        for (group, stats) in totals.accumulators.cumulative.iter() {
            let labels = with_partition(group_labels(groups, group), partition);
            impressions.push(counter(labels.clone(), stats.impressions as f64));
            engaged.push(counter(labels, stats.engaged as f64));
        }
    }
    vec![
        family("rankpulse_impressions_total", "Finalized impressions.", MetricType::COUNTER, impressions),
        family(
            "rankpulse_impressions_engaged_total",
            "Finalized impressions with at least one relevant result (1 - engaged/total is the abandonment rate).",
            MetricType::COUNTER,
            engaged,
        ),
    ]
}

/// Messages consumed per topic and partition, and rejected per topic, reason and partition
/// (every reason, also at 0, so that `rate()` works from the first reject on).
///
/// Messages of no partition (a negative partition number, which only a replay input can carry)
/// are counted in series without a `partition` label, and only once there are any: they belong
/// to this engine and never move.
fn event_counters(engine: &Engine) -> Vec<MetricFamily> {
    let (mut consumed, mut rejected) = (Vec::new(), Vec::new());
    let mut add = |counters: &Counters, partition: Option<i32>| {
        let labelled = |labels: Vec<LabelPair>| match partition {
            Some(p) => with_partition(labels, p),
            None => labels,
        };
        for kind in EventKind::ALL {
            let topic = label("topic", engine.topic(kind));
            consumed.push(counter(labelled(vec![topic.clone()]), counters.consumed[kind.index()] as f64));
            for reason in RejectReason::ALL {
                rejected.push(counter(
                    labelled(vec![topic.clone(), label("reason", reason.label())]),
                    counters.rejected[kind.index()][reason.index()] as f64,
                ));
            }
        }
    };
    for (partition, totals, _) in engine.partition_totals() {
        add(&totals.counters, Some(partition));
    }
    let unowned = engine.unowned_counters();
    if unowned.consumed.iter().any(|&n| n > 0) {
        add(unowned, None);
    }
    // The repartition stage's raw topics: without a `partition` label, since these counts are
    // this process's (the stage's partitions are not the join's, and its counts do not move on
    // a handover).
    let routing = engine.routing();
    if let Some(decision) = routing.decision().filter(|d| d.active) {
        let counts = routing.counts();
        for kind in EventKind::ALL {
            let topic = label("topic", &decision.raw_topics[kind.index()]);
            consumed.push(counter(vec![topic.clone()], counts.stage_consumed[kind.index()] as f64));
            for reason in RejectReason::ALL {
                let value = counts.stage_rejected[kind.index()][reason.index()] as f64;
                rejected.push(counter(vec![topic.clone(), label("reason", reason.label())], value));
            }
        }
    }
    vec![
        family("rankpulse_events_consumed_total", "Messages consumed, valid or not.", MetricType::COUNTER, consumed),
        family("rankpulse_events_rejected_total", "Messages rejected, by reason.", MetricType::COUNTER, rejected),
    ]
}

/// Whether events reach their impression's partition: the repartition decision and stage, and
/// the key check on the join's input.
fn routing_families(engine: &Engine) -> Vec<MetricFamily> {
    let routing = engine.routing();
    let counts = routing.counts();
    let mut families = Vec::new();
    if let Some(decision) = routing.decision() {
        let active = gauge(vec![label("reason", decision.reason.label())], if decision.active { 1.0 } else { 0.0 });
        families.push(family(
            "rankpulse_repartition_active",
            "1 when the inputs are re-keyed by query id through the internal repartition topics; reason says why (configured, partition_counts, keys) or why not (co_partitioned, disabled).",
            MetricType::GAUGE,
            vec![active],
        ));
        if decision.active {
            let forwarded = EventKind::ALL
                .iter()
                .map(|k| {
                    let topic = label("topic", &decision.raw_topics[k.index()]);
                    counter(vec![topic], counts.stage_forwarded[k.index()] as f64)
                })
                .collect();
            families.push(family(
                "rankpulse_repartition_forwarded_total",
                "Events of this input topic re-keyed by query id and acknowledged on its repartition topic (a message re-read after a crash is counted again).",
                MetricType::COUNTER,
                forwarded,
            ));
        }
    }
    let (mut checked, mut mismatched) = (Vec::new(), Vec::new());
    for kind in EventKind::ALL {
        let topic = label("topic", engine.topic(kind));
        checked.push(counter(vec![topic.clone()], counts.keys_checked[kind.index()] as f64));
        mismatched.push(counter(vec![topic], counts.keys_mismatched[kind.index()] as f64));
    }
    families.push(family(
        "rankpulse_input_keys_checked_total",
        "Valid messages the join consumed with a Kafka key, whose key was compared with their query_id.",
        MetricType::COUNTER,
        checked,
    ));
    families.push(family(
        "rankpulse_input_key_mismatches_total",
        "Valid messages the join consumed whose Kafka key is not their query_id: the topic is not keyed by query id, so engagements miss their impression's partition (set repartition.mode).",
        MetricType::COUNTER,
        mismatched,
    ));
    families
}

/// The outcome counters of one partition, in the order of [`OUTCOME_COUNTERS`].
fn outcome_values(totals: &crate::engine::Totals, tally: &EngagementTally) -> [u64; 11] {
    let counters = &totals.counters;
    [
        tally.duplicate,
        tally.evicted,
        counters.impressions_evicted,
        counters.dedup_keys_evicted,
        tally.late,
        tally.orphaned,
        tally.attributed,
        counters.impressions_duplicate,
        counters.impressions_late,
        counters.impressions_without_unit,
        totals.accumulators.window_late_impressions,
    ]
}

/// Name and help of each per-partition outcome counter without labels of its own.
const OUTCOME_COUNTERS: [(&str, &str); 11] = [
    ("rankpulse_engagements_duplicate_total", "Engagements seen before (same event_id, or same query, document, action and timestamp); counted once, then ignored."),
    ("rankpulse_engagements_evicted_total", "Held engagements dropped because join.max_held_engagements was reached."),
    ("rankpulse_impressions_evicted_total", "Impressions finalized before their attribution window closed because join.max_pending_impressions was reached."),
    ("rankpulse_dedup_keys_evicted_total", "De-duplication keys forgotten early because join.max_dedup_keys was reached."),
    ("rankpulse_engagements_late_total", "Engagements that arrived after the watermark passed them with no open impression (their impression was final or never came in time); dropped."),
    ("rankpulse_engagements_orphaned_total", "Engagements held for an impression that did not arrive before the watermark passed them; dropped."),
    ("rankpulse_engagements_attributed_total", "Engagements attributed to a shown result of an open impression."),
    ("rankpulse_impressions_duplicate_total", "Impressions whose query_id was already open; the first one counts."),
    ("rankpulse_impressions_late_total", "Impressions that arrived after the watermark passed the end of their attribution window; dropped."),
    ("rankpulse_ab_impressions_without_unit_total", "Impressions without the field ab.unit names (client_id or session_id); each is its own cluster in the A/B statistics."),
    ("rankpulse_window_late_impressions_total", "Impressions finalized after their event-time window had closed: in the cumulative series, not in the window."),
];

/// What became of valid events in the join, per partition: duplicates, late and orphaned
/// arrivals, evictions by the state limits, attributions and the reasons an engagement changed
/// nothing.
fn outcome_counters(engine: &Engine) -> Vec<MetricFamily> {
    let mut plain: [Vec<Metric>; OUTCOME_COUNTERS.len()] = Default::default();
    let mut unattributed = Vec::new();
    for (partition, totals, tally) in engine.partition_totals() {
        for (metrics, value) in plain.iter_mut().zip(outcome_values(totals, tally)) {
            metrics.push(counter(vec![partition_label(partition)], value as f64));
        }
        for (reason, value) in [("not_shown", tally.not_shown), ("outside_window", tally.outside_window)] {
            unattributed.push(counter(with_partition(vec![label("reason", reason)], partition), value as f64));
        }
    }
    let mut families: Vec<MetricFamily> = OUTCOME_COUNTERS
        .into_iter()
        .zip(plain)
        .map(|((name, help), metrics)| family(name, help, MetricType::COUNTER, metrics))
        .collect();
    families.push(family(
        "rankpulse_engagements_unattributed_total",
        "Engagements matched to an open impression that changed nothing: the document was not in its results, or the timestamp was outside its attribution window.",
        MetricType::COUNTER,
        unattributed,
    ));
    families
}

/// Checkpoint health: written and failed counts always, the last success's time, size and
/// duration only once there was one (a 0 timestamp would read as "stale since 1970").
fn checkpoint_families(engine: &Engine) -> Vec<MetricFamily> {
    let checkpoints = engine.checkpoint_stats();
    let mut families = vec![
        family(
            "rankpulse_checkpoints_total",
            "Snapshot rounds of the partitions held written to the changelog topic (their offsets are committed after each).",
            MetricType::COUNTER,
            vec![counter(vec![], checkpoints.written as f64)],
        ),
        family(
            "rankpulse_checkpoint_failures_total",
            "Snapshot rounds the brokers did not acknowledge; offsets stay uncommitted until one succeeds.",
            MetricType::COUNTER,
            vec![counter(vec![], checkpoints.failed as f64)],
        ),
    ];
    if let Some(last) = checkpoints.last_success_ms {
        families.extend([
            family(
                "rankpulse_checkpoint_last_success_timestamp_seconds",
                "Wall-clock time of the last acknowledged snapshot round.",
                MetricType::GAUGE,
                vec![gauge(vec![], last as f64 / 1000.0)],
            ),
            family(
                "rankpulse_checkpoint_bytes",
                "Size of the last snapshot round.",
                MetricType::GAUGE,
                vec![gauge(vec![], checkpoints.last_bytes as f64)],
            ),
            family(
                "rankpulse_checkpoint_duration_seconds",
                "Time to write the last snapshot round and have it acknowledged.",
                MetricType::GAUGE,
                vec![gauge(vec![], checkpoints.last_duration.as_secs_f64())],
            ),
        ]);
    }
    families
}

/// The `[labels]` cardinality guard: values folded into `other` (per partition), and the
/// groups it keeps (per replica: the guard is the replica's).
fn label_families(engine: &Engine) -> Vec<MetricFamily> {
    let groups = engine.groups();
    let mut folded = Vec::new();
    for (partition, totals, _) in engine.partition_totals() {
        for (name, which) in [("experiment", FoldedLabel::Experiment), ("variant", FoldedLabel::Variant)] {
            let value = totals.counters.labels_folded[which as usize];
            folded.push(counter(with_partition(vec![label("label", name)], partition), value as f64));
        }
    }
    vec![
        family(
            "rankpulse_labels_folded_total",
            "Impressions whose experiment or variant value was folded into \"other\" by the [labels] cardinality guard.",
            MetricType::COUNTER,
            folded,
        ),
        family(
            "rankpulse_label_groups",
            "(experiment, variant) pairs with their own series right now (bounded by the [labels] limits).",
            MetricType::GAUGE,
            vec![gauge(vec![], groups.active() as f64)],
        ),
    ]
}

/// The join's state right now: its sizes, and the watermark (absent until every partition has
/// one, rather than a misleading 0).
fn state_gauges(engine: &Engine) -> Vec<MetricFamily> {
    let mut families = vec![family(
        "rankpulse_dedup_keys",
        "Keys remembered for de-duplication (engagement identities and recently finalized queries).",
        MetricType::GAUGE,
        vec![gauge(vec![], engine.state_size().dedup as f64)],
    )];
    if let Some(lag) = engine.watermark_lag_ms(std::time::Instant::now()) {
        families.push(family(
            "rankpulse_watermark_lag_seconds",
            "How far the event-time watermark trails the wall clock.",
            MetricType::GAUGE,
            vec![gauge(vec![], lag as f64 / 1000.0)],
        ));
    }
    families.push(family(
        "rankpulse_pending_impressions",
        "Impressions waiting for their attribution window to pass.",
        MetricType::GAUGE,
        vec![gauge(vec![], engine.pending_impressions() as f64)],
    ));
    families.push(family(
        "rankpulse_held_engagements",
        "Engagements waiting for their impression to arrive.",
        MetricType::GAUGE,
        vec![gauge(vec![], engine.held_engagements() as f64)],
    ));
    if let Some(w) = engine.watermark() {
        families.push(family(
            "rankpulse_watermark_timestamp_seconds",
            "Event-time watermark (least over partitions): impressions older than this minus the attribution window are final.",
            MetricType::GAUGE,
            vec![gauge(vec![], w as f64 / 1000.0)],
        ));
    }
    families
}

/// The newest closed event-time window of each size: every metric's mean per group, the
/// group's impressions, and the window's start.
fn window_gauges(engine: &Engine) -> Vec<MetricFamily> {
    let groups = engine.groups();
    let keys = engine.layout().keys();
    let mut means = Vec::new();
    let mut starts = Vec::new();
    let mut window_impressions = Vec::new();
    for closed in engine.newest_closed() {
        let window = engine.window_label(closed.size_index);
        starts.push(gauge(vec![label("window", window)], closed.start as f64 / 1000.0));
        for (group, stats) in closed.groups.iter() {
            let (experiment, variant) = groups.name(group);
            for (slot, key) in keys.iter().enumerate() {
                means.push(gauge(
                    vec![
                        label("window", window),
                        label("metric", &key.name()),
                        label("experiment", experiment),
                        label("variant", variant),
                    ],
                    stats.mean(slot),
                ));
            }
            window_impressions.push(gauge(
                vec![label("window", window), label("experiment", experiment), label("variant", variant)],
                stats.impressions as f64,
            ));
        }
    }
    vec![
        family(
            "rankpulse_window_mean",
            "Mean of each metric over the newest closed event-time window of each size (empty-R impressions count as 0).",
            MetricType::GAUGE,
            means,
        ),
        family(
            "rankpulse_window_impressions",
            "Impressions in the newest closed window of each size.",
            MetricType::GAUGE,
            window_impressions,
        ),
        family(
            "rankpulse_window_start_timestamp_seconds",
            "Start of the newest closed window of each size.",
            MetricType::GAUGE,
            starts,
        ),
    ]
}

/// The A/B feed of the newest closed window of each size: treatment minus control per metric,
/// its confidence interval and Welch p-value, and the sample-ratio test per experiment; and the
/// anytime-valid figures of those windows and of the cumulative report (`window="cumulative"`).
fn ab_families(engine: &Engine) -> Vec<MetricFamily> {
    let (mut difference, mut lower, mut upper, mut p_values, mut srm) = Default::default();
    let (mut cs_lower, mut cs_upper, mut always_valid, mut ssrm, mut cs_empty) = Default::default();
    let push = |into: &mut Vec<Metric>, labels: &[LabelPair], value: Option<f64>| {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            into.push(gauge(labels.to_vec(), v));
        }
    };
    let windows = engine.newest_closed().map(|closed| {
        let window = engine.window_label(closed.size_index);
        let span =
            Span::Window { label: window, start: closed.start, size_ms: engine.window_size_ms(closed.size_index) };
        (window, engine.experiment_reports(&closed.groups, span))
    });
    let cumulative =
        std::iter::once((CUMULATIVE, engine.experiment_reports(&engine.ab_cumulative(), Span::Cumulative)));
    for (window, reports) in windows.chain(cumulative) {
        let fixed_horizon = window != CUMULATIVE;
        for report in reports {
            let experiment = label("experiment", &report.experiment);
            if let Some(test) = &report.sample_ratio {
                let labels = [experiment.clone(), label("window", window)];
                if fixed_horizon {
                    push(&mut srm, &labels, Some(test.p_value));
                }
                push(&mut ssrm, &labels, test.sequential_p_value);
            }
            for comparison in &report.comparisons {
                for (metric, c) in &comparison.metrics {
                    let labels = [
                        experiment.clone(),
                        label("variant", &comparison.variant),
                        label("metric", metric),
                        label("window", window),
                    ];
                    if fixed_horizon {
                        push(&mut difference, &labels, Some(c.difference));
                        push(&mut lower, &labels, c.difference_ci.map(|ci| ci[0]));
                        push(&mut upper, &labels, c.difference_ci.map(|ci| ci[1]));
                        push(&mut p_values, &labels, c.p_value);
                    }
                    push(&mut cs_lower, &labels, c.difference_cs.map(|cs| cs[0]));
                    push(&mut cs_upper, &labels, c.difference_cs.map(|cs| cs[1]));
                    push(&mut always_valid, &labels, c.always_valid_p_value);
                    if !fixed_horizon && (c.difference_cs.is_some() || c.difference_cs_empty) {
                        // Bounds gone for this reason, not for want of data, are to be seen.
                        push(&mut cs_empty, &labels, Some(f64::from(u8::from(c.difference_cs_empty))));
                    }
                }
            }
        }
    }
    vec![
        family(
            "rankpulse_ab_difference",
            "Mean of the metric in the variant minus in the experiment's control, over the newest closed window of each size.",
            MetricType::GAUGE,
            difference,
        ),
        family(
            "rankpulse_ab_difference_lower",
            "Lower bound of the confidence interval (ab.confidence) of rankpulse_ab_difference (Welch).",
            MetricType::GAUGE,
            lower,
        ),
        family(
            "rankpulse_ab_difference_upper",
            "Upper bound of the confidence interval (ab.confidence) of rankpulse_ab_difference (Welch).",
            MetricType::GAUGE,
            upper,
        ),
        family(
            "rankpulse_ab_p_value",
            "Two-sided p-value of Welch's t-test of the variant against the control (cluster-robust when ab.unit is a user or session).",
            MetricType::GAUGE,
            p_values,
        ),
        family(
            "rankpulse_ab_srm_p_value",
            "p-value of the chi-square sample-ratio-mismatch test of the experiment's split against the expected one; below 0.001 the split is broken.",
            MetricType::GAUGE,
            srm,
        ),
        family(
            "rankpulse_ab_cs_lower",
            "Lower bound of the anytime-valid confidence sequence (ab.confidence) of the variant minus the control: valid however often it is looked at. window=\"cumulative\": the running intersection over one look per closed window of the first size (never falls); a closed window's: that window alone.",
            MetricType::GAUGE,
            cs_lower,
        ),
        family(
            "rankpulse_ab_cs_upper",
            "Upper bound of the anytime-valid confidence sequence of rankpulse_ab_cs_lower (window=\"cumulative\": never rises).",
            MetricType::GAUGE,
            cs_upper,
        ),
        family(
            "rankpulse_ab_cs_empty",
            "window=\"cumulative\" only: 1 when the looks' confidence sequences of the variant minus the control have no value in common (rankpulse_ab_cs_lower and _upper are then absent): the data contradict one constant effect, it changed over time; 0 while they have bounds.",
            MetricType::GAUGE,
            cs_empty,
        ),
        family(
            "rankpulse_ab_always_valid_p_value",
            "Always-valid p-value (mixture SPRT) of no difference between the variant and the control: stopping at the first value below 0.05 keeps false positives at 5%. window=\"cumulative\": the running minimum over the looks (never rises).",
            MetricType::GAUGE,
            always_valid,
        ),
        family(
            "rankpulse_ab_ssrm_p_value",
            "Always-valid p-value of the sequential sample-ratio-mismatch test (Dirichlet-multinomial) of the experiment's split: safe to watch continuously. window=\"cumulative\": the running minimum over the looks.",
            MetricType::GAUGE,
            ssrm,
        ),
    ]
}

/// Latency distributions, exposed in seconds: engagement delay (kept in milliseconds) as a
/// histogram per partition, since it is the partitions' data (see [`delay_histogram`]), and
/// per-message processing time (kept in nanoseconds) as a summary per replica, a measurement of
/// this process.
fn latency_summaries(engine: &Engine) -> Vec<MetricFamily> {
    let delays = engine
        .partition_totals()
        .map(|(p, totals, _)| delay_histogram(vec![partition_label(p)], &totals.first_engagement_delay))
        .collect();
    vec![
        family(
            "rankpulse_first_engagement_delay_seconds",
            "Delay from an impression to its first attributed engagement.",
            MetricType::HISTOGRAM,
            delays,
        ),
        family(
            "rankpulse_event_processing_seconds",
            "Time to decode, join and account one consumed message.",
            MetricType::SUMMARY,
            vec![distribution_summary(engine.processing_time(), 1e-9)],
        ),
    ]
}

/// Registers the engine's families with a `prometheus` registry.
struct EngineCollector {
    /// Locked once per scrape, for the whole of [`gather`], so a scrape sees one consistent state.
    engine: SharedEngine,
    /// Empty: the families depend on the configuration and the traffic, so they cannot be
    /// declared up front; a registry takes a collector without descriptors unchecked.
    descs: Vec<Desc>,
}

impl Collector for EngineCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }
    fn collect(&self) -> Vec<MetricFamily> {
        let engine = self.engine.lock();
        gather(&engine)
    }
}

/// A registry holding the engine collector.
pub fn registry(engine: SharedEngine) -> Registry {
    let registry = Registry::new();
    registry
        .register(Box::new(EngineCollector { engine, descs: Vec::new() }))
        .expect("the engine collector registers once");
    registry
}

/// Renders the registry in the text exposition format.
pub fn render(registry: &Registry) -> String {
    let mut buf = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut buf).expect("text encoding into a Vec cannot fail");
    String::from_utf8(buf).expect("the text format is UTF-8")
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::config::Config;

    const CONFIG: &str = "[join]\nattribution_window = \"10s\"\n[metrics]\ncutoffs = [1, 3]\nwindows = [\"1m\"]\n[labels]\nmax_variants = 2\n";

    fn engine() -> Engine {
        Engine::new(&Config::from_toml_with_env(CONFIG, "test", std::iter::empty()).unwrap()).without_past_limit()
    }

    fn impression(e: &mut Engine, query: &str, timestamp: i64, variant: &str) {
        impression_on(e, 0, query, timestamp, variant);
    }

    fn impression_on(e: &mut Engine, partition: i32, query: &str, timestamp: i64, variant: &str) {
        let payload = format!(
            r#"{{"query_id":"{query}","timestamp":{timestamp},"results":["a","b","c","d"],"experiment":"x","variant":"{variant}"}}"#
        );
        e.process(EventKind::Impression, partition, payload.as_bytes(), Instant::now()).unwrap();
    }

    fn click(e: &mut Engine, query: &str, timestamp: i64, doc: &str) {
        click_on(e, 0, query, timestamp, doc);
    }

    fn click_on(e: &mut Engine, partition: i32, query: &str, timestamp: i64, doc: &str) {
        let payload = format!(r#"{{"query_id":"{query}","timestamp":{timestamp},"doc_id":"{doc}"}}"#);
        e.process(EventKind::Engagement, partition, payload.as_bytes(), Instant::now()).unwrap();
    }

    /// Experiment `x` in the first minute: control clicked at ranks 2 and 1 (RR 0.5 + 1), treatment
    /// not clicked and clicked at rank 4 (RR 0 + 0.25), one impression of a third variant folded
    /// into `other`; first engagements 500 ms and 1500 ms after their impressions, and one
    /// malformed message on each topic. Nothing is final yet: see [`finished`].
    fn traffic() -> Engine {
        let mut e = engine();
        impression(&mut e, "c1", 1_000, "control");
        impression(&mut e, "c2", 2_000, "control");
        impression(&mut e, "t1", 3_000, "treatment");
        impression(&mut e, "t2", 4_000, "treatment");
        impression(&mut e, "o1", 5_000, "third");
        click(&mut e, "c1", 1_500, "b");
        click(&mut e, "c2", 3_500, "a");
        click(&mut e, "t2", 4_000, "d");
        let now = Instant::now();
        assert!(e.process(EventKind::Impression, 0, b"not json", now).is_err());
        assert!(e.process(EventKind::Engagement, 0, b"{}", now).is_err());
        e
    }

    fn finished() -> Engine {
        let mut e = traffic();
        e.finish();
        e
    }

    fn find<'a>(families: &'a [MetricFamily], name: &str) -> Option<&'a MetricFamily> {
        families.iter().find(|f| f.name() == name)
    }

    fn labels_of(m: &Metric) -> Vec<(&str, &str)> {
        m.get_label().iter().map(|l| (l.name(), l.value())).collect()
    }

    /// The one series of `name` with exactly these labels.
    fn series<'a>(families: &'a [MetricFamily], name: &str, labels: &[(&str, &str)]) -> &'a Metric {
        let family = find(families, name).unwrap_or_else(|| panic!("no family {name}"));
        let mut matching = family.get_metric().iter().filter(|m| labels_of(m) == labels);
        let metric = matching.next().unwrap_or_else(|| panic!("no series {name}{labels:?}"));
        assert!(matching.next().is_none(), "{name}{labels:?} twice");
        metric
    }

    fn counter_value(families: &[MetricFamily], name: &str, labels: &[(&str, &str)]) -> f64 {
        series(families, name, labels).get_counter().get_value()
    }

    fn gauge_value(families: &[MetricFamily], name: &str, labels: &[(&str, &str)]) -> f64 {
        series(families, name, labels).get_gauge().get_value()
    }

    fn sum_and_count(families: &[MetricFamily], name: &str, labels: &[(&str, &str)]) -> (f64, u64) {
        let s = series(families, name, labels).get_summary();
        (s.sample_sum(), s.sample_count())
    }

    const CONTROL: [(&str, &str); 2] = [("experiment", "x"), ("variant", "control")];
    const TREATMENT: [(&str, &str); 2] = [("experiment", "x"), ("variant", "treatment")];
    const OTHER: [(&str, &str); 2] = [("experiment", "x"), ("variant", "other")];
    /// Every message of [`traffic`] is on partition 0.
    const P0: (&str, &str) = ("partition", "0");

    /// `labels` and partition 0's label, as a per-partition total carries them.
    fn p0<'a>(labels: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        labels.iter().copied().chain([P0]).collect()
    }

    #[test]
    fn reciprocal_rank_sums_and_counts_are_what_was_fed() {
        let f = gather(&finished());
        assert_eq!(sum_and_count(&f, "rankpulse_reciprocal_rank", &p0(&CONTROL)), (1.5, 2));
        assert_eq!(sum_and_count(&f, "rankpulse_reciprocal_rank", &p0(&TREATMENT)), (0.25, 2));
        assert_eq!(sum_and_count(&f, "rankpulse_reciprocal_rank", &p0(&OTHER)), (0.0, 1));
        let rr = find(&f, "rankpulse_reciprocal_rank").unwrap();
        assert_eq!(rr.get_field_type(), MetricType::SUMMARY);
        assert!(rr.get_metric().iter().all(|m| m.get_summary().get_quantile().is_empty()), "_sum and _count only");
    }

    #[test]
    fn cutoff_metrics_carry_k_and_ndcg_its_gain_and_iprec_its_recall_level() {
        let f = gather(&finished());
        let hit = |k| sum_and_count(&f, "rankpulse_hit", &[CONTROL[0], CONTROL[1], ("k", k), P0]);
        assert_eq!((hit("1"), hit("3")), ((1.0, 2), (2.0, 2)), "control: ranks 2 and 1");
        let ndcg: Vec<Vec<(&str, &str)>> = find(&f, "rankpulse_ndcg")
            .unwrap()
            .get_metric()
            .iter()
            .filter(|m| labels_of(m)[..2] == CONTROL)
            .map(|m| labels_of(m)[2..].to_vec())
            .collect();
        assert_eq!(
            ndcg,
            [
                [("k", "1"), ("gain", "linear"), P0],
                [("k", "1"), ("gain", "exponential"), P0],
                [("k", "3"), ("gain", "linear"), P0],
                [("k", "3"), ("gain", "exponential"), P0],
            ]
        );
        let levels: Vec<&str> = find(&f, "rankpulse_interpolated_precision")
            .unwrap()
            .get_metric()
            .iter()
            .filter(|m| labels_of(m)[..2] == CONTROL)
            .map(|m| labels_of(m)[2].1)
            .collect();
        assert_eq!(levels, ["0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1.0"]);
        assert_eq!(
            sum_and_count(&f, "rankpulse_r_precision", &p0(&CONTROL)),
            (1.0, 2),
            "no k label; rank 2 is outside the top |R| = 1"
        );
        assert!(find(&f, "rankpulse_abandonment").is_none(), "abandonment is 1 - engaged/total, not a summary");
    }

    #[test]
    fn impressions_and_engaged_impressions_per_group() {
        let f = gather(&finished());
        let both = |labels: &[(&str, &str)]| {
            (
                counter_value(&f, "rankpulse_impressions_total", &p0(labels)),
                counter_value(&f, "rankpulse_impressions_engaged_total", &p0(labels)),
            )
        };
        assert_eq!((both(&CONTROL), both(&TREATMENT), both(&OTHER)), ((2.0, 2.0), (2.0, 1.0), (1.0, 0.0)));
    }

    #[test]
    fn a_rejected_message_counts_under_its_topic_and_reason() {
        let f = gather(&finished());
        let impressions = ("topic", "search-impressions");
        let engagements = ("topic", "search-engagements");
        assert_eq!(counter_value(&f, "rankpulse_events_consumed_total", &[impressions, P0]), 6.0);
        assert_eq!(counter_value(&f, "rankpulse_events_consumed_total", &[engagements, P0]), 4.0);
        let rejected =
            |topic, reason| counter_value(&f, "rankpulse_events_rejected_total", &[topic, ("reason", reason), P0]);
        assert_eq!(rejected(impressions, "invalid_json"), 1.0);
        assert_eq!(rejected(engagements, "missing_field"), 1.0);
        let all = find(&f, "rankpulse_events_rejected_total").unwrap().get_metric();
        assert_eq!(all.len(), 2 * RejectReason::ALL.len(), "every reason of every topic, also at 0");
        assert_eq!(all.iter().map(|m| m.get_counter().get_value()).sum::<f64>(), 2.0);
    }

    #[test]
    fn engagement_outcomes_and_folded_labels_are_counted() {
        let mut e = traffic();
        click(&mut e, "c1", 1_600, "b");
        click(&mut e, "c1", 1_700, "zzz");
        e.finish();
        let f = gather(&e);
        assert_eq!(counter_value(&f, "rankpulse_engagements_attributed_total", &[P0]), 4.0);
        let unattributed =
            |reason| counter_value(&f, "rankpulse_engagements_unattributed_total", &[("reason", reason), P0]);
        assert_eq!((unattributed("not_shown"), unattributed("outside_window")), (1.0, 0.0));
        assert_eq!(counter_value(&f, "rankpulse_engagements_late_total", &[P0]), 0.0);
        assert_eq!(counter_value(&f, "rankpulse_labels_folded_total", &[("label", "variant"), P0]), 1.0);
        assert_eq!(counter_value(&f, "rankpulse_labels_folded_total", &[("label", "experiment"), P0]), 0.0);
        assert_eq!(gauge_value(&f, "rankpulse_label_groups", &[]), 3.0, "control, treatment, other");
    }

    #[test]
    fn join_state_gauges_follow_pending_work() {
        let open = gather(&traffic());
        assert_eq!(gauge_value(&open, "rankpulse_pending_impressions", &[]), 5.0);
        assert_eq!(gauge_value(&open, "rankpulse_held_engagements", &[]), 0.0);
        let f = gather(&finished());
        assert_eq!(gauge_value(&f, "rankpulse_pending_impressions", &[]), 0.0);
        assert!(find(&f, "rankpulse_impressions_total").is_some());
        assert!(find(&open, "rankpulse_impressions_total").is_none(), "no finalized impression, no series, no family");
    }

    #[test]
    fn checkpoint_details_appear_after_the_first_success() {
        let mut e = finished();
        let f = gather(&e);
        assert_eq!(counter_value(&f, "rankpulse_checkpoints_total", &[]), 0.0);
        assert!(find(&f, "rankpulse_checkpoint_last_success_timestamp_seconds").is_none());
        assert!(find(&f, "rankpulse_checkpoint_bytes").is_none());
        let now = Instant::now();
        e.record_checkpoint(4096, Duration::from_millis(250), true, now);
        e.record_checkpoint(0, Duration::ZERO, false, now);
        let f = gather(&e);
        assert_eq!(counter_value(&f, "rankpulse_checkpoints_total", &[]), 1.0);
        assert_eq!(counter_value(&f, "rankpulse_checkpoint_failures_total", &[]), 1.0);
        assert_eq!(gauge_value(&f, "rankpulse_checkpoint_bytes", &[]), 4096.0);
        assert_eq!(gauge_value(&f, "rankpulse_checkpoint_duration_seconds", &[]), 0.25);
        assert!(gauge_value(&f, "rankpulse_checkpoint_last_success_timestamp_seconds", &[]) > 1.6e9);
    }

    #[test]
    fn window_and_ab_gauges_appear_only_for_closed_windows() {
        let open = gather(&traffic());
        for name in
            ["rankpulse_window_mean", "rankpulse_window_impressions", "rankpulse_window_start_timestamp_seconds"]
        {
            assert!(find(&open, name).is_none(), "{name} before any window closed");
        }
        assert!(!open.iter().any(
            |f| f.name().starts_with("rankpulse_ab_") && f.name() != "rankpulse_ab_impressions_without_unit_total"
        ));

        let f = gather(&finished());
        let window = ("window", "1m");
        assert_eq!(gauge_value(&f, "rankpulse_window_start_timestamp_seconds", &[window]), 0.0);
        assert_eq!(gauge_value(&f, "rankpulse_window_impressions", &[window, CONTROL[0], CONTROL[1]]), 2.0);
        let mean = |metric, variant| {
            gauge_value(
                &f,
                "rankpulse_window_mean",
                &[window, ("metric", metric), ("experiment", "x"), ("variant", variant)],
            )
        };
        assert_eq!((mean("mrr", "control"), mean("mrr", "treatment")), (0.75, 0.125));
        assert_eq!((mean("hit_rate@3", "control"), mean("hit_rate@3", "treatment")), (1.0, 0.0), "rank 4 is no hit");
        let difference = gauge_value(
            &f,
            "rankpulse_ab_difference",
            &[("experiment", "x"), ("variant", "treatment"), ("metric", "mrr"), window],
        );
        assert_eq!(difference, 0.125 - 0.75);
        let labels = [("experiment", "x"), ("variant", "treatment"), ("metric", "mrr"), window];
        let (lower, upper) = (
            gauge_value(&f, "rankpulse_ab_difference_lower", &labels),
            gauge_value(&f, "rankpulse_ab_difference_upper", &labels),
        );
        assert!(lower < difference && difference < upper, "{lower} < {difference} < {upper}");
        assert!(find(&f, "rankpulse_ab_srm_p_value").is_some());
    }

    /// An effect present in the first two minutes only: the looks' sequences end with no value
    /// in common. The cumulative bounds are not exported inverted: they are absent, and
    /// `rankpulse_ab_cs_empty` says why; a closed window's sequence is its own, never empty.
    #[test]
    fn an_empty_cumulative_sequence_has_no_bounds_and_says_so() {
        let mut e = engine();
        for minute in 0..30i64 {
            for i in 0..300i64 {
                let ts = minute * 60_000 + i * 150;
                for (variant, rate) in [("control", 3), ("treatment", if minute < 2 { 9 } else { 3 })] {
                    let query = format!("{variant}-{minute}-{i}");
                    impression(&mut e, &query, ts, variant);
                    if i % 10 < rate {
                        click(&mut e, &query, ts + 10, "a");
                    }
                }
            }
        }
        e.finish();
        let f = gather(&e);
        let labels = |window| [("experiment", "x"), ("variant", "treatment"), ("metric", "mrr"), ("window", window)];
        assert_eq!(gauge_value(&f, "rankpulse_ab_cs_empty", &labels("cumulative")), 1.0);
        let has =
            |name: &str, window| find(&f, name).unwrap().get_metric().iter().any(|m| labels_of(m) == labels(window));
        assert!(!has("rankpulse_ab_cs_lower", "cumulative") && !has("rankpulse_ab_cs_upper", "cumulative"));
        assert!(gauge_value(&f, "rankpulse_ab_always_valid_p_value", &labels("cumulative")) < 0.05);
        let (lower, upper) = (
            gauge_value(&f, "rankpulse_ab_cs_lower", &labels("1m")),
            gauge_value(&f, "rankpulse_ab_cs_upper", &labels("1m")),
        );
        assert!(lower <= upper, "{lower} {upper}");
        assert!(!has("rankpulse_ab_cs_empty", "1m"), "a closed window's sequence is one look");
    }

    #[test]
    fn latencies_are_exposed_in_seconds() {
        let mut e = finished();
        e.record_processing_time(Duration::from_micros(250));
        e.record_processing_time(Duration::from_micros(750));
        let f = gather(&e);
        let delay = series(&f, "rankpulse_first_engagement_delay_seconds", &[P0]).get_histogram();
        assert_eq!((delay.get_sample_sum(), delay.get_sample_count()), (0.5 + 1.5 + 0.0, 3));
        // 0 ms (recorded as 1 ms), 500 ms and 1500 ms: cumulative counts up to each bound.
        let buckets: Vec<(f64, u64)> =
            delay.get_bucket().iter().map(|b| (b.upper_bound(), b.cumulative_count())).take(5).collect();
        assert_eq!(buckets, [(0.1, 1), (0.25, 1), (0.5, 2), (1.0, 2), (2.5, 3)]);
        assert_eq!(delay.get_bucket().last().map(|b| b.cumulative_count()), Some(3));
        let processing = find(&f, "rankpulse_event_processing_seconds").unwrap().get_metric()[0].get_summary();
        assert_eq!(
            (processing.sample_sum(), processing.sample_count()),
            (1_000_000.0 * 1e-9, 2),
            "kept in nanoseconds"
        );
    }

    #[test]
    fn the_text_exposition_renders_sums_and_counts_per_group() {
        let text = render(&registry(SharedEngine::new(finished())));
        for line in [
            "# TYPE rankpulse_reciprocal_rank summary",
            "rankpulse_reciprocal_rank_sum{experiment=\"x\",variant=\"control\",partition=\"0\"} 1.5",
            "rankpulse_reciprocal_rank_count{experiment=\"x\",variant=\"control\",partition=\"0\"} 2",
            "rankpulse_impressions_total{experiment=\"x\",variant=\"other\",partition=\"0\"} 1",
            "rankpulse_events_rejected_total{topic=\"search-impressions\",reason=\"invalid_json\",partition=\"0\"} 1",
            "rankpulse_first_engagement_delay_seconds_bucket{partition=\"0\",le=\"+Inf\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("rankpulse_checkpoint_bytes"));
    }

    /// The exposition of `e`'s families, as `/metrics` serves it.
    fn exposition(e: &Engine) -> String {
        let mut buf = Vec::new();
        TextEncoder::new().encode(&gather(e), &mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    /// Every total series (`_sum`, `_count`, `_bucket`, `_total`) of an exposition, keyed by
    /// its line up to the value, with the `partition` label cut out and the values of a series
    /// summed over it: what `sum without (partition)` sees. Also the partitions each name had.
    fn totals_without_partition(text: &str) -> (BTreeMap<String, f64>, BTreeMap<String, BTreeSet<String>>) {
        let (mut totals, mut partitions) = (BTreeMap::new(), BTreeMap::<String, BTreeSet<String>>::new());
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let name = series.split('{').next().unwrap();
            if !["_sum", "_count", "_bucket", "_total"].iter().any(|s| name.ends_with(s)) {
                continue;
            }
            let mut key = series.to_string();
            if let Some(start) = series.find("partition=\"") {
                let end = start + series[start..].find("\"").unwrap() + 1;
                let end = end + series[end..].find('"').unwrap() + 1;
                partitions.entry(name.to_string()).or_default().insert(series[start..end].to_string());
                key = format!("{}{}", &series[..start], &series[end..]).replace(",,", ",").replace("{,", "{");
                key = key.replace(",}", "}").replace("{}", "");
            }
            *totals.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap();
        }
        (totals, partitions)
    }

    #[test]
    fn a_partitions_totals_leave_its_old_owner_and_arrive_carried_over_at_the_new_one() {
        let mut a = traffic();
        impression_on(&mut a, 3, "p1", 6_000, "control");
        impression_on(&mut a, 3, "p2", 7_000, "treatment");
        click_on(&mut a, 3, "p1", 6_200, "c");
        assert!(a.process(EventKind::Engagement, 3, b"[]", Instant::now()).is_err());
        a.finish();
        let before = exposition(&a);
        let (one_replica, partitions) = totals_without_partition(&before);
        let both: BTreeSet<String> = ["partition=\"0\"", "partition=\"3\""].map(String::from).into();
        for name in [
            "rankpulse_reciprocal_rank_sum",
            "rankpulse_events_consumed_total",
            "rankpulse_engagements_attributed_total",
            "rankpulse_first_engagement_delay_seconds_bucket",
        ] {
            assert_eq!(partitions.get(name), Some(&both), "{name}: one series per partition held");
        }
        // Measurements of the process, not of the partitions' data.
        let of_the_replica = |k: &str| {
            [
                "rankpulse_event_processing_seconds",
                "rankpulse_checkpoint",
                "rankpulse_input_key",
                "rankpulse_rebalances",
                "rankpulse_partition_restores",
            ]
            .iter()
                .any(|p| k.starts_with(p))
        };
        let totals: Vec<&String> = one_replica.keys().filter(|k| !of_the_replica(k)).collect();
        assert!(totals.len() > 100, "{totals:?}");
        for name in totals {
            let family = name.split('{').next().unwrap();
            assert_eq!(partitions.get(family), Some(&both), "{name} is per partition");
        }
        for per_replica in [
            "rankpulse_pending_impressions",
            "rankpulse_label_groups",
            "rankpulse_window_mean",
            "rankpulse_event_processing_seconds_count",
        ] {
            let line = before.lines().find(|l| l.starts_with(per_replica)).unwrap();
            assert!(!line.contains("partition="), "{line}");
        }

        // Partition 3 moves from replica a to replica b.
        let snapshot = crate::checkpoint::encode(&a.snapshot_partition(3).unwrap());
        a.remove_partition(3);
        let mut b = engine();
        b.restore_partition(3, crate::checkpoint::decode(&snapshot).unwrap(), Instant::now()).unwrap();
        let (after_a, after_b) = (exposition(&a), exposition(&b));
        let p3 = |text: &str| -> Vec<String> {
            text.lines().filter(|l| l.contains("partition=\"3\"")).map(String::from).collect()
        };
        assert!(p3(&after_a).is_empty(), "partition 3's series end on replica a");
        assert_eq!(p3(&after_b), p3(&before), "and start on replica b at the values they had");
        assert!(!after_b.contains("partition=\"0\""));
        // Over both replicas, every total is what the one replica exported.
        let (mut over_replicas, _) = totals_without_partition(&after_a);
        for (series, value) in totals_without_partition(&after_b).0 {
            *over_replicas.entry(series).or_insert(0.0) += value;
        }
        over_replicas.retain(|k, _| !of_the_replica(k));
        let mut expected = one_replica.clone();
        expected.retain(|k, _| !of_the_replica(k));
        assert_eq!(over_replicas, expected);
    }
}
