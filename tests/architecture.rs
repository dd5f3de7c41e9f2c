//! The module layering of `src/`, checked: every module imports only modules of lower pipeline
//! stages, so that a rule has one home and the data flow reads from the bottom up.
//!
//! `lib.rs`'s module map is the prose of this table. A module that is not listed fails the test:
//! a new module must be given its stage on purpose. Test code (`#[cfg(test)]` and below) may
//! reach anywhere (a checkpoint test builds the source's payload), so it is not read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each top-level module and its stage, lowest first. A module may import only modules of a
/// lower stage (and itself).
const STAGES: &[(&str, u32)] = &[
    // Vocabulary and lifecycle every stage may use: no imports of the crate.
    ("time", 0),
    ("ids", 0),
    ("health", 0),
    ("shutdown", 0),
    ("kafka_log", 0),
    ("checkpoint", 0),
    // Pure interleaving credit (the metric layout keeps its sums), metric math (trec_eval
    // definitions) and A/B statistics.
    ("interleaving", 0),
    ("stats", 1),
    // Click models (the inverse-propensity weights the metric layout applies are theirs).
    ("clicks", 1),
    ("metrics", 2),
    // Start-up: the configuration schema and its checks.
    ("config", 3),
    // Reference data read from files or a registry (judgment lists, Avro and Protobuf
    // schemas), as configured.
    ("judgments", 4),
    ("schemas", 4),
    // Decoding (with the schemas).
    ("event", 5),
    // Attribution and aggregation.
    ("join", 6),
    ("accumulate", 6),
    // The A/B reports over the accumulators.
    ("experiments", 7),
    // Orchestration.
    ("engine", 8),
    // Inputs and outputs around the engine.
    ("source", 9),
    ("repartition", 9),
    ("replay", 9),
    ("eval", 9),
    ("output", 9),
    ("demo", 9),
    // Wiring and the command line; the hostile-input entry points, which drive inputs and
    // outputs together.
    ("pipeline", 10),
    ("fuzzing", 10),
    ("commands", 11),
];

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`src/engine/task.rs` -> `engine`).
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next().unwrap().as_os_str().to_str().unwrap();
    first.trim_end_matches(".rs").to_string()
}

/// The crate modules a piece of code names (`crate::engine::Engine` -> `engine`), with the line.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let name: String = rest[at + 7..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            found.push((n + 1, name));
            rest = &rest[at + 7..];
        }
    }
    found
}

#[test]
fn every_module_imports_only_lower_stages() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let stages: BTreeMap<&str, u32> = STAGES.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut violations = Vec::new();
    for file in &files {
        let module = module_of(&src, file);
        if module == "lib" || module == "main" {
            continue;
        }
        let Some(&own) = stages.get(module.as_str()) else {
            violations.push(format!("{}: module `{module}` has no stage in STAGES", file.display()));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (line, imported) in crate_paths(code) {
            if imported == module {
                continue;
            }
            match stages.get(imported.as_str()) {
                Some(&theirs) if theirs < own => {}
                Some(&theirs) => violations.push(format!(
                    "{}:{line}: `{module}` (stage {own}) imports `{imported}` (stage {theirs}): not a lower stage",
                    file.display()
                )),
                None => violations.push(format!("{}:{line}: unknown module `{imported}`", file.display())),
            }
        }
    }
    assert!(violations.is_empty(), "layering violations:\n{}", violations.join("\n"));
}

#[test]
fn the_checker_sees_an_upward_import() {
    let code = "use crate::engine::Engine;\n// crate::source in a comment\nfn f() { crate::time::now(); }";
    assert_eq!(crate_paths(code), [(1, "engine".to_string()), (3, "time".to_string())]);
}

/// The no-panic rule (`src/lib.rs`, "Hostile input"): denied outside tests in every file that
/// reads bytes from outside (messages, changelog and aggregates records, the configuration).
const NO_PANIC_RULE: &str =
    "#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]";

/// The files under the rule, besides every file of `src/event/` (a new decoder is under it
/// whether or not it is listed). `config/mod.rs` covers its submodules: lint levels are inherited.
const NO_PANIC_FILES: &[&str] = &[
    "time.rs",
    "checkpoint.rs",
    "config/mod.rs",
    "schemas/mod.rs",
    "source/chunks.rs",
    "source/changelog.rs",
    "source/aggregates.rs",
    "engine/snapshot.rs",
    "clicks/named.rs",
    "clicks/log/snapshot.rs",
    "accumulate/cuped.rs",
];

#[test]
fn modules_that_read_input_deny_panics() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: Vec<PathBuf> = NO_PANIC_FILES.iter().map(|f| src.join(f)).collect();
    rust_files(&src.join("event"), &mut files);
    let mut missing = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // An inner attribute: after the module documentation, before anything else.
        let head: Vec<&str> = text.lines().skip_while(|l| l.starts_with("//!")).take(1).collect();
        if head != [NO_PANIC_RULE] {
            missing.push(file.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "the no-panic rule is not the first line after the module documentation of:\n{}\nit is: {NO_PANIC_RULE}",
        missing.join("\n")
    );
}
