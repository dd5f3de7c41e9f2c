//! `rankpulse serve`: the daemon against real Kafka brokers. It starts with no state: each
//! partition's state comes from the changelog topic when the partition is assigned. A
//! judgment list is loaded first (a broken one stops the start) and then watched for changes.

use std::path::Path;
use std::sync::Arc;

use crate::config::Config;
use crate::engine::{Engine, SharedEngine};
use crate::judgments::JudgmentSource;
use crate::pipeline;
use crate::repartition;
use crate::shutdown::Shutdown;
use crate::source::Durability;

pub fn run(config: &Path) -> anyhow::Result<()> {
    let cfg = Config::load(Some(config))?;
    // Every file the configuration names is read before anything waits for the brokers (the
    // repartition plan does): a broken one stops the start at once, naming it.
    crate::output::HttpSecurity::load(&cfg.http)?;
    let judgments = JudgmentSource::from_config(&cfg.judgments)?;
    if let Some(schemas) = crate::event::Decoders::new(&cfg).schemas() {
        pipeline::check_schemas(schemas)?;
    }
    let runtime = super::runtime()?;
    // Signals are handled from here on: a SIGTERM while the repartition plan reads the brokers
    // stops the daemon cleanly once it returns, not by the signal's default action.
    let shutdown = Shutdown::new();
    {
        let _in_runtime = runtime.enter();
        shutdown.on_signals();
    }
    // Before the engine: when the inputs are re-keyed, the join reads the internal topics in
    // the native format, and the engine is built for those.
    let plan = repartition::plan(&cfg, runtime.handle())?;
    let join_cfg = plan.join_config(&cfg);
    let mut engine = Engine::new(&join_cfg);
    let routing = engine.routing().clone();
    routing.decide(plan.decision.clone());
    if let Some(judgments) = &judgments {
        engine.set_judgments(Arc::clone(judgments));
    }
    let engine = SharedEngine::new(engine);
    let durability = Durability { state: cfg.state.clone() };
    runtime.block_on(async {
        if let Some(judgments) = judgments {
            tokio::spawn(judgments.watch(cfg.judgments.reload_interval.as_duration(), shutdown.clone()));
        }
        let stage = match plan.decision.active {
            true => Some(repartition::spawn(&cfg, &plan, routing, shutdown.clone())?),
            false => None,
        };
        let served = pipeline::run(&join_cfg, engine, shutdown.clone(), Some(durability)).await;
        shutdown.trigger();
        if let Some(stage) = stage {
            // The stage's own final flush and commit; its error (a delivery that failed for
            // good) is the process's.
            let stopped = tokio::task::spawn_blocking(move || stage.join()).await;
            match stopped {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => return Err(e.into()),
                Ok(Err(_)) | Err(_) => anyhow::bail!("the repartition stage's thread panicked"),
            }
        }
        served
    })
}
