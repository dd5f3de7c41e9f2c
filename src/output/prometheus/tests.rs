//! The exposition's unit tests: which series each family has, per partition or per replica.

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
    e.telemetry_mut().record_checkpoint(4096, Duration::from_millis(250), Duration::from_millis(400), true, now);
    e.telemetry_mut().record_checkpoint(0, Duration::ZERO, Duration::ZERO, false, now);
    let f = gather(&e);
    assert_eq!(counter_value(&f, "rankpulse_checkpoints_total", &[]), 1.0);
    assert_eq!(counter_value(&f, "rankpulse_checkpoint_failures_total", &[]), 1.0);
    assert_eq!(gauge_value(&f, "rankpulse_checkpoint_bytes", &[]), 4096.0);
    assert_eq!(gauge_value(&f, "rankpulse_checkpoint_duration_seconds", &[]), 0.25);
    assert_eq!(gauge_value(&f, "rankpulse_checkpoint_acknowledged_seconds", &[]), 0.4);
    assert!(gauge_value(&f, "rankpulse_checkpoint_last_success_timestamp_seconds", &[]) > 1.6e9);
}

#[test]
fn window_and_ab_gauges_appear_only_for_closed_windows() {
    let open = gather(&traffic());
    for name in ["rankpulse_window_mean", "rankpulse_window_impressions", "rankpulse_window_start_timestamp_seconds"] {
        assert!(find(&open, name).is_none(), "{name} before any window closed");
    }
    assert!(!open
        .iter()
        .any(|f| f.name().starts_with("rankpulse_ab_") && f.name() != "rankpulse_ab_impressions_without_unit_total"));

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
    let has = |name: &str, window| find(&f, name).unwrap().get_metric().iter().any(|m| labels_of(m) == labels(window));
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
    e.telemetry_mut().record_processing_time(Duration::from_micros(250));
    e.telemetry_mut().record_processing_time(Duration::from_micros(750));
    let f = gather(&e);
    let delay = series(&f, "rankpulse_first_engagement_delay_seconds", &[P0]).get_histogram();
    assert_eq!((delay.get_sample_sum(), delay.get_sample_count()), (0.5 + 1.5 + 0.0, 3));
    // 0 ms (recorded as 1 ms), 500 ms and 1500 ms: cumulative counts up to each bound.
    let buckets: Vec<(f64, u64)> =
        delay.get_bucket().iter().map(|b| (b.upper_bound(), b.cumulative_count())).take(5).collect();
    assert_eq!(buckets, [(0.1, 1), (0.25, 1), (0.5, 2), (1.0, 2), (2.5, 3)]);
    assert_eq!(delay.get_bucket().last().map(|b| b.cumulative_count()), Some(3));
    let processing = find(&f, "rankpulse_event_processing_seconds").unwrap().get_metric()[0].get_summary();
    assert_eq!((processing.sample_sum(), processing.sample_count()), (1_000_000.0 * 1e-9, 2), "kept in nanoseconds");
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
            "rankpulse_changelog",
            "rankpulse_input_key",
            "rankpulse_rebalances",
            "rankpulse_partition_restores",
            "rankpulse_aggregates_",
            "rankpulse_state_bytes_sent",
            "process_",
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
