//! The exposition's window and A/B families: the newest closed event-time window of each size
//! (means, impressions, start) and the A/B feed over those windows and the cumulative report
//! (differences, intervals, p-values, sample-ratio tests, anytime-valid figures). They describe
//! the replica's experiment-wide view, so they carry no `partition` label.

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

use super::prometheus::{counter, family, gauge, label};
use crate::engine::Engine;
use crate::experiments::{ExperimentReport, Span, CUMULATIVE};

/// The newest closed event-time window of each size: every metric's mean per group, the
/// group's impressions, and the window's start.
pub(super) fn window_gauges(engine: &Engine) -> Vec<MetricFamily> {
    let groups = engine.groups();
    let keys = engine.layout().keys();
    let mut means = Vec::new();
    let mut starts = Vec::new();
    let mut window_impressions = Vec::new();
    for closed in engine.newest_closed() {
        let window = engine.window_label(closed.size_index);
        starts.push(gauge(vec![label("window", window)], closed.start as f64 / 1000.0));
        for (group, stats) in closed.groups.iter().filter(|&(g, _)| !groups.is_breakdown(g)) {
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
    let mut families = vec![
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
    ];
    if let Some(skipped) = engine.windows_skipped() {
        let reasons = [
            ("incomplete", skipped.incomplete),
            ("unwritten", skipped.unwritten),
            ("unpublished", skipped.unpublished),
        ];
        families.push(family(
            "rankpulse_ab_windows_skipped_total",
            "Windows closed on every partition that were never looks nor A/B feed records (they are in the cumulative figures), by reason: a partition's part unseen by this replica (incomplete), dropped past the limit while changelog writes failed (unwritten), or past the publisher's backlog limit while its deliveries failed (unpublished).",
            MetricType::COUNTER,
            reasons.iter().map(|&(reason, n)| counter(vec![label("reason", reason)], n as f64)).collect(),
        ));
        families.push(family(
            "rankpulse_aggregates_increments_skipped_total",
            "Aggregates increments this replica did not apply: of a chain it does not hold (a replica that lost the partition, a base not seen), or after a record of its chain was lost; the partition's next base is applied whole.",
            MetricType::COUNTER,
            vec![counter(vec![], engine.aggregates_increments_skipped() as f64)],
        ));
        families.push(family(
            "rankpulse_aggregates_windows_unwritten",
            "Closed windows of this replica's partitions that no acknowledged aggregates record carried yet: the experiment-wide view's backlog from this replica (a catch-up closes many windows at once; the next records carry them).",
            MetricType::GAUGE,
            vec![gauge(vec![], engine.unwritten_windows_total() as f64)],
        ));
    }
    families
}

/// The reports every comparison family reads: the newest closed window of each size, then the
/// cumulative one (`window = CUMULATIVE`).
pub(super) fn reports_per_window(engine: &Engine) -> Vec<(&str, Vec<ExperimentReport>)> {
    let windows = engine.newest_closed().map(|closed| {
        let window = engine.window_label(closed.size_index);
        let span =
            Span::Window { label: window, start: closed.start, size_ms: engine.window_size_ms(closed.size_index) };
        (window, engine.experiment_reports(&closed.groups, span))
    });
    let cumulative =
        std::iter::once((CUMULATIVE, engine.experiment_reports(&engine.ab_cumulative(), Span::Cumulative)));
    windows.chain(cumulative).collect()
}

/// The labels of one comparison's series: experiment, variant, metric and window.
pub(super) fn comparison_labels(experiment: &str, variant: &str, metric: &str, window: &str) -> [LabelPair; 4] {
    [label("experiment", experiment), label("variant", variant), label("metric", metric), label("window", window)]
}

/// Adds a gauge of `value` when there is one and it is finite: a comparison without enough
/// data has no series rather than a NaN.
pub(super) fn push_finite(into: &mut Vec<Metric>, labels: &[LabelPair], value: Option<f64>) {
    if let Some(v) = value.filter(|v| v.is_finite()) {
        into.push(gauge(labels.to_vec(), v));
    }
}

/// The A/B feed of the newest closed window of each size: treatment minus control per metric,
/// its confidence interval and Welch p-value, and the sample-ratio test per experiment; and the
/// anytime-valid figures of those windows and of the cumulative report (`window="cumulative"`).
pub(super) fn ab_families(reports_per_window: &[(&str, Vec<ExperimentReport>)]) -> Vec<MetricFamily> {
    let (mut difference, mut lower, mut upper, mut p_values, mut srm) = Default::default();
    let (mut cs_lower, mut cs_upper, mut always_valid, mut ssrm, mut cs_empty) = Default::default();
    let push = push_finite;
    for (window, reports) in reports_per_window {
        let fixed_horizon = *window != CUMULATIVE;
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
                    let labels = comparison_labels(&report.experiment, &comparison.variant, metric, window);
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
