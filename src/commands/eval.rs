//! `rankpulse eval`: trec_eval's command (`eval [-q] [-c] [-l N] [-M N] [-m MEASURE]... QRELS
//! RUN`), or AutoRAG's grouped measures with `--ground-truth`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::EvalFormat;
use crate::eval::measures::{self, Family};
use crate::eval::run::{self, RunError};
use crate::eval::truth::{GroundTruth, TruthError};
use crate::eval::{evaluate, evaluate_grouped, Options};
use crate::judgments::{Format, Judgments, LoadOptions};
use crate::metrics::MAX_GAIN;

/// The files named on the command line.
pub struct Inputs {
    pub files: Vec<PathBuf>,
    pub qrels: Option<PathBuf>,
    pub run: Option<PathBuf>,
    pub ground_truth: Option<PathBuf>,
}

/// The flags.
pub struct Flags {
    pub measures: Vec<String>,
    pub per_query: bool,
    pub complete: bool,
    pub level: u8,
    pub max_docs: Option<usize>,
    pub max_grade: Option<u8>,
    pub format: EvalFormat,
    pub threads: Option<usize>,
}

/// What the run is evaluated against.
enum Judged {
    Qrels(Judgments),
    Groups(GroundTruth),
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

pub fn run(inputs: Inputs, flags: Flags) -> anyhow::Result<()> {
    let Inputs { files, qrels, run, ground_truth } = inputs;
    let (judgments_path, run_path) = match (files.as_slice(), qrels.or(ground_truth.clone()), run) {
        ([], Some(j), Some(r)) => (j, r),
        ([j, r], None, None) => (j.clone(), r.clone()),
        ([r], Some(j), None) => (j, r.clone()),
        _ => bail!(
            "give the judgments and the run: `rankpulse eval QRELS RUN`, or --qrels (or --ground-truth) and --run"
        ),
    };
    let grouped = ground_truth.is_some();
    let default = if grouped {
        "retrieval_precision retrieval_recall retrieval_f1 retrieval_mrr retrieval_map retrieval_ndcg"
    } else {
        "official"
    };
    let names: Vec<String> =
        if flags.measures.is_empty() { default.split(' ').map(str::to_string).collect() } else { flags.measures };
    let measures = measures::parse(&names)?;
    if grouped && measures.iter().any(|m| m.family == Family::RunId) {
        bail!("runid is a trec_eval measure: give qrels");
    }
    let threads = flags.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let options = Options {
        measures,
        complete: flags.complete,
        relevance_level: flags.level,
        max_docs: flags.max_docs,
        max_grade: flags.max_grade,
        threads,
    };
    if let Some(g) = flags.max_grade.filter(|&g| g == 0 || g > MAX_GAIN) {
        bail!("--max-grade {g}: must be from 1 to {MAX_GAIN}");
    }
    // The judgments are read on a thread of their own while the run is read and ranked.
    let evaluation = std::thread::scope(|scope| -> anyhow::Result<_> {
        let judgments = scope.spawn(|| -> anyhow::Result<Judged> {
            if grouped {
                let text = read(&judgments_path)?;
                let truth = GroundTruth::parse(&judgments_path, &text).map_err(|e: TruthError| anyhow::anyhow!(e))?;
                return Ok(Judged::Groups(truth));
            }
            let load = LoadOptions {
                format: Format::of_path(&judgments_path),
                normalize: false,
                max_grade: MAX_GAIN,
                max_rejected_share: 0.0,
                keep_query_names: true,
            };
            Ok(Judged::Qrels(Judgments::load(&judgments_path, &load)?.0))
        });
        let run_text = read(&run_path)?;
        let ranking = run::read(&run_path, &run_text, threads).map_err(|e: RunError| anyhow::anyhow!(e));
        let judged = judgments.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        let ranking = ranking?;
        Ok(match judged {
            Judged::Groups(truth) => evaluate_grouped(&truth, &ranking, &options)?,
            Judged::Qrels(qrels) => evaluate(&qrels, &ranking, &options)?,
        })
    })?;
    if let Some(first) = evaluation.no_value.first() {
        // Counted and named, not silent: these are left out of every mean, as AutoRAG leaves them.
        let n = evaluation.no_value.len();
        eprintln!(
            "rankpulse eval: {n} quer{} left out, as AutoRAG gives no value for an empty ranking, an empty group or a blank id (first: {first:?})",
            if n == 1 { "y" } else { "ies" }
        );
    }
    let text = match flags.format {
        EvalFormat::Trec => evaluation.to_trec(flags.per_query),
        EvalFormat::Json => format!("{}\n", serde_json::to_string_pretty(&evaluation.to_json(flags.per_query))?),
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) ends the output, not with an error.
    let _ = stdout.write_all(text.as_bytes());
    Ok(())
}
