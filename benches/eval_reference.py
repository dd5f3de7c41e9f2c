#!/usr/bin/env python3
"""Times trec_eval (pytrec-eval-terrier) and ranx on a qrels and a run file (arguments), for
the measures `rankpulse eval` is timed on (map, P.10, ndcg_cut.10, recip_rank, recall.100).
Prints JSON: for each tool, seconds from the files (reading them into the tool's structures,
evaluating) and for the evaluation alone (median of 3, on data already loaded). ranx is warmed
up first, so its numba compilation is counted in neither.
"""
import json
import sys
import time
from collections import defaultdict


def read(qrels_path, run_path):
    qrels, run = defaultdict(dict), defaultdict(dict)
    with open(qrels_path) as f:
        for line in f:
            q, _, d, g = line.split()
            qrels[q][d] = int(g)
    with open(run_path) as f:
        for line in f:
            q, _, d, _, score, _ = line.split()
            run[q][d] = float(score)
    return dict(qrels), dict(run)


def median_of(runs, fn):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main():
    qrels_path, run_path = sys.argv[1], sys.argv[2]
    out = {}
    try:
        import pytrec_eval
        measures = {"map", "P.10", "ndcg_cut.10", "recip_rank", "recall.100"}
        started = time.perf_counter()
        qrels, run = read(qrels_path, run_path)
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures)
        evaluator.evaluate(run)
        out["trec_eval_from_files_seconds"] = time.perf_counter() - started
        out["trec_eval_evaluate_seconds"] = median_of(3, lambda: evaluator.evaluate(run))
    except ImportError as e:
        out["trec_eval_error"] = str(e)
    try:
        from ranx import Qrels, Run, evaluate
        metrics = ["map", "precision@10", "ndcg@10", "mrr", "recall@100"]
        evaluate(Qrels({"w": {"d": 1}}), Run({"w": {"d": 1.0}}), metrics)  # numba compilation, not timed
        started = time.perf_counter()
        q = Qrels.from_file(qrels_path, kind="trec")
        r = Run.from_file(run_path, kind="trec")
        evaluate(q, r, metrics)
        out["ranx_from_files_seconds"] = time.perf_counter() - started
        out["ranx_evaluate_seconds"] = median_of(3, lambda: evaluate(q, r, metrics))
    except ImportError as e:
        out["ranx_error"] = str(e)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
