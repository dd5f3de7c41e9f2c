use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,librdkafka=warn,rdkafka=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = rankpulse::commands::Cli::parse();
    match rankpulse::commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", rankpulse::commands::error_message(&e));
            ExitCode::FAILURE
        }
    }
}
