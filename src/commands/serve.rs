//! `rankpulse serve`: the daemon against real Kafka brokers. It starts with no state: each
//! partition's state comes from the changelog topic when the partition is assigned. A
//! judgment list is loaded first (a broken one stops the start) and then watched for changes.

use std::path::Path;
use std::sync::Arc;

use crate::config::Config;
use crate::engine::{Engine, SharedEngine};
use crate::judgments::JudgmentSource;
use crate::pipeline;
use crate::shutdown::Shutdown;
use crate::source::Durability;

pub fn run(config: &Path) -> anyhow::Result<()> {
    let cfg = Config::load(Some(config))?;
    let mut engine = Engine::new(&cfg);
    let judgments = JudgmentSource::from_config(&cfg.judgments)?;
    if let Some(judgments) = &judgments {
        engine.set_judgments(Arc::clone(judgments));
    }
    let engine = SharedEngine::new(engine);
    let durability = Durability { state: cfg.state.clone() };
    super::runtime()?.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.on_signals();
        if let Some(judgments) = judgments {
            tokio::spawn(judgments.watch(cfg.judgments.reload_interval.as_duration(), shutdown.clone()));
        }
        pipeline::run(&cfg, engine, shutdown, Some(durability)).await
    })
}
