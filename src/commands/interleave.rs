//! `rankpulse interleave`: the reference team-draft interleaver over JSON lines, so a search
//! service (or a test) can make exactly the lists rankpulse documents, and see what an
//! interleaved impression looks like.
//!
//! Each input line is an object with `rankings` (ranker name to its ranked result ids, in the
//! order that numbers the teams: the first is the baseline) and `query_id` (which seeds the
//! random choices, see [`crate::interleaving::team_draft`]); optionally `length` (default: the
//! longest ranking) and `seed` (an integer in place of the query id's). Every other field is
//! copied, so a line with `timestamp` and `experiment` comes out as an impression ready for
//! `replay` or the impressions topic, with `results`, `teams` and `interleaving` added.

use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::Context;
use serde_json::{Map, Value};

use crate::interleaving::{seed_of, team_draft, MAX_RANKERS, RANKER_SEPARATOR};

/// Interleaves every line of `input` (stdin when `None`) to stdout; a bad line is reported on
/// stderr with its number and skipped, and the command then fails after the last line.
pub fn run(input: Option<&Path>) -> anyhow::Result<()> {
    let reader: Box<dyn BufRead> = match input {
        Some(path) => Box::new(std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut bad = 0u64;
    for (number, line) in (1u64..).zip(reader.lines()) {
        let line = line.context("reading the input")?;
        if line.trim().is_empty() {
            continue;
        }
        match interleave_line(&line) {
            Ok(impression) => writeln!(out, "{impression}").context("writing stdout")?,
            Err(problem) => {
                bad += 1;
                eprintln!("line {number}: {problem}; skipped");
            }
        }
    }
    out.flush().context("writing stdout")?;
    anyhow::ensure!(bad == 0, "{bad} lines could not be interleaved (see above)");
    Ok(())
}

/// One input line's interleaved impression.
pub fn interleave_line(line: &str) -> Result<Value, String> {
    let mut object: Map<String, Value> = match serde_json::from_str(line) {
        Ok(Value::Object(object)) => object,
        Ok(_) => return Err("not a JSON object".into()),
        Err(e) => return Err(format!("not JSON: {e}")),
    };
    let Some(Value::Object(rankings)) = object.remove("rankings") else {
        return Err("`rankings` must be an object of ranker name to an array of result ids".into());
    };
    if rankings.len() < 2 || rankings.len() > MAX_RANKERS {
        return Err(format!("`rankings` names {} rankers; interleaving takes 2 to {MAX_RANKERS}", rankings.len()));
    }
    let mut names = Vec::new();
    let mut lists: Vec<Vec<String>> = Vec::new();
    for (name, list) in rankings {
        if name.is_empty() || name.contains(RANKER_SEPARATOR) {
            return Err(format!("ranker name {name:?} is empty or contains {RANKER_SEPARATOR:?}"));
        }
        let ids = list
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string)).collect())
            .ok_or_else(|| format!("`rankings.{name}` must be an array of non-empty result id strings"))?;
        names.push(name);
        lists.push(ids);
    }
    let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
    let length = match object.remove("length") {
        None => longest,
        Some(v) => v.as_u64().map(|n| n as usize).ok_or("`length` must be a non-negative integer")?,
    };
    let seed = match (object.remove("seed"), object.get("query_id")) {
        (Some(seed), _) => seed.as_u64().ok_or("`seed` must be a non-negative integer")?,
        (None, Some(Value::String(query_id))) => seed_of(query_id),
        (None, _) => return Err("`query_id` (a string) or `seed` is required: it seeds the random choices".into()),
    };
    let borrowed: Vec<&[String]> = lists.iter().map(Vec::as_slice).collect();
    let draft = team_draft(&borrowed, length, seed);
    let teams: Vec<&str> = draft.teams.iter().map(|&t| names[t].as_str()).collect();
    object.insert("results".into(), draft.results.into());
    object.insert("teams".into(), teams.into());
    object.insert("interleaving".into(), names.into());
    Ok(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_becomes_an_impression_with_its_teams() {
        let line = r#"{"query_id":"q1","timestamp":5,"experiment":"duel","length":6,"rankings":{"a":["d1","d2","d3","d4"],"b":["d2","d5","d1","d6"]}}"#;
        let out = interleave_line(line).unwrap();
        // The manual's first test vector (docs/src/interleaving.md).
        assert_eq!(out["results"], serde_json::json!(["d1", "d2", "d3", "d5", "d6", "d4"]));
        assert_eq!(out["teams"], serde_json::json!(["a", "b", "a", "b", "b", "a"]));
        assert_eq!(out["interleaving"], serde_json::json!(["a", "b"]));
        assert_eq!((out["timestamp"].as_i64(), out["experiment"].as_str()), (Some(5), Some("duel")));
        assert!(out.get("rankings").is_none());
        let short = interleave_line(&line.replace(r#""length":6"#, r#""length":2"#)).unwrap();
        assert_eq!(short["results"], serde_json::json!(["d1", "d2"]));
    }

    #[test]
    fn bad_lines_say_what_is_wrong() {
        for (line, needle) in [
            ("[1]", "not a JSON object"),
            ("{", "not JSON"),
            (r#"{"query_id":"q","rankings":{"a":["x"]}}"#, "2 to 7"),
            (r#"{"query_id":"q","rankings":{"a":["x"],"b":"y"}}"#, "rankings.b"),
            (r#"{"query_id":"q","rankings":{"a":["x"],"b":[""]}}"#, "rankings.b"),
            (r#"{"rankings":{"a":["x"],"b":["y"]}}"#, "seed"),
            (r#"{"query_id":"q","length":-1,"rankings":{"a":["x"],"b":["y"]}}"#, "length"),
            (r#"{"query_id":"q","rankings":{"a vs c":["x"],"b":["y"]}}"#, "contains"),
        ] {
            let err = interleave_line(line).unwrap_err();
            assert!(err.contains(needle), "{line}: {err}");
        }
    }
}
