//! The command line: every command parses its arguments here and calls its own file, which only
//! loads what it needs and calls the library: `demo`, `serve`, `replay`, `generate`, `produce`,
//! `interleave`, `eval`, `check-config`; and the shell completions and man pages of this very
//! command line, `completions` and `man`.

pub mod check_config;
pub mod completions;
pub mod counterfactual;
pub mod demo;
pub mod eval;
pub mod examples;
pub mod generate;
pub mod interleave;
pub mod judgments;
pub mod logging;
pub mod man;
pub mod produce;
pub mod replay;
pub mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{Config, KafkaConfig};
use crate::demo::FaultRate;

#[derive(Debug, Parser)]
#[command(
    name = "rankpulse",
    // `0.1.0 (abed8b2 2026-11-26)`: the commit, from build.rs.
    version = env!("RANKPULSE_VERSION"),
    after_help = examples::TOP,
    about = "Streaming online evaluation of search ranking quality: Kafka impressions and engagements to click-based IR metrics on a Prometheus endpoint"
)]
pub struct Cli {
    /// Log format on stderr: `text` for people (coloured on a terminal, unless NO_COLOR is
    /// set), `json` for log pipelines (one object per line). RUST_LOG filters either.
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text)]
    pub log_format: logging::LogFormat,
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the whole pipeline with no outside service: an in-process Kafka cluster, an A/B
    /// traffic generator, the consumer, the metrics and the HTTP endpoint.
    #[command(after_help = examples::DEMO)]
    Demo {
        /// Address of the experiment page (`/`), `/metrics` and the A/B API.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: SocketAddr,
        /// Stop after this many seconds (default: run until interrupted).
        #[arg(long)]
        duration: Option<u64>,
        /// Generated impressions per second.
        #[arg(long, default_value_t = 200)]
        rate: u32,
        /// Share of impressions followed by one malformed message, so the data-quality counters
        /// have something to show (0 for none).
        #[arg(long, default_value_t = FaultRate::DEMO)]
        faults: FaultRate,
    },
    /// Run the daemon against real Kafka brokers.
    #[command(after_help = examples::SERVE)]
    Serve {
        /// Configuration file (TOML). Every key has a default.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run the same join and metrics over JSON-lines files (one event per line) and print the
    /// results, as if every event had been consumed and the stream had then gone idle.
    #[command(after_help = examples::REPLAY)]
    Replay {
        /// Impressions, one JSON object per line (format: `kafka.impressions_format`).
        #[arg(long)]
        impressions: PathBuf,
        /// Engagements, one JSON object per line (format: `kafka.engagements_format`).
        #[arg(long)]
        engagements: PathBuf,
        /// Configuration file (TOML). Read here: [join], [metrics], [limits], [labels], [ab],
        /// [interleaving], [judgments], [clicks], [mapping], [ubi], the formats of [kafka]
        /// (impressions_format, engagements_format), and [page] for --html. Brokers, topics,
        /// [http], [state], [repartition] and schema sources are not: an Avro container file
        /// carries its own schema.
        #[arg(long)]
        config: Option<PathBuf>,
        /// `table` for people (cumulative figures and the A/B summary), `json` for programs
        /// (everything: groups, every window, event counts, every A/B comparison).
        #[arg(long, value_enum, default_value_t = ReplayFormat::Table)]
        format: ReplayFormat,
        /// Table format: also the newest window of each configured size (`metrics.windows`).
        #[arg(long)]
        windows: bool,
        /// Table format: also the 11-point interpolated precision-recall curve of each group.
        #[arg(long)]
        curve: bool,
        /// Table format: also each comparison's chance to beat control, risks, minimum
        /// detectable effect and ETA, adjusted p-value and CUPED (docs/src/readout.md).
        #[arg(long)]
        readout: bool,
        /// Table format: also each experiment per value of each dimension (`ab.dimensions`):
        /// the heterogeneity test and each value's difference, p-value and q-value
        /// (docs/src/dimensions.md).
        #[arg(long)]
        breakdown: bool,
        /// Also write qrels.txt and run.txt (TREC format) of every finalized impression into
        /// this directory, to run trec_eval or ranx on exactly what rankpulse measured, and
        /// interleaving.jsonl: each interleaved impression's credit per ranker and outcome.
        #[arg(long)]
        trec_out: Option<PathBuf>,
        /// Also write the experiment page as one self-contained HTML file: every experiment's
        /// curves over its looks, decisions, traffic split and data quality, with no external
        /// asset (to attach to a ticket, or open offline).
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Fail (after printing the report) when more lines are rejected than this: `half`
        /// (more than half of either file's lines), a number of lines (both files together), or
        /// `none` (never fail for rejected lines). Lines rejected as `unmapped_action` (events
        /// `mapping.engagements.actions` does not list: foreign, not malformed) are reported but
        /// not counted here.
        #[arg(long, default_value = "half", value_name = "half|N|none")]
        max_rejects: crate::replay::MaxRejects,
    },
    /// Write the demo's generated A/B traffic as JSON-lines files, to try `replay` without Kafka.
    #[command(after_help = examples::GENERATE)]
    Generate {
        /// Where to write the impressions (JSON lines; overwritten).
        #[arg(long)]
        impressions: PathBuf,
        /// Where to write the engagements (JSON lines, in delivery order; overwritten).
        #[arg(long)]
        engagements: PathBuf,
        /// Number of impressions (of the A/B experiment, and of none); `--interleaving` adds
        /// one for every two.
        #[arg(long, default_value_t = 100_000)]
        count: u64,
        /// Impressions per second of event time.
        #[arg(long, default_value_t = 200)]
        rate: u32,
        /// Random seed: the same seed, count, rate and start write the same files.
        #[arg(long, default_value_t = 2026)]
        seed: u64,
        /// Event time of the first impression (RFC 3339).
        #[arg(long, default_value = "2026-11-22T10:00:00Z")]
        start: String,
        /// Share of impressions followed by one malformed line, to try how replay counts
        /// rejects (the demo's rate is 0.001).
        #[arg(long, default_value_t = FaultRate::NONE)]
        faults: FaultRate,
        /// Also write the interleaving duel, as the demo and `produce` do: two close rankers
        /// team-draft interleaved (experiment ranker-duel) and the same two as an A/B test
        /// (ranker-duel-ab), one impression for every two of the others.
        #[arg(long)]
        interleaving: bool,
        /// Also write a judgment list for head queries to this file (JSON lines), and add
        /// their impressions (with a `query` field) to the A/B experiment: one per three of the
        /// others. Replay them with `[judgments] file` set to it.
        #[arg(long)]
        judgments: Option<PathBuf>,
        /// Also write this many searches of the same clients during the day before the start,
        /// outside the experiment: the pre-period that `[ab.cuped]` adjusts by.
        #[arg(long, default_value_t = 0)]
        pre_period: u64,
    },
    /// Produce the demo's generated A/B traffic to real Kafka topics in real time, to try
    /// `serve` against a real cluster (the docker compose quick start runs it).
    #[command(after_help = examples::PRODUCE)]
    Produce {
        /// Take the brokers, the topics and the librdkafka properties and secrets (TLS, SASL)
        /// from this configuration file's `[kafka]` section, as `serve` does.
        #[arg(long, conflicts_with_all = ["brokers", "impressions_topic", "engagements_topic"])]
        config: Option<PathBuf>,
        /// Bootstrap brokers, comma separated.
        #[arg(long, default_value = "localhost:9092")]
        brokers: String,
        /// Topic of the impressions, keyed by `query_id`.
        #[arg(long, default_value = "search-impressions")]
        impressions_topic: String,
        /// Topic of the engagements, keyed by `query_id`.
        #[arg(long, default_value = "search-engagements")]
        engagements_topic: String,
        /// Generated impressions per second.
        #[arg(long, default_value_t = 200)]
        rate: u32,
        /// Random seed of the generated traffic.
        #[arg(long, default_value_t = 2026)]
        seed: u64,
        /// Stop after this many seconds (default: run until interrupted).
        #[arg(long)]
        duration: Option<u64>,
        /// Share of impressions followed by one malformed message (the demo's rate is 0.001;
        /// the compose quick start passes it so its data-quality panels show something).
        #[arg(long, default_value_t = FaultRate::NONE)]
        faults: FaultRate,
    },
    /// Team-draft interleave rankings (JSON lines with `query_id` and `rankings`, from a file or
    /// stdin) into interleaved impressions on stdout, exactly as the manual documents (docs/src/interleaving.md).
    #[command(after_help = examples::INTERLEAVE)]
    Interleave {
        /// The input file (default: stdin).
        #[arg(long)]
        input: Option<PathBuf>,
    },
    /// Evaluate a TREC run against qrels as NIST trec_eval does, printing what it prints
    /// (`rankpulse eval qrels.txt run.txt`), on every core; or against AutoRAG's grouped ground
    /// truth (`--ground-truth`).
    #[command(after_help = examples::EVAL)]
    Eval {
        /// `QRELS RUN`, as trec_eval takes them (or use --qrels and --run).
        files: Vec<PathBuf>,
        /// Judgments: TREC qrels (`query iteration doc grade`), or JSON lines (`.jsonl`).
        #[arg(long)]
        qrels: Option<PathBuf>,
        /// The run: TREC (`qid Q0 docno rank score tag`), or JSON lines (`.jsonl`:
        /// `{"query", "results"}`, ranked as listed).
        #[arg(long)]
        run: Option<PathBuf>,
        /// AutoRAG's grouped ground truth instead of qrels: JSON lines `{"query",
        /// "retrieval_gt": [[ids], ...]}`, for the `retrieval_*` measures.
        #[arg(long, conflicts_with = "qrels")]
        ground_truth: Option<PathBuf>,
        /// Measures, trec_eval's names and syntax (`P.5,10`, `ndcg_cut.10`, `map`,
        /// `all_trec`), repeatable; default `official` (or, with --ground-truth, every
        /// `retrieval_*`).
        #[arg(short = 'm', long = "measure")]
        measures: Vec<String>,
        /// Per-query lines too (trec_eval's -q).
        #[arg(short = 'q')]
        per_query: bool,
        /// Average over every qrels query, a query missing from the run scoring 0 (trec_eval's -c).
        #[arg(short = 'c')]
        complete: bool,
        /// The smallest relevant grade (trec_eval's -l).
        #[arg(short = 'l', default_value_t = 1, allow_negative_numbers = true)]
        level: i64,
        /// Documents evaluated per query (trec_eval's -M; default all).
        #[arg(short = 'M')]
        max_docs: Option<usize>,
        /// Only judged documents are evaluated, in their order (trec_eval's -J).
        #[arg(short = 'J')]
        judged_only: bool,
        /// Documents in the collection, for `utility` (trec_eval's -N).
        #[arg(short = 'N', default_value_t = 0)]
        docs_in_collection: i64,
        /// No summary (`all`) lines (trec_eval's -n).
        #[arg(short = 'n')]
        no_summary: bool,
        /// Which NIST trec_eval to reproduce: `10` (10.0, the current release) or `9` (9.x:
        /// float scores, `(long)(p*R+0.9)` recall levels; what pytrec_eval embeds).
        #[arg(long, default_value = "10")]
        compat: crate::eval::trec::Compat,
        /// ERR's largest grade (err_cut); default the largest grade in the qrels.
        #[arg(long)]
        max_grade: Option<u8>,
        /// `trec` (trec_eval's lines) or `json` (full precision).
        #[arg(long, value_enum, default_value_t = EvalFormat::Trec)]
        format: EvalFormat,
        /// Threads (default: every core).
        #[arg(long)]
        threads: Option<usize>,
        /// Counterfactual evaluation: score the --run candidate against these click tables
        /// (`judgments --from-clicks --table-out`) by inverse propensity weighting, instead of
        /// against judgments (repeatable: tables add up).
        #[arg(long, requires = "run", conflicts_with_all = ["qrels", "ground_truth"])]
        clicks: Vec<PathBuf>,
        /// With --clicks: the position-bias propensities, `pbm` or `harvest` (estimated from the
        /// tables) or numbers relative to rank 1, comma separated.
        #[arg(long, default_value = "harvest")]
        propensities: String,
        /// With --clicks: propensities below this count as this (clipping; 0 for none).
        #[arg(long, default_value_t = 0.0)]
        clip: f64,
        /// With --clicks: the candidate's ranks scored (its DCG cutoff).
        #[arg(long, default_value_t = 10)]
        cutoff: usize,
        /// With --clicks: the ranks the tables track.
        #[arg(long, default_value_t = 10)]
        max_rank: usize,
    },
    /// Write a judgment list from clicks: per (normalized query, document), SRW's COEC or the
    /// position-based click model's attractiveness mapped to grades, in the formats
    /// `[judgments]` and `eval` read; with the position-bias estimates (`--models-out`).
    #[command(after_help = examples::JUDGMENTS)]
    Judgments {
        /// The only source of judgments so far: the click log (required, for clarity).
        #[arg(long, required = true)]
        from_clicks: bool,
        /// Logged impressions to replay (JSON lines, as `replay` reads them).
        #[arg(long, requires = "engagements")]
        impressions: Option<PathBuf>,
        /// Logged engagements to replay.
        #[arg(long, requires = "impressions")]
        engagements: Option<PathBuf>,
        /// Configuration: the replay's (`[clicks]` is turned on whatever it says), and
        /// `clicks.em_iterations` for the click model's fit, whatever the source.
        #[arg(long)]
        config: Option<PathBuf>,
        /// A running rankpulse's HTTP address: its `/api/v1/clicks` (repeatable: every replica).
        #[arg(long)]
        url: Vec<String>,
        /// A saved click table (`--table-out`; repeatable: tables add up).
        #[arg(long)]
        table: Vec<PathBuf>,
        /// The estimate a grade is read from.
        #[arg(long, value_enum, default_value_t = judgments::Estimate::Coec)]
        estimate: judgments::Estimate,
        /// Ascending thresholds: the grade is how many of them the estimate reaches.
        #[arg(long, value_delimiter = ',', default_value = "0.5,1.0,2.0")]
        grades: Vec<f64>,
        /// Pairs shown fewer times than this are left out: their estimates are noise.
        #[arg(long, default_value_t = 20)]
        min_impressions: u64,
        /// Ranks tracked (`clicks.max_rank` of the sources).
        #[arg(long, default_value_t = 10)]
        max_rank: usize,
        /// The judgment list (JSON lines; TREC qrels when it ends in .qrels or .txt). Default: stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also write the merged click table.
        #[arg(long)]
        table_out: Option<PathBuf>,
        /// Also write the position-bias estimates (PBM by EM, intervention harvesting) as JSON.
        #[arg(long)]
        models_out: Option<PathBuf>,
    },
    /// Validate a configuration file: prints the effective configuration, or names the key at fault.
    #[command(after_help = examples::CHECK_CONFIG)]
    CheckConfig {
        /// The configuration file (TOML) to check.
        #[arg(long)]
        config: PathBuf,
        /// Sample impressions (JSON lines, or an Avro container file for `avro`): each is
        /// decoded as `serve` would, and what every field read is printed under its key. Exits 1
        /// (after printing) when any sample line is rejected, so that a CI gate on a mapping
        /// fails; lines rejected as `unmapped_action` (event names the mapping does not list)
        /// are counted but fail nothing.
        #[arg(long)]
        impressions: Option<PathBuf>,
        /// Sample engagements, as `--impressions`.
        #[arg(long)]
        engagements: Option<PathBuf>,
        /// How many sample lines to print per file (all are decoded and counted).
        #[arg(long, default_value_t = 5)]
        lines: usize,
    },
    /// Print the shell completion script of this command line.
    #[command(after_help = examples::COMPLETIONS)]
    Completions {
        /// The shell to complete in.
        shell: clap_complete::Shell,
    },
    /// Print the man page of this command line, or write one page per command into a directory.
    #[command(after_help = examples::MAN)]
    Man {
        /// Write rankpulse.1 and rankpulse-COMMAND.1 of every command into this directory
        /// (created if missing) instead of printing rankpulse.1.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// How `eval` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EvalFormat {
    /// trec_eval's `measure\tqid\tvalue` lines.
    Trec,
    /// `{"queries": {...}, "all": {...}}` at full precision.
    Json,
}

/// How `replay` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplayFormat {
    /// Plain-text tables for a terminal.
    Table,
    /// The contract's JSON document, with everything.
    Json,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo { listen, duration, rate, faults } => {
            demo::run(listen, duration.map(std::time::Duration::from_secs), rate, faults)
        }
        Command::Serve { config } => serve::run(&config),
        Command::Replay {
            impressions,
            engagements,
            config,
            format,
            windows,
            curve,
            readout,
            breakdown,
            trec_out,
            html,
            max_rejects,
        } => {
            let tables = crate::replay::TableOptions { windows, curve, readout, breakdown };
            let outputs = replay::Outputs { trec: trec_out.as_deref(), html: html.as_deref() };
            replay::run(&impressions, &engagements, config.as_deref(), format, tables, outputs, max_rejects)
        }
        Command::Generate {
            impressions,
            engagements,
            count,
            rate,
            seed,
            start,
            faults,
            interleaving,
            judgments,
            pre_period,
        } => generate::run(
            &impressions,
            &engagements,
            (count, rate, seed, &start),
            faults,
            (interleaving, judgments.as_deref(), pre_period),
        ),
        Command::Produce { config, brokers, impressions_topic, engagements_topic, rate, seed, duration, faults } => {
            let kafka = match config {
                Some(path) => Config::load(Some(&path))?.kafka,
                None => KafkaConfig { brokers, impressions_topic, engagements_topic, ..KafkaConfig::default() },
            };
            produce::run(&kafka, (rate, seed, faults), duration.map(std::time::Duration::from_secs))
        }
        Command::Interleave { input } => interleave::run(input.as_deref()),
        Command::Eval {
            files,
            qrels,
            run,
            ground_truth,
            measures,
            per_query,
            complete,
            level,
            max_docs,
            judged_only,
            docs_in_collection,
            no_summary,
            compat,
            max_grade,
            format,
            threads,
            clicks,
            propensities,
            clip,
            cutoff,
            max_rank,
        } => {
            if !clicks.is_empty() {
                let run = run.ok_or_else(|| anyhow::anyhow!("--clicks scores the --run candidate"))?;
                let json = format == EvalFormat::Json;
                let flags = counterfactual::Flags { tables: clicks, propensities, clip, cutoff, max_rank, json };
                return counterfactual::run(&run, flags);
            }
            let inputs = eval::Inputs { files, qrels, run, ground_truth };
            let flags = eval::Flags {
                measures,
                per_query,
                complete,
                level,
                max_docs,
                judged_only,
                docs_in_collection,
                no_summary,
                compat,
                max_grade,
                format,
                threads,
            };
            eval::run(inputs, flags)
        }
        Command::CheckConfig { config, impressions, engagements, lines } => {
            check_config::run(&config, [impressions.as_deref(), engagements.as_deref()], lines)
        }
        Command::Judgments {
            from_clicks: _,
            impressions,
            engagements,
            config,
            url,
            table,
            estimate,
            grades,
            min_impressions,
            max_rank,
            out,
            table_out,
            models_out,
        } => {
            if !grades.windows(2).all(|w| w[0] < w[1]) {
                anyhow::bail!("--grades must be ascending thresholds, e.g. 0.5,1.0,2.0");
            }
            if !(1..=crate::config::MAX_TRACKED_RANKS).contains(&max_rank) {
                anyhow::bail!("--max-rank must be from 1 to {}", crate::config::MAX_TRACKED_RANKS);
            }
            let replay = impressions.zip(engagements);
            judgments::run(
                judgments::Sources { replay, config, urls: url, tables: table },
                judgments::Output { estimate, grades, min_impressions, max_rank, out, table_out, models_out },
            )
        }
        Command::Completions { shell } => completions::run(shell),
        Command::Man { out } => man::run(out.as_deref()),
    }
}

/// What `main` prints of a failed command: the error and its causes, each once. A cause whose
/// text the message already holds is left out: an error that quotes its cause and also returns
/// it as `source()` (rdkafka's do) must not print it twice.
pub fn error_message(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

/// A tokio runtime for the long-running commands.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_name_each_cause_once() {
        let os = || std::io::Error::from_raw_os_error(2);
        // A context over an OS error: both, once each.
        let e = anyhow::Error::new(os()).context("cannot read nope.jsonl");
        assert_eq!(error_message(&e), format!("cannot read nope.jsonl: {}", os()));
        // An error that quotes its cause and also returns it as its source: the cause once.
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read nope.jsonl: {0}")]
        struct Quoting(#[source] std::io::Error);
        let e = anyhow::Error::new(Quoting(os()));
        assert_eq!(error_message(&e), format!("cannot read nope.jsonl: {}", os()));
        assert_eq!(format!("{e:#}").matches("os error 2").count(), 2, "what anyhow alone prints");
    }
}
