//! `rankpulse man`: man pages generated from the clap definition, one per command
//! (`rankpulse.1`, `rankpulse-serve.1`, ...), each with the examples of its `--help`.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;
use clap_mangen::Man;
use roff::{bold, roman, Roff};

use super::Cli;

/// Prints rankpulse.1 to stdout, or writes every page into `out` and prints their paths.
pub fn run(out: Option<&Path>) -> anyhow::Result<()> {
    let pages = pages();
    let mut stdout = std::io::stdout().lock();
    match out {
        None => {
            let (_, top) = pages.first().context("no man page generated")?;
            stdout.write_all(top).context("writing the man page to stdout")?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, page) in &pages {
                let path = dir.join(name);
                std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
                writeln!(stdout, "{}", path.display()).context("writing to stdout")?;
            }
        }
    }
    stdout.flush().context("writing to stdout")
}

/// Every page, the top one first: its file name and its roff source.
pub fn pages() -> Vec<(String, Vec<u8>)> {
    // Without it, `help` would get a page of its own, and `rankpulse(1)` would list it.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Gives each subcommand its display name (`rankpulse-serve`), the page's title and file name.
    cmd.build();
    // Every page's footer names the version and commit, not only the top one's.
    let source = format!("rankpulse {}", cmd.get_version().unwrap_or_default());
    let mut pages = vec![page(&cmd, &source)];
    pages.extend(cmd.get_subcommands().filter(|sub| !sub.is_hide_set()).map(|sub| page(sub, &source)));
    pages
}

/// One page, as clap_mangen renders it but with the after-help text as an EXAMPLES section
/// kept line by line: clap_mangen's own would fill the examples into one paragraph.
fn page(cmd: &clap::Command, source: &str) -> (String, Vec<u8>) {
    let examples = cmd.get_after_help().map(|text| text.to_string());
    let man = Man::new(cmd.clone()).source(source);
    let mut page = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = render(&man, cmd, examples.as_deref(), &mut page);
    (man.get_filename(), page)
}

fn render(man: &Man, cmd: &clap::Command, examples: Option<&str>, w: &mut Vec<u8>) -> std::io::Result<()> {
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    if cmd.get_subcommands().any(|sub| !sub.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    if let Some(examples) = examples {
        examples_section(examples).to_writer(w)?;
    }
    // Only the top command has a version: clap_mangen's section would panic on the others.
    if cmd.get_version().is_some() {
        man.render_version_section(w)?;
    }
    Ok(())
}

/// `Examples:` and its indented lines, as an unfilled EXAMPLES section: the comments in roman,
/// the commands in bold.
fn examples_section(text: &str) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXAMPLES"]);
    roff.control("nf", []);
    for line in text.lines().filter(|line| line.trim_end() != "Examples:") {
        let line = line.strip_prefix("  ").unwrap_or(line);
        match line.starts_with('#') {
            true => roff.text([roman(line)]),
            false => roff.text([bold(line)]),
        };
    }
    roff.control("fi", []);
    roff
}
