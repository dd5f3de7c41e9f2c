//! Simulated search traffic with known position bias and relevance, written as the contract's
//! events: a position-based user (clicks with probability examination(rank) × attractiveness)
//! or a cascade user (reads down the list, clicks the first attractive result and stops), so
//! a test can tell an estimate that is right from one that only fits its own assumption.

use std::fmt::Write as _;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// How the simulated users click.
#[derive(Debug, Clone)]
pub enum User {
    /// Position-based: examination per rank (rank 1 first; 1.0 there in every test).
    Pbm(Vec<f64>),
    /// Cascade (Craswell et al., WSDM 2008): examine top down, click the first result found
    /// attractive, stop.
    Cascade,
}

/// Which ranking an impression shows.
#[derive(Debug, Clone, Copy)]
pub enum Ranker {
    /// The logging ranker's fixed list for the query.
    Production,
    /// A random permutation (an exploration slice).
    Shuffled,
}

/// Queries with documents of known attractiveness.
pub struct World {
    /// Per query, per document: the probability it is clicked once examined.
    pub alpha: Vec<Vec<f64>>,
    /// Per query, the production ranker's order (document indices).
    pub production: Vec<Vec<usize>>,
}

/// One impression as logged: what the references read.
pub struct Logged {
    pub query: String,
    pub docs: Vec<String>,
    pub clicks: Vec<bool>,
}

/// The simulated position-based users' examination, rank 1 first.
pub const EXAMINATION: [f64; 6] = [1.0, 0.72, 0.55, 0.41, 0.3, 0.22];

/// A run file's lines: per query its documents in `orders`' order, under the name `query(q)`.
pub fn run_lines(orders: &[Vec<usize>], query: impl Fn(usize) -> String) -> String {
    orders
        .iter()
        .enumerate()
        .map(|(q, order)| {
            let results: Vec<String> = order.iter().map(|&d| doc_id(q, d)).collect();
            format!("{}\n", serde_json::json!({"query": query(q), "results": results}))
        })
        .collect()
}

pub fn query_text(q: usize) -> String {
    format!("query {q}")
}

pub fn doc_id(q: usize, d: usize) -> String {
    format!("q{q}-d{d}")
}

impl World {
    /// Orders of every query by true attractiveness: the best candidate.
    pub fn ideal(&self) -> Vec<Vec<usize>> {
        self.alpha
            .iter()
            .map(|a| {
                let mut o: Vec<usize> = (0..a.len()).collect();
                o.sort_by(|&x, &y| a[y].total_cmp(&a[x]));
                o
            })
            .collect()
    }

    /// `queries` queries of `docs` documents each; the production ranker orders them by a
    /// noisy view of their attractiveness (better than random, not perfect).
    pub fn new(queries: usize, docs: usize, seed: u64) -> World {
        let mut rng = SmallRng::seed_from_u64(seed);
        let alpha: Vec<Vec<f64>> =
            (0..queries).map(|_| (0..docs).map(|_| rng.random_range(0.02..0.9)).collect()).collect();
        let production = alpha
            .iter()
            .map(|a| {
                let noisy: Vec<f64> = a.iter().map(|x| x + rng.random_range(-0.3..0.3)).collect();
                let mut order: Vec<usize> = (0..docs).collect();
                order.sort_by(|&x, &y| noisy[y].total_cmp(&noisy[x]));
                order
            })
            .collect();
        World { alpha, production }
    }

    /// `n` impressions, each of a random query, by `ranker(i)`, clicked by `user`: the logged
    /// view, and the impressions and engagements as JSON lines. The query text is written
    /// with capitals and doubled spaces, which normalization must undo.
    pub fn traffic(
        &self,
        n: usize,
        user: &User,
        ranker: impl Fn(usize) -> Ranker,
        seed: u64,
    ) -> (Vec<Logged>, String, String) {
        self.traffic_in_segments(n, &[("", user.clone())], ranker, seed)
    }

    /// [`World::traffic`] of several segments of users (impression i in segment i mod their
    /// count), each impression carrying its segment's name (none for "").
    pub fn traffic_in_segments(
        &self,
        n: usize,
        segments: &[(&str, User)],
        ranker: impl Fn(usize) -> Ranker,
        seed: u64,
    ) -> (Vec<Logged>, String, String) {
        let mut rng = SmallRng::seed_from_u64(seed);
        let (mut logged, mut impressions, mut engagements) = (Vec::with_capacity(n), String::new(), String::new());
        let start = 1_795_341_600_000i64;
        for i in 0..n {
            let q = rng.random_range(0..self.alpha.len());
            let order: Vec<usize> = match ranker(i) {
                Ranker::Production => self.production[q].clone(),
                Ranker::Shuffled => {
                    let mut o = self.production[q].clone();
                    o.shuffle(&mut rng);
                    o
                }
            };
            let mut clicks = vec![false; order.len()];
            let (segment, user) = &segments[i % segments.len()];
            match user {
                User::Pbm(examination) => {
                    for (rank, &d) in order.iter().enumerate() {
                        let e = examination.get(rank).copied().unwrap_or(0.0);
                        clicks[rank] = rng.random_bool(e * self.alpha[q][d]);
                    }
                }
                User::Cascade => {
                    for (rank, &d) in order.iter().enumerate() {
                        if rng.random_bool(self.alpha[q][d]) {
                            clicks[rank] = true;
                            break;
                        }
                    }
                }
            }
            let at = start + i as i64 * 1000;
            let docs: Vec<String> = order.iter().map(|&d| doc_id(q, d)).collect();
            let variant = match ranker(i) {
                Ranker::Production => "production",
                Ranker::Shuffled => "exploration",
            };
            let mut shown = serde_json::json!({
                "query_id": format!("imp-{i}"), "timestamp": at, "results": docs,
                "query": format!("Query  {q}"), "experiment": "bias", "variant": variant,
            });
            if !segment.is_empty() {
                shown["segment"] = (*segment).into();
            }
            writeln!(impressions, "{shown}").unwrap();
            for (rank, _) in clicks.iter().enumerate().filter(|(_, c)| **c) {
                let click = serde_json::json!({
                    "query_id": format!("imp-{i}"), "timestamp": at + 500, "doc_id": docs[rank], "action": "click",
                });
                writeln!(engagements, "{click}").unwrap();
            }
            logged.push(Logged { query: query_text(q), docs, clicks });
        }
        (logged, impressions, engagements)
    }

    /// A candidate's true DCG@cutoff of attractiveness, averaged over the logged impressions'
    /// queries: what IPS estimates under a position-based user with examination 1 at rank 1.
    pub fn true_dcg(&self, candidate: &[Vec<usize>], logged: &[Logged], cutoff: usize) -> f64 {
        let per_query: Vec<f64> = candidate
            .iter()
            .enumerate()
            .map(|(q, order)| {
                order.iter().take(cutoff).enumerate().map(|(j, &d)| self.alpha[q][d] / ((j + 2) as f64).log2()).sum()
            })
            .collect();
        let sum: f64 = logged.iter().map(|l| per_query[l.query["query ".len()..].parse::<usize>().unwrap()]).sum();
        sum / logged.len() as f64
    }
}

/// The logged impressions as the references' input.
pub fn reference_input(logged: &[Logged]) -> serde_json::Value {
    let impressions: Vec<serde_json::Value> =
        logged.iter().map(|l| serde_json::json!({"query": l.query, "docs": l.docs, "clicks": l.clicks})).collect();
    serde_json::json!({ "impressions": impressions })
}
