//! The command line: every command parses its arguments here and calls its own file, which only
//! loads what it needs and calls the library: `demo`, `serve`, `replay`, `generate`, `produce`,
//! `check-config`.

pub mod check_config;
pub mod demo;
pub mod generate;
pub mod logging;
pub mod produce;
pub mod replay;
pub mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "rankpulse",
    version,
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
    Demo {
        /// Address of the metrics endpoint.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: SocketAddr,
        /// Stop after this many seconds (default: run until interrupted).
        #[arg(long)]
        duration: Option<u64>,
        /// Generated impressions per second.
        #[arg(long, default_value_t = 200)]
        rate: u32,
    },
    /// Run the daemon against real Kafka brokers.
    Serve {
        /// Configuration file (TOML). Every key has a default.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run the same join and metrics over JSON-lines files (one event per line) and print the
    /// results, as if every event had been consumed and the stream had then gone idle.
    Replay {
        #[arg(long)]
        impressions: PathBuf,
        #[arg(long)]
        engagements: PathBuf,
        /// Configuration file (TOML); [join], [metrics], [limits], [labels], the formats of
        /// [kafka] (impressions_format, engagements_format) and [ubi] matter here.
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = ReplayFormat::Table)]
        format: ReplayFormat,
        /// Also write qrels.txt and run.txt (TREC format) of every finalized impression into
        /// this directory, to run trec_eval or ranx on exactly what rankpulse measured.
        #[arg(long)]
        trec_out: Option<PathBuf>,
    },
    /// Write the demo's generated A/B traffic as JSON-lines files, to try `replay` without Kafka.
    Generate {
        #[arg(long)]
        impressions: PathBuf,
        #[arg(long)]
        engagements: PathBuf,
        /// Number of impressions.
        #[arg(long, default_value_t = 100_000)]
        count: u64,
        /// Impressions per second of event time.
        #[arg(long, default_value_t = 200)]
        rate: u32,
        #[arg(long, default_value_t = 2026)]
        seed: u64,
        /// Event time of the first impression (RFC 3339).
        #[arg(long, default_value = "2026-11-22T10:00:00Z")]
        start: String,
    },
    /// Produce the demo's generated A/B traffic to real Kafka topics in real time, to try
    /// `serve` against a real cluster (the docker compose quick start runs it).
    Produce {
        /// Bootstrap brokers, comma separated.
        #[arg(long, default_value = "localhost:9092")]
        brokers: String,
        #[arg(long, default_value = "search-impressions")]
        impressions_topic: String,
        #[arg(long, default_value = "search-engagements")]
        engagements_topic: String,
        /// Generated impressions per second.
        #[arg(long, default_value_t = 200)]
        rate: u32,
        #[arg(long, default_value_t = 2026)]
        seed: u64,
        /// Stop after this many seconds (default: run until interrupted).
        #[arg(long)]
        duration: Option<u64>,
    },
    /// Validate a configuration file: prints the effective configuration, or names the key at fault.
    CheckConfig {
        #[arg(long)]
        config: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplayFormat {
    Table,
    Json,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo { listen, duration, rate } => {
            demo::run(listen, duration.map(std::time::Duration::from_secs), rate)
        }
        Command::Serve { config } => serve::run(&config),
        Command::Replay { impressions, engagements, config, format, trec_out } => {
            replay::run(&impressions, &engagements, config.as_deref(), format, trec_out.as_deref())
        }
        Command::Generate { impressions, engagements, count, rate, seed, start } => {
            generate::run(&impressions, &engagements, count, rate, seed, &start)
        }
        Command::Produce { brokers, impressions_topic, engagements_topic, rate, seed, duration } => produce::run(
            &brokers,
            (&impressions_topic, &engagements_topic),
            rate,
            seed,
            duration.map(std::time::Duration::from_secs),
        ),
        Command::CheckConfig { config } => check_config::run(&config),
    }
}

/// A tokio runtime for the long-running commands.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}
