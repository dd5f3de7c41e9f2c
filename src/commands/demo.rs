//! `rankpulse demo`: the whole pipeline against an in-process Kafka cluster with generated traffic.

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::Config;
use crate::demo::{backlog, DemoCluster, FaultRate, DUEL_AB_EXPERIMENT, DUEL_EXPERIMENT, EXPERIMENT};
use crate::engine::Engine;
use crate::engine::SharedEngine;
use crate::experiments::Span;
use crate::metrics::MetricKind;
use crate::shutdown::Shutdown;
use crate::time::HumanDuration;

/// The mean reciprocal rank per experiment and variant, as the demo prints it: the PromQL
/// chapter's query (docs/src/promql.md), over the last 5 minutes.
pub const MRR_PROMQL: &str = "sum by (experiment, variant) (rate(rankpulse_reciprocal_rank_sum[5m])) / sum by (experiment, variant) (rate(rankpulse_reciprocal_rank_count[5m]))";

/// The demo's configuration: the defaults, with windows short enough to see results in a minute.
pub fn demo_config(bootstrap_servers: &str, listen: SocketAddr) -> Config {
    let mut cfg = Config::default();
    cfg.kafka.brokers = bootstrap_servers.to_string();
    cfg.kafka.group_id = "rankpulse-demo".into();
    cfg.join.attribution_window = HumanDuration::from_millis(30_000);
    cfg.join.max_out_of_orderness = HumanDuration::from_millis(2_000);
    cfg.join.idle_timeout = HumanDuration::from_millis(10_000);
    cfg.metrics.windows = vec![HumanDuration::from_millis(60_000), HumanDuration::from_millis(300_000)];
    cfg.http.listen = listen.to_string();
    // The generator assigns variants per client, so clients are the independent unit.
    cfg.ab.unit = crate::config::AbUnit::ClientId;
    // The read-out with everything on: CUPED (whose pre-period is empty until the demo has
    // run for a day, so it adjusts nothing yet), abandonment as a guardrail, and the false
    // discovery rate over the experiment's metrics.
    cfg.ab.cuped.metrics = vec!["ndcg@10".into(), "mrr".into()];
    cfg.ab.guardrails = vec!["abandonment_rate".into()];
    cfg.ab.correction = crate::stats::multiple::Correction::BenjaminiHochberg;
    // Where it changed: per device (each client's, in its impressions' `dimensions`):
    // `/api/v1/experiments/ranker-2026-11/dimensions` and the experiment's page.
    cfg.ab.dimensions = vec!["device".into()];
    cfg
}

pub fn run(listen: SocketAddr, duration: Option<Duration>, rate: u32, faults: FaultRate) -> anyhow::Result<()> {
    let defaults = Config::default();
    let (impressions, engagements) = (&defaults.kafka.impressions_topic, &defaults.kafka.engagements_topic);
    let cluster = DemoCluster::start(impressions, engagements, rate, 2026, faults)?;
    let cfg = demo_config(&cluster.bootstrap_servers, listen);
    cfg.validate()?;
    let result = super::runtime()?.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.on_signals();
        if let Some(d) = duration {
            let s = shutdown.clone();
            tokio::spawn(async move {
                tokio::select! { _ = tokio::time::sleep(d) => s.trigger(), _ = s.wait() => {} }
            });
        }
        let engine = SharedEngine::new(Engine::new(&cfg));
        // The page first: what a newcomer opens.
        println!("rankpulse demo: open http://{listen}/ (the experiment page: figures within seconds, curves from the first complete minute)");
        println!(
            "  in-process Kafka at {} producing {rate} searches/s for experiment {EXPERIMENT} (control vs treatment), the last {}s of them already there",
            cluster.bootstrap_servers,
            backlog(rate).as_secs()
        );
        println!("  metrics:  http://{listen}/metrics   (attribution window 30s: a search's figures are final 30s after it)");
        // By experiment too: the demo's experiments share variant names (control, treatment),
        // and a sum by variant alone would mix them.
        println!("  MRR per experiment and variant in PromQL: {MRR_PROMQL}");
        println!("  A/B feed: http://{listen}/api/v1/experiments/{EXPERIMENT} (cumulative); ?window=1m the newest closed minute, once one has closed (within about a minute; until then it answers when it will)");
        println!("  interleaving: {DUEL_EXPERIMENT} shows two close rankers as one team-draft list; {DUEL_AB_EXPERIMENT} runs the same two as an A/B test on as many searches");
        if faults != FaultRate::NONE {
            // Said up front: the rejected-message warnings in the log are the demo's own doing.
            println!("  injecting faults: {faults} of impressions are followed by a malformed message (the WARNs about rejected messages); --faults 0 turns this off");
        }
        println!("  Ctrl-C to stop.");
        tokio::spawn(report_periodically(engine.clone(), shutdown.clone()));
        crate::pipeline::run(&cfg, engine, shutdown, None).await
    });
    cluster.stop();
    result
}

/// Prints MRR and nDCG@10 per variant every ten seconds, so the demo explains itself; the first
/// figures as soon as there are any (once the backlog is read), not at the next multiple of ten
/// seconds: a newcomer is waiting for them.
async fn report_periodically(engine: SharedEngine, shutdown: Shutdown) {
    const EVERY: Duration = Duration::from_secs(10);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut last_line = tokio::time::Instant::now();
    let mut figures_shown = false;
    loop {
        tokio::select! { _ = tick.tick() => {}, _ = shutdown.wait() => return }
        let engine = engine.lock();
        let first_figures = !figures_shown
            && engine
                .cumulative()
                .iter()
                .any(|(group, stats)| stats.impressions > 0 && engine.groups().name(group).0 == EXPERIMENT);
        if !first_figures && last_line.elapsed() < EVERY {
            continue;
        }
        figures_shown |= first_figures;
        last_line = tokio::time::Instant::now();
        let layout = engine.layout();
        let (Some(mrr), Some(ndcg)) =
            (layout.slot(MetricKind::ReciprocalRank, None), layout.slot(MetricKind::Ndcg, Some(10)))
        else {
            return;
        };
        let mut line = format!("pending {:>5}", engine.pending_impressions());
        let cumulative = engine.cumulative();
        for (group, stats) in cumulative.iter() {
            let (experiment, variant) = engine.groups().name(group);
            if experiment == EXPERIMENT {
                line.push_str(&format!(
                    " | {variant}: n={} MRR={:.3} nDCG@10={:.3}",
                    stats.impressions,
                    stats.mean(mrr),
                    stats.mean(ndcg)
                ));
            }
        }
        println!("{line}");
        // The A/B feed over everything so far: what the experimentation team reads.
        for report in engine.experiment_reports(&cumulative, Span::Cumulative) {
            if report.experiment != EXPERIMENT {
                continue;
            }
            for comparison in &report.comparisons {
                let Some((_, mrr)) = comparison.metrics.iter().find(|(k, _)| k == "mrr") else { continue };
                let (Some([low, high]), Some(p)) = (mrr.difference_ci, mrr.p_value) else { continue };
                println!(
                    "  A/B {} - {}: MRR {:+.3} [{low:+.3}, {high:+.3}] p={p:.1e} | SRM p={}",
                    comparison.variant,
                    comparison.control,
                    mrr.difference,
                    report.sample_ratio.as_ref().map_or("-".to_string(), |s| format!("{:.3}", s.p_value))
                );
                // The figures that may be watched like this, at one look per closed minute.
                let sequence = match mrr.difference_cs {
                    Some([low, high]) => Some(format!("[{low:+.3}, {high:+.3}]")),
                    // Never printed inverted: see docs/src/anytime-valid.md, "Empty sequences".
                    None if mrr.difference_cs_empty => Some("sequence empty (the effect changed)".to_string()),
                    None => None,
                };
                if let (Some(sequence), Some(p)) = (sequence, mrr.always_valid_p_value) {
                    println!(
                        "      anytime-valid after {} looks: MRR {sequence} p={p:.1e}{} | sequential SRM p={}",
                        report.sequential.looks,
                        mrr.always_valid_significant_at
                            .as_ref()
                            .map_or(String::new(), |at| format!(" (decided at {} impressions)", at.impressions)),
                        report
                            .sample_ratio
                            .as_ref()
                            .and_then(|s| s.sequential_p_value)
                            .map_or("-".to_string(), |p| format!("{p:.3}"))
                    );
                }
            }
        }
        if let Some(line) = duel_line(&engine, &cumulative) {
            println!("{line}");
        }
    }
}

/// The interleaving duel against its A/B twin: the same two rankers, as many impressions.
fn duel_line(engine: &Engine, cumulative: &crate::accumulate::GroupTable) -> Option<String> {
    let reports = engine.experiment_reports(cumulative, Span::Cumulative);
    let duel = reports.iter().find(|r| r.experiment == DUEL_EXPERIMENT)?.interleaving.first()?;
    let pair = duel.pairs.first()?;
    let f = &pair.figures;
    let fmt_p = |p: Option<f64>| p.map_or("-".to_string(), |p| format!("{p:.1e}"));
    let mut line = format!(
        "  interleaving {} over {}: preference {:+.3} p={} (always-valid {}) on {} searches",
        pair.ranker,
        pair.opponent,
        f.preference,
        fmt_p(f.sign_test_p_value),
        fmt_p(f.always_valid_p_value),
        duel.impressions
    );
    let twin = reports.iter().find(|r| r.experiment == DUEL_AB_EXPERIMENT);
    if let Some(twin) = twin {
        let impressions: u64 = twin.variants.iter().map(|v| v.impressions).sum();
        let mrr = twin.comparisons.first().and_then(|c| c.metrics.iter().find(|(k, _)| k == "mrr"));
        if let Some((_, mrr)) = mrr {
            line.push_str(&format!(
                " | same rankers as A/B: MRR {:+.3} p={} on {impressions}",
                mrr.difference,
                fmt_p(mrr.p_value)
            ));
        }
    }
    Some(line)
}
