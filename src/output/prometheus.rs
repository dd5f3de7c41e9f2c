//! The Prometheus text exposition of the engine's state.
//!
//! Metric families are built at scrape time from the engine's accumulators by one custom
//! [`Collector`], instead of updating `prometheus` vectors per event: the hot path then touches
//! no label maps and no atomics, and a scrape costs one short lock.

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary};
use prometheus::{Encoder, Registry, TextEncoder};

use crate::accumulate::{FoldedLabel, GroupId, GroupStats, Groups};
use crate::engine::{Distribution, Engine, SharedEngine};
use crate::event::{EventKind, RejectReason};
use crate::experiments::Span;
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

fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_string());
    l.set_value(value.to_string());
    l
}

fn family(name: &str, help: &str, kind: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(kind);
    f.set_metric(metrics);
    f
}

fn counter(labels: Vec<LabelPair>, value: f64) -> Metric {
    let mut c = Counter::default();
    c.set_value(value);
    let mut m = Metric::from_label(labels);
    m.set_counter(c);
    m
}

fn gauge(labels: Vec<LabelPair>, value: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(value);
    let mut m = Metric::from_label(labels);
    m.set_gauge(g);
    m
}

fn summary(labels: Vec<LabelPair>, sum: f64, count: u64, quantiles: Vec<Quantile>) -> Metric {
    let mut s = Summary::default();
    s.set_sample_sum(sum);
    s.set_sample_count(count);
    s.set_quantile(quantiles);
    let mut m = Metric::from_label(labels);
    m.set_summary(s);
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
    families.extend(checkpoint_families(engine));
    families.extend(label_families(engine));
    families.extend(state_gauges(engine));
    families.extend(window_gauges(engine));
    families.extend(ab_families(engine));
    families.extend(latency_summaries(engine));
    families.retain(|f| !f.get_metric().is_empty());
    families
}

/// The `experiment` and `variant` labels of a group, as its series carry them.
fn group_labels(groups: &Groups, id: GroupId) -> Vec<LabelPair> {
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
/// group × k (× gain), with `_sum` and `_count` only (quantiles of per-impression values that
/// are mostly 0 or 1 would say nothing).
fn metric_summaries(engine: &Engine) -> Vec<MetricFamily> {
    let groups = engine.groups();
    let cumulative: Vec<(GroupId, &GroupStats)> = engine.accumulators().cumulative.iter().collect();
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
        for &(group, stats) in &cumulative {
            let mut labels = group_labels(groups, group);
            labels.extend(key_labels(key));
            metrics.push(summary(labels, stats.sum(slot), stats.impressions, vec![]));
        }
    }
    by_name.into_iter().map(|(name, help, metrics)| family(name, help, MetricType::SUMMARY, metrics)).collect()
}

/// Finalized and engaged impressions per group, cumulative.
fn impression_counters(engine: &Engine) -> Vec<MetricFamily> {
    let groups = engine.groups();
    let cumulative = || engine.accumulators().cumulative.iter();
    vec![
        family(
            "rankpulse_impressions_total",
            "Finalized impressions.",
            MetricType::COUNTER,
            cumulative().map(|(g, s)| counter(group_labels(groups, g), s.impressions as f64)).collect(),
        ),
        family(
            "rankpulse_impressions_engaged_total",
            "Finalized impressions with at least one relevant result (1 - engaged/total is the abandonment rate).",
            MetricType::COUNTER,
            cumulative().map(|(g, s)| counter(group_labels(groups, g), s.engaged as f64)).collect(),
        ),
    ]
}

/// Messages consumed per topic, and rejected per topic and reason (every reason, also at 0, so
/// that `rate()` works from the first reject on).
fn event_counters(engine: &Engine) -> Vec<MetricFamily> {
    let counters = engine.counters();
    let consumed = EventKind::ALL
        .iter()
        .map(|&k| counter(vec![label("topic", engine.topic(k))], counters.consumed[k.index()] as f64))
        .collect();
    let mut rejected = Vec::new();
    for kind in EventKind::ALL {
        for reason in RejectReason::ALL {
            rejected.push(counter(
                vec![label("topic", engine.topic(kind)), label("reason", reason.label())],
                counters.rejected[kind.index()][reason.index()] as f64,
            ));
        }
    }
    vec![
        family("rankpulse_events_consumed_total", "Messages consumed, valid or not.", MetricType::COUNTER, consumed),
        family("rankpulse_events_rejected_total", "Messages rejected, by reason.", MetricType::COUNTER, rejected),
    ]
}

/// What became of valid events in the join: duplicates, late and orphaned arrivals, evictions
/// by the state limits, attributions and the reasons an engagement changed nothing.
fn outcome_counters(engine: &Engine) -> Vec<MetricFamily> {
    let counters = engine.counters();
    let tally = engine.engagement_tally();
    let plain_counters: [(&str, &str, u64); 11] = [
        ("rankpulse_engagements_duplicate_total", "Engagements seen before (same event_id, or same query, document, action and timestamp); counted once, then ignored.", tally.duplicate),
        ("rankpulse_engagements_evicted_total", "Held engagements dropped because join.max_held_engagements was reached.", tally.evicted),
        ("rankpulse_impressions_evicted_total", "Impressions finalized before their attribution window closed because join.max_pending_impressions was reached.", counters.impressions_evicted),
        ("rankpulse_dedup_keys_evicted_total", "De-duplication keys forgotten early because join.max_dedup_keys was reached.", counters.dedup_keys_evicted),
        ("rankpulse_engagements_late_total", "Engagements that arrived after the watermark passed them with no open impression (their impression was final or never came in time); dropped.", tally.late),
        ("rankpulse_engagements_orphaned_total", "Engagements held for an impression that did not arrive before the watermark passed them; dropped.", tally.orphaned),
        ("rankpulse_engagements_attributed_total", "Engagements attributed to a shown result of an open impression.", tally.attributed),
        ("rankpulse_impressions_duplicate_total", "Impressions whose query_id was already open; the first one counts.", counters.impressions_duplicate),
        ("rankpulse_impressions_late_total", "Impressions that arrived after the watermark passed the end of their attribution window; dropped.", counters.impressions_late),
        ("rankpulse_ab_impressions_without_unit_total", "Impressions without the field ab.unit names (client_id or session_id); each is its own cluster in the A/B statistics.", counters.impressions_without_unit),
        ("rankpulse_window_late_impressions_total", "Impressions finalized after their event-time window had closed: in the cumulative series, not in the window.", engine.accumulators().window_late_impressions),
    ];
    let mut families: Vec<MetricFamily> = plain_counters
        .into_iter()
        .map(|(name, help, value)| family(name, help, MetricType::COUNTER, vec![counter(vec![], value as f64)]))
        .collect();
    families.push(family(
        "rankpulse_engagements_unattributed_total",
        "Engagements matched to an open impression that changed nothing: the document was not in its results, or the timestamp was outside its attribution window.",
        MetricType::COUNTER,
        vec![
            counter(vec![label("reason", "not_shown")], tally.not_shown as f64),
            counter(vec![label("reason", "outside_window")], tally.outside_window as f64),
        ],
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
            "Checkpoints written to state.dir (offsets are committed after each).",
            MetricType::COUNTER,
            vec![counter(vec![], checkpoints.written as f64)],
        ),
        family(
            "rankpulse_checkpoint_failures_total",
            "Checkpoints that could not be written (disk full, permissions); offsets stay uncommitted until one succeeds.",
            MetricType::COUNTER,
            vec![counter(vec![], checkpoints.failed as f64)],
        ),
    ];
    if let Some(last) = checkpoints.last_success_ms {
        families.extend([
            family(
                "rankpulse_checkpoint_last_success_timestamp_seconds",
                "Wall-clock time of the last successful checkpoint.",
                MetricType::GAUGE,
                vec![gauge(vec![], last as f64 / 1000.0)],
            ),
            family(
                "rankpulse_checkpoint_bytes",
                "Size of the last checkpoint.",
                MetricType::GAUGE,
                vec![gauge(vec![], checkpoints.last_bytes as f64)],
            ),
            family(
                "rankpulse_checkpoint_duration_seconds",
                "Time to write and fsync the last checkpoint.",
                MetricType::GAUGE,
                vec![gauge(vec![], checkpoints.last_duration.as_secs_f64())],
            ),
        ]);
    }
    families
}

/// The `[labels]` cardinality guard: values folded into `other`, and the groups it keeps.
fn label_families(engine: &Engine) -> Vec<MetricFamily> {
    let groups = engine.groups();
    vec![
        family(
            "rankpulse_labels_folded_total",
            "Impressions whose experiment or variant value was folded into \"other\" by the [labels] cardinality guard.",
            MetricType::COUNTER,
            vec![
                counter(vec![label("label", "experiment")], groups.folded(FoldedLabel::Experiment) as f64),
                counter(vec![label("label", "variant")], groups.folded(FoldedLabel::Variant) as f64),
            ],
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
    for closed in engine.accumulators().newest_closed() {
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
/// its confidence interval and Welch p-value, and the sample-ratio test per experiment.
fn ab_families(engine: &Engine) -> Vec<MetricFamily> {
    let acc = engine.accumulators();
    let (mut difference, mut lower, mut upper, mut p_values, mut srm) = Default::default();
    let push = |into: &mut Vec<Metric>, labels: &[LabelPair], value: Option<f64>| {
        if let Some(v) = value.filter(|v| v.is_finite()) {
            into.push(gauge(labels.to_vec(), v));
        }
    };
    for closed in acc.newest_closed() {
        let window = engine.window_label(closed.size_index);
        let span = Span::Window { label: window, start: closed.start, size_ms: acc.window_size_ms(closed.size_index) };
        for report in engine.experiment_reports(&closed.groups, span) {
            let experiment = label("experiment", &report.experiment);
            if let Some(test) = &report.sample_ratio {
                push(&mut srm, &[experiment.clone(), label("window", window)], Some(test.p_value));
            }
            for comparison in &report.comparisons {
                for (metric, c) in &comparison.metrics {
                    let labels = [
                        experiment.clone(),
                        label("variant", &comparison.variant),
                        label("metric", metric),
                        label("window", window),
                    ];
                    push(&mut difference, &labels, Some(c.difference));
                    push(&mut lower, &labels, c.difference_ci.map(|ci| ci[0]));
                    push(&mut upper, &labels, c.difference_ci.map(|ci| ci[1]));
                    push(&mut p_values, &labels, c.p_value);
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
    ]
}

/// Latency distributions: engagement delay (kept in milliseconds) and per-message processing
/// time (kept in nanoseconds), both exposed in seconds.
fn latency_summaries(engine: &Engine) -> Vec<MetricFamily> {
    vec![
        family(
            "rankpulse_first_engagement_delay_seconds",
            "Delay from an impression to its first attributed engagement.",
            MetricType::SUMMARY,
            vec![distribution_summary(engine.first_engagement_delay(), 1e-3)],
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
