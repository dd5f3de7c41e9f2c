use std::process::ExitCode;

use clap::Parser;
use rankpulse::commands::logging::{self, LogFormat};

fn main() -> ExitCode {
    let cli = rankpulse::commands::Cli::parse();
    let format = cli.log_format;
    logging::init(format);
    match rankpulse::commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A log pipeline reads every stderr line as JSON: the fatal error too.
            let message = rankpulse::commands::error_message(&e);
            match format {
                LogFormat::Text => eprintln!("error: {message}"),
                LogFormat::Json => tracing::error!("{message}"),
            }
            ExitCode::FAILURE
        }
    }
}
