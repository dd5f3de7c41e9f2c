//! `rankpulse serve`: the daemon against real Kafka brokers.

use std::path::Path;

use crate::config::Config;
use crate::engine::SharedEngine;
use crate::pipeline;
use crate::shutdown::Shutdown;

pub fn run(config: &Path) -> anyhow::Result<()> {
    let cfg = Config::load(Some(config))?;
    let (engine, durability) = pipeline::restore(&cfg)?;
    super::runtime()?.block_on(async {
        let shutdown = Shutdown::new();
        shutdown.on_signals();
        pipeline::run(&cfg, SharedEngine::new(engine), shutdown, Some(durability)).await
    })
}
