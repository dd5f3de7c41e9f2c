#!/usr/bin/env python3
"""Generate the judged-metrics conformance fixtures, with trec_eval as the oracle.

Two suites of impressions whose queries partly have judgments, replayed by
tests/judgments.rs through rankpulse with a judgment list configured:

* `query_jsonl`: judgments as JSON lines keyed by the query's text, which the
  impressions write with other casing and spacing (rankpulse normalizes both
  sides); judged relevance from grade 2; per-impression A/B unit.
* `query_id_qrels`: judgments as a TREC qrels file keyed by the impressions'
  `query_id`; judged relevance from grade 1; clustered by client_id.

Mixed in: impressions of queries without judgments, impressions without a
`query` field, unjudged results, judged documents never shown, repeated
results, empty result lists, repeated query ids (the first counts) and clicks
(the engagement metrics go on as before).

Expected per-impression judged values come from trec_eval (pytrec-eval-terrier):
one trec_eval query per impression, its qrels the judgments of the impression's
query (all of them, shown or not), its run the shown results with strictly
decreasing scores (a repeated result renamed, so it is unjudged after its first
rank, as rankpulse scores it). Exponential nDCG is trec_eval's ndcg_cut over
2^g - 1 gains, F1 the harmonic mean of trec_eval's P and recall, ERR
Elasticsearch's formula (no trec_eval measure), abandonment 1 when the query has
no relevant judged document. An empty result list is no trec_eval query: every
value 0 but abandonment. Judged coverage at k is counted directly. Group means
(cumulative and per 1h window) are math.fsum over judged impressions; the judged
A/B comparisons of the per-impression suite are scipy's Welch test.

Deterministic: rerunning rewrites tests/judgments/fixtures/ byte for byte.
The fixtures of the measures for incomplete judgments (incomplete.json beside
each suite) are derived from these suites: after changing them, rerun
incomplete.py (see its docstring).
"""

import json
import math
import random
import sys
from pathlib import Path

import pytrec_eval
from scipy import stats

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CUTOFFS = [1, 3, 5, 10, 20]
MAX_GRADE = 3
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SPACING_MS = 1_800  # 10,000 impressions over 5 hours: five 1h windows
WINDOW_MS = 3_600_000
IMPRESSIONS = 10_000
RECALL_LEVELS = [f"{tenths / 10:.1f}" for tenths in range(11)]
METRIC_NAMES = ["hit_rate", "precision", "recall", "map", "ndcg", "ndcg_exp", "f1", "err"]
METRIC_KEYS = (["mrr", "abandonment_rate", "r_precision"]
               + [f"iprec@{r}" for r in RECALL_LEVELS]
               + [f"{m}@{k}" for k in CUTOFFS for m in METRIC_NAMES]
               + [f"coverage@{k}" for k in CUTOFFS])
TOLERANCE = 1e-12

CONFIG_TOML = """\
[join]
attribution_window = "1m"

[metrics]
cutoffs = [{cutoffs}]
windows = ["1h"]

[ab]
unit = "{unit}"

[ab.experiments.e2]
control = "a"

[judgments]
file = "{file}"
key = "{key}"
relevance_threshold = {threshold}
max_grade = {max_grade}
"""

SUITES = [
    # name, seed, judgments file, key, judged threshold, A/B unit
    ("query_jsonl", 2101, "judgments.jsonl", "query", 2, "impression"),
    ("query_id_qrels", 2102, "qrels.txt", "query_id", 1, "client_id"),
]


def normalize(text):
    return " ".join(text.split()).lower()


def respell(rng, text):
    """The query as a user typed it: other casing, extra spaces."""
    words = [w.upper() if rng.random() < 0.3 else w.capitalize() if rng.random() < 0.3 else w for w in text.split()]
    sep = lambda: " " * rng.choice([1, 1, 1, 2, 3])
    return (" " if rng.random() < 0.2 else "") + sep().join(words) + ("\t" if rng.random() < 0.2 else "")


def grade_of(rng):
    return rng.choices([0, 1, 2, 3], weights=[40, 30, 20, 10])[0]


def make_queries(rng):
    words = ["red", "shoes", "laptop", "bag", "cheap", "wireless", "phone", "case", "running", "garden",
             "lamp", "desk", "kids", "winter", "coat", "usb", "cable", "coffee", "grinder", "book"]
    queries = []
    for i in range(500):
        text = " ".join(rng.sample(words, rng.randint(1, 3))) + f" {i}"
        docs = [f"d{i}-{j}" for j in range(40)]
        judged = rng.random() < 0.6
        judgments = {}
        if judged:
            for d in rng.sample(docs, rng.randint(1, 25)):
                judgments[d] = grade_of(rng)
        queries.append({"text": text, "docs": docs, "judgments": judgments})
    return queries


def shown_results(rng, query):
    n = rng.choice([0] + [rng.randint(1, 10)] * 3 + [rng.randint(1, 40)] * 4)
    results = rng.sample(query["docs"], min(n, len(query["docs"])))
    results += [f"x-{rng.randint(0, 10**6)}" for _ in range(rng.randint(0, 3))]  # not in any pool
    rng.shuffle(results)
    if results and rng.random() < 0.1:
        results.insert(rng.randint(0, len(results)), rng.choice(results))  # a repeat
    return results


def err_elasticsearch(gains, k):
    err, reached = 0.0, 1.0
    for rank, g in enumerate(gains[:k], start=1):
        stop = (2 ** g - 1) / 2 ** MAX_GRADE
        err += reached * stop / rank
        reached *= 1 - stop
    return err


def judged_values(impressions, judgments_of, threshold):
    """Per judged impression (by query_id), every judged value: trec_eval's, coverage counted."""
    cut = ",".join(str(k) for k in CUTOFFS)
    measures = {"recip_rank", f"success.{cut}", f"P.{cut}", f"recall.{cut}", f"map_cut.{cut}",
                f"ndcg_cut.{cut}", "Rprec", "iprec_at_recall", "num_rel"}
    qrels, qrels_exp, run, grades_by_qid = {}, {}, {}, {}
    for imp in impressions:
        qid, judgments = imp["query_id"], judgments_of(imp)
        seen, ranked, grades, judged = set(), [], [], []
        for rank, d in enumerate(imp["results"], start=1):
            judged.append(d in judgments)
            if d in seen:
                ranked.append(f"{d}#dup{rank}")
                grades.append(0)
            else:
                seen.add(d)
                ranked.append(d)
                grades.append(judgments.get(d, 0))
        grades_by_qid[qid] = (grades, judged, judgments)
        if ranked:
            qrels[qid] = dict(judgments)
            qrels_exp[qid] = {d: 2 ** g - 1 for d, g in judgments.items()}
            run[qid] = {d: float(len(ranked) - i) for i, d in enumerate(ranked)}
    raw = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=threshold).evaluate(run)
    exp = pytrec_eval.RelevanceEvaluator(qrels_exp, {f"ndcg_cut.{cut}"}, relevance_level=threshold).evaluate(run)
    if sorted(raw) != sorted(run):
        sys.exit("trec_eval did not evaluate every judged impression with results")
    out = {}
    for imp in impressions:
        qid = imp["query_id"]
        grades, judged, judgments = grades_by_qid[qid]
        num_rel = sum(1 for g in judgments.values() if g >= threshold)
        m = {}
        if qid in raw:
            r, e = raw[qid], exp[qid]
            assert r["num_rel"] == num_rel
            m["mrr"] = r["recip_rank"]
            m["abandonment_rate"] = 0.0 if num_rel else 1.0
            m["r_precision"] = r["Rprec"]
            for label in RECALL_LEVELS:
                m[f"iprec@{label}"] = r[f"iprec_at_recall_{label}0"]
            for k in CUTOFFS:
                p, rec = r[f"P_{k}"], r[f"recall_{k}"]
                m[f"hit_rate@{k}"] = r[f"success_{k}"]
                m[f"precision@{k}"] = p
                m[f"recall@{k}"] = rec
                m[f"map@{k}"] = r[f"map_cut_{k}"]
                m[f"ndcg@{k}"] = r[f"ndcg_cut_{k}"]
                m[f"ndcg_exp@{k}"] = e[f"ndcg_cut_{k}"]
                m[f"f1@{k}"] = 2 * p * rec / (p + rec) if p + rec else 0.0
                m[f"err@{k}"] = err_elasticsearch(grades, k)
        else:  # nothing shown
            m = {key: 0.0 for key in METRIC_KEYS}
            m["abandonment_rate"] = 0.0 if num_rel else 1.0
        for k in CUTOFFS:
            shown = min(k, len(judged))
            m[f"coverage@{k}"] = sum(judged[:shown]) / shown if shown else 0.0
        out[qid] = m
    return out


def build_suite(name, seed, file_name, key, threshold, unit):
    rng = random.Random(seed)
    queries = make_queries(rng)
    by_text = {normalize(q["text"]): q for q in queries}
    impressions, engagements, qrels_lines = [], [], []
    for i in range(IMPRESSIONS):
        q = rng.choice(queries)
        ts = START_MS + i * SPACING_MS + rng.randint(0, SPACING_MS - 1)
        experiment = "e1" if rng.random() < 0.7 else "e2"
        variant = (["control", "treatment"] if experiment == "e1" else ["a", "b"])[rng.random() < 0.5]
        imp = {"query_id": f"{name}-{i}", "timestamp": ts, "experiment": experiment, "variant": variant,
               "client_id": f"c{rng.randint(0, 700)}", "results": shown_results(rng, q)}
        if rng.random() < 0.93:
            imp["query"] = respell(rng, q["text"])
        imp["_query"] = q
        impressions.append(imp)
        for rank, d in enumerate(imp["results"], start=1):
            if rng.random() < 0.15 / rank:
                engagements.append({"query_id": imp["query_id"], "timestamp": ts + rng.randint(0, 30_000),
                                    "doc_id": d, "action": "click"})
    # A repeated query id counts once: its judged values are the first's.
    repeats = [dict(impressions[i], results=list(reversed(impressions[i]["results"])),
                    timestamp=impressions[i]["timestamp"] + 5_000) for i in range(0, IMPRESSIONS, 97)]

    if key == "query":
        def judgments_of(imp):
            return imp["_query"]["judgments"] if "query" in imp and normalize(imp["query"]) in by_text else {}
        judged = [imp for imp in impressions if "query" in imp and imp["_query"]["judgments"]]
        lines = []
        for q in queries:
            for d, g in q["judgments"].items():
                lines.append(json.dumps({"query": q["text"], "doc_id": d, "grade": g, "rater": "r1"}))
        rng.shuffle(lines)
        judgment_text = "\n".join(lines) + "\n"
    else:
        # Judgments per response: most impressions get their query's, keyed by query_id.
        per_id = {}
        for imp in impressions:
            if imp["_query"]["judgments"] and rng.random() < 0.8:
                per_id[imp["query_id"]] = imp["_query"]["judgments"]
        def judgments_of(imp):
            return per_id.get(imp["query_id"], {})
        judged = [imp for imp in impressions if imp["query_id"] in per_id]
        lines = [f"{qid} 0 {d} {g}" for qid, js in per_id.items() for d, g in js.items()]
        rng.shuffle(lines)
        judgment_text = "\n".join(lines) + "\n"

    values = judged_values(judged, judgments_of, threshold)
    out = FIXTURES / name
    out.mkdir(parents=True, exist_ok=True)
    events = sorted(impressions + repeats, key=lambda e: e["timestamp"])
    with open(out / "impressions.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for imp in events:
            f.write(json.dumps({k: v for k, v in imp.items() if k != "_query"}) + "\n")
    with open(out / "engagements.jsonl", "w", encoding="utf-8", newline="\n") as f:
        for e in sorted(engagements, key=lambda e: e["timestamp"]):
            f.write(json.dumps(e) + "\n")
    (out / file_name).write_text(judgment_text, encoding="utf-8")
    (out / "config.toml").write_text(CONFIG_TOML.format(
        cutoffs=", ".join(map(str, CUTOFFS)), unit=unit, file=file_name, key=key, threshold=threshold,
        max_grade=MAX_GRADE), encoding="utf-8")

    # Group means, cumulative and per 1h window, over judged impressions.
    def means(imps):
        groups = {}
        for imp in imps:
            groups.setdefault((imp["experiment"], imp["variant"]), []).append(values[imp["query_id"]])
        return [{"experiment": e, "variant": v, "impressions": len(vs),
                 "metrics": {k: math.fsum(x[k] for x in vs) / len(vs) for k in METRIC_KEYS}}
                for (e, v), vs in sorted(groups.items())]
    windows = {}
    for imp in judged:
        start = imp["timestamp"] // WINDOW_MS * WINDOW_MS
        windows.setdefault(start, []).append(imp)
    # Welch's test of the judged metrics, treatment against control (independent impressions).
    ab = {}
    if unit == "impression":
        for experiment, (control, treatment) in [("e1", ("control", "treatment")), ("e2", ("a", "b"))]:
            side = lambda v: [values[i["query_id"]] for i in judged if i["experiment"] == experiment and i["variant"] == v]
            c, t = side(control), side(treatment)
            ab[experiment] = {}
            for k in ["mrr", "ndcg@10", "precision@5", "coverage@10", "err@20"]:
                xs, ys = [x[k] for x in t], [x[k] for x in c]
                result = stats.ttest_ind(xs, ys, equal_var=False)
                ab[experiment][k] = {"difference": math.fsum(xs) / len(xs) - math.fsum(ys) / len(ys),
                                     "p_value": float(result.pvalue)}
    expected = {
        "suite": name,
        "judged_impressions": len(judged),
        # Per impression, the values in the order of "keys", to 12 significant digits (the
        # comparison is to 1e-9; the means below are exact).
        "keys": METRIC_KEYS,
        "impressions": {imp["query_id"]: [float(f"{values[imp['query_id']][k]:.12g}") for k in METRIC_KEYS]
                        for imp in judged},
        "groups": means(judged),
        "windows": [{"start": start, "groups": means(imps)} for start, imps in sorted(windows.items())],
        "ab": ab,
    }
    with open(out / "expected.json", "w", encoding="utf-8", newline="\n") as f:
        json.dump(expected, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")
    empty = sum(1 for i in judged if not i["results"])
    unjudged = sum(1 for i in impressions if not judgments_of(i))
    print(f"{name}: {len(events)} impressions ({len(repeats)} repeated ids), {len(judged)} judged "
          f"({empty} with no results), {unjudged} without judgments, {len(lines)} judgments")


def main():
    for suite in SUITES:
        build_suite(*suite)


if __name__ == "__main__":
    main()
