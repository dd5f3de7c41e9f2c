#!/usr/bin/env python3
"""The batch pipeline a search team would otherwise write to get `rankpulse replay`'s numbers:
read the same JSON-lines impressions and engagements, attribute engagements to impressions,
build qrels/run and evaluate them with trec_eval (PyPI's pytrec-eval-terrier). Prints JSON.

What it models (rankpulse's default join, simplified but faithful): gains click=1,
add_to_cart=2, purchase=3 (unknown action 0), relevance threshold 1; an engagement counts for
the impression with its query_id when its doc_id was shown and it falls in
[impression.timestamp, impression.timestamp + 30 min]; engagements are de-duplicated by event_id
(or by (query_id, doc_id, action, timestamp) without one); a doc's gain is the maximum of its
engagements; a repeated query_id counts once (the first). Lines that do not parse or lack a
needed field are skipped and counted. Every impression is a query: run scores decrease with
rank (a doc listed twice in one impression keeps its first rank and its repeat stays in the run
as a distinct non-relevant doc, so later ranks do not move up); qrels hold the docs with gain
> 0. trec_eval drops a query whose qrels are empty (it would then average over engaged queries
only), so such a query gets one zero-gain judgment on a doc outside the run: it is kept and
scores 0 on every measure, as in rankpulse's means.

Why it is fair: one pass over each file with the usual json.loads per line (orjson when it is
installed, reported in the output), dicts and sets only, no per-event work beyond the join, and
trec_eval's C code for all the metrics. Timed with time.perf_counter, from opening the files to
the means: read, attribute, then evaluate (building qrels/run, RelevanceEvaluator construction,
evaluate, averaging over queries).

Usage: python3 benches/trec_pipeline.py IMPRESSIONS.jsonl ENGAGEMENTS.jsonl
"""
import json
import sys
import time

import pytrec_eval

try:
    import orjson
    loads, JSON_MODULE = orjson.loads, "orjson"
except ImportError:
    loads, JSON_MODULE = json.loads, "json"

CUTOFFS = ",".join(map(str, [1, 3, 5, 10]))
MEASURES = {"recip_rank", f"success.{CUTOFFS}", f"P.{CUTOFFS}", f"recall.{CUTOFFS}",
            f"map_cut.{CUTOFFS}", f"ndcg_cut.{CUTOFFS}"}
GAINS = {"click": 1, "add_to_cart": 2, "purchase": 3}
WINDOW_MS = 30 * 60 * 1000
NO_DOC = "\x00none"  # the zero-gain judgment that keeps a query without relevant docs


def read_impressions(path):
    """query_id -> (timestamp, results) of its first impression; and the lines skipped."""
    impressions, skipped = {}, 0
    with open(path, "rb") as f:
        for line in f:
            try:
                e = loads(line)
                qid, ts, results = e["query_id"], int(e["timestamp"]), e["results"]
                if not isinstance(results, list):
                    raise TypeError
                if qid not in impressions:
                    impressions[qid] = (ts, results)
            except (ValueError, KeyError, TypeError):
                skipped += 1
    return impressions, skipped


def read_engagements(path):
    """The de-duplicated engagements as (query_id, doc_id, gain, timestamp); lines, skipped."""
    engagements, seen, lines, skipped = [], set(), 0, 0
    with open(path, "rb") as f:
        for line in f:
            lines += 1
            try:
                e = loads(line)
                qid, doc, action, ts = e["query_id"], e["doc_id"], e["action"], int(e["timestamp"])
                gain, key = GAINS.get(action, 0), e.get("event_id") or (qid, doc, action, ts)
                if key in seen:
                    continue
            except (ValueError, KeyError, TypeError):
                skipped += 1
                continue
            seen.add(key)
            engagements.append((qid, doc, gain, ts))
    return engagements, lines, skipped


def attribute(impressions, engagements):
    """query_id -> {doc_id: max gain} over the engagements in the window; and how many."""
    qrels, attributed = {}, 0
    for qid, doc, gain, ts in engagements:
        imp = impressions.get(qid)
        if imp is None or not imp[0] <= ts <= imp[0] + WINDOW_MS or doc not in imp[1]:
            continue
        attributed += 1
        if gain > 0:
            docs = qrels.setdefault(qid, {})
            if gain > docs.get(doc, 0):
                docs[doc] = gain
    return qrels, attributed


def evaluate(impressions, gains):
    """Mean of every trec_eval measure over all impressions (queries)."""
    run, qrels = {}, {}
    for qid, (_, results) in impressions.items():
        n = len(results)
        scores = dict(zip(reversed(results), map(float, range(1, n + 1))))  # first shown wins
        if len(scores) < n:  # a doc shown twice: its repeat stays a non-relevant doc at its rank
            scores = {}
            for rank, doc in enumerate(results):
                scores[f"{doc}#dup{rank + 1}" if doc in scores else doc] = float(n - rank)
        run[qid] = scores
        qrels[qid] = gains.get(qid) or {NO_DOC: 0}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, MEASURES, relevance_level=1)
    per_query = evaluator.evaluate(run)
    sums = {}
    for values in per_query.values():
        for measure, value in values.items():
            sums[measure] = sums.get(measure, 0.0) + value
    return {m: s / len(per_query) for m, s in sorted(sums.items())} if per_query else {}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.rsplit("Usage: ", 1)[1])
    started = time.perf_counter()
    impressions, bad_impressions = read_impressions(sys.argv[1])
    engagements, engagement_lines, bad_engagements = read_engagements(sys.argv[2])
    read_done = time.perf_counter()
    gains, attributed = attribute(impressions, engagements)
    attribute_done = time.perf_counter()
    means = evaluate(impressions, gains)
    done = time.perf_counter()
    print(json.dumps({
        "impressions": len(impressions), "engagements": engagement_lines, "attributed": attributed,
        "skipped_impression_lines": bad_impressions, "skipped_engagement_lines": bad_engagements,
        "read_seconds": read_done - started, "attribute_seconds": attribute_done - read_done,
        "evaluate_seconds": done - attribute_done, "total_seconds": done - started,
        "json_module": JSON_MODULE, "means": means,
    }))


if __name__ == "__main__":
    main()
