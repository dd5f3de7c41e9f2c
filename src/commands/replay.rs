//! `rankpulse replay`: the engine over JSON-lines files.

use std::path::Path;

use super::ReplayFormat;
use crate::config::Config;
use crate::engine::Engine;
use crate::judgments::JudgmentSource;
use crate::replay::{self, MaxRejects, Report, TableOptions};

pub fn run(
    impressions: &Path,
    engagements: &Path,
    config: Option<&Path>,
    format: ReplayFormat,
    tables: TableOptions,
    trec_out: Option<&Path>,
    max_rejects: MaxRejects,
) -> anyhow::Result<()> {
    let mut cfg = Config::load(config)?;
    // Avro container files become JSON lines for the run (removed when `_converted` drops).
    let (impressions, engagements, _converted) = replay::records::prepare(&mut cfg, impressions, engagements)?;
    let (impressions, engagements) = (impressions.as_path(), engagements.as_path());
    let mut engine = Engine::with_topic_labels(&cfg, ["impressions-file".into(), "engagements-file".into()]);
    if let Some(judgments) = JudgmentSource::from_config(&cfg.judgments)? {
        engine.set_judgments(judgments);
    }
    let mut engine = replay::run_with_trec(impressions, engagements, engine, trec_out)?;
    let report = Report::from_engine(&mut engine);
    match format {
        ReplayFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        ReplayFormat::Table => print!("{}", report.to_table(tables)),
    }
    // After the report, which counts the rejected lines by reason: what to fix.
    replay::check_rejects(max_rejects, &engine.counters(), [impressions, engagements])?;
    Ok(())
}
