//! `rankpulse serve`: the daemon against real Kafka brokers. It starts with no state: each
//! partition's state comes from the changelog topic when the partition is assigned.

use std::path::Path;

use crate::config::Config;
use crate::engine::{Engine, SharedEngine};
use crate::pipeline;
use crate::shutdown::Shutdown;
use crate::source::Durability;

pub fn run(config: &Path) -> anyhow::Result<()> {
    let cfg = Config::load(Some(config))?;
    let engine = SharedEngine::new(Engine::new(&cfg));
    let durability = Durability { state: cfg.state.clone() };
    super::runtime()?.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.on_signals();
        pipeline::run(&cfg, engine, shutdown, Some(durability)).await
    })
}
