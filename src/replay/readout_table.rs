//! The text report's read-out of each comparison: the Bayesian chance to beat control and
//! risks, the minimum detectable effect and ETA, the adjusted p-value, CUPED's adjusted
//! difference, and the guardrails (the figures are `crate::experiments::readout`'s).

use crate::experiments::ExperimentReport;
use crate::stats::Comparison;

fn p(p: Option<f64>) -> String {
    p.map_or("-".to_string(), |p| format!("{p:.2e}"))
}

fn percent(x: Option<f64>) -> String {
    x.map_or("-".to_string(), |x| format!("{:.1}%", 100.0 * x))
}

/// The read-out lines of one experiment's comparisons, for MRR, abandonment and nDCG; without
/// `full` (`--readout`), only the guardrails' verdicts: an alarm the configuration asked for.
pub(super) fn readout_summary(report: &ExperimentReport, full: bool) -> String {
    let mut out = String::new();
    let headline = |key: &str| key == "mrr" || key == "abandonment_rate" || key.starts_with("ndcg@");
    for comparison in &report.comparisons {
        let shown: Vec<&(String, Comparison)> = comparison.metrics.iter().filter(|(k, _)| headline(k)).collect();
        if full && shown.iter().any(|(_, c)| c.bayesian.is_some() || c.power.is_some()) {
            let name = format!("{} - {}", comparison.variant, comparison.control);
            out.push_str(&figures(report, &name, &shown));
        }
        for (key, c) in &comparison.metrics {
            if let Some(g) = &c.guardrail {
                let verdict = if g.failed { "WORSE" } else { "not worse" };
                out.push_str(&format!(
                    "guardrail {key}: {verdict} ({} is worse; one-sided p = {})\n",
                    g.worse_when,
                    p(Some(g.p_value))
                ));
            }
        }
    }
    out
}

/// Chance to win, risks, MDE, ETA and adjusted p of `shown`, then CUPED's figures.
fn figures(report: &ExperimentReport, name: &str, shown: &[&(String, Comparison)]) -> String {
    let mut out = format!(
        "{name:<18} {:>9} {:>21} {:>9} {:>10} {:>14}\n",
        "P(win)",
        "risk keep / ship",
        "MDE",
        "ETA",
        format!("p ({})", report.correction),
    );
    for (key, c) in shown {
        let risk = c.bayesian.map_or("-".to_string(), |b| format!("{:.4} / {:.4}", b.risk_control, b.risk_treatment));
        let eta = c.power.and_then(|p| p.eta_seconds).map_or("-".to_string(), eta);
        out.push_str(&format!(
            "{key:<18} {:>9} {:>21} {:>9} {:>10} {:>14}\n",
            percent(c.bayesian.map(|b| b.chance_to_win)),
            risk,
            percent(c.power.and_then(|p| p.relative_mde)),
            eta,
            p(c.adjusted_p_value),
        ));
    }
    let adjusted: Vec<_> = shown.iter().filter_map(|(k, c)| c.cuped.as_ref().map(|a| (k, a))).collect();
    if adjusted.is_empty() {
        return out;
    }
    out.push_str(&format!(
        "{:<18} {:>10} {:>24} {:>10} {:>10} {:>12}\n",
        "CUPED",
        "difference",
        format!("{:.0}% interval", report.confidence * 100.0),
        "p",
        "var. red.",
        "pre-period"
    ));
    for (key, a) in adjusted {
        let d = &a.difference;
        out.push_str(&format!(
            "{key:<18} {:>+10.4} {:>24} {:>10} {:>10} {:>12}\n",
            d.estimate,
            format!("[{:+.4}, {:+.4}]", d.ci[0], d.ci[1]),
            p(Some(d.p_value)),
            percent(Some(a.variance_reduction)),
            format!("{} units", a.units_with_pre_period.iter().sum::<u64>()),
        ));
    }
    out
}

/// Event-time seconds as people read them.
fn eta(seconds: f64) -> String {
    match seconds {
        s if s <= 0.0 => "reached".to_string(),
        s if s < 3600.0 => format!("{:.0} min", s / 60.0),
        s if s < 172_800.0 => format!("{:.1} h", s / 3600.0),
        s => format!("{:.1} d", s / 86_400.0),
    }
}
