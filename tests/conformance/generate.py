#!/usr/bin/env python3
"""Generate the rankpulse conformance fixtures, with trec_eval as the oracle.

Expected metric values come from trec_eval (through pytrec-eval-terrier, see
requirements.txt). Every value is also recomputed by a direct Python
implementation of the project's metric contract, and generation aborts if the
two disagree by more than 1e-12 anywhere. This way the fixtures test the Rust
code against trec_eval, and the script tests that trec_eval and the contract
agree.

Output is deterministic: `python3 tests/conformance/generate.py` rewrites
tests/conformance/fixtures/ byte for byte. That is why only seeded
random.Random instances are used and no set of strings is ever iterated
(string hashing is randomized per process).
"""

import json
import math
import random
import sys
from pathlib import Path

import pytrec_eval

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Both suites use the same settings apart from relevance_threshold.
SUITES = [("threshold1", 1, 1001), ("threshold2", 2, 2002)]  # name, threshold, seed
IMPRESSIONS_PER_SUITE = 3100
CUTOFFS = [1, 2, 3, 5, 10, 20, 100, 250]
ACTION_GAINS = {"click": 1, "add_to_cart": 2, "purchase": 3}
ACTION_FOR_GAIN = {0: "hover", 1: "click", 2: "add_to_cart", 3: "purchase"}
WINDOW_MS = 10_000  # attribution_window = "10s"
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SPACING_MS = 1_000
MAX_LEN = 200
CATALOG = 100_000  # doc ids are drawn from doc-00000 .. doc-99999
TOLERANCE = 1e-12

MAX_GAIN = max(ACTION_GAINS.values())  # ERR's g_max: the largest configured action gain
RECALL_LEVELS = [f"{tenths / 10:.1f}" for tenths in range(11)]  # "0.0" .. "1.0"

METRIC_NAMES = ["hit_rate", "precision", "recall", "map", "ndcg", "ndcg_exp", "f1", "err"]
METRIC_KEYS = (["mrr", "abandonment_rate", "r_precision"]
               + [f"iprec@{r}" for r in RECALL_LEVELS]
               + [f"{m}@{k}" for m in METRIC_NAMES for k in CUTOFFS])

CONFIG_TOML = """\
[join]
attribution_window = "10s"

[metrics]
cutoffs = [{cutoffs}]
windows = ["1m"]
relevance_threshold = {threshold}

[metrics.action_gains]
click = 1
add_to_cart = 2
purchase = 3
"""


# ----------------------------------------------------------------------------
# Event generation
# ----------------------------------------------------------------------------

def pick_length(rng):
    # Mostly realistic short pages, but every length in 0..200 is reachable and
    # the edge lengths 0, 1 and 200 each get a few percent of the mass.
    r = rng.random()
    if r < 0.03:
        return 0
    if r < 0.06:
        return 1
    if r < 0.08:
        return MAX_LEN
    if r < 0.68:
        return rng.randint(5, 30)
    if r < 0.76:
        return rng.randint(2, 4)
    return rng.randint(31, MAX_LEN - 1)


def pick_group(rng, index):
    # A sprinkling of a second experiment so the per-(experiment, variant)
    # grouping is exercised, not just the variant split.
    if index % 97 == 13:
        return "other", "x"
    return "conf", rng.choice(["a", "b", "c"])


def in_window_ts(rng, ts):
    # Hit both inclusive ends of the window often enough to matter.
    r = rng.random()
    if r < 0.07:
        return ts
    if r < 0.14:
        return ts + WINDOW_MS
    return ts + rng.randint(1, WINDOW_MS - 1)


def engaged_ranks(rng, n):
    # Engage mostly near the top (so rr and small cutoffs vary) but also deep in
    # the list, including past the 100 cutoff when the list is long enough.
    count = min(n, rng.choice([1, 1, 1, 1, 2, 2, 3, 4, 6, 9]))
    ranks = []
    while len(ranks) < count:
        if rng.random() < 0.7:
            rank = rng.randint(1, min(n, 10))
        else:
            rank = rng.randint(1, n)
        if rank not in ranks:
            ranks.append(rank)
    return ranks


def actions_for(rng, gain):
    # The top action determines the gain; lower-valued actions, the unknown
    # "hover" and exact repeats are mixed in because they must not change it.
    actions = [ACTION_FOR_GAIN[gain]]
    for _ in range(rng.choice([0, 0, 1, 2])):
        actions.append(ACTION_FOR_GAIN[rng.randint(0, gain)])
    if rng.random() < 0.2:
        actions.append(actions[0])
    rng.shuffle(actions)
    return actions


def generate_impression(rng, index, prefix):
    ts = START_MS + index * SPACING_MS
    qid = f"{prefix}-q{index + 1:06d}"
    experiment, variant = pick_group(rng, index)
    results = [f"doc-{d:05d}" for d in rng.sample(range(CATALOG), pick_length(rng))]
    impression = {"query_id": qid, "timestamp": ts, "results": results,
                  "experiment": experiment, "variant": variant}
    engagements = []  # (timestamp, doc_id, action)
    n = len(results)

    # About a quarter of the impressions get no genuine engagement at all;
    # together with gain-0 and noise-only cases that yields ~30% empty R at
    # threshold 1 (more at threshold 2, where clicks alone are not relevant).
    if n and rng.random() >= 0.25:
        for rank in engaged_ranks(rng, n):
            gain = rng.choices([0, 1, 2, 3], weights=[1, 4, 3, 3])[0]
            for action in actions_for(rng, gain):
                engagements.append((in_window_ts(rng, ts), results[rank - 1], action))

    # Noise that a correct join must ignore: one millisecond either side of the
    # window, and valuable actions on documents that were never shown.
    if n and rng.random() < 0.12:
        engagements.append((ts - 1, rng.choice(results), rng.choice(["click", "purchase"])))
    if n and rng.random() < 0.12:
        engagements.append((ts + WINDOW_MS + 1, rng.choice(results),
                            rng.choice(["add_to_cart", "purchase"])))
    if rng.random() < 0.12:
        doc = f"doc-{rng.randrange(CATALOG):05d}"
        if doc not in results:
            engagements.append((in_window_ts(rng, ts), doc, "purchase"))
    if n and rng.random() < 0.08:
        engagements.append((in_window_ts(rng, ts), rng.choice(results), "hover"))

    engagements = [{"query_id": qid, "timestamp": t, "doc_id": d, "action": a}
                   for t, d, a in engagements]
    return impression, engagements


# ----------------------------------------------------------------------------
# Attribution and the metric contract (the independent implementation)
# ----------------------------------------------------------------------------

def attribute_gains(impression, engagements):
    """Gain per shown result, by rank, applying the attribution rules."""
    ts = impression["timestamp"]
    best = {doc: 0 for doc in impression["results"]}
    for e in engagements:
        if e["query_id"] != impression["query_id"]:
            continue
        if not ts <= e["timestamp"] <= ts + WINDOW_MS:
            continue
        if e["doc_id"] in best:
            best[e["doc_id"]] = max(best[e["doc_id"]], ACTION_GAINS.get(e["action"], 0))
    return [best[doc] for doc in impression["results"]]


def dcg(gains):
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def ndcg_at(gains, k):
    ideal = sorted((g for g in gains if g > 0), reverse=True)
    if not ideal:
        return 0.0
    return dcg(gains[:k]) / dcg(ideal[:k])


def err_cascade(gains, k):
    """ERR@k as the contract writes it: sum of p_i / i x prod_{j<i} (1 - p_j)."""
    p = [(2 ** g - 1) / 2 ** MAX_GAIN for g in gains]
    return sum(p[i] / (i + 1) * math.prod(1 - q for q in p[:i]) for i in range(min(k, len(p))))


def err_elasticsearch(gains, k):
    """ERR@k as Elasticsearch's rank evaluation computes it (maximum_relevance = g_max):
    an independent formulation (running probability of reaching the rank)."""
    err, reached = 0.0, 1.0
    for rank, g in enumerate(gains[:k], start=1):
        stop = (2 ** g - 1) / 2 ** MAX_GAIN
        err += reached * stop / rank
        reached *= 1 - stop
    return err


def contract_metrics(gains, threshold):
    relevant = [g >= threshold for g in gains]
    num_rel = sum(relevant)
    first = next((i + 1 for i, r in enumerate(relevant) if r), None)
    m = {"mrr": 1.0 / first if first else 0.0,
         "abandonment_rate": 0.0 if num_rel else 1.0,
         "r_precision": sum(relevant[:num_rel]) / num_rel if num_rel else 0.0}
    for tenths, label in enumerate(RECALL_LEVELS):
        # Largest precision@i over ranks that reached the level. trec_eval 9.0.8 counts the
        # level as reached at int(level * |R| + 0.9) relevant results in double precision: the
        # ceiling, except where the product rounds below a tenth (0.7 * 3 = 2.0999999999999996
        # gives 2). The contract follows trec_eval there; see docs/src/metrics.md, "iprec".
        needed = max(1, int(tenths / 10 * num_rel + 0.9))
        best = 0.0
        for i in range(len(gains)):
            hits = sum(relevant[:i + 1])
            if num_rel and hits >= needed:
                best = max(best, hits / (i + 1))
        m[f"iprec@{label}"] = best
    exp_gains = [2 ** g - 1 for g in gains]
    for k in CUTOFFS:
        hits = sum(relevant[:k])
        ap = sum(sum(relevant[:i + 1]) / (i + 1)
                 for i, r in enumerate(relevant[:k]) if r)
        m[f"hit_rate@{k}"] = 1.0 if hits else 0.0
        m[f"precision@{k}"] = hits / k
        m[f"recall@{k}"] = hits / num_rel if num_rel else 0.0
        m[f"map@{k}"] = ap / num_rel if num_rel else 0.0
        m[f"ndcg@{k}"] = ndcg_at(gains, k)
        m[f"ndcg_exp@{k}"] = ndcg_at(exp_gains, k)
        p, r = m[f"precision@{k}"], m[f"recall@{k}"]
        m[f"f1@{k}"] = 2 * p * r / (p + r) if p + r else 0.0
        m[f"err@{k}"] = err_cascade(gains, k)
    return m


# ----------------------------------------------------------------------------
# trec_eval
# ----------------------------------------------------------------------------

def trec_eval_metrics(impressions, gains_by_qid, threshold):
    """Per-impression metrics as computed by trec_eval."""
    cut = ",".join(str(k) for k in CUTOFFS)
    measures = {"recip_rank", f"success.{cut}", f"P.{cut}", f"recall.{cut}",
                f"map_cut.{cut}", f"ndcg_cut.{cut}", "Rprec", "iprec_at_recall"}
    qrels, qrels_exp, run = {}, {}, {}
    for imp in impressions:
        qid, results = imp["query_id"], imp["results"]
        judged = {d: g for d, g in zip(results, gains_by_qid[qid]) if g > 0}
        # trec_eval never evaluates a query absent from the qrels; those
        # impressions (no positive gain) are filled in with zeros below.
        if judged:
            qrels[qid] = judged
            qrels_exp[qid] = {d: 2 ** g - 1 for d, g in judged.items()}
            # Strictly decreasing integer scores: trec_eval orders by score, so
            # the run order is exactly the shown order, with no tie-breaking.
            run[qid] = {d: float(len(results) - i) for i, d in enumerate(results)}
    raw = pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=threshold).evaluate(run)
    exp = pytrec_eval.RelevanceEvaluator(
        qrels_exp, {f"ndcg_cut.{cut}"}, relevance_level=threshold).evaluate(run)
    if sorted(raw) != sorted(qrels) or sorted(exp) != sorted(qrels):
        sys.exit("trec_eval did not evaluate exactly the judged queries")

    out = {}
    for imp in impressions:
        qid = imp["query_id"]
        if qid not in raw:
            out[qid] = {key: 0.0 for key in METRIC_KEYS}
            out[qid]["abandonment_rate"] = 1.0
            # ERR is no trec_eval measure: Elasticsearch's formula, which is 0 here too.
            for k in CUTOFFS:
                out[qid][f"err@{k}"] = err_elasticsearch(gains_by_qid[qid], k)
            continue
        r, e = raw[qid], exp[qid]
        # abandonment is not a trec_eval measure; success at the largest
        # cutoff (longer than any list) says whether R is non-empty.
        m = {"mrr": r["recip_rank"],
             "abandonment_rate": 1.0 - r[f"success_{CUTOFFS[-1]}"],
             "r_precision": r["Rprec"]}
        for label in RECALL_LEVELS:
            m[f"iprec@{label}"] = r[f"iprec_at_recall_{label}0"]
        for k in CUTOFFS:
            m[f"hit_rate@{k}"] = r[f"success_{k}"]
            m[f"precision@{k}"] = r[f"P_{k}"]
            m[f"recall@{k}"] = r[f"recall_{k}"]
            m[f"map@{k}"] = r[f"map_cut_{k}"]
            m[f"ndcg@{k}"] = r[f"ndcg_cut_{k}"]
            m[f"ndcg_exp@{k}"] = e[f"ndcg_cut_{k}"]
            # F1 is no trec_eval measure: the harmonic mean of trec_eval's own P.k and recall.k.
            p, rec = r[f"P_{k}"], r[f"recall_{k}"]
            m[f"f1@{k}"] = 2 * p * rec / (p + rec) if p + rec else 0.0
            m[f"err@{k}"] = err_elasticsearch(gains_by_qid[qid], k)
        out[qid] = m
    return out


# ----------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------

def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def write_expected(path, doc):
    # Sorted keys as json.dumps(sort_keys=True) would give, but one impression
    # or group per line so the file stays greppable and diffs stay small.
    def dump(v):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))

    parts = []
    for key in sorted(doc):
        value = doc[key]
        if key == "impressions":
            body = ",\n".join(f"  {dump(q)}: {dump(value[q])}" for q in sorted(value))
            parts.append(f'  "impressions": {{\n{body}\n  }}')
        elif key == "groups":
            body = ",\n".join(f"  {dump(g)}" for g in value)
            parts.append(f'  "groups": [\n{body}\n  ]')
        else:
            parts.append(f"  {dump(key)}: {dump(value)}")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("{\n" + ",\n".join(parts) + "\n}\n")


def group_means(impressions, per_impression):
    groups = {}
    for imp in impressions:
        groups.setdefault((imp["experiment"], imp["variant"]), []).append(imp["query_id"])
    out = []
    for (experiment, variant) in sorted(groups):
        qids = groups[(experiment, variant)]
        # Our mean is over every impression (empty R counts as 0), unlike
        # trec_eval's average over the queries it evaluated.
        means = {key: math.fsum(per_impression[q][key] for q in qids) / len(qids)
                 for key in METRIC_KEYS}
        engaged = sum(1 for q in qids if per_impression[q]["abandonment_rate"] == 0.0)
        out.append({"experiment": experiment, "variant": variant,
                    "impressions": len(qids), "engaged": engaged, "metrics": means})
    return out


def build_suite(name, threshold, seed):
    rng = random.Random(seed)
    prefix = f"t{threshold}"
    impressions, engagements = [], []
    for i in range(IMPRESSIONS_PER_SUITE):
        imp, engs = generate_impression(rng, i, prefix)
        impressions.append(imp)
        engagements.extend(engs)
    # event_id follows generation order; sorting is stable, so ties on the
    # timestamp keep that order too.
    for n, e in enumerate(engagements):
        e["event_id"] = f"{prefix}-e{n + 1:07d}"
    engagements.sort(key=lambda e: e["timestamp"])

    by_qid = {}
    for e in engagements:
        by_qid.setdefault(e["query_id"], []).append(e)
    gains = {imp["query_id"]: attribute_gains(imp, by_qid.get(imp["query_id"], []))
             for imp in impressions}

    expected = trec_eval_metrics(impressions, gains, threshold)
    failures = 0
    for imp in impressions:
        qid = imp["query_id"]
        ours = contract_metrics(gains[qid], threshold)
        for key in METRIC_KEYS:
            if abs(ours[key] - expected[qid][key]) > TOLERANCE:
                failures += 1
                print(f"DISAGREE {name} {qid} {key}: trec_eval={expected[qid][key]!r} "
                      f"contract={ours[key]!r} gains={gains[qid]}", file=sys.stderr)
    if failures:
        sys.exit(f"{failures} disagreements between trec_eval and the contract")

    out_dir = FIXTURES / name
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "config.toml", "w", encoding="utf-8", newline="\n") as f:
        f.write(CONFIG_TOML.format(cutoffs=", ".join(map(str, CUTOFFS)), threshold=threshold))
    write_jsonl(out_dir / "impressions.jsonl", impressions)
    write_jsonl(out_dir / "engagements.jsonl", engagements)
    write_expected(out_dir / "expected.json", {
        "suite": name, "relevance_threshold": threshold, "cutoffs": CUTOFFS,
        "impressions": expected, "groups": group_means(impressions, expected)})
    summarize(name, impressions, engagements, gains, expected, threshold)


def summarize(name, impressions, engagements, gains, expected, threshold):
    """Print coverage numbers so a regeneration shows what the suite exercises."""
    lengths = [len(imp["results"]) for imp in impressions]
    ts_of = {imp["query_id"]: imp["timestamp"] for imp in impressions}
    shown = {imp["query_id"]: imp["results"] for imp in impressions}
    offsets = [e["timestamp"] - ts_of[e["query_id"]] for e in engagements]
    empty = sum(1 for m in expected.values() if m["abandonment_rate"] == 1.0)
    positive_no_r = sum(1 for q, g in gains.items()
                        if any(g) and expected[q]["abandonment_rate"] == 1.0)
    print(f"{name}: {len(impressions)} impressions, {len(engagements)} engagements")
    print(f"  lengths: 0 x{lengths.count(0)}, 1 x{lengths.count(1)}, "
          f"{MAX_LEN} x{lengths.count(MAX_LEN)}, >100 x{sum(n > 100 for n in lengths)}, "
          f"5..30 x{sum(5 <= n <= 30 for n in lengths)}")
    print(f"  empty R: {empty} ({empty / len(impressions):.1%}); "
          f"of those with a positive gain below threshold {threshold}: {positive_no_r}")
    print(f"  engagements at ts-1: {offsets.count(-1)}, at ts: {offsets.count(0)}, "
          f"at ts+window: {offsets.count(WINDOW_MS)}, "
          f"at ts+window+1: {offsets.count(WINDOW_MS + 1)}, "
          f"on unshown docs: {sum(e['doc_id'] not in shown[e['query_id']] for e in engagements)}, "
          f"unknown action: {sum(e['action'] not in ACTION_GAINS for e in engagements)}")
    deep = sum(1 for q, g in gains.items() if any(x >= threshold for x in g[100:]))
    print(f"  impressions with a relevant result below rank 100: {deep}")


def main():
    for name, threshold, seed in SUITES:
        build_suite(name, threshold, seed)


if __name__ == "__main__":
    main()
