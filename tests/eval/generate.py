#!/usr/bin/env python3
"""Generate the `rankpulse eval` conformance fixtures, with trec_eval as the oracle.

A seeded qrels file and TREC run, and what trec_eval (pytrec-eval-terrier 0.5.x, which
embeds trec_eval 9.0.8) computes for them, written as trec_eval prints it: one file of
expected output per invocation that tests/eval.rs runs `rankpulse eval` with.

The run has ties in score, including scores that differ only beyond single precision
(trec_eval keeps scores in a C float), unjudged documents, queries the qrels lack and qrels
queries the run lacks, queries with no relevant judgment, grades 0 to 4 and -1, and lists from 1
to 150 documents. pytrec-eval-terrier evaluates a dict, so two things trec_eval's command does
are applied here on its input and output, following trec_eval's documented rules: `-M N`
(the run cut to the top N of trec_eval's order: score as a float descending, then docno
descending) and `-c` (qrels queries missing from the run score 0, counting their relevant
documents); `all` is pytrec_eval.compute_aggregated_measure over the evaluated queries (trec_eval's
own aggregation). trec_eval prints floats as `%6.4f` and counts as integers.

Deterministic: rerunning rewrites tests/eval/fixtures/ byte for byte.
"""

import json
import random
from pathlib import Path

import numpy as np
import pytrec_eval

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEED = 2110
QUERIES = 240
TAG = "bm25-rm3"

OFFICIAL = ["runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "Rprec", "recip_rank", "iprec_at_recall", "P"]
ALL_TREC = OFFICIAL + ["recall", "success", "map_cut", "ndcg", "ndcg_cut"]
DEFAULT_CUTOFFS = [5, 10, 15, 20, 30, 100, 200, 500, 1000]
COUNTS = {"num_q", "num_ret", "num_rel", "num_rel_ret"}


def expand(families):
    """`rankpulse eval -m` expansion: trec_eval's printed names, in -m order."""
    out = []
    for f in families:
        name, _, cut = f.partition(".")
        if name == "iprec_at_recall":
            names = [f"iprec_at_recall_{t / 10:.2f}" for t in range(11)]
        elif name in ("P", "recall", "map_cut", "ndcg_cut", "success"):
            ks = [int(k) for k in cut.split(",")] if cut else ([1, 5, 10] if name == "success" else DEFAULT_CUTOFFS)
            names = [f"{name}_{k}" for k in ks]
        else:
            names = [name]
        out += [n for n in names if n not in out]
    return out


def generate(rng):
    qrels, run = {}, {}
    for q in range(QUERIES):
        qid = f"{q + 301}" if q % 3 else f"q{q:03d}"
        pool = [f"{qid}-d{j:03d}" for j in range(rng.randint(5, 200))]
        in_qrels, in_run = rng.random() < 0.93, rng.random() < 0.93
        if in_qrels:
            judged = rng.sample(pool, rng.randint(1, min(40, len(pool))))
            none_relevant = rng.random() < 0.05
            qrels[qid] = {d: (0 if none_relevant else rng.choices([-1, 0, 1, 2, 3, 4], [2, 50, 25, 12, 8, 3])[0])
                          for d in judged}
        if in_run:
            n = rng.choice([1, 2, 5, rng.randint(1, 30), rng.randint(1, 150), rng.randint(90, 150)])
            docs = rng.sample(pool, min(n, len(pool)))
            scores = {}
            for d in docs:
                kind = rng.random()
                if kind < 0.3:
                    s = round(rng.uniform(0, 10), 1)  # ties
                elif kind < 0.4:
                    s = 5.0 + rng.choice([0.0, 1e-9, 2e-9])  # equal as floats
                else:
                    s = rng.uniform(-5, 30)
                scores[d] = s
            run[qid] = scores
    return qrels, run


def trec_order(docs):
    """trec_eval's ranking: score as a C float descending, then docno descending."""
    return sorted(docs.items(), key=lambda kv: (-float(np.float32(kv[1])), [-b for b in kv[0].encode()] + [1]))


def write_inputs(qrels, run, rng):
    lines = [f"{qid} 0 {d} {g}" for qid, js in qrels.items() for d, g in js.items()]
    rng.shuffle(lines)
    (FIXTURES / "qrels.txt").write_text("\n".join(lines) + "\n")
    out = []
    for qid, docs in run.items():
        for rank, (d, s) in enumerate(sorted(docs.items(), key=lambda kv: -kv[1])):
            out.append(f"{qid} Q0 {d} {rank + 1} {s!r} {TAG}")
    # Lines of one query together, but queries and lines within not in score order.
    blocks = {}
    for line in out:
        blocks.setdefault(line.split()[0], []).append(line)
    ordered = []
    for qid in sorted(blocks, key=lambda _: rng.random()):
        block = blocks[qid]
        rng.shuffle(block)
        ordered += block
    (FIXTURES / "run.txt").write_text("\n".join(ordered) + "\n")


def evaluate(qrels, run, families, level=1, max_docs=None, complete=False):
    names = expand(families)
    measures = {f.partition(".")[0] if f.partition(".")[0] in ("runid", "num_q") else f for f in families} - {"runid"}
    ranked = {}
    for qid, docs in run.items():
        order = trec_order(docs)
        if max_docs is not None:
            order = order[:max_docs]
        ranked[qid] = dict(order)
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures | {"num_q"}, relevance_level=level)
    per_query = evaluator.evaluate(ranked)
    if complete:
        for qid, judged in qrels.items():
            if qid not in per_query:
                row = {n: 0.0 for n in names if n != "runid"}
                row["num_q"] = 1.0
                if "num_rel" in row:
                    row["num_rel"] = float(sum(1 for g in judged.values() if g >= level))
                per_query[qid] = row
    all_values = {}
    for n in names:
        if n == "runid":
            continue
        all_values[n] = pytrec_eval.compute_aggregated_measure(n, [row[n] for row in per_query.values()])
    return names, per_query, all_values


def extensions(qrels, run, cutoffs):
    """rankpulse's measures without a trec_eval name, from trec_eval where it has the parts:
    ndcg_exp_cut is trec_eval's ndcg_cut over gains 2^g - 1, f1_cut the harmonic mean of its P
    and recall; err_cut Elasticsearch's formula with g_max the largest grade in the qrels."""
    cut = ",".join(map(str, cutoffs))
    ranked = {qid: dict(trec_order(docs)) for qid, docs in run.items()}
    plain = pytrec_eval.RelevanceEvaluator(qrels, {f"P.{cut}", f"recall.{cut}", "num_q"}).evaluate(ranked)
    exp_qrels = {q: {d: (2 ** g - 1 if g > 0 else 0) for d, g in js.items()} for q, js in qrels.items()}
    exp = pytrec_eval.RelevanceEvaluator(exp_qrels, {f"ndcg_cut.{cut}"}).evaluate(ranked)
    g_max = max(g for js in qrels.values() for g in js.values())
    names = [f"{m}_{k}" for m in ("f1_cut", "ndcg_exp_cut", "err_cut") for k in cutoffs]
    per_query = {}
    for qid in plain:
        row = {}
        gains = [max(qrels[qid].get(d, 0), 0) for d in ranked[qid]]
        for k in cutoffs:
            p, r = plain[qid][f"P_{k}"], plain[qid][f"recall_{k}"]
            row[f"f1_cut_{k}"] = 2 * p * r / (p + r) if p + r else 0.0
            row[f"ndcg_exp_cut_{k}"] = exp[qid][f"ndcg_cut_{k}"]
            err, reached = 0.0, 1.0
            for rank, g in enumerate(gains[:k], start=1):
                stop = (2 ** g - 1) / 2 ** g_max
                err += reached * stop / rank
                reached *= 1 - stop
            row[f"err_cut_{k}"] = err
        per_query[qid] = row
    all_values = {n: sum(row[n] for row in per_query.values()) / len(per_query) for n in names}
    return names, per_query, all_values


def as_trec(names, per_query, all_values, with_queries):
    def line(name, qid, value):
        if name == "runid":
            return f"{name:<22}\t{qid}\t{TAG}"
        if name in COUNTS:
            return f"{name:<22}\t{qid}\t{int(value)}"
        return f"{name:<22}\t{qid}\t{value:6.4f}"
    out = []
    if with_queries:
        for qid in sorted(per_query):
            out += [line(n, qid, per_query[qid][n]) for n in names if n not in ("runid", "num_q")]
    out += [line(n, "all", all_values.get(n)) for n in names]
    return "\n".join(out) + "\n"


# Invocations: (name, arguments after the files, families, level, -M, -c, -q).
INVOCATIONS = [
    ("default", [], OFFICIAL, 1, None, False, False),
    ("all_trec_q", ["-q", "-m", "all_trec"], ALL_TREC, 1, None, False, True),
    ("level2_q", ["-q", "-l", "2", "-m", "all_trec"], ALL_TREC, 2, None, False, True),
    ("complete_q", ["-q", "-c", "-m", "official"], OFFICIAL, 1, None, True, True),
    ("top10_q", ["-q", "-M", "10", "-m", "P.1,3,10", "-m", "map", "-m", "ndcg_cut.3,10", "-m", "recip_rank",
                 "-m", "num_ret", "-m", "num_rel_ret"],
     ["P.1,3,10", "map", "ndcg_cut.3,10", "recip_rank", "num_ret", "num_rel_ret"], 1, 10, False, True),
]


def main():
    rng = random.Random(SEED)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    qrels, run = generate(rng)
    write_inputs(qrels, run, rng)
    # The inputs as trec_eval reads them: negative grades are judged non-relevant (rel 0 for
    # every measure rankpulse prints), so pytrec gets them as they are.
    cases = []
    for name, args, families, level, max_docs, complete, with_queries in INVOCATIONS:
        names, per_query, all_values = evaluate(qrels, run, families, level, max_docs, complete)
        (FIXTURES / f"{name}.txt").write_text(as_trec(names, per_query, all_values, with_queries))
        cases.append({"name": name, "args": args})
        if name == "all_trec_q":
            doc = {"queries": {q: {n: (TAG if n == "runid" else per_query[q].get(n)) for n in names if n not in ("runid",)}
                               for q in sorted(per_query)},
                   "all": {n: (TAG if n == "runid" else all_values[n]) for n in names}}
            (FIXTURES / "all_trec_q.json").write_text(json.dumps(doc, sort_keys=True) + "\n")
    names, per_query, all_values = extensions(qrels, run, [3, 10])
    (FIXTURES / "extensions_q.txt").write_text(as_trec(names, per_query, all_values, True))
    cases.append({"name": "extensions_q", "args": ["-q", "-m", "f1_cut.3,10", "-m", "ndcg_exp_cut.3,10", "-m", "err_cut.3,10"]})
    (FIXTURES / "invocations.json").write_text(json.dumps(cases, indent=1) + "\n")
    evaluated = len(set(qrels) & set(run))
    print(f"{len(qrels)} qrels queries, {len(run)} run queries, {evaluated} evaluated; "
          f"{sum(map(len, run.values()))} run lines, {sum(map(len, qrels.values()))} judgments")


if __name__ == "__main__":
    main()
