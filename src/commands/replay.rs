//! `rankpulse replay`: the engine over JSON-lines files.

use std::path::Path;

use anyhow::Context;

use super::ReplayFormat;
use crate::config::{Config, Reads};
use crate::engine::Engine;
use crate::judgments::JudgmentSource;
use crate::output::page::{self, PageData, PageSettings};
use crate::replay::{self, MaxRejects, Report, TableOptions};

/// The files `replay` writes besides its report.
pub struct Outputs<'a> {
    /// `--trec-out`: a directory for qrels.txt, run.txt and interleaving.jsonl.
    pub trec: Option<&'a Path>,
    /// `--html`: the experiment page as one file.
    pub html: Option<&'a Path>,
}

pub fn run(
    impressions: &Path,
    engagements: &Path,
    config: Option<&Path>,
    format: ReplayFormat,
    tables: TableOptions,
    outputs: Outputs<'_>,
    max_rejects: MaxRejects,
) -> anyhow::Result<()> {
    // The files are exports: an Avro container file carries its schema, none is configured.
    let mut cfg = Config::load_for(config, Reads::Files)?;
    // Avro container files become JSON lines for the run (removed when `_converted` drops).
    let (impressions, engagements, _converted) = replay::records::prepare(&mut cfg, impressions, engagements)?;
    let (impressions, engagements) = (impressions.as_path(), engagements.as_path());
    let mut engine = Engine::with_topic_labels(&cfg, ["impressions-file".into(), "engagements-file".into()]);
    if let Some(judgments) = JudgmentSource::from_config(&cfg.judgments)? {
        engine.set_judgments(judgments);
    }
    let mut engine = replay::run_with_trec(impressions, engagements, engine, outputs.trec)?;
    let report = Report::from_engine(&mut engine);
    if let Some(path) = outputs.html {
        let inputs = vec![impressions.display().to_string(), engagements.display().to_string()];
        let settings = PageSettings::from_config(&cfg, engine.layout());
        let data = PageData::gather(&engine, &settings, Some(inputs), None);
        std::fs::write(path, page::report_file(&data))
            .with_context(|| format!("writing the HTML report to {}", path.display()))?;
    }
    match format {
        ReplayFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        ReplayFormat::Table => print!("{}", report.to_table(tables)),
    }
    // After the report, which counts the rejected lines by reason: what to fix.
    replay::check_rejects(max_rejects, &engine.counters(), [impressions, engagements])?;
    Ok(())
}
