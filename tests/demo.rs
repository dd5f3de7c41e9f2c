//! `rankpulse demo` as a newcomer runs it: within a minute, `/metrics` shows treatment's MRR and
//! nDCG@10 above control's, the exposition passes `promtool check metrics`, and `--duration`
//! ends the process cleanly.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn demo_shows_treatment_beating_control_within_a_minute() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let daemon = Daemon::spawn(&["demo", "--listen", &listen, "--duration", "300"]);
    let labels = |variant: &'static str| [("experiment", "ranker-2026-11"), ("variant", variant)];
    let count = |m: &std::collections::BTreeMap<String, f64>, v| {
        m.get(&series("rankpulse_reciprocal_rank_count", &labels(v))).copied().unwrap_or(0.0)
    };
    let (exposition, m) =
        scrape_until(port, Duration::from_secs(60), |m| count(m, "control") >= 300.0 && count(m, "treatment") >= 300.0);

    let mean = |name: &str, variant, extra: &[(&str, &str)]| {
        let mut l = labels(variant).to_vec();
        l.extend_from_slice(extra);
        m[&series(&format!("{name}_sum"), &l)] / m[&series(&format!("{name}_count"), &l)]
    };
    let mrr = (mean("rankpulse_reciprocal_rank", "control", &[]), mean("rankpulse_reciprocal_rank", "treatment", &[]));
    let ndcg10 = [("k", "10"), ("gain", "linear")];
    let ndcg = (mean("rankpulse_ndcg", "control", &ndcg10), mean("rankpulse_ndcg", "treatment", &ndcg10));
    eprintln!(
        "demo after warm-up: MRR control {:.3} treatment {:.3}; nDCG@10 control {:.3} treatment {:.3}",
        mrr.0, mrr.1, ndcg.0, ndcg.1
    );
    assert!(mrr.1 > mrr.0 + 0.05, "treatment MRR should be clearly higher: {mrr:?}");
    assert!(ndcg.1 > ndcg.0 + 0.05, "treatment nDCG@10 should be clearly higher: {ndcg:?}");
    assert!(m.keys().any(|k| k.starts_with("rankpulse_events_rejected_total")), "rejects are exported");
    promtool_check(&exposition);

    let (status, took) = daemon.terminate(Duration::from_secs(10));
    assert!(status.success() && took < Duration::from_secs(5), "demo exited with {status:?} after {took:?}");
}
