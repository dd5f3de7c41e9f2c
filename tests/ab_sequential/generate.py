#!/usr/bin/env python3
"""Generate tests/ab_sequential/fixtures.json: an independent reference for rankpulse::stats::sequential.

Rerun from the crate root (deterministic given the same numpy/scipy versions):

    python3 tests/ab_sequential/generate.py

The reference below is written from the papers, in plain Python floats, not from rankpulse's
code:

* confidence sequence (Waudby-Smith, Arbour, Sinha, Kennedy and Ramdas 2024, "Time-uniform
  central limit theory and asymptotic confidence sequences", Annals of Statistics, arXiv
  2103.06476, eq. (14); tuning of Section 2.3):
      rho^2 = (-2 ln a + ln(1 - 2 ln a)) / N*,   t = n rho^2,
      half  = sqrt(V (t + 1) / t * (ln(t + 1) - 2 ln a)),
  with V the squared standard error of the difference (of each arm's mean, plain: s^2 / n;
  clustered: K/(K-1) sum_b (S_b - mean N_b)^2 / (sum_b N_b)^2) and n the impressions of both arms;
  the relative difference uses the delta-method V_rel = V_t/mc^2 + mt^2 V_c/mc^4;
* always-valid p-value (Johari, Pekelis and Walsh 2017, mixture SPRT with tau^2 = rho^2 n V):
      p = min(1, sqrt(t + 1) exp(-t/(t + 1) * diff^2 / (2 V)));
* running figures over looks: intersection of the intervals, minimum of the p-values (what
  savvi's Inference.infer keeps);
* sequential sample-ratio test (Lindon and Malek 2022): p = min(1, 1/BF),
      ln BF = ln B(k theta + x) - ln B(k theta) - sum x_i ln theta_i,  k = 100.

Every reference value is then checked against the published packages that implement the same
formulas, and generation aborts on any disagreement beyond 1e-9 (relative):

* `confseq` (Howard, Ramdas et al.): `boundaries.normal_mixture_bound(v = n s^2, alpha,
  v_opt = N* s^2, alpha, is_one_sided=False) / n` is the half-width, and
  `boundaries.normal_log_mixture(n diff, n s^2, N* s^2, alpha, False)` is ln(1/p) (s^2 = n V);
* `savvi` (Lindon): `multinomial.Multinomial(alpha, theta, k=100)`, updated look by look with
  `infer()`, gives the running p-value of the split test.

Installing them here: `pip install savvi`; confseq 0.0.11 builds from source and needs Boost
headers (`apt-get install libboost-dev`) and, on Python 3.11, a current pybind11:
`pip install ninja cmake pybind11 scikit-build && pip install --no-build-isolation confseq`.

Sections, all read by tests/ab_sequential.rs:
* difference: two arms as the moments rankpulse accumulates (n, sum, sum of squares), or as
  per-cluster totals (N_b, S_b) for the cluster-robust error; alpha and N*; expected interval,
  relative interval and p-value.
* sequences: a stream of looks (cumulative moments per look) and the running figures after each.
* ssrm: counts and expected shares; the p-value. ssrm_sequences: count increments per look and
  savvi's running p-value after each.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy.special import gammaln

import confseq
import savvi
from confseq import boundaries
from savvi.multinomial import Multinomial

OUT = Path(__file__).with_name("fixtures.json")
RNG = np.random.default_rng(20261123)
K_SSRM = 100.0


def rho2(n_star, alpha):
    la = math.log(alpha)
    return (-2.0 * la + math.log(1.0 - 2.0 * la)) / n_star


def half_width(n, v, n_star, alpha):
    t = n * rho2(n_star, alpha)
    return math.sqrt(v * (t + 1.0) / t * (math.log(t + 1.0) - 2.0 * math.log(alpha)))


def p_value(n, diff, v, n_star, alpha):
    t = n * rho2(n_star, alpha)
    ln_lambda = -0.5 * math.log(t + 1.0) + t / (t + 1.0) * diff * diff / (2.0 * v)
    return min(1.0, math.exp(-ln_lambda))


def plain_arm(values):
    values = [float(x) for x in values]
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((x - mean) ** 2 for x in values) / (n - 1)
    moments = {"n": n, "sum": math.fsum(values), "sum_squares": math.fsum(x * x for x in values)}
    return moments, mean, var / n


def clustered_arm(clusters):
    """clusters: list of (N_b, S_b)."""
    big_n = math.fsum(c[0] for c in clusters)
    mean = math.fsum(c[1] for c in clusters) / big_n
    k = len(clusters)
    spread = math.fsum((s - mean * m) ** 2 for m, s in clusters)
    return mean, k / (k - 1) * spread / big_n**2


def check_confseq(n, v, diff, n_star, alpha, half, p):
    s2 = n * v
    bound = float(boundaries.normal_mixture_bound(n * s2, alpha, n_star * s2, alpha, False)) / n
    if abs(bound - half) > 1e-9 * half:
        sys.exit(f"confseq disagrees on the half-width: {bound} vs {half}")
    log_mix = float(boundaries.normal_log_mixture(n * diff, n * s2, n_star * s2, alpha, False))
    if abs(min(1.0, math.exp(-log_mix)) - p) > 1e-9 * max(p, 1e-300):
        sys.exit(f"confseq disagrees on the p-value: {math.exp(-log_mix)} vs {p}")


def figures(n, mt, vt, mc, vc, n_star, alpha):
    v = vt + vc
    diff = mt - mc
    half = half_width(n, v, n_star, alpha)
    p = p_value(n, diff, v, n_star, alpha)
    check_confseq(n, v, diff, n_star, alpha, half, p)
    rel = None
    if mc != 0.0:
        v_rel = vt / mc**2 + mt**2 * vc / mc**4
        h = half_width(n, v_rel, n_star, alpha)
        rel = [diff / mc - h, diff / mc + h]
    return {"cs": [diff - half, diff + half], "relative_cs": rel, "p_value": p}


def metric_values(size, mean):
    """Values shaped like a ranking metric: many zeros, reciprocal ranks, some ones."""
    ranks = RNG.geometric(0.45, size)
    values = np.where(RNG.random(size) < mean, 1.0 / ranks, 0.0)
    return values


def difference_cases():
    cases = []
    for i in range(60):
        alpha = [0.05, 0.01, 0.1][i % 3]
        n_star = [100.0, 5000.0, 1e6][(i // 3) % 3]
        n_t, n_c = int(RNG.integers(2, 3000)), int(RNG.integers(2, 3000))
        lift = RNG.normal(0, 0.05)
        t_vals, c_vals = metric_values(n_t, 0.6 + lift), metric_values(n_c, 0.6)
        if i % 10 == 9:
            c_vals = np.zeros(n_c)  # a control mean of 0: no relative interval
            c_vals[0] = 1.0 if i % 20 == 9 else 0.0
        t, mt, vt = plain_arm(t_vals)
        c, mc, vc = plain_arm(c_vals)
        if vt + vc <= 0:
            continue
        cases.append({"alpha": alpha, "n_star": n_star, "treatment": t, "control": c,
                      **figures(n_t + n_c, mt, vt, mc, vc, n_star, alpha)})
    for i in range(20):
        alpha = [0.05, 0.01][i % 2]
        n_star = [5000.0, 50000.0][(i // 2) % 2]
        arms = []
        for lift in (RNG.normal(0, 0.05), 0.0):
            k = int(RNG.integers(3, 300))
            sizes = RNG.integers(1, 40, k)
            user = np.clip(0.5 + lift + RNG.normal(0, 0.2, k), 0.01, 0.99)
            clusters = [(float(m), float(RNG.binomial(m, p))) for m, p in zip(sizes, user)]
            arms.append(clusters)
        (mt, vt), (mc, vc) = clustered_arm(arms[0]), clustered_arm(arms[1])
        n = sum(m for m, _ in arms[0]) + sum(m for m, _ in arms[1])
        cases.append({"alpha": alpha, "n_star": n_star, "treatment_clusters": arms[0], "control_clusters": arms[1],
                      **figures(n, mt, vt, mc, vc, n_star, alpha)})
    return cases


def sequence_cases():
    cases = []
    for i, (lift, looks) in enumerate([(0.0, 40), (0.03, 40), (-0.05, 25), (0.1, 30)]):
        alpha, n_star = 0.05, [5000.0, 2000.0, 20000.0, 500.0][i]
        t_all, c_all = np.array([]), np.array([])
        steps = []
        run = {"cs": [-math.inf, math.inf], "relative_cs": [-math.inf, math.inf], "p_value": 1.0}
        for _ in range(looks):
            t_all = np.concatenate([t_all, metric_values(int(RNG.integers(20, 120)), 0.55 + lift)])
            c_all = np.concatenate([c_all, metric_values(int(RNG.integers(20, 120)), 0.55)])
            t, mt, vt = plain_arm(t_all)
            c, mc, vc = plain_arm(c_all)
            look = figures(len(t_all) + len(c_all), mt, vt, mc, vc, n_star, alpha)
            run["cs"] = [max(run["cs"][0], look["cs"][0]), min(run["cs"][1], look["cs"][1])]
            rel = look["relative_cs"]
            run["relative_cs"] = [max(run["relative_cs"][0], rel[0]), min(run["relative_cs"][1], rel[1])]
            run["p_value"] = min(run["p_value"], look["p_value"])
            steps.append({"treatment": t, "control": c, "cs": list(run["cs"]),
                          "relative_cs": list(run["relative_cs"]), "p_value": run["p_value"]})
        cases.append({"alpha": alpha, "n_star": n_star, "looks": steps})
    return cases


def ssrm_reference(counts, shares):
    prior = K_SSRM * np.asarray(shares, dtype=float)
    x = np.asarray(counts, dtype=float)
    ln_b = lambda a: float(np.sum(gammaln(a)) - gammaln(np.sum(a)))
    ln_null = float(sum(c * math.log(s) for c, s in zip(counts, shares) if c > 0))
    return min(1.0, math.exp(-(ln_b(prior + x) - ln_b(prior) - ln_null)))


def savvi_p(counts, shares):
    test = Multinomial(0.05, np.asarray(shares, dtype=float), k=K_SSRM)
    test.update(np.asarray(counts, dtype=np.int64))
    return min(1.0, float(test.calculate_p_value()))


def ssrm_cases():
    cases = []
    for i in range(40):
        d = [2, 2, 3, 4][i % 4]
        shares = [1.0 / d] * d if i % 3 else list(np.round(RNG.dirichlet([5.0] * d), 6))
        shares[-1] = 1.0 - sum(shares[:-1])  # savvi insists on an exact sum of 1
        total = int(10 ** RNG.uniform(1, 6.5))
        skew = RNG.normal(0, 0.02 if i % 2 else 0.002, d)
        probs = np.clip(np.asarray(shares) * (1 + skew), 1e-9, None)
        counts = [int(c) for c in RNG.multinomial(total, probs / probs.sum())]
        p = ssrm_reference(counts, shares)
        q = savvi_p(counts, shares)
        if abs(p - q) > 1e-9 * max(p, 1e-300) and abs(math.log(p) - math.log(q)) > 1e-9:
            sys.exit(f"savvi disagrees: {q} vs {p} for {counts} {shares}")
        cases.append({"observed": counts, "shares": [float(s) for s in shares], "p_value": p})
    return cases


def ssrm_sequence_cases():
    cases = []
    for skew in (0.0, 0.03, -0.08):
        shares = [0.5, 0.5]
        test = Multinomial(0.05, np.asarray(shares), k=K_SSRM)
        counts = np.zeros(2, dtype=np.int64)
        running = 1.0
        steps = []
        for _ in range(30):
            x = RNG.multinomial(int(RNG.integers(50, 400)), [0.5 + skew / 2, 0.5 - skew / 2])
            counts += x
            test.update(x)
            test.infer()
            running = min(running, ssrm_reference([int(c) for c in counts], shares))
            if abs(float(test.p_value[0]) - running) > 1e-9 * max(running, 1e-300):
                sys.exit(f"savvi's running p-value {test.p_value[0]} vs {running}")
            steps.append({"observed": [int(c) for c in counts], "p_value": running})
        cases.append({"shares": shares, "looks": steps})
    return cases


def main():
    fixtures = {
        "meta": {
            "generator": "tests/ab_sequential/generate.py",
            "numpy": np.__version__,
            "scipy": __import__("scipy").__version__,
            "confseq": getattr(confseq, "__version__", "0.0.11"),
            "savvi": getattr(savvi, "__version__", "0.3.1"),
            "ssrm_concentration": K_SSRM,
        },
        "difference": difference_cases(),
        "sequences": sequence_cases(),
        "ssrm": ssrm_cases(),
        "ssrm_sequences": ssrm_sequence_cases(),
    }
    OUT.write_text(json.dumps(fixtures, indent=1) + "\n")
    print(f"wrote {OUT}: {len(fixtures['difference'])} difference, {len(fixtures['sequences'])} sequence, "
          f"{len(fixtures['ssrm'])} split and {len(fixtures['ssrm_sequences'])} split-sequence cases; "
          "every value agrees with confseq and savvi to 1e-9")


if __name__ == "__main__":
    main()
