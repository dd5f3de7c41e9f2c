//! `rankpulse eval`: trec_eval's command (`eval [-q] [-c] [-l N] [-M N] [-m MEASURE]... QRELS
//! RUN`), or AutoRAG's grouped measures with `--ground-truth`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::EvalFormat;
use crate::eval::evaluate_grouped;
use crate::eval::measures::{self, Origin};
use crate::eval::run::{self, RunError};
use crate::eval::trec::qrels::{Qrels, QrelsError};
use crate::eval::trec::{self, Compat, Settings};
use crate::eval::truth::{GroundTruth, TruthError};
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
    pub level: i64,
    pub max_docs: Option<usize>,
    pub judged_only: bool,
    pub docs_in_collection: i64,
    pub no_summary: bool,
    pub compat: Compat,
    pub max_grade: Option<u8>,
    pub format: EvalFormat,
    pub threads: Option<usize>,
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
    let measures = measures::parse(&names, flags.compat)?;
    if grouped && measures.iter().any(|m| m.def.origin != Origin::AutoRag && m.def.name != "num_q") {
        bail!("{} is a trec_eval measure: give qrels, not --ground-truth", measures[0].def.name);
    }
    if let Some(g) = flags.max_grade.filter(|&g| g == 0 || g > MAX_GAIN) {
        bail!("--max-grade {g}: must be from 1 to {MAX_GAIN}");
    }
    let threads = flags.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let judgments_text = read(&judgments_path)?;
    let run_text = read(&run_path)?;
    // The judgments are read on a thread of their own while the run is read and ranked.
    let evaluation = std::thread::scope(|scope| -> anyhow::Result<_> {
        let ranking = scope.spawn(|| run::read(&run_path, &run_text, threads, flags.compat));
        if grouped {
            let truth =
                GroundTruth::parse(&judgments_path, &judgments_text).map_err(|e: TruthError| anyhow::anyhow!(e))?;
            let ranking = ranking.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            let ranking = ranking.map_err(|e: RunError| anyhow::anyhow!(e))?;
            return Ok(evaluate_grouped(&truth, &ranking, &measures, flags.max_docs, threads)?);
        }
        let qrels =
            Qrels::parse(&judgments_path, &judgments_text, flags.compat).map_err(|e: QrelsError| anyhow::anyhow!(e));
        let ranking = ranking.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let (qrels, ranking) = (qrels?, ranking.map_err(|e: RunError| anyhow::anyhow!(e))?);
        let settings = Settings {
            compat: flags.compat,
            relevance_level: flags.level,
            max_docs: flags.max_docs,
            judged_only: flags.judged_only,
            docs_in_collection: flags.docs_in_collection,
            complete: flags.complete,
            max_grade: flags.max_grade,
            threads,
        };
        let (evaluation, lacking) = trec::evaluate(&qrels, &ranking, &measures, &settings)?;
        if !lacking.is_empty() {
            let shown: Vec<&str> = lacking.iter().take(5).map(String::as_str).collect();
            eprintln!(
                "rankpulse eval: {} qrels quer{} the run lacks ({}{}) {} left out, as trec_eval 9.x does; trec_eval 10.0 \
                 stops there (\"result qid not found\"), and with -c scores {} 0",
                lacking.len(),
                if lacking.len() == 1 { "y" } else { "ies" },
                shown.join(", "),
                if lacking.len() > shown.len() { ", ..." } else { "" },
                if lacking.len() == 1 { "is" } else { "are" },
                if lacking.len() == 1 { "it" } else { "them" },
            );
        }
        Ok(evaluation)
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
        EvalFormat::Trec => evaluation.to_trec(flags.per_query, !flags.no_summary),
        EvalFormat::Json => format!("{}\n", serde_json::to_string_pretty(&evaluation.to_json(flags.per_query))?),
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) ends the output, not with an error.
    let _ = stdout.write_all(text.as_bytes());
    Ok(())
}
