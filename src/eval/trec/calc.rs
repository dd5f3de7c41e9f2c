#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing))]
//! Each trec_eval measure on one query that reads relevance as relevant or not (at `-l`),
//! operation for operation as NIST trec_eval computes it (the `te_calc_*` function of the
//! `m_*.c` file named beside each), so the printed figures are trec_eval's to the last digit.
//! Where 9.0.8 and 10.0 differ, [`Compat`] says which. The measures over graded gains are in
//! [`super::gains`].
//!
//! Pure: a [`ResRels`] and the measure's parameters in, values out.

use super::res_rels::{ResRels, NONPOOL, UNJUDGED};
use super::Compat;
use crate::metrics::recall_cutoff;

/// trec_eval's `MIN_GEO_MEAN` (trec_eval.h): the floor of a value before its logarithm.
pub const MIN_GEO_MEAN: f64 = 0.00001;
/// trec_eval's `INFAP_EPSILON` (trec_eval.h).
const INFAP_EPSILON: f64 = 0.00001;

/// What every measure may read besides the query's ranking.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    /// trec_eval's `-l`.
    pub relevance_level: i64,
    /// trec_eval's `-N`: documents in the collection (`utility`'s fourth term).
    pub docs_in_collection: i64,
    /// Which trec_eval.
    pub compat: Compat,
}

impl Ctx {
    fn relevant(&self, rel: i64) -> bool {
        rel >= self.relevance_level
    }
}

/// Values at long cutoffs, counted from the ranking (m_P.c, m_recall.c, m_success.c,
/// m_rel_P.c, m_map_cut.c, m_unjudged.c all share this walk): `at(i, state)` gives the value at
/// cutoff `i` from the state accumulated over ranks 1..=i by `step`.
fn at_cutoffs<S>(
    rr: &ResRels,
    cutoffs: &[i64],
    out: &mut [f64],
    mut state: S,
    step: impl Fn(&mut S, i64),
    value: impl Fn(&S, i64) -> f64,
) {
    let mut index = 0;
    for (i, &rel) in rr.list.iter().enumerate() {
        if cutoffs.get(index) == Some(&(i as i64)) {
            if let Some(slot) = out.get_mut(index) {
                *slot = value(&state, i as i64);
            }
            index += 1;
            if index == cutoffs.len() {
                return;
            }
        }
        step(&mut state, rel);
    }
    while let (Some(&k), Some(slot)) = (cutoffs.get(index), out.get_mut(index)) {
        *slot = value(&state, k);
        index += 1;
    }
}

/// `P` (m_P.c): relevant in the top k / k.
pub fn precision(ctx: &Ctx, rr: &ResRels, cutoffs: &[i64], out: &mut [f64]) {
    at_cutoffs(rr, cutoffs, out, 0i64, |n, rel| *n += i64::from(ctx.relevant(rel)), |&n, k| n as f64 / k as f64);
}

/// `recall` (m_recall.c): relevant in the top k / relevant; nothing when none is relevant.
pub fn recall(ctx: &Ctx, rr: &ResRels, cutoffs: &[i64], out: &mut [f64]) {
    if rr.num_rel == 0 {
        return;
    }
    let r = rr.num_rel as f64;
    at_cutoffs(rr, cutoffs, out, 0i64, |n, rel| *n += i64::from(ctx.relevant(rel)), |&n, _| n as f64 / r);
}

/// `success` (m_success.c): 1 when a relevant document is in the top k.
pub fn success(ctx: &Ctx, rr: &ResRels, cutoffs: &[i64], out: &mut [f64]) {
    at_cutoffs(
        rr,
        cutoffs,
        out,
        0i64,
        |n, rel| *n += i64::from(ctx.relevant(rel)),
        |&n, _| if n > 0 { 1.0 } else { 0.0 },
    );
}

/// `relative_P` (m_rel_P.c): relevant in the top k / min(k, relevant).
pub fn relative_precision(ctx: &Ctx, rr: &ResRels, cutoffs: &[i64], out: &mut [f64]) {
    if rr.num_rel == 0 {
        return;
    }
    let r = rr.num_rel;
    at_cutoffs(
        rr,
        cutoffs,
        out,
        0i64,
        |n, rel| *n += i64::from(ctx.relevant(rel)),
        |&n, k| n as f64 / (if k > r { r } else { k }) as f64,
    );
}

/// `map_cut` (m_map_cut.c): average precision over the top k.
pub fn map_cut(ctx: &Ctx, rr: &ResRels, cutoffs: &[i64], out: &mut [f64]) {
    if rr.num_rel == 0 {
        return;
    }
    let r = rr.num_rel as f64;
    at_cutoffs(
        rr,
        cutoffs,
        out,
        (0i64, 0.0f64, 0i64),
        |(rel_so_far, sum, i), rel| {
            *i += 1;
            if ctx.relevant(rel) {
                *rel_so_far += 1;
                *sum += *rel_so_far as f64 / *i as f64;
            }
        },
        |&(_, sum, _), _| sum / r,
    );
}

/// `unj` (m_unjudged.c, 10.0): share of the top k that is not judged.
pub fn unjudged(rr: &ResRels, cutoffs: &[i64], out: &mut [f64]) {
    at_cutoffs(
        rr,
        cutoffs,
        out,
        0i64,
        |n, rel| *n += i64::from(rel == NONPOOL || rel == UNJUDGED),
        |&n, k| n as f64 / k as f64,
    );
}

/// `ndcg_cut` (m_ndcg_cut.c): the grade as the gain, the ideal from the judged grades.
pub fn ndcg_cut(rr: &ResRels, cutoffs: &[i64], out: &mut [f64]) {
    at_cutoffs(
        rr,
        cutoffs,
        out,
        (0.0f64, 0i64),
        |(sum, i), rel| {
            let gain = rel as f64;
            if gain > 0.0 {
                *sum += gain / ((*i + 2) as f64).log2();
            }
            *i += 1;
        },
        |&(sum, _), _| sum,
    );
    let mut index = 0;
    let mut level = rr.num_rel_levels as i64 - 1;
    let mut count = 0i64;
    let mut ideal = 0.0f64;
    let levels = |l: i64| usize::try_from(l).ok().and_then(|l| rr.rel_levels.get(l)).copied().unwrap_or(0);
    let mut i = 0i64;
    loop {
        count += 1;
        while level > 0 && count > levels(level) {
            level -= 1;
            count = 1;
        }
        if level <= 0 {
            // trec_eval stops at level 0, and so when no grade is above 0 (its loop reads
            // `cur_lvl == 0`; a query with no judged grade has none either).
            break;
        }
        if cutoffs.get(index) == Some(&i) {
            if ideal > 0.0 {
                if let Some(slot) = out.get_mut(index) {
                    *slot /= ideal;
                }
            }
            index += 1;
            if index == cutoffs.len() {
                break;
            }
        }
        ideal += level as f64 / ((i + 2) as f64).log2();
        i += 1;
    }
    if ideal > 0.0 {
        out.iter_mut().take(cutoffs.len()).skip(index).for_each(|slot| *slot /= ideal);
    }
}

/// `map` (m_map.c).
pub fn map(ctx: &Ctx, rr: &ResRels) -> f64 {
    let (sum, rel_so_far) = ap_sum(ctx, rr);
    if rel_so_far > 0 {
        sum / rr.num_rel as f64
    } else {
        0.0
    }
}

fn ap_sum(ctx: &Ctx, rr: &ResRels) -> (f64, i64) {
    let mut rel_so_far = 0i64;
    let mut sum = 0.0;
    for (i, &rel) in rr.list.iter().enumerate() {
        if ctx.relevant(rel) {
            rel_so_far += 1;
            sum += rel_so_far as f64 / (i + 1) as f64;
        }
    }
    (sum, rel_so_far)
}

/// `gm_map` (m_gm_map.c): the log of AP floored at [`MIN_GEO_MEAN`], averaged then exponentiated.
pub fn gm_map(ctx: &Ctx, rr: &ResRels) -> f64 {
    let (mut sum, rel_so_far) = ap_sum(ctx, rr);
    if rel_so_far > 0 {
        sum /= rr.num_rel as f64;
    }
    sum.max(MIN_GEO_MEAN).ln()
}

/// `Rprec` (m_Rprec.c).
pub fn r_prec(ctx: &Ctx, rr: &ResRels) -> f64 {
    let n = rr.num_ret.min(rr.num_rel);
    if n <= 0 {
        return 0.0;
    }
    let rel = rr.list.iter().take(n as usize).filter(|&&r| ctx.relevant(r)).count();
    rel as f64 / rr.num_rel as f64
}

/// `recip_rank` (m_recip_rank.c).
pub fn recip_rank(ctx: &Ctx, rr: &ResRels) -> f64 {
    rr.list.iter().position(|&r| ctx.relevant(r)).map_or(0.0, |i| 1.0 / (i + 1) as f64)
}

/// bpref's walk (m_bpref.c, m_gm_bpref.c): the sum before the division by R.
fn bpref_sum(ctx: &Ctx, rr: &ResRels) -> f64 {
    let level = usize::try_from(ctx.relevance_level).unwrap_or(0);
    let num_nonrel: i64 = rr.rel_levels.iter().take(level).sum();
    let mut nonrel_so_far = 0i64;
    let mut bpref = 0.0;
    for &rel in &rr.list {
        if rel == NONPOOL || rel == UNJUDGED {
            continue;
        }
        if rel >= 0 && rel < ctx.relevance_level {
            nonrel_so_far += 1;
        } else if nonrel_so_far > 0 {
            bpref += 1.0 - nonrel_so_far.min(rr.num_rel) as f64 / num_nonrel.min(rr.num_rel) as f64;
        } else {
            bpref += 1.0;
        }
    }
    bpref
}

/// `bpref` (m_bpref.c; Buckley and Voorhees, SIGIR 2004).
pub fn bpref(ctx: &Ctx, rr: &ResRels) -> f64 {
    let sum = bpref_sum(ctx, rr);
    if rr.num_rel != 0 {
        sum / rr.num_rel as f64
    } else {
        sum
    }
}

/// `gm_bpref` (m_gm_bpref.c): bpref's log, floored as gm_map's.
pub fn gm_bpref(ctx: &Ctx, rr: &ResRels) -> f64 {
    bpref(ctx, rr).max(MIN_GEO_MEAN).ln()
}

/// `infAP` (m_infap.c; Yilmaz and Aslam, CIKM 2006).
pub fn inf_ap(ctx: &Ctx, rr: &ResRels) -> f64 {
    let (mut nonrel_so_far, mut rel_so_far, mut unjudged_so_far) = (0i64, 0i64, 0i64);
    let mut inf_ap = 0.0;
    for (j, &rel) in rr.list.iter().enumerate() {
        if rel == NONPOOL {
            continue;
        }
        if rel == UNJUDGED {
            unjudged_so_far += 1;
            continue;
        }
        if rel >= 0 && rel < ctx.relevance_level {
            nonrel_so_far += 1;
            continue;
        }
        rel_so_far += 1;
        if j == 0 {
            inf_ap += 1.0;
        } else {
            let fj = j as f64;
            // C evaluates `(rel_so_far - 1 + nonrel_so_far + pool_unjudged_so_far) / fj` with
            // the integer sum converted to double; the same here.
            inf_ap += 1.0 / (fj + 1.0)
                + (fj / (fj + 1.0))
                    * ((rel_so_far - 1 + nonrel_so_far + unjudged_so_far) as f64 / fj)
                    * (((rel_so_far - 1) as f64 + INFAP_EPSILON)
                        / ((rel_so_far - 1 + nonrel_so_far) as f64 + 2.0 * INFAP_EPSILON));
        }
    }
    if rr.num_rel != 0 {
        inf_ap / rr.num_rel as f64
    } else {
        inf_ap
    }
}

/// Interpolated precision at each recall level (m_iprec_at_recall.c's walk, which m_11pt_avg.c
/// repeats): `emit(index, value)` for every level, from the last.
fn interpolated(ctx: &Ctx, rr: &ResRels, levels: &[f64], mut emit: impl FnMut(usize, f64)) {
    let cutoffs: Vec<i64> = levels.iter().map(|&p| recall_cutoff(p, rr.num_rel, ctx.compat)).collect();
    let cut = |c: isize| usize::try_from(c).ok().and_then(|c| cutoffs.get(c)).copied().unwrap_or(0);
    let mut current = levels.len() as isize - 1;
    while current >= 0 && cut(current) > rr.num_rel_ret {
        current -= 1;
    }
    let mut int_precis = rr.num_rel_ret as f64 / rr.num_ret as f64;
    let mut rel_so_far = rr.num_rel_ret;
    let mut i = rr.num_ret;
    while i > 0 && rel_so_far > 0 {
        let precis = rel_so_far as f64 / i as f64;
        if int_precis < precis {
            int_precis = precis;
        }
        if ctx.relevant(rr.list.get((i - 1) as usize).copied().unwrap_or(NONPOOL)) {
            while current >= 0 && rel_so_far == cut(current) {
                emit(current as usize, int_precis);
                current -= 1;
            }
            rel_so_far -= 1;
        }
        i -= 1;
    }
    while current >= 0 {
        emit(current as usize, int_precis);
        current -= 1;
    }
}

/// `iprec_at_recall` (m_iprec_at_recall.c).
pub fn iprec_at_recall(ctx: &Ctx, rr: &ResRels, levels: &[f64], out: &mut [f64]) {
    interpolated(ctx, rr, levels, |i, v| {
        if let Some(slot) = out.get_mut(i) {
            *slot = v;
        }
    });
}

/// `11pt_avg` (m_11pt_avg.c): the mean of the interpolated precisions.
pub fn eleven_point_average(ctx: &Ctx, rr: &ResRels, levels: &[f64]) -> f64 {
    let mut sum = 0.0;
    interpolated(ctx, rr, levels, |_, v| sum += v);
    sum / levels.len() as f64
}

/// `Rprec_mult` (m_Rprec_mult.c): precision at multiples of R, `(long)(p R + 0.9)` in both
/// versions.
pub fn r_prec_mult(ctx: &Ctx, rr: &ResRels, levels: &[f64], out: &mut [f64]) {
    let cutoffs: Vec<i64> = levels.iter().map(|&p| (p * rr.num_rel as f64 + 0.9) as i64).collect();
    let cut = |c: isize| usize::try_from(c).ok().and_then(|c| cutoffs.get(c)).copied().unwrap_or(0);
    let mut set = |c: isize, v: f64| {
        if let Some(slot) = usize::try_from(c).ok().and_then(|c| out.get_mut(c)) {
            *slot = v;
        }
    };
    let mut current = levels.len() as isize - 1;
    while current >= 0 && cut(current) > rr.num_ret {
        set(current, rr.num_rel_ret as f64 / cut(current) as f64);
        current -= 1;
    }
    let mut rel_so_far = rr.num_rel_ret;
    let mut i = rr.num_ret;
    while i > 0 && rel_so_far > 0 {
        let precis = rel_so_far as f64 / i as f64;
        while current >= 0 && i == cut(current) {
            set(current, precis);
            current -= 1;
        }
        if ctx.relevant(rr.list.get((i - 1) as usize).copied().unwrap_or(NONPOOL)) {
            rel_so_far -= 1;
        }
        i -= 1;
    }
}

/// `utility` (m_utility.c): a·rel_ret + b·nonrel_ret + c·rel_not_ret + d·nonrel_not_ret.
pub fn utility(ctx: &Ctx, rr: &ResRels, params: &[f64]) -> f64 {
    let p = |i: usize| params.get(i).copied().unwrap_or(0.0);
    p(0) * rr.num_rel_ret as f64
        + p(1) * (rr.num_ret - rr.num_rel_ret) as f64
        + p(2) * (rr.num_rel - rr.num_rel_ret) as f64
        + p(3) * (ctx.docs_in_collection + rr.num_rel_ret - rr.num_ret - rr.num_rel) as f64
}

/// `binG` (m_binG.c).
pub fn bin_g(ctx: &Ctx, rr: &ResRels) -> f64 {
    let mut rel_so_far = 0i64;
    let mut sum = 0.0;
    for (i, &rel) in rr.list.iter().enumerate() {
        if ctx.relevant(rel) {
            rel_so_far += 1;
            sum += 1.0 / ((3 + i as i64 - rel_so_far) as f64).log2();
        }
    }
    if rel_so_far > 0 {
        sum / rr.num_rel as f64
    } else {
        0.0
    }
}

/// `set_P` (m_set_P.c).
pub fn set_p(rr: &ResRels) -> f64 {
    if rr.num_ret != 0 {
        rr.num_rel_ret as f64 / rr.num_ret as f64
    } else {
        0.0
    }
}

/// `set_relative_P` (m_set_rel_P.c).
pub fn set_relative_p(rr: &ResRels) -> f64 {
    if rr.num_ret != 0 && rr.num_rel != 0 {
        rr.num_rel_ret as f64 / rr.num_ret.min(rr.num_rel) as f64
    } else {
        0.0
    }
}

/// `set_recall` (m_set_recall.c).
pub fn set_recall(rr: &ResRels) -> f64 {
    if rr.num_rel != 0 {
        rr.num_rel_ret as f64 / rr.num_rel as f64
    } else {
        0.0
    }
}

/// `set_map` (m_set_map.c).
pub fn set_map(rr: &ResRels) -> f64 {
    if rr.num_ret != 0 && rr.num_rel != 0 {
        (rr.num_rel_ret as f64 * rr.num_rel_ret as f64) / (rr.num_ret as f64 * rr.num_rel as f64)
    } else {
        0.0
    }
}

/// `set_F` (m_set_F.c): (β + 1) P R / (β P + R), β the parameter (default 1).
pub fn set_f(rr: &ResRels, beta: f64) -> f64 {
    if rr.num_rel_ret == 0 {
        return 0.0;
    }
    let p = rr.num_rel_ret as f64 / rr.num_ret as f64;
    let r = rr.num_rel_ret as f64 / rr.num_rel as f64;
    (beta + 1.0) * p * r / (beta * p + r)
}

/// `num_nonrel_judged_ret` (m_num_nonrel_judged_ret.c).
pub fn num_nonrel_judged_ret(rr: &ResRels) -> f64 {
    (rr.num_ret - rr.num_nonpool - rr.num_unjudged_in_pool - rr.num_rel_ret) as f64
}

/// `relstring` (m_relstring.c): the first `len` relevance values as characters.
pub fn relstring(rr: &ResRels, len: f64) -> String {
    let len = (len as i64).min(rr.num_ret).max(0) as usize;
    rr.list
        .iter()
        .take(len)
        .map(|&rel| match rel {
            r if r > 9 => '>',
            r if r >= 0 => char::from(b'0' + r as u8),
            NONPOOL => '-',
            UNJUDGED => '.',
            _ => '<',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_cutoffs_round_as_each_version() {
        // 9.x: (long)(p R + 0.9); 10.0: lround(p R).
        assert_eq!(recall_cutoff(0.1, 3, Compat::V9), 1);
        assert_eq!(recall_cutoff(0.1, 3, Compat::V10), 0);
        assert_eq!(recall_cutoff(0.7, 3, Compat::V9), 2, "0.7 x 3 = 2.0999999999999996");
        assert_eq!(recall_cutoff(0.5, 3, Compat::V10), 2, "half away from zero");
    }
}
