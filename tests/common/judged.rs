//! The judgment-list suites of `tests/judgments/fixtures/` (`generate.py`, `incomplete.py`),
//! replayed through the library with an observer of every judged impression.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rankpulse::config::Config;
use rankpulse::engine::Engine;
use rankpulse::ids::QueryKey;
use rankpulse::judgments::JudgmentSource;
use rankpulse::replay;

/// The suites: judgments keyed by query text (JSON lines) and by query id (TREC qrels).
pub const JUDGED_SUITES: [&str; 2] = ["query_jsonl", "query_id_qrels"];

/// A suite's directory.
pub fn judged_suite_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/judgments/fixtures").join(name)
}

/// The suite's configuration, its judgment file found beside it.
pub fn judged_suite_config(dir: &Path) -> Config {
    let mut cfg = Config::load(Some(&dir.join("config.toml"))).unwrap();
    cfg.judgments.file = dir.join(&cfg.judgments.file).to_string_lossy().into_owned();
    cfg
}

/// Replays the suite in `dir` with `cfg`; returns the engine and each judged impression's
/// judged block (by query), each impression judged once.
pub fn replay_observing_judged(dir: &Path, cfg: &Config) -> (Engine, HashMap<QueryKey, Vec<f64>>) {
    let mut engine = Engine::new(cfg);
    engine.set_judgments(JudgmentSource::from_config(&cfg.judgments).unwrap().expect("a judgment list"));
    let seen: Arc<Mutex<HashMap<QueryKey, Vec<f64>>>> = Arc::default();
    let sink = Arc::clone(&seen);
    engine.set_judged_observer(Box::new(move |query, values| {
        assert!(sink.lock().unwrap().insert(query, values.to_vec()).is_none(), "an impression was judged twice");
    }));
    let engine = replay::run(&dir.join("impressions.jsonl"), &dir.join("engagements.jsonl"), engine).unwrap();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (engine, seen)
}
