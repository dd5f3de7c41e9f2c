#!/usr/bin/env python3
"""Sanity self-test of tests/clicks/reference.py (plain Python, < 30 s).

Simulates 2000 impressions from a position-based model with known examination
probabilities gamma = [1, 0.7, 0.5, 0.35, 0.25] and random attractiveness for
20 queries x 8 documents.  Every impression shows the first 5 documents of a
fresh random permutation of its query's 8 documents, so every document appears
at many ranks (the "swaps" intervention harvesting needs).  It then fits `pbm`
(200 EM iterations) and `harvest` and prints gamma_k / gamma_1 of each next to
the truth.  A few tiny hand-computed cases are also checked for coec and ips,
and every command is run once through the JSON command line.

Usage: python3 tests/clicks/check_reference.py
"""

import json
import math
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402

TRUE_GAMMA = [1.0, 0.7, 0.5, 0.35, 0.25]
N_QUERIES, N_DOCS, N_IMPRESSIONS, ITERATIONS = 20, 8, 2000, 200


def simulate(seed=20240601):
    rng = random.Random(seed)
    alpha = {
        ("q%02d" % q, "d%02d_%d" % (q, d)): rng.uniform(0.05, 0.95)
        for q in range(N_QUERIES)
        for d in range(N_DOCS)
    }
    impressions = []
    for _ in range(N_IMPRESSIONS):
        q = rng.randrange(N_QUERIES)
        docs = ["d%02d_%d" % (q, d) for d in range(N_DOCS)]
        rng.shuffle(docs)
        docs = docs[: len(TRUE_GAMMA)]
        qs = "q%02d" % q
        clicks = [rng.random() < g * alpha[(qs, d)] for g, d in zip(TRUE_GAMMA, docs)]
        impressions.append({"query": qs, "docs": docs, "clicks": clicks})
    return impressions


def run_cli(command, payload):
    """Runs reference.py as the Rust tests will and returns its parsed output."""
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "reference.py"), command],
        input=json.dumps(payload).encode(),
        stdout=subprocess.PIPE,
        check=True,
    ).stdout
    return json.loads(out)


def fmt(x):
    return "  null" if x is None else "%6.3f" % x


def check_small_cases():
    # COEC by hand (0-based ordinals, max_rank 2):
    #   ordinal 0: impressions a/x, a/y, b/x -> 3, clicks a/x -> 1  => ctr 1/3
    #   ordinal 1: impressions a/y, a/x, b/w -> 3, clicks a/x -> 1  => ctr 1/3
    #   ordinal 2 passes the "<= max_rank" filter: a/z counted, but no ctr.
    coec_in = {
        "impressions": [
            {"query": "a", "docs": ["x", "y", "z"], "clicks": [True, False, True]},
            {"query": "a", "docs": ["y", "x", "z"], "clicks": [False, True, False]},
            {"query": "b", "docs": ["x", "w"], "clicks": [False, False]},
        ],
        "max_rank": 2,
    }
    out = run_cli("coec", coec_in)
    pairs = {(p["query"], p["doc"]): p for p in out["pairs"]}
    assert out["rank_ctr"] == [1 / 3, 1 / 3], out["rank_ctr"]
    ax = pairs[("a", "x")]
    assert (ax["clicks"], ax["impressions"], ax["rank"]) == (2, 2, 0)
    assert abs(ax["coec"] - 3.0) < 1e-12 and ax["rating"] == "3.000"
    az = pairs[("a", "z")]  # best ordinal 2 == max_rank: no ctr -> 0
    assert (az["clicks"], az["impressions"], az["coec"]) == (1, 2, 0.0)
    assert pairs[("a", "y")]["rating"] == "0.000"  # no clicks: kept, rated 0
    # Java "%.3f" rounds half-up on the shortest decimal form.
    assert reference._java_format_3f(0.0625) == "0.063"
    assert reference._java_format_3f(1.0005) == "1.001"

    # IPS by hand: candidate for q = [x, y]; propensities [1, 0.5], clip 0.6.
    #   imp 1 clicks x at logged rank 2: 1/log2(2) / max(0.5, 0.6) = 1/0.6
    #   imp 2 clicks y at logged rank 1: 1/log2(3) / 1
    #   imp 3 query r has no candidate: 0
    ips_in = {
        "impressions": [
            {"query": "q", "docs": ["y", "x"], "clicks": [False, True]},
            {"query": "q", "docs": ["y", "x"], "clicks": [True, False]},
            {"query": "r", "docs": ["x"], "clicks": [True]},
        ],
        "propensities": [1.0, 0.5],
        "clip": 0.6,
        "candidate": {"q": ["x", "y"]},
        "cutoff": 2,
    }
    out = run_cli("ips", ips_in)
    v = [1 / 0.6, 1 / math.log2(3), 0.0]
    mean = sum(v) / 3
    assert abs(out["estimate"] - mean) < 1e-12
    var = sum((x - mean) ** 2 for x in v) / 2 / 3
    assert abs(out["variance_of_mean"] - var) < 1e-12
    assert abs(out["naive"] - (1 + 1 / math.log2(3)) / 3) < 1e-12
    print("hand-computed coec / ips cases: ok")


def main():
    t0 = time.time()
    check_small_cases()

    impressions = simulate()
    k = len(TRUE_GAMMA)
    pbm = reference.cmd_pbm({"impressions": impressions, "max_rank": k, "iterations": ITERATIONS})
    harvest = run_cli("harvest", {"impressions": impressions, "max_rank": k})

    g = pbm["examination"]
    print("\n%d impressions, %d queries x %d docs, PBM EM %d iterations" % (
        N_IMPRESSIONS, N_QUERIES, N_DOCS, ITERATIONS))
    print("rank   truth   pbm gamma_k/gamma_1   harvest ratio_k   harvest pairs")
    for r in range(k):
        pbm_rel = g[r] / g[0] if g[r] is not None and g[0] else None
        print("%4d  %6.3f   %6s                %6s            %5d" % (
            r + 1, TRUE_GAMMA[r] / TRUE_GAMMA[0], fmt(pbm_rel), fmt(harvest["ratio"][r]),
            harvest["pairs"][r]))
    print("PBM log-likelihood: %.4f" % pbm["log_likelihood"])

    # Sanity: both estimates should land near the truth with this much data.
    worst = max(
        abs(g[r] / g[0] - TRUE_GAMMA[r]) for r in range(k)
    )
    worst_h = max(abs(harvest["ratio"][r] - TRUE_GAMMA[r]) for r in range(k))
    print("max |error|: pbm %.3f, harvest %.3f" % (worst, worst_h))
    if worst > 0.15 or worst_h > 0.15:
        print("WARNING: estimates far from the truth")

    # One CLI round trip of pbm on a small slice, compared with the direct call.
    small = {"impressions": impressions[:50], "max_rank": k, "iterations": 20}
    assert run_cli("pbm", small) == json.loads(json.dumps(reference.cmd_pbm(small)))
    print("elapsed %.1f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
