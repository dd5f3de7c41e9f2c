//! `rankpulse completions SHELL`: the completion script of this command line, generated from its
//! clap definition so that it cannot fall behind a new command or flag.

use std::io::Write;

use anyhow::Context;
use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

pub fn run(shell: Shell) -> anyhow::Result<()> {
    // Into a buffer first: clap_complete panics when its writer fails, and a closed pipe
    // (`rankpulse completions bash | head`) is an error to report, not a crash.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "rankpulse", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script).and_then(|()| out.flush()).context("writing the completion script to stdout")
}
