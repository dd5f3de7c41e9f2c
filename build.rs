//! Names the git commit the binary is built from, for `rankpulse --version`: sets
//! `RANKPULSE_VERSION` to `0.1.0 (abed8b2 2026-11-26)`, with `-dirty` after the date when tracked
//! files had uncommitted changes. A build without the repository (a crate tarball, a Docker build
//! context without .git) takes the commit from `RANKPULSE_GIT_COMMIT`, else says `unknown
//! commit`: the version is a courtesy and never fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;

const COMMIT_ENV: &str = "RANKPULSE_GIT_COMMIT";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={COMMIT_ENV}");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = from_git(&manifest_dir).or_else(from_env).unwrap_or_else(|| "unknown commit".to_string());
    println!("cargo:rustc-env=RANKPULSE_VERSION={version} ({commit})");
}

/// `abed8b2 2026-11-26[-dirty]` from the repository whose root is the crate's directory. Only
/// that one: a tarball unpacked inside some other repository (a vendor directory) must not be
/// given that repository's commit.
fn from_git(dir: &Path) -> Option<String> {
    // A directory in a clone, a file (`gitdir: ...`) in a worktree: git resolves either.
    if !dir.join(".git").exists() {
        return None;
    }
    let toplevel = git(dir, &["rev-parse", "--show-toplevel"])?;
    if Path::new(&toplevel).canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    watch_git_files(dir);
    let described = git(dir, &["log", "-1", "--date=short", "--format=%h %cd"])?;
    // --no-optional-locks: a plain `git status` may write a refreshed .git/index, which is
    // watched below, and every build would then run this script (and rebuild the crate) again.
    // --untracked-files=no: only changes to tracked files make a build dirty.
    let status = git(dir, &["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"])?;
    Some(if status.is_empty() { described } else { format!("{described}-dirty") })
}

/// Runs the script again when HEAD moves (a checkout or a commit), and when the index changes
/// (a staged or committed edit, which may change dirtiness). `--git-path` maps each to where it
/// lives: a worktree's own HEAD and index, the branch ref in the shared directory. An edit not
/// yet staged changes no git file: the sources the binary is built from are watched too (an
/// edit there rebuilds the crate anyway), so that such an edit makes the version `-dirty`.
fn watch_git_files(dir: &Path) {
    for source in ["src", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={source}");
    }
    let mut watched = vec!["HEAD".to_string(), "index".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        let Some(path) = git(dir, &["rev-parse", "--git-path", &name]) else { continue };
        let path = dir.join(path);
        // A missing file (a branch only in packed-refs) would make cargo run the script on
        // every build.
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// The commit given by whoever builds without the repository: `docker build --build-arg
/// RANKPULSE_GIT_COMMIT=...`. Printed as given, when it is one printable line.
fn from_env() -> Option<String> {
    let value = std::env::var(COMMIT_ENV).ok()?;
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.chars().any(char::is_control) {
        println!("cargo:warning={COMMIT_ENV} holds control characters; the version says `unknown commit`");
        return None;
    }
    Some(value.to_string())
}

/// `git ARGS` in `dir`: its trimmed stdout, or `None` when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    Some(String::from_utf8(output.stdout).ok()?.trim().to_string())
}
