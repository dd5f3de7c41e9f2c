//! The replay report: what `rankpulse replay` prints, as the contract's JSON document or as
//! plain-text tables (metrics by group and the A/B summary; on request the newest windows and
//! the precision-recall curve), built from a finished engine.

use serde::Serialize;

use crate::accumulate::{GroupStats, GroupTable, Groups};
use crate::engine::{Counters, Engine};
use crate::event::{EventKind, RejectReason};
use crate::experiments::breakdown::{DimensionsReport, Which};
use crate::experiments::{ExperimentReport, Span};
use crate::ids::GroupId;
use crate::metrics::{recall_level_label, MetricLayout, RECALL_LEVELS};
use crate::time::format_rfc3339_ms;

/// The replay document of the contract (`--format json`); extra keys are allowed.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Every group's means over the whole replay: the headline numbers.
    pub groups: Vec<GroupReport>,
    /// Every closed window of every configured size, oldest first per size, to see trends.
    pub windows: Vec<WindowReport>,
    /// Where the input went: what a reader needs to trust (or doubt) the metrics.
    pub events: EventCounts,
    /// The A/B feed over every impression, one entry per experiment.
    pub experiments: Vec<ExperimentReport>,
    /// The unit the A/B statistics used, and whether the data suggests another one.
    pub ab_unit: AbUnitReport,
    /// Each experiment per value of each dimension (`ab.dimensions`), cumulatively: the
    /// A/B API's `/dimensions` document per experiment; left out without dimensions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub breakdowns: Vec<DimensionsReport>,
}

/// `ab.unit` as replayed: a per-impression unit on traffic assigned per client makes intervals
/// too narrow and the split test raise false alarms, which reads like a broken experiment.
#[derive(Debug, Serialize)]
pub struct AbUnitReport {
    /// `ab.unit`: `impression`, `client_id` or `session_id`.
    pub unit: &'static str,
    /// Impressions that carried a `client_id` the `impression` unit ignored (0 for other units).
    pub impressions_with_unused_client_id: u64,
}

/// What the plain-text report shows besides the cumulative figures and the A/B summary, so the
/// default fits a screen (`--format json` always has everything).
#[derive(Debug, Clone, Copy, Default)]
pub struct TableOptions {
    /// `--windows`: the newest closed window of each configured size.
    pub windows: bool,
    /// `--curve`: the 11-point interpolated precision-recall curve of each group.
    pub curve: bool,
    /// `--readout`: each comparison's chance to win, risks, power and CUPED (guardrails are
    /// shown whenever `ab.guardrails` names any).
    pub readout: bool,
    /// `--breakdown`: each experiment per value of each dimension (`ab.dimensions`).
    pub breakdown: bool,
}

#[derive(Debug, Serialize)]
pub struct GroupReport {
    /// The group's experiment (`"none"` for impressions in none).
    pub experiment: String,
    /// The group's variant (`"none"` for impressions in none).
    pub variant: String,
    /// Finalized impressions: the sample size behind every mean.
    pub impressions: u64,
    /// Finalized impressions with at least one attributed engagement.
    pub engaged: u64,
    /// Each metric's mean, keyed by its name (`ndcg@10`, `mrr`, ...), in the layout's order.
    pub metrics: serde_json::Map<String, serde_json::Value>,
    /// The means against the judgment list, over the group's impressions of judged queries;
    /// left out without any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged: Option<JudgedGroupReport>,
}

/// A group's figures against the judgment list.
#[derive(Debug, Serialize)]
pub struct JudgedGroupReport {
    /// Impressions whose query has judgments.
    pub impressions: u64,
    /// Each judged metric's mean over them (the metrics' names, then `coverage@k`, then the
    /// measures for incomplete judgments: `bpref`, `map_condensed@k`, `ndcg_condensed@k`, each
    /// over the impressions it was computed for).
    pub metrics: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Serialize)]
pub struct WindowReport {
    /// The window size as configured (`"1h"`), which groups windows in the table.
    pub size: String,
    /// The window's start, RFC 3339.
    pub start: String,
    /// Every group's means within the window.
    pub groups: Vec<GroupReport>,
    /// The A/B feed of this window, one entry per experiment.
    pub experiments: Vec<ExperimentReport>,
}

#[derive(Debug, Serialize)]
pub struct EventCounts {
    /// Impression lines read, rejected ones included.
    pub impressions_read: u64,
    /// Engagement lines read, rejected ones included.
    pub engagements_read: u64,
    /// Lines of either file that did not decode or broke a limit.
    pub rejected: u64,
    /// The rejected lines of each file by reason: what to fix.
    pub rejected_by_reason: RejectedByReason,
    /// Impressions whose query was pending or recently finalized: dropped, the first counts.
    pub impressions_duplicate: u64,
    /// Impressions whose attribution window had already closed when they arrived.
    pub impressions_late: u64,
    /// Engagements that counted towards an impression's metrics.
    pub engagements_attributed: u64,
    /// Engagements behind the watermark, or whose impression was already finalized.
    pub engagements_late: u64,
    /// Engagements held for an impression that never arrived.
    pub engagements_orphaned: u64,
    /// Engagements on a result the impression did not show.
    pub engagements_not_shown: u64,
    /// Engagements after their impression's attribution window.
    pub engagements_outside_window: u64,
}

/// Each file's rejected lines by reason label (`invalid_json`, ...), in the order of
/// [`RejectReason::ALL`]; a reason with no rejected line is left out.
#[derive(Debug, Serialize)]
pub struct RejectedByReason {
    /// The impressions file's.
    pub impressions: serde_json::Map<String, serde_json::Value>,
    /// The engagements file's.
    pub engagements: serde_json::Map<String, serde_json::Value>,
}

impl RejectedByReason {
    fn from_counters(c: &Counters) -> Self {
        let of = |kind: EventKind| {
            RejectReason::ALL
                .into_iter()
                .map(|r| (r.label().to_string(), c.rejected[kind.index()][r.index()]))
                .filter(|(_, n)| *n > 0)
                .map(|(label, n)| (label, n.into()))
                .collect()
        };
        RejectedByReason { impressions: of(EventKind::Impression), engagements: of(EventKind::Engagement) }
    }
}

/// The table's lines on each file's rejected lines by reason, and on files without events.
fn input_notes(e: &EventCounts) -> String {
    let mut out = String::new();
    for (kind, read, reasons) in [
        ("impression", e.impressions_read, &e.rejected_by_reason.impressions),
        ("engagement", e.engagements_read, &e.rejected_by_reason.engagements),
    ] {
        if read == 0 {
            out.push_str(&format!("note: the {kind}s file has no events (it is empty or blank)\n"));
        }
        if !reasons.is_empty() {
            let counts: Vec<String> = reasons.iter().map(|(reason, n)| format!("{reason} {n}")).collect();
            out.push_str(&format!("rejected {kind} lines by reason: {}\n", counts.join(", ")));
        }
    }
    out
}

fn group_reports(layout: &MetricLayout, groups: &Groups, table: &GroupTable) -> Vec<GroupReport> {
    let mut out: Vec<GroupReport> = table
        .iter()
        .filter(|&(id, _)| !groups.is_breakdown(id))
        .map(|(id, stats)| group_report(layout, groups, id, stats))
        .collect();
    out.sort_by(|a, b| (&a.experiment, &a.variant).cmp(&(&b.experiment, &b.variant)));
    out
}

fn group_report(layout: &MetricLayout, groups: &Groups, id: GroupId, stats: &GroupStats) -> GroupReport {
    let (experiment, variant) = groups.name(id);
    GroupReport {
        experiment: experiment.to_string(),
        variant: variant.to_string(),
        impressions: stats.impressions,
        engaged: stats.engaged,
        metrics: layout
            .keys()
            .iter()
            .enumerate()
            .map(|(slot, key)| (key.name(), serde_json::json!(stats.mean(slot))))
            .collect(),
        judged: layout.judged().and_then(|block| {
            let judged = stats.sum(block.count_slot()).round();
            (judged > 0.0).then(|| JudgedGroupReport {
                impressions: judged as u64,
                metrics: block
                    .named_slots()
                    .into_iter()
                    .filter_map(|(name, slot)| {
                        let count = stats.sum(block.count_slot_of(slot)).round();
                        (count > 0.0).then(|| (name, serde_json::json!(stats.sum(slot) / count)))
                    })
                    .collect(),
            })
        }),
    }
}

impl Report {
    /// Builds the report from a finished engine (closed windows are taken from it).
    pub fn from_engine(engine: &mut Engine) -> Report {
        let mut closed = engine.take_closed_windows();
        closed.sort_by_key(|w| (w.size_index, w.start));
        let layout = engine.layout();
        let groups = engine.groups();
        let windows: Vec<WindowReport> = closed
            .iter()
            .map(|w| {
                let label = engine.window_label(w.size_index);
                let span = Span::Window { label, start: w.start, size_ms: engine.window_size_ms(w.size_index) };
                WindowReport {
                    size: label.to_string(),
                    start: format_rfc3339_ms(w.start),
                    groups: group_reports(layout, groups, &w.groups),
                    experiments: engine.experiment_reports(&w.groups, span),
                }
            })
            .collect();
        let c = engine.counters();
        let t = engine.engagement_tally();
        let cumulative = engine.cumulative();
        let experiments = engine.experiment_reports(&cumulative, Span::Cumulative);
        let breakdowns =
            experiments.iter().filter_map(|r| engine.dimensions_report(&r.experiment, Which::All)).collect();
        Report {
            breakdowns,
            groups: group_reports(layout, groups, &cumulative),
            experiments,
            windows,
            events: EventCounts {
                impressions_read: c.consumed[0],
                engagements_read: c.consumed[1],
                rejected: c.rejected.iter().flatten().sum(),
                rejected_by_reason: RejectedByReason::from_counters(&c),
                impressions_duplicate: c.impressions_duplicate,
                impressions_late: c.impressions_late,
                engagements_attributed: t.attributed,
                engagements_late: t.late,
                engagements_orphaned: t.orphaned,
                engagements_not_shown: t.not_shown,
                engagements_outside_window: t.outside_window,
            },
            ab_unit: AbUnitReport {
                unit: engine.ab().unit.label(),
                impressions_with_unused_client_id: c.impressions_with_unused_client_id,
            },
        }
    }

    /// Plain-text tables, metrics as rows and groups as columns: cumulatively, the A/B summary,
    /// and what `options` adds.
    pub fn to_table(&self, options: TableOptions) -> String {
        let mut out = String::new();
        out.push_str("== cumulative ==\n");
        out.push_str(&table(&self.groups));
        if options.curve {
            out.push_str("\n== interpolated precision-recall curve (11 points, cumulative) ==\n");
            out.push_str(&precision_recall_curve(&self.groups));
        }
        out.push_str(&self.unit_lines());
        out.push_str(&ab_summary(&self.experiments, options.readout));
        if options.breakdown {
            out.push_str(&super::breakdown_table::breakdown_summary(&self.breakdowns));
        }
        out.push_str(&judged_summary(&self.groups, &self.experiments));
        out.push_str(&interleaving_summary(&self.experiments));
        if options.windows {
            out.push_str(&self.window_tables());
        }
        let e = &self.events;
        out.push_str(&format!(
            "\nevents: {} impressions and {} engagements read, {} rejected; {} engagements attributed, {} late, {} orphaned, {} on results not shown, {} outside the attribution window; {} duplicate and {} late impressions\n",
            e.impressions_read, e.engagements_read, e.rejected, e.engagements_attributed, e.engagements_late, e.engagements_orphaned,
            e.engagements_not_shown, e.engagements_outside_window, e.impressions_duplicate, e.impressions_late
        ));
        out.push_str(&input_notes(e));
        let more: Vec<&str> = [
            (!options.windows).then_some("--windows for the newest window of each size"),
            (!options.curve).then_some("--curve for the precision-recall curve"),
            (!options.readout).then_some("--readout for chance to win, risk, power and CUPED"),
        ]
        .into_iter()
        .flatten()
        .chain(["--format json for everything"])
        .collect();
        out.push_str(&format!("(more: {})\n", more.join(", ")));
        out
    }

    /// The newest closed window of each configured size, after how many there were.
    fn window_tables(&self) -> String {
        let mut out = String::new();
        let mut sizes: Vec<&str> = self.windows.iter().map(|w| w.size.as_str()).collect();
        sizes.dedup();
        for size in sizes {
            let windows: Vec<&WindowReport> = self.windows.iter().filter(|w| w.size == size).collect();
            out.push_str(&format!(
                "\n== {} windows of {size} (newest shown: {}) ==\n",
                windows.len(),
                windows.last().map_or("", |w| &w.start)
            ));
            if let Some(last) = windows.last() {
                out.push_str(&table(&last.groups));
            }
        }
        out
    }

    /// The A/B unit used, and a warning when impressions carry a client id it ignores.
    fn unit_lines(&self) -> String {
        let u = &self.ab_unit;
        let mut out = format!("\nA/B unit: {} (ab.unit)\n", u.unit);
        if u.impressions_with_unused_client_id > 0 {
            out.push_str(&format!(
                "warning: {} impressions carry a client_id, but ab.unit = \"impression\" treats each as independent.\n  If variants are assigned per client, the intervals are too narrow and the split test raises\n  false alarms: set ab.unit = \"client_id\" (as config/replay-demo.toml does).\n",
                u.impressions_with_unused_client_id
            ));
        }
        out
    }
}

/// The figures against the judgment list (cumulative), when any impression was judged: each
/// group's judged share, coverage and headline metrics, then each variant against its control.
fn judged_summary(groups: &[GroupReport], experiments: &[ExperimentReport]) -> String {
    let judged: Vec<(&GroupReport, &JudgedGroupReport)> =
        groups.iter().filter_map(|g| g.judged.as_ref().map(|j| (g, j))).collect();
    let Some((_, first)) = judged.first() else { return String::new() };
    // bpref and nDCG' beside the plain nDCG and coverage: how much of the plain figures'
    // standing is owed to unjudged results.
    let headline = |key: &str| {
        key == "mrr" || key == "bpref" || ["ndcg@", "ndcg_condensed@", "coverage@"].iter().any(|p| key.starts_with(p))
    };
    let width = judged.iter().map(|(g, _)| g.experiment.len() + g.variant.len() + 1).max().unwrap_or(0).max(10);
    let mut out = "\n== judged (cumulative, against the judgment list) ==\n".to_string();
    out.push_str(&format!("{:<18}", "metric"));
    for (g, _) in &judged {
        out.push_str(&format!(" {:>width$}", format!("{}/{}", g.experiment, g.variant)));
    }
    out.push('\n');
    let mut row = |name: &str, cell: &dyn Fn(&GroupReport, &JudgedGroupReport) -> String| {
        out.push_str(&format!("{name:<18}"));
        for (g, j) in &judged {
            out.push_str(&format!(" {:>width$}", cell(g, j)));
        }
        out.push('\n');
    };
    row("judged", &|_, j| j.impressions.to_string());
    row("judged share", &|g, j| format!("{:.4}", j.impressions as f64 / g.impressions.max(1) as f64));
    for key in first.metrics.keys().filter(|k| headline(k)) {
        row(key, &|_, j| j.metrics.get(key).and_then(|v| v.as_f64()).map_or("-".into(), |v| format!("{v:.4}")));
    }
    let p = |p: Option<f64>| p.map_or("-".to_string(), |p| format!("{p:.2e}"));
    for report in experiments {
        let Some(judged) = &report.judged else { continue };
        for comparison in &judged.comparisons {
            let compared =
                |k: &str| k == "mrr" || k == "bpref" || k.starts_with("ndcg@") || k.starts_with("ndcg_condensed@");
            for (key, c) in comparison.metrics.iter().filter(|(k, _)| compared(k)) {
                let ci = c.difference_ci.map_or("-".to_string(), |[lo, hi]| format!("[{lo:+.4}, {hi:+.4}]"));
                out.push_str(&format!(
                    "{} {} - {}: judged {key} {:+.4} {ci}, p = {}\n",
                    report.experiment,
                    comparison.variant,
                    comparison.control,
                    c.difference,
                    p(c.p_value)
                ));
            }
        }
    }
    out
}

/// Every interleaved comparison (cumulative): outcomes, then each pair's preference with its
/// interval and p-values.
fn interleaving_summary(experiments: &[ExperimentReport]) -> String {
    let mut out = String::new();
    let p = |p: Option<f64>| p.map_or("-".to_string(), |p| format!("{p:.2e}"));
    for report in experiments {
        for il in &report.interleaving {
            out.push_str(&format!(
                "\n== interleaving {}: {} (cumulative, unit {}) ==\n",
                report.experiment, il.variant, report.unit
            ));
            let wins: Vec<String> = il.wins.iter().map(|(r, n)| format!("{r} {n}")).collect();
            out.push_str(&format!(
                "{} impressions, {} with credit; wins: {}; ties: {}\n",
                il.impressions,
                il.engaged,
                wins.join(", "),
                il.ties
            ));
            for pair in &il.pairs {
                let f = &pair.figures;
                let ci = f.preference_ci.map_or("-".to_string(), |[lo, hi]| format!("[{lo:+.4}, {hi:+.4}]"));
                let cs = if f.preference_cs_empty {
                    "empty: the preference changed over time".to_string()
                } else {
                    f.preference_cs.map_or("-".to_string(), |[lo, hi]| format!("[{lo:+.4}, {hi:+.4}]"))
                };
                out.push_str(&format!(
                    "{} over {}: preference {:+.4} {ci}; sign test p = {} ({}); always-valid p = {}, sequence {cs}\n",
                    pair.ranker,
                    pair.opponent,
                    f.preference,
                    p(f.sign_test_p_value),
                    f.sign_test,
                    p(f.always_valid_p_value)
                ));
            }
        }
    }
    out
}

/// Every variant against its control on the headline metrics (cumulative), and the split test;
/// `--format json` has every metric.
fn ab_summary(experiments: &[ExperimentReport], readout: bool) -> String {
    let mut out = String::new();
    for report in experiments.iter().filter(|r| !r.comparisons.is_empty() || r.sample_ratio.is_some()) {
        out.push_str(&format!("\n== A/B {} (cumulative, unit {}) ==\n", report.experiment, report.unit));
        if let Some(srm) = &report.sample_ratio {
            let observed: Vec<String> = srm.observed.iter().map(|(v, n)| format!("{v} {n}")).collect();
            let sequential = srm.sequential_p_value.map_or("-".to_string(), |p| format!("{p:.2e}"));
            out.push_str(&format!(
                "split test ({}): {}; chi-square {:.2}, p = {:.2e}; sequential p = {sequential}{}\n",
                srm.counted,
                observed.join(", "),
                srm.chi_square,
                srm.p_value,
                if srm.p_value < 0.001 || srm.sequential_p_value.is_some_and(|p| p < 0.001) {
                    "  << SAMPLE RATIO MISMATCH: comparisons are not trustworthy"
                } else {
                    ""
                }
            ));
        }
        let headline = |key: &str| key == "mrr" || key == "abandonment_rate" || key.starts_with("ndcg@");
        let interval = |ci: Option<[f64; 2]>| ci.map_or("-".to_string(), |[lo, hi]| format!("[{lo:+.4}, {hi:+.4}]"));
        let p = |p: Option<f64>| p.map_or("-".to_string(), |p| format!("{p:.2e}"));
        let level = format!("{:.0}%", report.confidence * 100.0);
        for comparison in &report.comparisons {
            out.push_str(&format!(
                "{:<18} {:>10} {:>10} {:>10} {:>24} {:>10}\n",
                format!("{} - {}", comparison.variant, comparison.control),
                comparison.control,
                comparison.variant,
                "difference",
                format!("{level} interval"),
                "p"
            ));
            for (key, c) in comparison.metrics.iter().filter(|(k, _)| headline(k)) {
                let mean = |variant: &str| {
                    report
                        .variants
                        .iter()
                        .find(|v| v.variant == variant)
                        .and_then(|v| v.metrics.iter().find(|(k, _)| k == key))
                        .map_or(f64::NAN, |(_, e)| e.mean)
                };
                out.push_str(&format!(
                    "{key:<18} {:>10.4} {:>10.4} {:>+10.4} {:>24} {:>10}\n",
                    mean(&comparison.control),
                    mean(&comparison.variant),
                    c.difference,
                    interval(c.difference_ci),
                    p(c.p_value)
                ));
            }
        }
        // The figures that stay valid however often they are looked at, and where each way of
        // watching would have stopped.
        let looks = &report.sequential;
        for comparison in report.comparisons.iter().filter(|_| looks.looks > 0) {
            out.push_str(&format!(
                "anytime-valid: {} looks (one per closed {} window) through {}, tuned for {} impressions\n",
                looks.looks,
                looks.look_window.as_deref().unwrap_or("-"),
                looks.through.as_deref().unwrap_or("-"),
                looks.sample_size,
            ));
            out.push_str(&format!(
                "{:<18} {:>24} {:>10} {:>12} {:>12}\n",
                format!("{} - {}", comparison.variant, comparison.control),
                format!("{level} sequence"),
                "p",
                "decided at",
                "Welch peek"
            ));
            let at = |s: &Option<crate::stats::SignificantAt>| {
                s.as_ref().map_or("-".to_string(), |s| s.impressions.to_string())
            };
            // The primary candidates only: MRR, abandonment and the deepest nDCG.
            let deepest_ndcg = comparison.metrics.iter().rev().find(|(k, _)| k.starts_with("ndcg@")).map(|(k, _)| k);
            let primary = |key: &String| key == "mrr" || key == "abandonment_rate" || Some(key) == deepest_ndcg;
            // An empty running intersection is no interval: said so, never printed inverted.
            let sequence = |c: &crate::stats::Comparison| {
                if c.difference_cs_empty {
                    "empty (see note)".to_string()
                } else {
                    interval(c.difference_cs)
                }
            };
            for (key, c) in comparison.metrics.iter().filter(|(k, _)| primary(k)) {
                out.push_str(&format!(
                    "{key:<18} {:>24} {:>10} {:>12} {:>12}\n",
                    sequence(c),
                    p(c.always_valid_p_value),
                    at(&c.always_valid_significant_at),
                    at(&c.fixed_horizon_significant_at)
                ));
            }
            out.push_str(&format!(
                "(decided at / Welch peek: impressions at the first look whose always-valid / Welch p-value was below {:.2})\n",
                1.0 - report.confidence
            ));
        }
        out.push_str(&super::readout_table::readout_summary(report, readout));
        for note in &report.notes {
            out.push_str(&format!("note: {note}\n"));
        }
    }
    out
}

/// The 11-point interpolated precision-recall curve of each group: one row per recall level,
/// each value with a bar (one `#` per 0.05), so control and treatment can be compared by eye.
fn precision_recall_curve(groups: &[GroupReport]) -> String {
    const BAR: usize = 20;
    if groups.is_empty() {
        return "(no finalized impressions)\n".to_string();
    }
    let width = groups.iter().map(|g| g.experiment.len() + g.variant.len() + 1).max().unwrap_or(0).max(BAR + 7);
    let mut out = format!("{:<8}", "recall");
    for g in groups {
        out.push_str(&format!(" {:<width$}", format!("{}/{}", g.experiment, g.variant)));
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    for level in 0..RECALL_LEVELS {
        let label = recall_level_label(level);
        out.push_str(&format!("{label:<8}"));
        for g in groups {
            let v = g.metrics.get(&format!("iprec@{label}")).and_then(|v| v.as_f64()).unwrap_or(0.0);
            let bar = "#".repeat((v * BAR as f64).round() as usize);
            out.push_str(&format!(" {:<width$}", format!("{v:.3} {bar}")));
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}

fn table(groups: &[GroupReport]) -> String {
    if groups.is_empty() {
        return "(no finalized impressions)\n".to_string();
    }
    let headers: Vec<String> = groups.iter().map(|g| format!("{}/{}", g.experiment, g.variant)).collect();
    let width = headers.iter().map(String::len).max().unwrap_or(0).max(10);
    let mut out = format!("{:<18}", "metric");
    for h in &headers {
        out.push_str(&format!(" {h:>width$}"));
    }
    out.push('\n');
    let row = |name: &str, cell: &dyn Fn(&GroupReport) -> String| {
        let mut line = format!("{name:<18}");
        for g in groups {
            line.push_str(&format!(" {:>width$}", cell(g)));
        }
        line.push('\n');
        line
    };
    out.push_str(&row("impressions", &|g| g.impressions.to_string()));
    out.push_str(&row("engaged", &|g| g.engaged.to_string()));
    // The interpolated precisions are the curve (`--curve`): eleven rows of one figure.
    for key in groups[0].metrics.keys().filter(|k| !k.starts_with("iprec@")) {
        out.push_str(&row(key, &|g| {
            g.metrics.get(key).and_then(|v| v.as_f64()).map_or("-".into(), |v| format!("{v:.4}"))
        }));
    }
    out
}
