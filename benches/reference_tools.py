#!/usr/bin/env python3
"""Times trec_eval (pytrec-eval-terrier) and ranx on the qrels/run that `rankpulse replay
--trec-out` wrote, computing the same measures as rankpulse's default cutoffs. Prints JSON.

Two timings per tool: evaluation alone on data already in the tool's structures (generous to
the tools), and from the files to the results (reading qrels/run, building the tool's
structures, evaluating), which is what a user waits for and what `rankpulse replay` is timed on.
ranx is warmed up once first, so its numba compilation is counted in neither.
"""
import json
import sys
import time
from collections import defaultdict

CUTOFFS = [1, 3, 5, 10]


def load(directory):
    qrels, run = defaultdict(dict), defaultdict(dict)
    with open(f"{directory}/qrels.txt") as f:
        for line in f:
            q, _, d, g = line.split()
            qrels[q][d] = int(g)
    with open(f"{directory}/run.txt") as f:
        for line in f:
            q, _, d, _, score, _ = line.split()
            run[q][d] = float(score)
    return dict(qrels), dict(run)


def best_of(runs, fn):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main():
    started = time.perf_counter()
    qrels, run = load(sys.argv[1])
    load_seconds = time.perf_counter() - started
    out = {"queries": len(run), "load_seconds": load_seconds}
    try:
        import pytrec_eval
        cut = ",".join(map(str, CUTOFFS))
        measures = {"recip_rank", f"success.{cut}", f"P.{cut}", f"recall.{cut}", f"map_cut.{cut}", f"ndcg_cut.{cut}"}
        started = time.perf_counter()
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures)
        build = time.perf_counter() - started
        out["trec_eval_seconds"] = best_of(3, lambda: evaluator.evaluate(run))
        out["trec_eval_from_files_seconds"] = load_seconds + build + out["trec_eval_seconds"]
    except ImportError as e:
        out["trec_eval_error"] = str(e)
    try:
        from ranx import Qrels, Run, evaluate
        metrics = ["mrr"] + [f"{m}@{k}" for k in CUTOFFS for m in ("hit_rate", "precision", "recall", "map", "ndcg", "ndcg_burges")]
        evaluate(Qrels({"w": {"d": 1}}), Run({"w": {"d": 1.0}}), metrics)  # numba compilation, not timed
        started = time.perf_counter()
        q, r = Qrels(qrels), Run(run)
        build = time.perf_counter() - started
        out["ranx_seconds"] = best_of(3, lambda: evaluate(q, r, metrics))
        out["ranx_from_files_seconds"] = load_seconds + build + out["ranx_seconds"]
    except ImportError as e:
        out["ranx_error"] = str(e)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
