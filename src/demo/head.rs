//! Head queries for the generated traffic (`rankpulse generate --judgments FILE`): a fixed
//! catalog of popular queries whose candidate results have hidden grades, impressions of them
//! in the A/B experiment, and the judgment list an editorial team would have written for them
//! (most candidates judged, with their hidden grades), so that `replay` with `[judgments]`
//! scores the experiment's rankers against editorial truth.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::traffic::{
    browse, client, gaussian, grade, EventIds, ScheduledEngagement, CONTROL_NOISE, EXPERIMENT, TREATMENT_NOISE,
};

/// Head queries in the catalog.
const QUERIES: usize = 300;
/// Candidates per head query, of which the ranker shows the best [`SHOWN`].
const CANDIDATES: usize = 14;
const SHOWN: usize = 10;
/// The share of candidates the judgment list grades.
const JUDGED_SHARE: f64 = 0.8;
const WORDS: [&str; 16] = [
    "wireless",
    "headphones",
    "running",
    "shoes",
    "laptop",
    "stand",
    "coffee",
    "grinder",
    "garden",
    "hose",
    "kids",
    "bike",
    "winter",
    "jacket",
    "usb",
    "charger",
];

/// One head query: its text and its candidates (hidden grade, document, judged).
struct HeadQuery {
    text: String,
    candidates: Vec<(usize, String, bool)>,
}

/// The catalog and the random numbers of its impressions (its own, so the rest of the traffic
/// of a seed is the same with or without it).
pub struct HeadQueries {
    queries: Vec<HeadQuery>,
    rng: SmallRng,
    /// Calls so far: one impression every third.
    turn: u64,
    /// Number of the next query id (`h-…`) and engagement id (`he-…`).
    next: u64,
}

impl HeadQueries {
    pub fn new(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x6ead_6ead_6ead_6ead);
        let queries = (0..QUERIES)
            .map(|q| {
                let words: Vec<&str> =
                    (0..rng.random_range(1..=3)).map(|_| WORDS[rng.random_range(0..WORDS.len())]).collect();
                let candidates = (0..CANDIDATES)
                    .map(|c| (grade(&mut rng), format!("sku-{q}-{c}"), rng.random_bool(JUDGED_SHARE)))
                    .collect();
                HeadQuery { text: format!("{} {q}", words.join(" ")), candidates }
            })
            .collect();
        HeadQueries { queries, rng, turn: 0, next: 0 }
    }

    /// The judgment list: one JSON line per judged candidate. Returns how many.
    pub fn write_judgments(&self, out: &mut dyn std::io::Write) -> std::io::Result<u64> {
        let mut written = 0;
        for query in &self.queries {
            for (grade, doc, judged) in &query.candidates {
                if *judged {
                    let line = serde_json::json!({"query": query.text, "doc_id": doc, "grade": grade});
                    writeln!(out, "{line}")?;
                    written += 1;
                }
            }
        }
        Ok(written)
    }

    /// Every third call, an impression of a head query in the A/B experiment (popular queries
    /// more often), its text typed with other casing, and its engagements.
    pub fn impression(&mut self, now_ms: i64) -> Option<(String, String, Vec<ScheduledEngagement>)> {
        self.turn += 1;
        if self.turn % 3 != 0 {
            return None;
        }
        self.next += 1;
        let query_id = format!("h-{:08}", self.next);
        let rng = &mut self.rng;
        let query = &self.queries[(QUERIES as f64 * rng.random::<f64>().powi(2)) as usize];
        let (user, patience) = client(rng);
        let variant = if user % 2 == 0 { "control" } else { "treatment" };
        let noise = if variant == "control" { CONTROL_NOISE } else { TREATMENT_NOISE };
        let mut scored: Vec<(f64, usize)> =
            query.candidates.iter().enumerate().map(|(c, (g, _, _))| (*g as f64 + noise * gaussian(rng), c)).collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        let shown: Vec<usize> = scored.iter().take(SHOWN).map(|&(_, c)| c).collect();
        let results: Vec<&str> = shown.iter().map(|&c| query.candidates[c].1.as_str()).collect();
        let typed = if rng.random_bool(0.5) { query.text.to_uppercase() } else { query.text.clone() };
        let impression = serde_json::json!({"query_id": query_id, "timestamp": now_ms, "results": results,
                                            "experiment": EXPERIMENT, "variant": variant, "query": typed,
                                            "client_id": format!("u{user}"),
                                            "session_id": format!("u{user}-{}", now_ms / 1_800_000)});
        let ranked: Vec<(usize, &str)> =
            shown.iter().map(|&c| (query.candidates[c].0, query.candidates[c].1.as_str())).collect();
        let ids = EventIds { prefix: "he", next: &mut self.next };
        let engagements = browse(&mut self.rng, ids, &query_id, &ranked, patience, now_ms);
        Some((query_id, impression.to_string(), engagements))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::{write_traffic, write_traffic_with, Extras, FaultRate};

    #[test]
    fn head_queries_leave_the_rest_of_the_traffic_as_it_was_and_are_judged() {
        let at = (3000, 200, 9, 1_795_341_600_000);
        let (mut imp, mut eng, mut list) = (Vec::new(), Vec::new(), Vec::new());
        let extras = Extras { duel: false, judgments: Some(&mut list), pre_period: 0 };
        let summary = write_traffic_with(&mut imp, &mut eng, at, FaultRate::DEMO, extras).unwrap();
        let (mut plain_imp, mut plain_eng) = (Vec::new(), Vec::new());
        write_traffic(&mut plain_imp, &mut plain_eng, at.0, at.1, at.2, at.3, FaultRate::DEMO).unwrap();
        let without_head = |bytes: &[u8]| -> String {
            let text = String::from_utf8(bytes.to_vec()).unwrap();
            text.lines().filter(|l| !l.starts_with(r#"{"query_id":"h-"#)).flat_map(|l| [l, "\n"]).collect()
        };
        assert_eq!(without_head(&imp), String::from_utf8(plain_imp).unwrap());
        assert_eq!(without_head(&eng), String::from_utf8(plain_eng).unwrap());
        assert_eq!(summary.head, 1000, "one per three impressions");

        let judgments: Vec<serde_json::Value> =
            String::from_utf8(list).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(judgments.len() as u64, summary.judgments);
        let judged = judgments.len() as f64 / (QUERIES * CANDIDATES) as f64;
        assert!((judged - JUDGED_SHARE).abs() < 0.03, "{judged}");
        let text = String::from_utf8(imp).unwrap();
        let head: Vec<serde_json::Value> = text
            .lines()
            .filter(|l| l.starts_with(r#"{"query_id":"h-"#))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for impression in &head {
            let query = impression["query"].as_str().unwrap().to_lowercase();
            let docs = impression["results"].as_array().unwrap();
            assert_eq!(docs.len(), SHOWN);
            // Every shown result is a candidate of the query, judged or not.
            let index: usize = query.rsplit(' ').next().unwrap().parse().unwrap();
            assert!(docs.iter().all(|d| d.as_str().unwrap().starts_with(&format!("sku-{index}-"))));
        }
    }
}
