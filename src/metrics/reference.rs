//! The straightforward definitions, one function per metric. They are the readable reference
//! that [`super::MetricLayout::evaluate`] is tested against, and the vocabulary of the unit tests.

use super::{discount, exp_gain};

fn relevant(g: u8, threshold: u8) -> bool {
    g >= threshold
}

fn num_relevant(ranked: &[u8], unretrieved: &[u8], threshold: u8) -> usize {
    ranked.iter().chain(unretrieved).filter(|&&g| relevant(g, threshold)).count()
}

pub fn reciprocal_rank(ranked: &[u8], threshold: u8) -> f64 {
    ranked.iter().position(|&g| relevant(g, threshold)).map_or(0.0, |i| 1.0 / (i + 1) as f64)
}

pub fn hit(ranked: &[u8], threshold: u8, k: usize) -> f64 {
    if ranked.iter().take(k).any(|&g| relevant(g, threshold)) {
        1.0
    } else {
        0.0
    }
}

pub fn precision(ranked: &[u8], threshold: u8, k: usize) -> f64 {
    ranked.iter().take(k).filter(|&&g| relevant(g, threshold)).count() as f64 / k as f64
}

pub fn recall(ranked: &[u8], unretrieved: &[u8], threshold: u8, k: usize) -> f64 {
    let r = num_relevant(ranked, unretrieved, threshold);
    if r == 0 {
        return 0.0;
    }
    ranked.iter().take(k).filter(|&&g| relevant(g, threshold)).count() as f64 / r as f64
}

pub fn average_precision(ranked: &[u8], unretrieved: &[u8], threshold: u8, k: usize) -> f64 {
    let r = num_relevant(ranked, unretrieved, threshold);
    if r == 0 {
        return 0.0;
    }
    let mut hits = 0usize;
    let mut sum = 0.0;
    for (i, &g) in ranked.iter().take(k).enumerate() {
        if relevant(g, threshold) {
            hits += 1;
            sum += hits as f64 / (i + 1) as f64;
        }
    }
    sum / r as f64
}

pub fn f1(ranked: &[u8], unretrieved: &[u8], threshold: u8, k: usize) -> f64 {
    let (p, r) = (precision(ranked, threshold, k), recall(ranked, unretrieved, threshold, k));
    if p + r > 0.0 {
        2.0 * p * r / (p + r)
    } else {
        0.0
    }
}

pub fn r_precision(ranked: &[u8], unretrieved: &[u8], threshold: u8) -> f64 {
    let r = num_relevant(ranked, unretrieved, threshold);
    if r == 0 {
        return 0.0;
    }
    ranked.iter().take(r).filter(|&&g| relevant(g, threshold)).count() as f64 / r as f64
}

/// Interpolated precision at recall `tenths / 10`: the largest precision@i over ranks i
/// that reached the level (see [`super::recall_level_count`]).
pub fn interpolated_precision(ranked: &[u8], unretrieved: &[u8], threshold: u8, tenths: u32) -> f64 {
    let r = num_relevant(ranked, unretrieved, threshold);
    if r == 0 {
        return 0.0;
    }
    let needed = super::recall_level_count(tenths, r as u32, super::TrecEval::V9) as usize;
    let mut best = 0.0f64;
    let mut hits = 0usize;
    for (i, &g) in ranked.iter().enumerate() {
        hits += usize::from(relevant(g, threshold));
        if hits >= needed {
            best = best.max(hits as f64 / (i + 1) as f64);
        }
    }
    best
}

/// ERR@k as the cascade model reads it: the user stops at rank i with probability p_i.
pub fn err(ranked: &[u8], k: usize, max_gain: u8) -> f64 {
    let p = |g: u8| exp_gain(g.min(max_gain)) / 2f64.powi(i32::from(max_gain));
    let mut total = 0.0;
    for (i, &g) in ranked.iter().take(k).enumerate() {
        let reach: f64 = ranked[..i].iter().map(|&h| 1.0 - p(h)).product();
        total += reach * p(g) / (i + 1) as f64;
    }
    total
}

/// nDCG@k; `exponential` selects 2^g - 1 over g.
pub fn ndcg(ranked: &[u8], unretrieved: &[u8], k: usize, exponential: bool) -> f64 {
    let gain = |g: u8| {
        if exponential {
            exp_gain(g)
        } else {
            f64::from(g)
        }
    };
    let dcg: f64 =
        ranked.iter().take(k).enumerate().filter(|(_, &g)| g > 0).map(|(i, &g)| gain(g) / discount(i + 1)).sum();
    let mut ideal: Vec<u8> = ranked.iter().chain(unretrieved).copied().filter(|&g| g > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal.iter().take(k).enumerate().map(|(i, &g)| gain(g) / discount(i + 1)).sum();
    if idcg > 0.0 {
        dcg / idcg
    } else {
        0.0
    }
}
