#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]
//! The trec_eval measures over graded gains, operation for operation as NIST trec_eval computes
//! them: `ndcg`, `dcg`, `ideal_dcg` (m_ndcg.c), `ndcg_rel`, `Rndcg`, `G`, `rbp` and
//! `rbp_resid`, each grade's gain set by `grade=gain` parameters or the grade itself
//! (`setup_gains`: gain_init.c in 10.0, m_ndcg.c in 9.x).
//!
//! Pure: a [`ResRels`] and the measure's parameters in, values out.

use super::res_rels::{ResRels, NONPOOL};
use super::Compat;

/// A grade's gain and how many judged documents have it (trec_eval's `REL_GAIN`).
#[derive(Debug, Clone, Copy)]
struct RelGain {
    rel_level: i64,
    gain: f64,
    num_at_level: i64,
}

/// trec_eval's `setup_gains` (gain_init.c in 10.0, m_ndcg.c in 9.x): the grades' gains,
/// `grade=gain` pairs overriding the grade itself, sorted by gain as trec_eval's comparator
/// sorts them (it truncates the difference to an int; the sort is stable, as glibc's).
fn setup_gains(rr: &ResRels, pairs: &[(String, f64)], compat: Compat) -> Vec<RelGain> {
    let mut gains: Vec<RelGain> = Vec::with_capacity(rr.num_rel_levels + pairs.len());
    for (name, value) in pairs {
        let rel_level = match compat {
            // 10.0 skips a name that is not an integer (rbp's `p`).
            Compat::V10 => match name.trim_start_matches(['+', '-']) {
                digits if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                    name.parse::<i64>().unwrap_or(0)
                }
                _ => continue,
            },
            Compat::V9 => atol(name),
        };
        gains.push(RelGain { rel_level, gain: *value, num_at_level: 0 });
    }
    let explicit = gains.len();
    for level in 0..rr.num_rel_levels {
        let count = rr.rel_levels.get(level).copied().unwrap_or(0);
        match gains.iter_mut().take(explicit).find(|g| g.rel_level == level as i64) {
            Some(g) => g.num_at_level = count,
            None => gains.push(RelGain { rel_level: level as i64, gain: level as f64, num_at_level: count }),
        }
    }
    gains.sort_by(|a, b| ((a.gain - b.gain) as i32).cmp(&0));
    gains
}

/// C's `atol`: optional blanks and sign, then digits; 0 when there are none.
fn atol(text: &str) -> i64 {
    let t = text.trim_start();
    let (sign, digits) = match t.as_bytes().first() {
        Some(b'-') => (-1, t.get(1..).unwrap_or("")),
        Some(b'+') => (1, t.get(1..).unwrap_or("")),
        _ => (1, t),
    };
    let end = digits.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(digits.len());
    sign * digits.get(..end).and_then(|d| d.parse::<i64>().ok()).unwrap_or(0)
}

fn get_gain(rel: i64, gains: &[RelGain]) -> f64 {
    gains.iter().find(|g| g.rel_level == rel).map_or(0.0, |g| g.gain)
}

/// The ideal ranking's gains, one per rank, as trec_eval's ndcg walk produces them: from the
/// highest-gain level down, each level as many times as it has judged documents, while the
/// gain is positive.
struct Ideal<'a> {
    gains: &'a [RelGain],
    level: isize,
    count: i64,
    gain: f64,
}

impl<'a> Ideal<'a> {
    fn new(gains: &'a [RelGain]) -> Self {
        let level = gains.len() as isize - 1;
        let gain = usize::try_from(level).ok().and_then(|l| gains.get(l)).map_or(0.0, |g| g.gain);
        Ideal { gains, level, count: 0, gain }
    }

    /// The next rank's ideal gain (trec_eval's `num_at_level++` and its `while`).
    fn advance(&mut self) -> f64 {
        self.count += 1;
        while self.level >= 0
            && self.count
                > usize::try_from(self.level).ok().and_then(|l| self.gains.get(l)).map_or(0, |g| g.num_at_level)
        {
            self.count = 1;
            self.level -= 1;
            self.gain = usize::try_from(self.level).ok().and_then(|l| self.gains.get(l)).map_or(0.0, |g| g.gain);
        }
        self.gain
    }
}

fn discount(i: i64) -> f64 {
    ((i + 2) as f64).log2()
}

/// `ndcg`, `dcg` and `ideal_dcg` (m_ndcg.c): (DCG, ideal DCG) over the whole ranking with the
/// grades' gains.
pub fn dcg_pair(rr: &ResRels, pairs: &[(String, f64)], compat: Compat) -> (f64, f64) {
    let gains = setup_gains(rr, pairs, compat);
    let mut ideal = Ideal::new(&gains);
    let (mut results_dcg, mut ideal_dcg) = (0.0f64, 0.0f64);
    let mut i = 0i64;
    while i < rr.num_ret && ideal.gain > 0.0 {
        let g = get_gain(rr.list.get(i as usize).copied().unwrap_or(NONPOOL), &gains);
        if g != 0.0 {
            results_dcg += g / discount(i);
        }
        let ig = ideal.advance();
        if ig > 0.0 {
            ideal_dcg += ig / discount(i);
        }
        i += 1;
    }
    while i < rr.num_ret {
        let g = get_gain(rr.list.get(i as usize).copied().unwrap_or(NONPOOL), &gains);
        if g != 0.0 {
            results_dcg += g / discount(i);
        }
        i += 1;
    }
    while ideal.gain > 0.0 {
        let ig = ideal.advance();
        if ig > 0.0 {
            ideal_dcg += ig / discount(i);
        }
        i += 1;
    }
    (results_dcg, ideal_dcg)
}

/// `ndcg_rel` (m_ndcg_rel.c): nDCG averaged over the relevant documents' ranks.
pub fn ndcg_rel(rr: &ResRels, pairs: &[(String, f64)], compat: Compat) -> f64 {
    let gains = setup_gains(rr, pairs, compat);
    let mut ideal = Ideal::new(&gains);
    let (mut results_dcg, mut ideal_dcg, mut sum) = (0.0f64, 0.0f64, 0.0f64);
    let (mut num_rel, mut num_rel_ret) = (0i64, 0i64);
    let mut i = 0i64;
    while i < rr.num_ret && ideal.gain > 0.0 {
        let g = get_gain(rr.list.get(i as usize).copied().unwrap_or(NONPOOL), &gains);
        if g != 0.0 {
            results_dcg += g / discount(i);
        }
        let ig = ideal.advance();
        if ig > 0.0 {
            num_rel += 1;
            ideal_dcg += ig / discount(i);
        }
        if g > 0.0 {
            sum += results_dcg / ideal_dcg;
            num_rel_ret += 1;
        }
        i += 1;
    }
    while i < rr.num_ret {
        let g = get_gain(rr.list.get(i as usize).copied().unwrap_or(NONPOOL), &gains);
        if g != 0.0 {
            results_dcg += g / discount(i);
        }
        if g > 0.0 {
            sum += results_dcg / ideal_dcg;
            num_rel_ret += 1;
        }
        i += 1;
    }
    while ideal.gain > 0.0 {
        let ig = ideal.advance();
        if ig > 0.0 {
            num_rel += 1;
            ideal_dcg += ig / discount(i);
        }
        i += 1;
    }
    sum += (num_rel - num_rel_ret) as f64 * results_dcg / ideal_dcg;
    if sum > 0.0 {
        sum / num_rel as f64
    } else {
        0.0
    }
}

/// `Rndcg` (m_Rndcg.c): nDCG averaged over the ranks where the ideal gain changes.
pub fn r_ndcg(rr: &ResRels, pairs: &[(String, f64)], compat: Compat) -> f64 {
    let gains = setup_gains(rr, pairs, compat);
    if rr.num_rel == 0 {
        return 0.0;
    }
    let mut ideal = Ideal::new(&gains);
    let mut old_gain = ideal.gain;
    let (mut results_dcg, mut ideal_dcg, mut sum) = (0.0f64, 0.0f64, 0.0f64);
    let mut changes = 0i64;
    let mut i = 0i64;
    while i < rr.num_ret && ideal.gain > 0.0 {
        let g = get_gain(rr.list.get(i as usize).copied().unwrap_or(NONPOOL), &gains);
        let ig = ideal.advance();
        if old_gain != ig {
            if ideal_dcg > 0.0 {
                sum += results_dcg / ideal_dcg;
                changes += 1;
            }
            old_gain = ig;
        }
        if g != 0.0 {
            results_dcg += g / discount(i);
        }
        if ig > 0.0 {
            ideal_dcg += ig / discount(i);
        }
        i += 1;
    }
    if i < rr.num_ret {
        while i < rr.num_ret {
            let g = get_gain(rr.list.get(i as usize).copied().unwrap_or(NONPOOL), &gains);
            if g != 0.0 {
                results_dcg += g / discount(i);
            }
            i += 1;
        }
        if ideal_dcg > 0.0 {
            sum += results_dcg / ideal_dcg;
            changes += 1;
        }
    }
    while ideal.gain > 0.0 {
        let ig = ideal.advance();
        if old_gain != ig {
            if ideal_dcg > 0.0 {
                sum += results_dcg / ideal_dcg;
                changes += 1;
            }
            old_gain = ig;
        }
        if ig > 0.0 {
            ideal_dcg += ig / discount(i);
        }
        i += 1;
    }
    sum / changes as f64
}

/// `G` (m_G.c): gain discounted by the cost of reaching it.
pub fn g(rr: &ResRels, pairs: &[(String, f64)], compat: Compat) -> f64 {
    let gains = setup_gains(rr, pairs, compat);
    let mut ideal = Ideal::new(&gains);
    let (mut results_g, mut sum_results, mut sum_ideal, mut sum_cost) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let min_cost = 1.0;
    let mut i = 0i64;
    while i < rr.num_ret && ideal.gain > 0.0 {
        let rg = get_gain(rr.list.get(i as usize).copied().unwrap_or(NONPOOL), &gains);
        sum_results += rg;
        let ig = ideal.advance();
        if ig > 0.0 {
            sum_ideal += ig;
        }
        sum_cost += if ig >= min_cost { ig } else { min_cost };
        if rg != 0.0 {
            results_g += rg / (2.0 + sum_cost - sum_results).log2();
        }
        i += 1;
    }
    while i < rr.num_ret {
        let rg = get_gain(rr.list.get(i as usize).copied().unwrap_or(NONPOOL), &gains);
        sum_results += rg;
        sum_cost += min_cost;
        if rg != 0.0 {
            results_g += rg / (2.0 + sum_cost - sum_results).log2();
        }
        i += 1;
    }
    while ideal.gain > 0.0 {
        let ig = ideal.advance();
        if ig > 0.0 {
            sum_ideal += ig;
        }
    }
    if sum_ideal > 0.0 {
        results_g / sum_ideal
    } else {
        0.0
    }
}

/// rbp's persistence `p` among the pairs (default 0.9).
fn persistence(pairs: &[(String, f64)]) -> f64 {
    pairs.iter().rev().find(|(name, _)| name == "p").map_or(0.9, |&(_, v)| v)
}

/// `rbp` (m_rbp.c, 10.0; Moffat and Zobel, TOIS 2008): gains scaled into [0, 1] when any lies
/// outside, then Σ gain · p^(rank-1) · (1 - p).
pub fn rbp(rr: &ResRels, pairs: &[(String, f64)], compat: Compat) -> f64 {
    let p = persistence(pairs);
    let mut gains = setup_gains(rr, pairs, compat);
    // trec_eval reads `min` and `max` uninitialized; built with gcc as its Makefile builds it
    // they start at 0, which is what this assumes (checked against the binary by
    // tests/trec_eval_conformance.rs).
    let (mut min, mut max) = (0.0f64, 0.0f64);
    for g in &gains {
        if g.gain < min {
            min = g.gain;
        }
        if g.gain > max {
            max = g.gain;
        }
    }
    if min < 0.0 || max > 1.0 {
        for g in gains.iter_mut() {
            g.gain = (g.gain - min) / (max - min);
        }
    }
    let (mut sum, mut cur_p) = (0.0f64, 1.0f64);
    for &rel in &rr.list {
        let gain = get_gain(rel, &gains);
        if gain != 0.0 {
            sum += gain * cur_p;
        }
        cur_p *= p;
    }
    (1.0 - p) * sum
}

/// `rbp_resid` (m_rbp_resid.c, 10.0): the residual of rbp that unjudged documents leave open.
pub fn rbp_resid(rr: &ResRels, pairs: &[(String, f64)]) -> f64 {
    let p = persistence(pairs);
    let (mut unjudged, mut sum, mut cur_p) = (0i64, 0.0f64, 1.0f64);
    for &rel in &rr.list {
        if rel < 0 {
            unjudged += 1;
            sum += cur_p;
        }
        cur_p *= p;
    }
    if unjudged > 0 {
        cur_p + (1.0 - p) * sum
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atol_as_c() {
        assert_eq!((atol("12x"), atol(" -3"), atol("p"), atol("+7")), (12, -3, 0, 7));
    }
}
