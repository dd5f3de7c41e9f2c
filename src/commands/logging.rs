//! Where the logs go and how they look: stderr, filtered by `RUST_LOG`; plain text for people
//! (coloured only on a terminal, and never with `NO_COLOR` set), or one JSON object per line
//! for log pipelines (`--log-format json`).

use std::ffi::OsStr;
use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// The filter without `RUST_LOG`: librdkafka's own chatter only from warnings up.
const DEFAULT_FILTER: &str = "info,librdkafka=warn,rdkafka=warn";

/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line of text per event, for people.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, message and fields at the top
    /// level), for Loki, Elasticsearch, Cloud Logging and the like.
    Json,
}

/// Installs the global subscriber; called once, before any command runs.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    // A failed write is dropped: by default tracing-subscriber reports it with `eprintln!`,
    // which panics when stderr is a closed pipe, and a panic in the signal task left SIGTERM
    // without effect.
    let builder =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).log_internal_errors(false);
    match format {
        LogFormat::Text => {
            let no_color = std::env::var_os("NO_COLOR");
            builder.with_ansi(colour(std::io::stderr().is_terminal(), no_color.as_deref())).init();
        }
        LogFormat::Json => builder.with_ansi(false).json().flatten_event(true).init(),
    }
}

/// Colour codes only for a person at a terminal: a file, a pipe or a container log gets plain
/// text, and a non-empty `NO_COLOR` turns colour off anywhere (<https://no-color.org>).
pub fn colour(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))), "an empty NO_COLOR does not count");
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None), "a file or pipe gets no escape codes");
    }
}
