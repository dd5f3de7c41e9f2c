//! Cargo.lock and fuzz/Cargo.lock audited against the committed snapshot of the RustSec advisory
//! database (audit/advisory-db, refreshed by audit/refresh.sh; audit/check.sh checks the snapshot
//! is unedited and covers every crate). This is what `cargo audit --no-fetch --deny warnings`
//! does, with the same library (the `rustsec` crate), without building cargo-audit on every fresh
//! machine (9.5 minutes on 2 cores): every advisory affecting a locked version fails the test,
//! and so does every informational one (unmaintained, unsound, notice), as `--deny warnings`
//! would. Yanked versions are not checked: that needs the crates.io index, which CI cannot reach.

use std::path::{Path, PathBuf};

use rustsec::advisory::Informational;
use rustsec::report::{Report, Settings};
use rustsec::{Database, Lockfile};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn database() -> Database {
    Database::open(&repo("audit/advisory-db")).expect("audit/advisory-db is readable")
}

/// Every advisory kind fails the audit, informational ones included.
fn strict() -> Settings {
    Settings {
        informational_warnings: vec![Informational::Unmaintained, Informational::Unsound, Informational::Notice],
        ..Settings::default()
    }
}

/// The advisories (and informational warnings) that apply to `lockfile`, one line each.
fn findings(db: &Database, lockfile: &Lockfile) -> Vec<String> {
    let report = Report::generate(db, lockfile, &strict());
    let mut found: Vec<String> = report
        .vulnerabilities
        .list
        .iter()
        .map(|v| format!("{} {} {}: {}", v.advisory.id, v.package.name, v.package.version, v.advisory.title))
        .collect();
    for (kind, warnings) in &report.warnings {
        for w in warnings {
            let id = w.advisory.as_ref().map(|a| a.id.to_string()).unwrap_or_default();
            found.push(format!("{kind:?} {id} {} {}", w.package.name, w.package.version));
        }
    }
    found
}

#[test]
fn the_lockfiles_have_no_advisories() {
    let db = database();
    assert!(db.iter().count() > 50, "the snapshot holds {} advisories; is it complete?", db.iter().count());
    for lock in ["Cargo.lock", "fuzz/Cargo.lock"] {
        let lockfile = Lockfile::load(repo(lock)).unwrap_or_else(|e| panic!("{lock}: {e}"));
        let found = findings(&db, &lockfile);
        assert!(
            found.is_empty(),
            "{lock}: {} crates audited, advisories apply:\n{}\n(update the crate, or refresh the snapshot with audit/refresh.sh if it is stale)",
            lockfile.packages.len(),
            found.join("\n")
        );
        println!("{lock}: {} crates, no advisory applies", lockfile.packages.len());
    }
}

/// The database is read and matched at all: bytes 1.11.0 is affected by RUSTSEC-2026-0007, and
/// 1.11.1, its fix, is not. Without this, an empty or unreadable snapshot would pass.
#[test]
fn a_known_affected_version_is_flagged() {
    let db = database();
    let lock = |version: &str| -> Lockfile {
        format!(
            "version = 4\n\n[[package]]\nname = \"bytes\"\nversion = \"{version}\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\n"
        )
        .parse()
        .unwrap()
    };
    let affected = findings(&db, &lock("1.11.0"));
    assert!(affected.iter().any(|f| f.starts_with("RUSTSEC-2026-0007 bytes 1.11.0")), "{affected:?}");
    assert_eq!(findings(&db, &lock("1.11.1")), Vec::<String>::new());
}
