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
        MetricKind::IpsClicks => (
            "rankpulse_ips_clicks",
            "Clicks in the top k weighted by the inverse of their rank's position-bias propensity (clicks.propensities, clipped at clicks.clip): relevant results had every rank been examined.",
        ),
        MetricKind::IpsDcg => (
            "rankpulse_ips_dcg",
            "rankpulse_ips_clicks discounted by rank as DCG is (1 / log2(rank + 1)): the DCG of the results users found attractive, position bias taken out.",
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
    families.extend(super::window_families::window_gauges(engine));
    // Every comparison family reads the same reports: computed once per scrape.
    let reports = super::window_families::reports_per_window(engine);
    families.extend(super::window_families::ab_families(&reports));
    families.extend(super::readout_families::families(engine, &reports));
    families.extend(super::dimension_families::families(engine, &reports));
    families.extend(super::interleaving_families::counters(engine));
    families.extend(super::interleaving_families::gauges(engine, &reports));
    families.extend(super::judged_families::sums(engine));
    families.extend(super::judged_families::comparisons(engine, &reports));
    families.extend(super::judged_families::source(engine));
    families.extend(latency_summaries(engine));
    families.extend(super::process_families::families());
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
        .filter(|&(_, g, _)| !groups.is_breakdown(g))
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
        for (group, stats) in totals.accumulators.cumulative.iter().filter(|&(g, _)| !groups.is_breakdown(g)) {
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
    let checkpoints = engine.telemetry().checkpoint_stats();
    let mut families = vec![
        family(
            "rankpulse_checkpoints_total",
            "Snapshot rounds of the partitions held written to the changelog topic (their offsets are committed after each).",
            MetricType::COUNTER,
            vec![counter(vec![], checkpoints.written as f64)],
        ),
        family(
            "rankpulse_changelog_records_total",
            "Changelog records acknowledged, by kind: a partition's whole state (snapshot) or its changes since the record before (delta).",
            MetricType::COUNTER,
            ["snapshot", "delta"]
                .iter()
                .zip(checkpoints.records)
                .map(|(kind, n)| counter(vec![label("kind", kind)], n as f64))
                .collect(),
        ),
        family(
            "rankpulse_changelog_bytes_total",
            "Payload bytes of the changelog records acknowledged, by kind (snapshot, delta).",
            MetricType::COUNTER,
            ["snapshot", "delta"]
                .iter()
                .zip(checkpoints.record_bytes)
                .map(|(kind, n)| counter(vec![label("kind", kind)], n as f64))
                .collect(),
        ),
        family(
            "rankpulse_aggregates_records_total",
            "Aggregates records acknowledged, by kind: a partition's A/B sums whole (base) or their change since the record before (increment).",
            MetricType::COUNTER,
            ["base", "increment"]
                .iter()
                .zip(checkpoints.aggregates_records)
                .map(|(kind, n)| counter(vec![label("kind", kind)], n as f64))
                .collect(),
        ),
        family(
            "rankpulse_aggregates_bytes_total",
            "Payload bytes of the aggregates records acknowledged, by kind (base, increment).",
            MetricType::COUNTER,
            ["base", "increment"]
                .iter()
                .zip(checkpoints.aggregates_bytes)
                .map(|(kind, n)| counter(vec![label("kind", kind)], n as f64))
                .collect(),
        ),
        family(
            "rankpulse_state_bytes_sent_total",
            "Bytes the producer of the changelog and aggregates topics sent to the brokers: the records compressed (state.compression), with the protocol's framing, as librdkafka's statistics count them each second.",
            MetricType::COUNTER,
            vec![counter(vec![], checkpoints.state_bytes_sent as f64)],
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
                "Time the last acknowledged snapshot round kept the consumer thread (encoding and sending its records).",
                MetricType::GAUGE,
                vec![gauge(vec![], checkpoints.last_duration.as_secs_f64())],
            ),
            family(
                "rankpulse_checkpoint_acknowledged_seconds",
                "From the start of the last acknowledged snapshot round until the brokers acknowledged all of it (the consumer goes on meanwhile; its offsets are committed then).",
                MetricType::GAUGE,
                vec![gauge(vec![], checkpoints.last_acknowledged.as_secs_f64())],
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
            vec![distribution_summary(engine.telemetry().processing_time(), 1e-9)],
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
mod tests;
