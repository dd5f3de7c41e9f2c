#!/usr/bin/env python3
"""Generate tests/ab_statistics/fixtures.json: scipy's answers for rankpulse::stats.

Rerun (from the crate root; deterministic, rewrites the fixture byte for byte given the
same numpy/scipy versions):

    python3 tests/ab_statistics/generate.py

Generated with scipy 1.17.1 and numpy 2.4.6 (recorded in the fixture's "meta" too). The
data come from seeded numpy Generators only; a different numpy may draw different data,
which is harmless (the fixture is committed and self-contained) but changes the bytes.

Four sections, all read by tests/ab_statistics.rs:

* two_sample: treatment and control arms of one metric. Stored inputs are the exact moments
  (n, math.fsum of values, math.fsum of squares) that rankpulse accumulates; expected values
  are scipy's on the raw data: mean, std(ddof=1), sem, scipy.stats.t.interval per arm;
  scipy.stats.ttest_ind(equal_var=False) statistic, pvalue, df and confidence_interval; and
  the relative difference (mean_t - mean_c) / mean_c with its delta-method interval written
  out here (se_rel = sqrt(v_t/mc^2 + mt^2 v_c/mc^4), rel +- t.ppf(0.5 + conf/2, welch_df) se_rel).
  Where scipy answers NaN (zero variance) the fixture holds null.
* srm: observed variant counts and expected shares; scipy.stats.chisquare(obs,
  f_exp=shares * total) statistic and pvalue.
* clustered: users (clusters) with a heavy-tailed number of impressions (1..50) and a
  user-level effect, stored as per-cluster (N_i, S_i) plus the impression-level moments. The
  cluster-robust delta-method SE of mu = sum S / sum N is computed from sample
  (co)variances: Var = (var(S) - 2 mu cov(S, N) + mu^2 var(N)) / (K Nbar^2), ddof=1; and,
  independently, as the CR1 sandwich SE of an impression-level OLS of y on a constant (what
  statsmodels' cov_type="cluster" reports; statsmodels itself is not used). Generation
  aborts if the two disagree. Arms are also compared with
  scipy.stats.ttest_ind_from_stats on cluster-level summaries (std = se sqrt(K), nobs = K),
  which is Welch's test with K - 1 degrees of freedom per arm.
* t_distribution: scipy.stats.t.ppf(q, df) and 2 * t.sf(|t|, df) on a grid of df from 1 to
  1e6, for t_quantile and t_two_sided_p unscaled (in the cases above a quantile error is
  multiplied by a small standard error and could hide below 1e-6).

Every scipy answer is also cross-checked here against the textbook formula, and generation
aborts on a disagreement beyond 1e-9 (relative), so the fixture cannot silently encode a
scipy quirk.
"""

import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import scipy
import scipy.stats as st

OUT = Path(__file__).resolve().parent / "fixtures.json"
BASE_SEED = 20260101
CROSS_CHECK = 1e-9


def f(x):
    """numpy scalar -> JSON number, NaN/inf -> null."""
    x = float(x)
    return x if math.isfinite(x) else None


def agree(name, a, b, tol=CROSS_CHECK):
    if not (abs(a - b) <= tol * max(1.0, abs(b))):
        sys.exit(f"cross-check failed: {name}: {a!r} vs {b!r}")


# ---------------------------------------------------------------------------------------------
# Metric generators: (rng, n) -> float64 array with values in [0, 1].


def binary(rate):
    return lambda rng, n: (rng.random(n) < rate).astype(np.float64)


def beta(a, b):
    return lambda rng, n: rng.beta(a, b, n)


def zero_inflated_beta(zeros, a, b):
    """nDCG-like: exactly 0 with probability `zeros`, else Beta(a, b)."""
    return lambda rng, n: np.where(rng.random(n) < zeros, 0.0, rng.beta(a, b, n))


def reciprocal_rank(click, q):
    """0 with probability 1 - click, else 1/k with k ~ Geometric(q) capped at 10."""

    def gen(rng, n):
        k = np.minimum(rng.geometric(q, n), 10)
        return np.where(rng.random(n) < click, 1.0 / k, 0.0)

    return gen


def fixed(values):
    return lambda rng, n: np.array(values, dtype=np.float64)


def constant(value):
    return lambda rng, n: np.full(n, value, dtype=np.float64)


# name, treatment generator, n_t, control generator, n_c, confidence.
# "same" as treatment generator: a shuffled copy of the control arm (identical moments).
# "plus_one": the control arm with one 0 turned into a 1.
TWO_SAMPLE = [
    ("ctr_equal_rates_20k", binary(0.10), 20000, binary(0.10), 20000, 0.95),
    ("ctr_small_lift_20k", binary(0.105), 20000, binary(0.10), 20000, 0.95),
    ("ctr_clear_lift_20k", binary(0.34), 20000, binary(0.30), 20000, 0.95),
    ("ctr_doubled_rate_20k", binary(0.20), 20000, binary(0.10), 20000, 0.90),
    ("ctr_rare_5k", binary(0.05), 5000, binary(0.06), 5000, 0.90),
    ("ctr_high_rate_unequal", binary(0.60), 1000, binary(0.58), 1200, 0.90),
    ("ctr_20k_vs_300", binary(0.20), 20000, binary(0.25), 300, 0.95),
    ("ctr_3_vs_15k", fixed([1, 0, 1]), 3, binary(0.4), 15000, 0.95),
    ("ctr_two_each_mirrored", fixed([1, 0]), 2, fixed([0, 1]), 2, 0.95),
    ("ctr_two_vs_three", fixed([1, 0]), 2, fixed([0, 0, 1]), 3, 0.90),
    ("ctr_shuffled_copy_10k", "same", 10000, binary(0.3), 10000, 0.95),
    ("ctr_one_more_click_10k", "plus_one", 10000, binary(0.3), 10000, 0.90),
    ("rr_equal_20k_19k", reciprocal_rank(0.4, 0.5), 20000, reciprocal_rank(0.4, 0.5), 19000, 0.95),
    ("rr_lift_8k", reciprocal_rank(0.45, 0.55), 8000, reciprocal_rank(0.40, 0.5), 8000, 0.95),
    ("rr_tiny_5_vs_7", reciprocal_rank(0.5, 0.4), 5, reciprocal_rank(0.5, 0.4), 7, 0.90),
    ("rr_clear_drop_20k", reciprocal_rank(0.36, 0.5), 20000, reciprocal_rank(0.40, 0.5), 20000, 0.90),
    ("ndcg_zero_inflated_equal", zero_inflated_beta(0.6, 2, 5), 15000, zero_inflated_beta(0.6, 2, 5), 14000, 0.90),
    ("ndcg_zero_inflated_lift", zero_inflated_beta(0.5, 2, 3), 20000, zero_inflated_beta(0.6, 2, 3), 20000, 0.95),
    ("ndcg_mostly_zero_20k", zero_inflated_beta(0.95, 2, 2), 20000, zero_inflated_beta(0.95, 2, 2), 20000, 0.95),
    ("beta_unequal_variance", beta(0.5, 0.5), 50, beta(20, 20), 5000, 0.95),
    ("beta_narrow_20k", beta(50, 50), 20000, beta(50, 49), 20000, 0.90),
    ("beta_2_vs_20k", beta(2, 2), 2, beta(2, 2), 20000, 0.95),
    ("beta_skewed_small", beta(0.3, 3), 12, beta(0.3, 2), 9, 0.99),
    ("control_all_zero", binary(0.3), 40, constant(0.0), 40, 0.95),
    ("both_all_zero", constant(0.0), 30, constant(0.0), 25, 0.95),
    ("treatment_all_one", constant(1.0), 10, binary(0.6), 10, 0.90),
]

N_RANDOM_TWO_SAMPLE = 16


def random_two_sample(rng, i):
    """A random case: random metric family, log-uniform sizes in [2, 20000], random effect."""
    kind = ["binary", "rr", "ndcg", "beta"][i % 4]
    conf = [0.95, 0.90][(i // 4) % 2]
    n_t, n_c = (int(round(math.exp(rng.uniform(math.log(2), math.log(20000))))) for _ in range(2))
    if kind == "binary":
        base = rng.uniform(0.05, 0.6)
        gens = binary(base * rng.uniform(0.9, 1.15)), binary(base)
    elif kind == "rr":
        base = rng.uniform(0.1, 0.6)
        gens = reciprocal_rank(base * rng.uniform(0.9, 1.1), 0.5), reciprocal_rank(base, 0.5)
    elif kind == "ndcg":
        zeros = rng.uniform(0.3, 0.9)
        gens = zero_inflated_beta(zeros * rng.uniform(0.9, 1.1), 2, 4), zero_inflated_beta(zeros, 2, 4)
    else:
        a, b = rng.uniform(0.3, 10), rng.uniform(0.3, 10)
        gens = beta(a * rng.uniform(0.8, 1.25), b), beta(a, b)
    return (f"random_{i:02d}_{kind}_{n_t}_vs_{n_c}", gens[0], n_t, gens[1], n_c, conf)


def moments(x):
    x = [float(v) for v in x]
    return {"n": len(x), "sum": math.fsum(x), "sum_squares": math.fsum(v * v for v in x)}


def arm_expected(x, conf):
    n = len(x)
    mean = np.mean(x)
    sd = np.std(x, ddof=1)
    sem = st.sem(x)
    agree("sem", sem, sd / math.sqrt(n))
    # scipy answers NaN for a zero scale (a constant arm): stored as null.
    ci = [f(v) for v in st.t.interval(conf, n - 1, loc=mean, scale=sem)] if sem > 0 else None
    return {"mean": f(mean), "sd": f(sd), "sem": f(sem), "df": n - 1, "ci": ci}


def two_sample_case(index, spec):
    name, gen_t, n_t, gen_c, n_c, conf = spec
    rng = np.random.default_rng(BASE_SEED + index)
    c = gen_c(rng, n_c)
    if isinstance(gen_t, str):
        t = rng.permutation(c)
        if gen_t == "plus_one":
            t[np.flatnonzero(t == 0)[0]] = 1.0
    else:
        t = gen_t(rng, n_t)
    assert len(t) == n_t and len(c) == n_c and t.min() >= 0 and t.max() <= 1 and c.min() >= 0 and c.max() <= 1

    et, ec = arm_expected(t, conf), arm_expected(c, conf)
    with warnings.catch_warnings():
        # Constant arms make scipy warn about precision loss; every answer is cross-checked below.
        warnings.simplefilter("ignore", RuntimeWarning)
        r = st.ttest_ind(t, c, equal_var=False)
    mt, mc = float(np.mean(t)), float(np.mean(c))
    vt, vc = et["sem"] ** 2, ec["sem"] ** 2
    welch = None
    if vt + vc > 0:
        ci = r.confidence_interval(conf)
        welch = {"statistic": f(r.statistic), "pvalue": f(r.pvalue), "df": f(r.df), "ci": [f(ci.low), f(ci.high)]}
        # Cross-check scipy against the textbook Welch formulas.
        df = (vt + vc) ** 2 / (vt**2 / (n_t - 1) + vc**2 / (n_c - 1))
        tstat = (mt - mc) / math.sqrt(vt + vc)
        agree(f"{name} df", welch["df"], df)
        agree(f"{name} t", welch["statistic"], tstat)
        agree(f"{name} p", welch["pvalue"], 2 * st.t.sf(abs(tstat), df))
        assert welch["pvalue"] > 0, name
    else:
        assert math.isnan(r.statistic), name  # scipy: 0/0

    relative = None
    if mc != 0:
        rel = (mt - mc) / mc
        relative = {"value": rel, "ci": None}
        if welch is not None:
            se_rel = math.sqrt(vt / mc**2 + mt**2 * vc / mc**4)
            half = st.t.ppf(0.5 + conf / 2, welch["df"]) * se_rel
            relative["ci"] = [rel - half, rel + half]

    return {
        "name": name,
        "confidence": conf,
        "treatment": {**moments(t), **et},
        "control": {**moments(c), **ec},
        "difference": mt - mc,
        "welch": welch,
        "relative": relative,
    }


# ---------------------------------------------------------------------------------------------
# Sample ratio mismatch.

SRM = [
    ("split_55_45_of_10k", [5500, 4500], [0.5, 0.5]),
    ("split_exact_50_50", [5000, 5000], [0.5, 0.5]),
    ("split_5012_4988", [5012, 4988], [0.5, 0.5]),
    ("split_small_3_7", [3, 7], [0.5, 0.5]),
    ("split_0_10", [0, 10], [0.5, 0.5]),
    ("split_90_10_ok", [90120, 9880], [0.9, 0.1]),
    ("split_90_10_small", [900, 100], [0.9, 0.1]),
    ("split_90_10_off", [880, 120], [0.9, 0.1]),
    ("split_50_30_20_ok", [5030, 2990, 1980], [0.5, 0.3, 0.2]),
    ("split_50_30_20_off", [520, 290, 190], [0.5, 0.3, 0.2]),
    ("split_50_30_20_bad", [52000, 29000, 19000], [0.5, 0.3, 0.2]),
    ("three_equal", [3340, 3330, 3330], [1 / 3, 1 / 3, 1 / 3]),
    ("four_equal", [2500, 2510, 2490, 2500], [0.25, 0.25, 0.25, 0.25]),
    ("four_equal_1m", [250000, 251000, 249000, 250000], [0.25, 0.25, 0.25, 0.25]),
    ("five_unequal", [40210, 14950, 15100, 14870, 14870], [0.4, 0.15, 0.15, 0.15, 0.15]),
]


def random_srm(rng, i):
    k = [2, 3, 5][i % 3]
    shares = rng.dirichlet(np.full(k, 3.0))
    total = int(rng.integers(100, 200000))
    # Half of them drawn from slightly wrong shares, i.e. a real mismatch.
    drawn = shares if i % 2 == 0 else rng.dirichlet(shares * 2000)
    return (f"random_{i}_{k}_variants", [int(v) for v in rng.multinomial(total, drawn)], [float(s) for s in shares])


def srm_case(spec):
    name, observed, shares = spec
    total = sum(observed)
    f_exp = np.array(shares) * total
    r = st.chisquare(observed, f_exp=f_exp)
    agree(f"{name} chi2", r.statistic, math.fsum((o - e) ** 2 / e for o, e in zip(observed, f_exp)))
    agree(f"{name} p", r.pvalue, st.chi2.sf(r.statistic, len(observed) - 1))
    assert r.pvalue > 0, name
    return {
        "name": name,
        "observed": observed,
        "shares": shares,
        "statistic": f(r.statistic),
        "pvalue": f(r.pvalue),
        "df": len(observed) - 1,
    }


# ---------------------------------------------------------------------------------------------
# Clustered (delta method).


def impressions_per_user(rng, k, a):
    """Heavy-tailed counts in 1..50: Zipf(a) draws above 50 are rejected."""
    out = []
    while len(out) < k:
        draw = rng.zipf(a, 4 * k)
        out.extend(int(v) for v in draw[draw <= 50])
    return np.array(out[:k])


def clustered_arm(rng, k, metric, level, a):
    """Values per user: the user-level effect makes impressions within a user correlated;
    heavy users engage less, so S and N are not proportional."""
    n_i = impressions_per_user(rng, k, a) if a is not None else np.ones(k, dtype=np.int64)
    values = []
    for n in n_i:
        user = rng.beta(2, 2 / level - 2 + 1e-12) * (1.3 if n < 5 else 0.8)  # mean about `level`
        user = min(user, 1.0)
        if metric == "ctr":
            v = (rng.random(n) < user).astype(np.float64)
        elif metric == "rr":
            k_rank = np.minimum(rng.geometric(0.3 + 0.6 * user, n), 10)
            v = np.where(rng.random(n) < user, 1.0 / k_rank, 0.0)
        else:  # ndcg-like, zero-inflated
            v = np.where(rng.random(n) < user, rng.beta(1 + 4 * user, 2, n), 0.0)
        values.append(v)
    return n_i, values


def cluster_se_direct(n_i, s_i):
    """The delta-method variance, from sample (co)variances of the per-cluster totals."""
    S = np.asarray(s_i, dtype=np.float64)
    N = np.asarray(n_i, dtype=np.float64)
    K = len(S)
    mu = S.sum() / N.sum()
    nbar = N.mean()
    var_s = np.var(S, ddof=1)
    var_n = np.var(N, ddof=1)
    cov_sn = np.cov(S, N, ddof=1)[0, 1]
    var = (var_s - 2 * mu * cov_sn + mu**2 * var_n) / (K * nbar**2)
    return math.sqrt(var)


def cluster_se_cr1(values):
    """CR1 cluster-robust SE of the intercept of OLS y ~ 1 at impression level (sandwich)."""
    y = np.concatenate(values)
    X = np.ones((len(y), 1))
    bread = np.linalg.inv(X.T @ X)
    beta_hat = bread @ X.T @ y
    u = y - X @ beta_hat
    meat = np.zeros((1, 1))
    start = 0
    for v in values:
        Xg, ug = X[start : start + len(v)], u[start : start + len(v)]
        score = Xg.T @ ug
        meat += np.outer(score, score)
        start += len(v)
    G, n, p = len(values), len(y), X.shape[1]
    correction = G / (G - 1) * (n - 1) / (n - p)
    return math.sqrt((correction * bread @ meat @ bread)[0, 0])


# name, metric, (K, level, zipf a) for treatment and control, confidence.
CLUSTERED = [
    ("ctr_users_800_vs_800", "ctr", (800, 0.12, 1.6), (800, 0.10, 1.6), 0.95),
    ("ctr_users_heavy_tail", "ctr", (500, 0.30, 1.3), (600, 0.30, 1.3), 0.90),
    ("ctr_two_users", "ctr", (2, 0.4, 1.5), (3, 0.4, 1.5), 0.95),
    ("rr_users_400", "rr", (400, 0.35, 1.8), (450, 0.30, 1.8), 0.95),
    ("rr_users_small", "rr", (8, 0.4, 1.5), (12, 0.4, 1.5), 0.90),
    ("ndcg_users_300", "ndcg", (300, 0.5, 1.5), (300, 0.5, 1.5), 0.95),
    ("ndcg_users_unequal", "ndcg", (60, 0.6, 2.0), (700, 0.45, 1.4), 0.90),
    ("ctr_one_impression_each", "ctr", (500, 0.2, None), (400, 0.25, None), 0.95),
    ("ctr_users_50", "ctr", (50, 0.15, 1.5), (40, 0.15, 1.5), 0.99),
    ("rr_users_clear_drop", "rr", (600, 0.2, 1.7), (600, 0.4, 1.7), 0.95),
]


def clustered_case(index, spec):
    name, metric, tspec, cspec, conf = spec
    rng = np.random.default_rng(BASE_SEED + 1000 + index)
    arms = {}
    for arm, (k, level, a) in (("treatment", tspec), ("control", cspec)):
        n_i, values = clustered_arm(rng, k, metric, level, a)
        s_i = [math.fsum(float(v) for v in vs) for vs in values]
        flat = np.concatenate(values)
        se = cluster_se_direct(n_i, s_i)
        se_cr1 = cluster_se_cr1(values)
        agree(f"{name} {arm} delta vs CR1", se_cr1, se, 1e-9)
        mean = math.fsum(s_i) / int(n_i.sum())
        agree(f"{name} {arm} mean", float(np.mean(flat)), mean)
        lo, hi = st.t.interval(conf, k - 1, loc=mean, scale=se)
        arms[arm] = {
            "clusters": [[int(n), s] for n, s in zip(n_i, s_i)],
            **moments(flat),
            "mean": mean,
            "sd": f(np.std(flat, ddof=1)),
            "se": se,
            "se_cr1": se_cr1,
            "df": k - 1,
            "ci": [f(lo), f(hi)],
        }
    t, c = arms["treatment"], arms["control"]
    kt, kc = len(t["clusters"]), len(c["clusters"])
    r = st.ttest_ind_from_stats(
        t["mean"], t["se"] * math.sqrt(kt), kt, c["mean"], c["se"] * math.sqrt(kc), kc, equal_var=False
    )
    vt, vc = t["se"] ** 2, c["se"] ** 2
    df = (vt + vc) ** 2 / (vt**2 / (kt - 1) + vc**2 / (kc - 1))
    diff = t["mean"] - c["mean"]
    half = st.t.ppf(0.5 + conf / 2, df) * math.sqrt(vt + vc)
    agree(f"{name} t", r.statistic, diff / math.sqrt(vt + vc))
    agree(f"{name} p", r.pvalue, 2 * st.t.sf(abs(diff) / math.sqrt(vt + vc), df))
    welch = {"statistic": f(r.statistic), "pvalue": f(r.pvalue), "df": df, "ci": [diff - half, diff + half]}
    return {"name": name, "confidence": conf, "treatment": t, "control": c, "difference": diff, "welch": welch}


# ---------------------------------------------------------------------------------------------
# The t distribution itself (t_quantile, t_two_sided_p), unscaled: in the cases above a quantile
# error is multiplied by a small standard error and could hide below 1e-6.

T_DFS = [1, 2, 3.5, 7, 29.7, 100, 1000, 39997.7, 1e5, 1e6]
T_PROBABILITIES = [0.001, 0.025, 0.05, 0.5, 0.8, 0.95, 0.975, 0.995, 0.9995]
T_STATISTICS = [0.0, 0.3, 1.0, 1.96, -2.5, 4.0, 8.0, -15.0, 30.0]


def t_distribution():
    quantiles = [[q, df, float(st.t.ppf(q, df))] for df in T_DFS for q in T_PROBABILITIES]
    for q, df, x in quantiles:
        agree(f"ppf {q} df {df}", float(st.t.cdf(x, df)), q, 1e-12)
    two_sided = []
    for df in T_DFS:
        for t in T_STATISTICS:
            p = float(2 * st.t.sf(abs(t), df))
            agree(f"t {t} df {df}", p, float(2 * st.t.cdf(-abs(t), df)))
            if p > 1e-300:  # an underflow to 0 has no relative error to check
                two_sided.append([t, df, min(p, 1.0)])
    return {"quantiles": quantiles, "two_sided_p": two_sided}


def main():
    two_sample_specs = list(TWO_SAMPLE)
    rng = np.random.default_rng(BASE_SEED - 1)
    two_sample_specs += [random_two_sample(rng, i) for i in range(N_RANDOM_TWO_SAMPLE)]
    two_sample = [two_sample_case(i, s) for i, s in enumerate(two_sample_specs)]

    srm_specs = list(SRM)
    rng = np.random.default_rng(BASE_SEED - 2)
    srm_specs += [random_srm(rng, i) for i in range(4)]
    srm = [srm_case(s) for s in srm_specs]

    clustered = [clustered_case(i, s) for i, s in enumerate(CLUSTERED)]
    t_dist = t_distribution()

    names = [c["name"] for c in two_sample + srm + clustered]
    assert len(names) == len(set(names)), "case names are unique"

    meta = {
        "generator": "tests/ab_statistics/generate.py",
        "scipy": scipy.__version__,
        "numpy": np.__version__,
        "seed": BASE_SEED,
    }
    # One case per line: readable diffs without a huge file.
    lines = ["{", f'"meta": {json.dumps(meta)},']
    for key, cases in (("two_sample", two_sample), ("srm", srm), ("clustered", clustered)):
        lines.append(f'"{key}": [')
        lines.append(",\n".join(json.dumps(c, allow_nan=False, separators=(",", ":")) for c in cases))
        lines.append("],")
    lines.append(f'"t_distribution": {json.dumps(t_dist, allow_nan=False, separators=(",", ":"))}')
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)
    OUT.write_text(text)
    pvals = [c["welch"]["pvalue"] for c in two_sample if c["welch"]]
    print(
        f"wrote {OUT} ({len(text)} bytes): {len(two_sample)} two-sample, {len(srm)} SRM, "
        f"{len(clustered)} clustered cases, {len(t_dist['quantiles'])} t quantiles, "
        f"{len(t_dist['two_sided_p'])} t p-values; Welch p from {min(pvals):.3g} to {max(pvals):.6g}"
    )


if __name__ == "__main__":
    main()
