//! The command line's conventions, on the real binary: `--version` names the git commit it was
//! built from, `completions` and `man` generate what shells and man read, and every `--help`
//! ends with examples that parse.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use rankpulse::commands::Cli;

const BIN: &str = env!("CARGO_BIN_EXE_rankpulse");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the binary and returns its stdout; panics unless it succeeded.
fn rankpulse(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).current_dir(repo()).output().unwrap();
    assert!(out.status.success(), "rankpulse {args:?}: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The commands a user can type, as the clap definition has them (`help` is clap's own).
fn subcommands() -> Vec<String> {
    let names: Vec<String> = Cli::command().get_subcommands().map(|s| s.get_name().to_string()).collect();
    assert!(names.len() >= 10, "{names:?}");
    names
}

/// `git ARGS` in the repository: its trimmed stdout, or `None` without git or a repository.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(repo()).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn version_names_the_commit() {
    let long = rankpulse(&["--version"]);
    assert_eq!(rankpulse(&["-V"]), long);
    let prefix = format!("rankpulse {} (", env!("CARGO_PKG_VERSION"));
    assert!(long.starts_with(&prefix) && long.ends_with(")\n"), "{long:?}");
    if !repo().join(".git").exists() {
        println!("note: no .git in {}: the commit in {long:?} is not checked", repo().display());
        return;
    }
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        println!("note: git is not available: the commit in {long:?} is not checked");
        return;
    };
    let date = git(&["log", "-1", "--date=short", "--format=%cd"]).unwrap();
    // `rankpulse 0.1.0 (abed8b2 2026-11-26)`, `-dirty` after the date when tracked files had
    // uncommitted changes at build time.
    let expected = [format!("{prefix}{head} {date})\n"), format!("{prefix}{head} {date}-dirty)\n")];
    assert!(expected.contains(&long), "{long:?} is not one of {expected:?}");
}

/// build.rs on its own, compiled with rustc and run as cargo runs it: without a repository of
/// its own it takes RANKPULSE_GIT_COMMIT, else says `unknown commit`, and never fails.
#[test]
fn build_script_names_a_commit_without_a_repository() {
    let work = tempfile::tempdir().unwrap();
    let script = work.path().join("build-script");
    let compiled = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--edition", "2021", "--crate-name", "build_script_build", "-o"])
        .arg(&script)
        .arg(repo().join("build.rs"))
        .output();
    match compiled {
        Ok(out) => assert!(out.status.success(), "rustc build.rs: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => {
            println!("note: rustc cannot be run ({e}): build.rs is not checked on its own");
            return;
        }
    }
    let run = |manifest_dir: &Path, commit: Option<&str>| -> String {
        let mut cmd = Command::new(&script);
        cmd.env("CARGO_MANIFEST_DIR", manifest_dir).env("CARGO_PKG_VERSION", "9.8.7");
        match commit {
            Some(commit) => cmd.env("RANKPULSE_GIT_COMMIT", commit),
            None => cmd.env_remove("RANKPULSE_GIT_COMMIT"),
        };
        let out: Output = cmd.output().unwrap();
        assert!(out.status.success(), "build.rs failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let version = |stdout: &str| -> String {
        let line = stdout.lines().find_map(|l| l.strip_prefix("cargo:rustc-env=RANKPULSE_VERSION="));
        line.unwrap_or_else(|| panic!("no RANKPULSE_VERSION in\n{stdout}")).to_string()
    };
    // A crate tarball unpacked on its own, or inside another repository (here, this one's
    // target directory): not that repository's commit.
    let unpacked = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for dir in [work.path(), unpacked.path()] {
        assert_eq!(version(&run(dir, None)), "9.8.7 (unknown commit)");
        assert_eq!(version(&run(dir, Some(""))), "9.8.7 (unknown commit)", "an empty build argument");
        assert_eq!(version(&run(dir, Some("deadbee 2026-01-02"))), "9.8.7 (deadbee 2026-01-02)");
        let out = run(dir, Some("dead\nbee"));
        assert_eq!(version(&out), "9.8.7 (unknown commit)");
        assert!(out.contains("cargo:warning="), "{out}");
        assert!(out.contains("cargo:rerun-if-env-changed=RANKPULSE_GIT_COMMIT"), "{out}");
        // A watched path that does not exist would run the script on every build.
        assert!(!out.contains(".git"), "{out}");
    }
    // In the repository, git's answer wins over the variable, and HEAD is watched wherever
    // git keeps it (a worktree's .git is a file naming the directory).
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        println!("note: git or the repository is not available: build.rs's git path is not checked");
        return;
    };
    let out = run(repo(), Some("deadbee"));
    assert!(version(&out).starts_with(&format!("9.8.7 ({head} ")), "{out}");
    let head_file = repo().join(git(&["rev-parse", "--git-path", "HEAD"]).unwrap());
    let watched: Vec<PathBuf> =
        out.lines().filter_map(|l| l.strip_prefix("cargo:rerun-if-changed=")).map(PathBuf::from).collect();
    assert!(
        watched.iter().any(|p| repo().join(p).canonicalize().ok() == head_file.canonicalize().ok()),
        "{} is not watched: {watched:?}",
        head_file.display()
    );
    for path in &watched {
        assert!(repo().join(path).exists(), "watched but missing: {}", path.display());
    }
}

#[test]
fn bash_completions_parse_and_name_every_command() {
    let script = rankpulse(&["completions", "bash"]);
    for name in subcommands() {
        assert!(script.contains(&name), "the bash completions do not name `{name}`");
    }
    // Flags of a command, not only the command names.
    assert!(script.contains("--trec-out") && script.contains("--impressions-topic"));
    match Command::new("bash").arg("-n").stdin(std::process::Stdio::piped()).spawn() {
        Ok(mut bash) => {
            use std::io::Write;
            bash.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
            let status = bash.wait().unwrap();
            assert!(status.success(), "bash -n rejects the completions: {status}");
        }
        Err(e) => println!("note: bash cannot be run ({e}): the script's syntax is not checked"),
    }
}

#[test]
fn completions_for_the_other_shells() {
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let script = rankpulse(&["completions", shell]);
        for name in subcommands() {
            assert!(script.contains(&name), "the {shell} completions do not name `{name}`");
        }
    }
    let out = Command::new(BIN).args(["completions", "tcsh"]).output().unwrap();
    assert!(!out.status.success(), "an unknown shell is refused");
}

/// groff (or man) typesets a page without a warning; `None` when neither is installed.
fn typeset_warnings(page: &Path) -> Option<String> {
    let attempts: [(&str, Vec<&str>); 2] =
        [("groff", vec!["-man", "-Tutf8", "-z", "-ww"]), ("man", vec!["-l", "-Tutf8"])];
    for (program, args) in attempts {
        let Ok(out) = Command::new(program).args(&args).arg(page).env("MANWIDTH", "80").output() else { continue };
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        return Some(match out.status.success() {
            true => stderr,
            false => format!("{program} failed ({}): {stderr}", out.status),
        });
    }
    None
}

#[test]
fn man_pages_one_per_command_and_valid_roff() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let listed = rankpulse(&["man", "--out", out.to_str().unwrap()]);
    let mut expected: Vec<String> = vec!["rankpulse.1".into()];
    expected.extend(subcommands().iter().filter(|s| *s != "help").map(|s| format!("rankpulse-{s}.1")));
    let mut written: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    written.sort();
    expected.sort();
    assert_eq!(written, expected);
    assert_eq!(listed.lines().count(), expected.len(), "one path printed per page:\n{listed}");
    let mut typeset = false;
    for name in &expected {
        let path = out.join(name);
        let page = std::fs::read_to_string(&path).unwrap();
        // The first request after roff's apostrophe preamble (`.ie`/`.el`) is the title.
        let first = page.lines().find(|l| !l.starts_with(".ie ") && !l.starts_with(".el ") && !l.starts_with(".\\\""));
        let title = name.trim_end_matches(".1");
        assert!(first.unwrap().starts_with(&format!(".TH {title} 1")), "{name} starts with {first:?}");
        for section in [".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS", ".SH EXAMPLES"] {
            assert!(page.contains(section), "{name} has no {section}");
        }
        if let Some(warnings) = typeset_warnings(&path) {
            typeset = true;
            assert!(warnings.trim().is_empty(), "{name}: {warnings}");
        }
    }
    if !typeset {
        println!("note: neither groff nor man is installed: the pages are not typeset");
    }
    // Without --out, the top page on stdout.
    assert_eq!(rankpulse(&["man"]), std::fs::read_to_string(out.join("rankpulse.1")).unwrap());
}

/// A line of an Examples: section split as a POSIX shell splits it: its words, quotes removed,
/// with `|`, `<` and `>` as words of their own.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' => words.extend(word.take()),
            '\'' => word.get_or_insert_with(String::new).extend(chars.by_ref().take_while(|&c| c != '\'')),
            '"' => word.get_or_insert_with(String::new).extend(chars.by_ref().take_while(|&c| c != '"')),
            '|' | '<' | '>' => {
                words.extend(word.take());
                words.push(c.to_string());
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The `rankpulse ...` command of an example line: its arguments, without the environment
/// assignments before it, the pipeline around it and its redirections.
fn example_args(line: &str) -> Vec<String> {
    let words = shell_words(line);
    let segment = words
        .split(|w| w == "|")
        .find(|segment| segment.iter().any(|w| w == "rankpulse"))
        .unwrap_or_else(|| panic!("no rankpulse command in the example {line:?}"));
    let env_assignment = |w: &String| {
        w.split_once('=').is_some_and(|(name, _)| name.chars().all(|c| c == '_' || c.is_ascii_uppercase()))
    };
    let command: Vec<String> = segment.iter().skip_while(|w| env_assignment(w)).cloned().collect();
    assert_eq!(command.first().map(String::as_str), Some("rankpulse"), "{line:?}");
    command.into_iter().take_while(|w| w != "<" && w != ">").collect()
}

#[test]
fn the_example_splitter_splits_as_a_shell_does() {
    let line = r#"RUST_LOG=debug echo '{"a": 1}' | rankpulse interleave --input "my file" > out.jsonl"#;
    assert_eq!(shell_words(line)[..3], ["RUST_LOG=debug", "echo", r#"{"a": 1}"#]);
    assert_eq!(example_args(line), ["rankpulse", "interleave", "--input", "my file"]);
}

/// The example lines of the Examples: section of one `--help` (comments left out).
fn examples(help: &str, what: &str) -> Vec<String> {
    let (_, section) =
        help.split_once("\nExamples:\n").unwrap_or_else(|| panic!("{what} has no Examples: section:\n{help}"));
    let mut lines = Vec::new();
    for line in section.lines() {
        let line =
            line.strip_prefix("  ").unwrap_or_else(|| panic!("{what}: an unindented line in Examples: {line:?}"));
        if line.starts_with('#') {
            continue;
        }
        assert!(line.contains("rankpulse "), "{what}: an example that does not run rankpulse: {line:?}");
        lines.push(line.to_string());
    }
    assert!(!lines.is_empty(), "{what} has an empty Examples: section");
    lines
}

#[test]
fn every_help_has_examples_that_parse() {
    let mut commands: Vec<Option<String>> = vec![None];
    commands.extend(subcommands().into_iter().filter(|s| s != "help").map(Some));
    for command in commands {
        let what = format!("rankpulse {}--help", command.as_deref().map(|c| format!("{c} ")).unwrap_or_default());
        let prefix: Vec<&str> = command.iter().map(String::as_str).collect();
        let long = rankpulse(&[&prefix[..], &["--help"]].concat());
        let short = rankpulse(&[&prefix[..], &["-h"]].concat());
        let examples = examples(&long, &what);
        assert_eq!(examples, self::examples(&short, &what), "-h shows the same examples");
        let mut own = 0;
        for line in &examples {
            let args = example_args(line);
            if let Some(command) = &command {
                own += usize::from(args.get(1) == Some(command));
            }
            // The binary's own parser, which also converts every value (addresses, shares,
            // `--max-rejects`); --help and --version end it as a success.
            if let Err(e) = Cli::try_parse_from(&args) {
                assert!(
                    matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion),
                    "{what}: {line:?} does not parse: {e}"
                );
            }
            for arg in args.iter().filter(|a| a.starts_with("config/")) {
                assert!(repo().join(arg).is_file(), "{what}: {line:?} names {arg}, which is not in the repository");
            }
        }
        if let Some(command) = &command {
            assert!(own > 0, "{what}: no example runs `rankpulse {command}`");
        }
    }
}

/// `replay --help` names every section of the configuration a replay reads, the field mapping
/// and the A/B statistics among them.
#[test]
fn replay_help_names_every_section_it_reads() {
    let help = rankpulse(&["replay", "--help"]);
    let config = &help[help.find("--config <CONFIG>").expect("replay has --config")..];
    let config = &config[..config.find("\n      --").unwrap_or(config.len())];
    for section in [
        "[join]",
        "[metrics]",
        "[limits]",
        "[labels]",
        "[ab]",
        "[interleaving]",
        "[judgments]",
        "[clicks]",
        "[mapping]",
    ]
    .into_iter()
    .chain(["[ubi]", "[kafka]", "[page]"])
    {
        assert!(config.contains(section), "replay --help does not name {section}:\n{config}");
    }
}
