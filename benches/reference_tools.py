#!/usr/bin/env python3
"""Times trec_eval (pytrec-eval-terrier) and ranx on the qrels/run that `rankpulse replay
--trec-out` wrote, computing the same measures as rankpulse's default cutoffs. Prints JSON.

Loading the files into the tools' data structures is not timed; only evaluation is. ranx is
warmed up once first, so its numba compilation is not counted either: the comparison is
generous to both tools.
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
    qrels, run = load(sys.argv[1])
    out = {"queries": len(run)}
    try:
        import pytrec_eval
        cut = ",".join(map(str, CUTOFFS))
        measures = {"recip_rank", f"success.{cut}", f"P.{cut}", f"recall.{cut}", f"map_cut.{cut}", f"ndcg_cut.{cut}"}
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures)
        out["trec_eval_seconds"] = best_of(3, lambda: evaluator.evaluate(run))
    except ImportError as e:
        out["trec_eval_error"] = str(e)
    try:
        from ranx import Qrels, Run, evaluate
        q, r = Qrels(qrels), Run(run)
        metrics = ["mrr"] + [f"{m}@{k}" for k in CUTOFFS for m in ("hit_rate", "precision", "recall", "map", "ndcg", "ndcg_burges")]
        evaluate(q, r, metrics)  # numba compilation, not timed
        out["ranx_seconds"] = best_of(3, lambda: evaluate(q, r, metrics))
    except ImportError as e:
        out["ranx_error"] = str(e)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
