//! `rankpulse eval --clicks TABLE --run CANDIDATE`: a candidate ranking scored against logged
//! clicks before it gets any traffic, by inverse propensity weighting
//! ([`crate::clicks::ips::counterfactual`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::clicks::ips::{counterfactual, Propensities};
use crate::clicks::named::NamedTable;
use crate::clicks::pbm::{self, EmSettings};
use crate::eval::run;
use crate::eval::trec::Compat;
use crate::judgments::normalize_query;

/// The flags.
pub struct Flags {
    /// Saved click tables (`rankpulse judgments --from-clicks --table-out`).
    pub tables: Vec<PathBuf>,
    /// `pbm`, `harvest`, or the propensities relative to rank 1, comma separated.
    pub propensities: String,
    /// τ: propensities below it count as τ.
    pub clip: f64,
    /// The candidate's ranks scored: 0-based ranks below this.
    pub cutoff: usize,
    /// Ranks in the tables.
    pub max_rank: usize,
    /// Print JSON instead of a line per figure.
    pub json: bool,
}

pub fn run(run_path: &Path, flags: Flags) -> anyhow::Result<()> {
    let mut table = NamedTable::new(flags.max_rank);
    for path in &flags.tables {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let bad = table.add_lines(&text);
        if let Some(first) = bad.first() {
            bail!(
                "{}: {} lines are not click table lines; line {}: {}",
                path.display(),
                bad.len(),
                first.line,
                first.problem
            );
        }
    }
    // The candidate is scored on every segment's clicks, with the propensities of all of them.
    let table = table.across_segments();
    super::judgments::warn_saturated(&table);
    let propensities = propensities(&table, &flags)?;
    let text = std::fs::read_to_string(run_path).with_context(|| format!("cannot read {}", run_path.display()))?;
    let candidate = run::read(run_path, &text, 1, Compat::V10)?;
    // The candidate's rank of each document, per normalized query.
    let mut scratch = String::new();
    let mut ranks: HashMap<String, HashMap<&str, usize>> = HashMap::new();
    for query in &candidate.queries {
        normalize_query(&query.qid, &mut scratch);
        let docs = ranks.entry(scratch.clone()).or_default();
        for (rank, doc) in query.docs.iter().enumerate().take(flags.cutoff) {
            docs.entry(doc.as_ref()).or_insert(rank);
        }
    }
    // Impressions per query: every impression shows exactly one document at rank 1.
    let mut impressions: HashMap<&str, u64> = HashMap::new();
    let mut logged: HashMap<&str, std::collections::HashSet<&str>> = HashMap::new();
    let mut candidate_rank = Vec::with_capacity(table.names.len());
    for (name, cells) in table.names.iter().zip(&table.table.pairs) {
        let (query, doc) = (&name.query, &name.doc);
        let ranked = ranks.get(query.as_ref());
        if ranked.is_some() {
            // Saturating, as every sum of counts (tables from outside can hold any count).
            let top = cells.iter().filter(|(r, _)| *r == 0).fold(0u64, |sum, (_, c)| sum.saturating_add(c.impressions));
            let sum = impressions.entry(query).or_default();
            *sum = sum.saturating_add(top);
            logged.entry(query).or_default().insert(doc);
        }
        candidate_rank.push(ranked.and_then(|docs| docs.get(doc.as_ref()).copied()));
    }
    let unlogged: u64 = ranks
        .iter()
        .filter_map(|(q, docs)| {
            let shown = logged.get(q.as_str())?;
            Some(docs.keys().filter(|d| !shown.contains(*d)).count() as u64)
        })
        .sum();
    let n = impressions.values().fold(0u64, |sum, n| sum.saturating_add(*n));
    if n == 0 {
        bail!("no query of the run was logged in the click tables (queries are matched normalized: NFKC, lower case, whitespace runs as one space)");
    }
    let result = counterfactual(&table.table, &candidate_rank, &propensities, n, unlogged);
    let half = 1.959963984540054 * result.stderr;
    if flags.json {
        let out = serde_json::json!({
            "estimate": result.estimate, "stderr": result.stderr, "stderr_clicks": result.stderr_clicks,
            "ci95": [result.estimate - half, result.estimate + half],
            "naive": result.naive, "impressions": result.impressions, "unlogged": result.unlogged,
            "queries": impressions.len(), "propensities": propensities.relative,
            "propensities_stderr": propensities.stderr(), "clip": propensities.clip,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "ips_dcg@{}\t{:.6}\t(95% CI {:.6} to {:.6})",
            flags.cutoff,
            result.estimate,
            result.estimate - half,
            result.estimate + half
        );
        println!("naive_dcg@{}\t{:.6}\t(clicks without position-bias weights)", flags.cutoff, result.naive);
        println!("impressions\t{}\t({} queries of the run logged)", result.impressions, impressions.len());
        println!(
            "unlogged\t{}\t(candidate results never shown in the logged ranks: credited nothing)",
            result.unlogged
        );
    }
    Ok(())
}

/// The propensities the flags name, estimated from the table or given.
fn propensities(table: &NamedTable, flags: &Flags) -> anyhow::Result<Propensities> {
    let (relative, covariance): (Vec<f64>, Vec<Vec<f64>>) = match flags.propensities.as_str() {
        "pbm" => {
            let fit = pbm::fit(&table.table, EmSettings::default());
            // A rank without an estimate ends the weighted ranks: its clicks count nothing.
            let estimates: Vec<(f64, Option<f64>)> = fit.relative_with_stderr().into_iter().map_while(|p| p).collect();
            let clicked = table.table.per_rank();
            let unidentified: Vec<String> = estimates
                .iter()
                .enumerate()
                .filter(|(rank, (_, se))| se.is_none() && clicked[*rank].clicks > 0)
                .map(|(rank, _)| (rank + 1).to_string())
                .collect();
            if !unidentified.is_empty() {
                bail!(
                    "--propensities pbm: the tables cannot tell the examination of rank {} from the attractiveness \
                     of what was shown there (no clicked pair was shown both there and at a rank tied to rank 1), so \
                     the position-based model has no error for it: log rank swaps (A/B variants, interleaving, an \
                     exploration slice) or give known propensities",
                    unidentified.join(", ")
                );
            }
            let n = estimates.len();
            let covariance = fit.relative_covariance.unwrap_or_default();
            let covariance = covariance.into_iter().take(n).map(|row| row.into_iter().take(n).collect()).collect();
            (estimates.into_iter().map(|(ratio, _)| ratio).collect(), covariance)
        }
        "harvest" => {
            let harvest = crate::clicks::harvest::ratios_to_top(&table.table);
            let estimates: Vec<(f64, f64)> =
                harvest.iter().map_while(|h| h.map(|h| (h.ratio, h.stderr.unwrap_or(0.0)))).collect();
            let n = estimates.len();
            // Harvesting's ranks rest on different pairs: their errors are taken as independent.
            let covariance =
                (0..n).map(|r| (0..n).map(|s| if r == s { estimates[r].1.powi(2) } else { 0.0 }).collect()).collect();
            (estimates.into_iter().map(|(ratio, _)| ratio).collect(), covariance)
        }
        list => {
            let known = list
                .split(',')
                .map(|p| p.trim().parse::<f64>().ok().filter(|p| *p > 0.0 && *p <= 1.0))
                .collect::<Option<Vec<f64>>>()
                .with_context(|| {
                    format!("--propensities {list:?}: give pbm, harvest, or numbers in (0, 1] per rank")
                })?;
            (known, Vec::new())
        }
    };
    if relative.is_empty() {
        bail!("no propensity could be estimated: the tables have no clicks at rank 1");
    }
    Ok(Propensities { relative, covariance, clip: flags.clip })
}
