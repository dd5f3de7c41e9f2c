//! `rankpulse judgments --from-clicks`: implicit judgments from the click log, of a replay of
//! logged events, of running daemons (`/api/v1/clicks`) or of saved click tables, with the
//! position-bias estimates they rest on.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::clicks::named::NamedTable;
use crate::clicks::pbm::EmSettings;
use crate::clicks::Fitted;
use crate::config::Config;
use crate::engine::Engine;

/// Where the click log comes from.
pub struct Sources {
    /// Logged events to replay: (impressions, engagements).
    pub replay: Option<(PathBuf, PathBuf)>,
    /// The configuration: the replay's, and `clicks.em_iterations` for every fit whatever the
    /// source.
    pub config: Option<PathBuf>,
    /// Running daemons' base URLs.
    pub urls: Vec<String>,
    /// Saved click tables.
    pub tables: Vec<PathBuf>,
}

/// What is written, and how estimates become grades.
pub struct Output {
    pub estimate: Estimate,
    pub grades: Vec<f64>,
    pub min_impressions: u64,
    pub max_rank: usize,
    pub out: Option<PathBuf>,
    pub table_out: Option<PathBuf>,
    pub models_out: Option<PathBuf>,
}

/// Which estimate a grade is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Estimate {
    /// SRW's clicks over expected clicks.
    Coec,
    /// The position-based model's attractiveness on the scale of rank 1.
    Attractiveness,
}

pub fn run(sources: Sources, output: Output) -> anyhow::Result<()> {
    let cfg = Config::load_for(sources.config.as_deref(), crate::config::Reads::Files)?;
    let em = EmSettings { max_iterations: cfg.clicks.em_iterations, ..EmSettings::default() };
    let table = collect(&sources, cfg, output.max_rank)?;
    if let Some(path) = &output.table_out {
        std::fs::write(path, table.to_lines()).with_context(|| format!("cannot write {}", path.display()))?;
    }
    // Judgments are per (query, document) over every segment; the position bias is each
    // segment's own.
    let across = table.across_segments();
    warn_saturated(&across);
    let fitted = Fitted::fit(&across.table, em);
    // With segments, every one is fitted apart (traffic without one as a segment of its own).
    let named = table.segments();
    let segmented = named.iter().any(|s| !s.is_empty());
    let segments: Vec<(&str, NamedTable, Fitted)> = named
        .into_iter()
        .filter(|_| segmented)
        .map(|s| {
            let of = table.of_segment(s);
            let fit = Fitted::fit(&of.table, em);
            (s, of, fit)
        })
        .collect();
    let mut models = models_json(&across, &fitted);
    if !segments.is_empty() {
        let per: serde_json::Map<String, serde_json::Value> =
            segments.iter().map(|(s, of, fit)| (segment_label(s).to_string(), models_json(of, fit))).collect();
        models["segments"] = per.into();
    }
    if let Some(path) = &output.models_out {
        std::fs::write(path, serde_json::to_string_pretty(&models)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let attractiveness = attractiveness(&across, &fitted, &segments);
    let (lines, kept, too_few) = judgment_lines(&across, &fitted, &attractiveness, &output)?;
    match &output.out {
        Some(path) => std::fs::write(path, lines).with_context(|| format!("cannot write {}", path.display()))?,
        None => std::io::stdout().write_all(lines.as_bytes())?,
    }
    eprintln!(
        "{kept} judgments of {} pairs ({too_few} with fewer than {} impressions left out); examination relative to rank 1 (pbm | harvest): {}",
        across.names.len(),
        output.min_impressions,
        relative_line(&fitted)
    );
    for (segment, _, fit) in &segments {
        eprintln!("  segment {}: {}", segment_label(segment), relative_line(fit));
    }
    Ok(())
}

/// Says so when a pair's counts reached 2^64 − 1, where they saturate: tables from outside can
/// hold any count, and a figure capped there is not the count it would be.
pub(super) fn warn_saturated(table: &NamedTable) {
    let saturated = table.table.saturated_pairs();
    if saturated > 0 {
        eprintln!(
            "warning: {saturated} pair{} shown or clicked 2^64 - 1 times or more over their ranks: counts saturate there \
             (18446744073709551615), so their totals, their ranks' click-through rates and what is estimated from them \
             are capped, not exact",
            if saturated == 1 { "" } else { "s" }
        );
    }
}

/// The merged click table of every source.
fn collect(sources: &Sources, cfg: Config, max_rank: usize) -> anyhow::Result<NamedTable> {
    let mut table = NamedTable::new(max_rank);
    if sources.replay.is_none() && sources.urls.is_empty() && sources.tables.is_empty() {
        bail!("give the clicks: --impressions and --engagements (a replay), --url (a running rankpulse, repeatable), or --table (a saved click table, repeatable)");
    }
    if let Some((impressions, engagements)) = &sources.replay {
        table.merge(&replay_table(impressions, engagements, cfg, max_rank)?);
    }
    for url in &sources.urls {
        let url = format!("{}/api/v1/clicks", url.trim_end_matches('/'));
        let body = ureq::get(&url)
            .call()
            .with_context(|| format!("cannot read {url}"))?
            .into_body()
            .read_to_string()
            .with_context(|| format!("cannot read {url}"))?;
        add_text(&mut table, &body, &url)?;
    }
    for path in &sources.tables {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        add_text(&mut table, &text, &path.display().to_string())?;
    }
    Ok(table)
}

fn add_text(table: &mut NamedTable, text: &str, source: &str) -> anyhow::Result<()> {
    let bad = table.add_lines(text);
    if let Some(first) = bad.first() {
        bail!("{source}: {} lines are not click table lines; line {}: {}", bad.len(), first.line, first.problem);
    }
    Ok(())
}

/// The click log of a replay of the files, with `[clicks]` on whatever the configuration says.
fn replay_table(
    impressions: &Path,
    engagements: &Path,
    mut cfg: Config,
    max_rank: usize,
) -> anyhow::Result<NamedTable> {
    cfg.clicks.enabled = true;
    cfg.clicks.max_rank = max_rank;
    let (impressions, engagements, _converted) = crate::replay::records::prepare(&mut cfg, impressions, engagements)?;
    let engine = Engine::with_topic_labels(&cfg, ["impressions-file".into(), "engagements-file".into()]);
    let engine = crate::replay::run(&impressions, &engagements, engine)?;
    // Files mostly rejected are not the events they were meant to be: said as `replay` says it.
    let paths = [impressions.as_path(), engagements.as_path()];
    crate::replay::check_rejects(crate::replay::MaxRejects::default(), &engine.counters(), paths)?;
    let (table, summary) = engine.click_table().context("the click log is on")?;
    let c = summary.counts;
    eprintln!(
        "replay: {} impressions tracked, {} of untracked queries, {} without a query text, {} outside the horizon",
        c.tracked, c.untracked, c.without_query, c.outside_horizon
    );
    Ok(table)
}

/// Each pair's attractiveness on the scale of rank 1 (α × γ_1): with segments, each
/// segment's own fit (its own examination), averaged over the segments weighted by the pair's
/// showings in each; without, the fit over everything.
fn attractiveness(across: &NamedTable, fitted: &Fitted, segments: &[(&str, NamedTable, Fitted)]) -> Vec<Option<f64>> {
    if segments.is_empty() {
        return (0..across.names.len()).map(|pair| fitted.attractiveness_at_top(pair)).collect();
    }
    let index: HashMap<(&str, &str), usize> =
        across.names.iter().enumerate().map(|(i, n)| ((n.query.as_ref(), n.doc.as_ref()), i)).collect();
    let mut sums = vec![(0.0, 0.0); across.names.len()];
    for (_, table, fit) in segments {
        for (pair, name) in table.names.iter().enumerate() {
            let (Some(&at), Some(value)) =
                (index.get(&(name.query.as_ref(), name.doc.as_ref())), fit.attractiveness_at_top(pair))
            else {
                continue;
            };
            let weight = table.table.pair_total(pair).impressions as f64;
            sums[at].0 += value * weight;
            sums[at].1 += weight;
        }
    }
    sums.into_iter().map(|(sum, weight)| (weight > 0.0).then(|| sum / weight)).collect()
}

/// How a segment is named in the output: traffic without one as `(no segment)`.
fn segment_label(segment: &str) -> &str {
    if segment.is_empty() {
        "(no segment)"
    } else {
        segment
    }
}

/// The judgment list as JSON lines (`{"query", "doc_id", "grade", ...}`, what `[judgments]`
/// and `eval` read), or TREC qrels when `out` ends in `.qrels` or `.txt`.
fn judgment_lines(
    table: &NamedTable,
    fitted: &Fitted,
    attractiveness: &[Option<f64>],
    output: &Output,
) -> anyhow::Result<(String, usize, usize)> {
    let qrels = output.out.as_ref().and_then(|p| p.extension()).is_some_and(|e| e == "qrels" || e == "txt");
    let (mut out, mut kept, mut too_few) = (String::new(), 0, 0);
    for (pair, name) in table.names.iter().enumerate() {
        let (query, doc) = (&name.query, &name.doc);
        let coec = fitted.coec[pair];
        if coec.impressions < output.min_impressions {
            too_few += 1;
            continue;
        }
        let value = match output.estimate {
            Estimate::Coec => coec.coec,
            Estimate::Attractiveness => attractiveness.get(pair).copied().flatten().unwrap_or(0.0),
        };
        let grade = output.grades.iter().filter(|&&t| value >= t).count();
        if qrels {
            if query.contains(char::is_whitespace) || doc.contains(char::is_whitespace) {
                bail!("query {query:?} has whitespace, which TREC qrels cannot hold: write JSON lines (an --out ending in .jsonl)");
            }
            out.push_str(&format!("{query} 0 {doc} {grade}\n"));
        } else {
            let line = serde_json::json!({
                "query": query, "doc_id": doc, "grade": grade,
                "estimate": value, "coec": coec.coec, "attractiveness": attractiveness.get(pair).copied().flatten(),
                "impressions": coec.impressions, "clicks": coec.clicks,
            });
            out.push_str(&line.to_string());
            out.push('\n');
        }
        kept += 1;
    }
    Ok((out, kept, too_few))
}

/// The position-bias estimates as JSON.
fn models_json(table: &NamedTable, fitted: &Fitted) -> serde_json::Value {
    let pbm = fitted.pbm.relative_with_stderr();
    let ranks: Vec<serde_json::Value> = (0..table.table.max_rank)
        .map(|r| {
            let harvest = fitted.harvest.get(r).copied().flatten();
            serde_json::json!({
                "rank": r + 1,
                "pbm_examination": fitted.pbm.examination[r],
                "pbm_relative": pbm.get(r).copied().flatten().map(|(ratio, _)| ratio),
                "pbm_relative_stderr": pbm.get(r).copied().flatten().and_then(|(_, se)| se),
                "harvest_relative": harvest.map(|h| h.ratio),
                "harvest_stderr": harvest.and_then(|h| h.stderr),
                "harvest_pairs": harvest.map_or(0, |h| h.pairs),
            })
        })
        .collect();
    serde_json::json!({
        "pairs": table.names.len(),
        "em_iterations": fitted.pbm.iterations,
        "em_converged": fitted.pbm.converged,
        "log_likelihood": fitted.pbm.log_likelihood,
        "ranks": ranks,
    })
}

fn relative_line(fitted: &Fitted) -> String {
    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    fitted
        .pbm
        .relative()
        .iter()
        .zip(&fitted.harvest)
        .map(|(p, h)| format!("{} | {}", show(*p), show(h.map(|h| h.ratio))))
        .collect::<Vec<_>>()
        .join(", ")
}
