//! `rankpulse demo` as a newcomer runs it: within about a minute, `/metrics` shows treatment's MRR
//! and nDCG@10 above control's, the A/B feed calls the MRR difference significant (clustered by
//! client), the interleaving duel is scored (API, counters, the printed line), the exposition
//! passes `promtool check metrics`, and `--duration` ends the process cleanly.
//!
//! The links it prints answer from the start: the A/B feed's window link says, until its first
//! window closes, that it has not and when it will (the window it names is the one served
//! next), and an unknown experiment is called unknown. The printed PromQL groups by experiment
//! as well as variant (the demo's experiments share variant names).

use crate::common;

use std::time::Duration;

use common::*;

#[test]
fn demo_shows_treatment_beating_control_within_a_minute() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let daemon = Daemon::spawn(&["demo", "--listen", &listen, "--duration", "300"]);
    let printed = wait_for(
        std::time::Instant::now() + Duration::from_secs(60),
        Duration::from_millis(100),
        "the demo's links",
        || daemon.output().contains("Ctrl-C to stop.").then(|| daemon.output()),
    );
    let promql =
        printed.lines().find_map(|l| l.split_once("in PromQL: ")).map(|(_, q)| q.trim()).unwrap_or_else(|| {
            panic!("the demo prints a PromQL query: {printed}");
        });
    assert_eq!(promql.matches("sum by (experiment, variant)").count(), 2, "{promql}");
    assert!(!promql.contains("sum by (variant)"), "{promql}");
    let feed = printed.lines().find(|l| l.contains("A/B feed: ")).unwrap();
    assert!(feed.contains(&format!("http://{listen}/api/v1/experiments/ranker-2026-11")), "{feed}");

    // The window link, asked every half second until its first window closes: unknown before
    // the first impression, then not final, then not closed, naming the window served next.
    let window_link = "/api/v1/experiments/ranker-2026-11?window=1m";
    let mut answers: Vec<String> = Vec::new();
    let (first_window, served_at): (serde_json::Value, _) = wait_for(
        std::time::Instant::now() + Duration::from_secs(240),
        Duration::from_millis(500),
        "the first 1m window of the demo",
        || {
            let (status, body) = http_get(port, window_link)?;
            if status == 200 {
                return serde_json::from_str(&body).ok().map(|window| (window, chrono::Utc::now()));
            }
            assert_eq!(status, 404, "{body}");
            let error: serde_json::Value = serde_json::from_str(&body).unwrap();
            let error = error["error"].as_str().unwrap().to_string();
            if answers.last() != Some(&error) {
                answers.push(error);
            }
            None
        },
    );
    eprintln!("the window link before its first window closed:\n  {}", answers.join("\n  "));
    let kinds: Vec<&str> = answers
        .iter()
        .map(|a| {
            if a.starts_with(r#"unknown experiment "ranker-2026-11""#) {
                "unknown"
            } else if a.starts_with(r#"experiment "ranker-2026-11" has no finalized impressions yet"#) {
                "not final"
            } else if a.starts_with(r#"experiment "ranker-2026-11": no 1m window has closed yet; the next ends at "#) {
                "not closed"
            } else {
                panic!("an answer of the window link before its first window: {a}")
            }
        })
        .collect();
    let mut order = kinds.clone();
    order.dedup();
    assert!(order.windows(2).all(|w| w[0] != "not closed" && w[1] != "unknown"), "{answers:?}");
    let end = first_window["end"].as_str().unwrap();
    if order.ends_with(&["not closed"]) {
        // The window the last answer named is the one served: its end, closing an attribution
        // window (30 s) after.
        let named = answers.last().unwrap();
        let at = chrono::DateTime::parse_from_rfc3339(end).unwrap() + chrono::Duration::seconds(30);
        let at = at.with_timezone(&chrono::Utc).format("%Y-%m-%dT%H:%M:%SZ").to_string();
        assert!(
            named.contains(&format!("the next ends at {end} (event time) and closes when the watermark reaches {at}")),
            "{named} against the window served: {first_window}"
        );
    }
    // "Not closed" lasts from the first impression's finalization to the first window's close.
    // The demo's topics start with the minute of traffic before it (its backlog), so both can
    // come in the read of that backlog, when the first minute ended more than an attribution
    // window (30 s) and the allowed out-of-orderness (2 s) before the demo started, or a poll's
    // half second apart: then no answer said "not closed". Either way the window served had
    // closed, its end that long before the wall clock (the demo's event time) when it was served.
    let closes = chrono::DateTime::parse_from_rfc3339(end).unwrap() + chrono::Duration::seconds(32);
    assert!(
        closes <= served_at + chrono::Duration::seconds(1),
        "the first window, ending at {end}, was served at {served_at}, before it closed; the answers before: {answers:?}"
    );
    let (status, body) = http_get(port, "/api/v1/experiments/ranker-2099?window=1m").unwrap();
    assert_eq!(
        (status, body.as_str()),
        (404, r#"{"error":"unknown experiment \"ranker-2099\": no impression has named it"}"#)
    );
    let labels = |variant: &'static str| [("experiment", "ranker-2026-11"), ("variant", variant)];
    let count = |m: &std::collections::BTreeMap<String, f64>, v| {
        m.get(&series("rankpulse_reciprocal_rank_count", &labels(v))).copied().unwrap_or(0.0)
    };
    // 1,500 impressions per variant: the true MRR difference (about 0.09) is then more than
    // five standard errors away from zero and four from the 0.03 asserted below.
    let (exposition, m) = scrape_until(port, Duration::from_secs(120), |m| {
        count(m, "control") >= 1500.0 && count(m, "treatment") >= 1500.0
    });

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
    assert!(mrr.1 > mrr.0 + 0.03, "treatment MRR should be clearly higher: {mrr:?}");
    assert!(ndcg.1 > ndcg.0 + 0.03, "treatment nDCG@10 should be clearly higher: {ndcg:?}");

    let (status, body) = http_get(port, "/api/v1/experiments/ranker-2026-11").expect("the A/B API answers");
    assert_eq!(status, 200, "{body}");
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["unit"], "client_id", "the demo assigns variants per client");
    let mrr_test = &report["comparisons"][0]["metrics"]["mrr"];
    eprintln!("demo A/B, cumulative: MRR treatment - control {mrr_test}");
    assert_eq!(report["comparisons"][0]["variant"], "treatment");
    assert!(mrr_test["p_value"].as_f64().unwrap() < 0.05, "{mrr_test}");
    assert!(report["sample_ratio"]["p_value"].as_f64().unwrap() > 0.001, "the demo's split is fair: {report}");
    assert!(m.keys().any(|k| k.starts_with("rankpulse_events_rejected_total")), "rejects are exported");

    // The interleaving duel: scored on the same stream, in the API, on /metrics and on stdout.
    let (status, body) = http_get(port, "/api/v1/experiments/ranker-duel").expect("the A/B API answers");
    assert_eq!(status, 200, "{body}");
    let duel: serde_json::Value = serde_json::from_str(&body).unwrap();
    let comparison = &duel["interleaving"][0];
    assert_eq!(comparison["variant"], "baseline vs candidate", "{duel}");
    assert_eq!(comparison["rankers"], serde_json::json!(["baseline", "candidate"]));
    let pair = &comparison["pairs"][0];
    assert_eq!(
        (&pair["ranker"], &pair["opponent"], &pair["sign_test"]),
        (&"candidate".into(), &"baseline".into(), &"cluster-robust z".into())
    );
    let engaged = comparison["engaged"].as_u64().unwrap();
    let decided = pair["wins"].as_u64().unwrap() + pair["losses"].as_u64().unwrap();
    assert!(engaged > 100 && decided <= engaged, "{comparison}");
    let (_, body) = http_get(port, "/api/v1/experiments").unwrap();
    let listing: serde_json::Value = serde_json::from_str(&body).unwrap();
    let listed = listing["experiments"].as_array().unwrap().iter().find(|e| e["experiment"] == "ranker-duel").unwrap();
    assert_eq!(listed["interleaving"][0]["variant"], "baseline vs candidate", "{listed}");
    let duel_labels = [("experiment", "ranker-duel"), ("variant", "baseline vs candidate")];
    let interleaved: f64 = m
        .iter()
        .filter(|(k, _)| {
            k.starts_with("rankpulse_interleaved_impressions_total{")
                && duel_labels.iter().all(|(l, v)| k.contains(&format!("{l}=\"{v}\"")))
        })
        .map(|(_, v)| v)
        .sum();
    assert!(interleaved > 0.0, "interleaved impressions are counted on /metrics");
    wait_for(
        std::time::Instant::now() + Duration::from_secs(30),
        Duration::from_millis(500),
        "the duel's line",
        || daemon.output().contains("interleaving candidate over baseline: preference").then_some(()),
    );
    promtool_check(&exposition);

    let (status, took) = daemon.terminate(Duration::from_secs(10));
    assert!(status.success() && took < Duration::from_secs(5), "demo exited with {status:?} after {took:?}");
}
