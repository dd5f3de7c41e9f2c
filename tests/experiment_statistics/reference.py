#!/usr/bin/env python3
"""The reference figures for rankpulse's experiment statistics (tests/experiment_statistics.rs).

Prints one JSON object of generated cases, each with its inputs and the figures the reference
tools compute from them:

* cuped_unit: per-unit data (one impression and one pre-period impression per unit, so the
  ratios are per-unit means), adjusted by gbstats 0.8.0's RegressionAdjustedStatistic with
  compute_theta and tested with its TwoSidedTTest, absolute and relative, and its
  SequentialTwoSidedTTest (absolute);
* cuped_ratio: unit buckets of several impressions (some without pre-period data), where
  gbstats 0.8.0 has no regression-adjusted ratio: the delta method written out over the buckets
  with numpy (linearized ratios, np.cov) and scipy's t distribution;
* bayes: gbstats's EffectBayesianABTest (flat and proper priors, relative and absolute,
  inverse metrics, regression-adjusted arms);
* multiple: statsmodels' multipletests, methods holm and fdr_bh;
* power: the closed form with scipy's normal quantiles, and statsmodels' NormalIndPower's
  power at that effect (both tails: the closed form leaves out the far one);
* guardrail: scipy's ttest_ind(equal_var=False, alternative=...).

Usage: python3 tests/experiment_statistics/reference.py > cases.json
Needs gbstats==0.8.0 (installed with --no-deps: its pins predate numpy 2, and the modules used
here import only numpy, scipy and pydantic), statsmodels and scipy.
"""

import json
import sys

import numpy as np
import scipy.stats
from gbstats.bayesian.tests import EffectBayesianABTest, EffectBayesianConfig, GaussianPrior
from gbstats.frequentist.tests import FrequentistConfig, SequentialConfig, SequentialTwoSidedTTest, TwoSidedTTest
from gbstats.models.statistics import RegressionAdjustedStatistic, SampleMeanStatistic, compute_theta
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import NormalIndPower

RNG = np.random.default_rng(20261126)
CONFIDENCE = 0.95
# gbstats's sequential_tuning_parameter, rankpulse's ab.sequential_sample_size.
TUNING = 5000.0


def f(x):
    return None if x is None or not np.isfinite(x) else float(x)


def unit_arm(n, effect, rho):
    """Per-unit (post, pre) with correlation about rho, values in [0, 1] like metrics."""
    pre = RNG.beta(2, 3, n)
    noise = RNG.beta(2, 3, n)
    post = np.clip(rho * pre + (1 - rho) * noise + effect, 0, 1)
    return post, pre


def mean_stat(values):
    return SampleMeanStatistic(n=len(values), sum=float(values.sum()), sum_squares=float((values**2).sum()))


def ra_stat(post, pre):
    return RegressionAdjustedStatistic(
        n=len(post),
        post_statistic=mean_stat(post),
        pre_statistic=mean_stat(pre),
        post_pre_sum_of_products=float((post * pre).sum()),
        theta=0,
    )


def ttest(a, b, relative):
    config = FrequentistConfig(alpha=1 - CONFIDENCE, difference_type="relative" if relative else "absolute")
    r = TwoSidedTTest(a, b, config).compute_result()
    return {"estimate": f(r.expected), "ci": [f(r.ci[0]), f(r.ci[1])], "p_value": f(r.p_value)}


def cuped_unit_cases():
    cases = []
    for n_a, n_b, effect, rho in [(200, 220, 0.0, 0.8), (500, 480, 0.02, 0.5), (60, 75, 0.05, 0.95), (1000, 1000, 0.01, 0.2)]:
        post_a, pre_a = unit_arm(n_a, 0.0, rho)
        post_b, pre_b = unit_arm(n_b, effect, rho)
        a, b = ra_stat(post_a, pre_a), ra_stat(post_b, pre_b)
        theta = compute_theta(ra_stat(post_a, pre_a), ra_stat(post_b, pre_b))
        absolute = ttest(ra_stat(post_a, pre_a), ra_stat(post_b, pre_b), relative=False)
        relative = ttest(a, b, relative=True)
        config = SequentialConfig(alpha=1 - CONFIDENCE, difference_type="absolute", sequential_tuning_parameter=TUNING)
        seq = SequentialTwoSidedTTest(ra_stat(post_a, pre_a), ra_stat(post_b, pre_b), config).compute_result()
        rows = lambda post, pre: [[float(p), 1.0, float(x), 1.0] for p, x in zip(post, pre)]
        cases.append(
            {
                "control": rows(post_a, pre_a),
                "treatment": rows(post_b, pre_b),
                "theta": f(theta),
                "difference": absolute,
                "relative_difference": relative,
                "sequential": {"ci": [f(seq.ci[0]), f(seq.ci[1])], "p_value": f(seq.p_value)},
            }
        )
    return cases


def linearized(rows, y_ratio=None, x_ratio=None):
    m, d, x, e = (rows[:, i] for i in range(4))
    y = m.sum() / d.sum()
    y_lin = (m - y * d) / d.mean()
    if e.sum() > 0:
        xr = x.sum() / e.sum()
        x_lin = (x - xr * e) / e.mean()
    else:
        xr, x_lin = 0.0, np.zeros(len(rows))
    return y, xr, y_lin, x_lin


def cuped_ratio_cases():
    cases = []
    for buckets_a, buckets_b, effect, missing in [(64, 64, 0.0, 0.1), (256, 250, 0.03, 0.3), (40, 48, 0.1, 0.0), (128, 128, 0.0, 1.0)]:
        def arm(buckets, effect):
            rows = []
            for _ in range(buckets):
                d = int(RNG.integers(1, 30))
                e = 0 if RNG.random() < missing else int(RNG.integers(1, 30))
                quality = RNG.beta(3, 3)
                m = float(np.clip(RNG.normal(quality + effect, 0.2, d), 0, 1).sum())
                x = float(np.clip(RNG.normal(quality, 0.2, e), 0, 1).sum()) if e else 0.0
                rows.append([m, float(d), x, float(e)])
            return np.array(rows)

        a, b = arm(buckets_a, 0.0), arm(buckets_b, effect)
        _, _, yj, xj = linearized(np.vstack([a, b]))
        theta = float(np.cov(yj, xj)[0, 1] / np.var(xj, ddof=1)) if np.var(xj) > 0 else 0.0
        out = {"control": a.tolist(), "treatment": b.tolist(), "theta": theta}
        arms = []
        for rows in (a, b):
            y, xr, y_lin, x_lin = linearized(rows)
            arms.append((y, y - theta * xr, np.var(y_lin - theta * x_lin, ddof=1), len(rows)))
        (ya, adj_a, va, na), (yb, adj_b, vb, nb) = arms
        df = (va / na + vb / nb) ** 2 / ((vb / nb) ** 2 / (nb - 1) + (va / na) ** 2 / (na - 1))
        q = scipy.stats.t.ppf(0.5 + CONFIDENCE / 2, df)

        def welch(estimate, variance):
            se = np.sqrt(variance)
            return {
                "estimate": f(estimate),
                "ci": [f(estimate - q * se), f(estimate + q * se)],
                "p_value": f(2 * scipy.stats.t.sf(abs(estimate / se), df)),
            }

        out["difference"] = welch(adj_b - adj_a, va / na + vb / nb)
        out["relative_difference"] = welch((adj_b - adj_a) / ya, vb / (ya**2 * nb) + va * yb**2 / (ya**4 * na))
        out["df"] = f(df)
        cases.append(out)
    return cases


def bayes_cases():
    cases = []
    settings = [
        (True, False, None),
        (False, False, None),
        (True, True, None),
        (True, False, (0.0, 0.3**2)),
        (False, True, (0.01, 0.05**2)),
    ]
    for relative, inverse, prior in settings:
        for n_a, n_b, effect in [(300, 310, 0.02), (80, 90, -0.05), (2000, 2000, 0.001)]:
            post_a, pre_a = unit_arm(n_a, 0.0, 0.6)
            post_b, pre_b = unit_arm(n_b, effect, 0.6)
            for adjusted in (False, True):
                if adjusted:
                    a, b = ra_stat(post_a, pre_a), ra_stat(post_b, pre_b)
                else:
                    a, b = mean_stat(post_a), mean_stat(post_b)
                config = EffectBayesianConfig(
                    difference_type="relative" if relative else "absolute",
                    inverse=inverse,
                    alpha=1 - CONFIDENCE,
                    prior_type="relative" if relative else "absolute",
                    prior_effect=GaussianPrior(
                        mean=prior[0] if prior else 0.0, variance=prior[1] if prior else 1.0, proper=prior is not None
                    ),
                )
                test = EffectBayesianABTest(a, b, config)
                r = test.compute_result()
                arm = lambda s: {
                    "n": s.n,
                    "mean": float(s.mean),
                    "unadjusted_mean": float(s.unadjusted_mean),
                    "variance": float(s.variance),
                }
                cases.append(
                    {
                        "relative": relative,
                        "inverse": inverse,
                        "prior": {"mean": prior[0], "variance": prior[1], "proper": True}
                        if prior
                        else {"mean": 0.0, "variance": 1.0, "proper": False},
                        "control": arm(test.stat_a),
                        "treatment": arm(test.stat_b),
                        "chance_to_win": f(r.chance_to_win),
                        "expected": f(r.expected),
                        "ci": [f(r.ci[0]), f(r.ci[1])],
                        "risk": [f(r.risk[0]), f(r.risk[1])],
                    }
                )
    return cases


def multiple_cases():
    cases = []
    for m in [1, 2, 5, 12, 40]:
        p = RNG.beta(0.4, 2.0, m)
        if m >= 5:
            p[1] = p[3]  # a tie
        cases.append(
            {
                "p_values": p.tolist(),
                "holm": multipletests(p, method="holm")[1].tolist(),
                "benjamini_hochberg": multipletests(p, method="fdr_bh")[1].tolist(),
            }
        )
    return cases


def power_cases():
    cases = []
    for se, confidence, power in [(0.01, 0.95, 0.8), (0.003, 0.9, 0.9), (0.2, 0.99, 0.5)]:
        closed = (scipy.stats.norm.ppf(0.5 + confidence / 2) + scipy.stats.norm.ppf(power)) * se
        # statsmodels's power of a two-sided z-test (both tails) at that effect: with unit spread
        # and n1 = n2 = 2 / se^2 the difference's standard error sqrt(1/n1 + 1/n2) is se.
        n1 = 2 / se**2
        power_at_mde = NormalIndPower().power(effect_size=closed, nobs1=n1, alpha=1 - confidence, ratio=1.0)
        cases.append({"se": se, "confidence": confidence, "power": power, "mde": closed, "power_at_mde": float(power_at_mde)})
    return cases


def guardrail_cases():
    cases = []
    for n_a, n_b, effect in [(50, 60, 0.0), (400, 380, -0.03), (30, 30, 0.1)]:
        a, _ = unit_arm(n_a, 0.0, 0.5)
        b, _ = unit_arm(n_b, effect, 0.5)
        cases.append(
            {
                "control": a.tolist(),
                "treatment": b.tolist(),
                "greater": f(scipy.stats.ttest_ind(b, a, equal_var=False, alternative="greater").pvalue),
                "less": f(scipy.stats.ttest_ind(b, a, equal_var=False, alternative="less").pvalue),
            }
        )
    return cases


json.dump(
    {
        "confidence": CONFIDENCE,
        "tuning": TUNING,
        "cuped_unit": cuped_unit_cases(),
        "cuped_ratio": cuped_ratio_cases(),
        "bayes": bayes_cases(),
        "multiple": multiple_cases(),
        "power": power_cases(),
        "guardrail": guardrail_cases(),
    },
    sys.stdout,
)
