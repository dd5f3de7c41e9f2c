#!/usr/bin/env python3
"""Generate tests/interleaving/fixtures/: interleaved traffic and what rankpulse must say about it.

Rerun (from the crate root; deterministic given the same numpy/scipy, rewrites the files byte
for byte):

    pip install --user xxhash      # rankpulse's unit hash (xxh3-64) for the unit buckets
    python3 tests/interleaving/generate.py tests/interleaving/fixtures

The traffic: about 6,000 team-draft interleaved impressions of two rankers (`ranker-duel`),
2,000 of three (`ranker-triple`, multileaving), 1,000 ordinary A/B impressions that must not
count, with duplicates across teams, clicks at every rank (depth 5 cuts some), graded and
unknown actions, repeated engagements on one result (the best counts, never the sum),
engagements before the impression, after its 30 minute window and on its last millisecond,
engagements on results not shown, and invalid interleaved lines of every kind.

The reference is written from the manual's "Interleaving" chapter (docs/src/interleaving.md), not from the Rust code:
attribution (the best action gain of a result's engagements within [t, t + 30m], at the first
rank showing the document), credit per ranker, the outcome, and per comparison (cumulative and
per closed 1h window) the counts, every pair's preference with its Student t interval
(scipy.stats.t.interval; cluster-robust over unit buckets for `gains.toml`), the sign test
(scipy.stats.binomtest, or the cluster-robust z) and the always-valid p-value and confidence
sequence (Johari et al. 2017; Waudby-Smith et al. 2024): a closed window's own, and for the
cumulative figures the running minimum and intersection over looks at every closed 1h window. The clustered standard error is
computed twice (the closed form below and a CR1 sandwich) and generation aborts if they differ.
"""

import json, math, random, sys
from pathlib import Path

import numpy as np
import scipy.stats as st
import xxhash

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "fixtures")
rng = random.Random(20)
T0 = 1_795_300_000_000
WINDOW_MS = 30 * 60_000
HOUR = 3_600_000
GAINS = {"click": 1, "add_to_cart": 2, "purchase": 3}

imps, engs = [], []
next_event = [0]


def engagement(q, t, doc, action):
    next_event[0] += 1
    engs.append({"query_id": q, "timestamp": t, "doc_id": doc, "action": action, "event_id": f"e{next_event[0]}"})


def team_draft(rankings, length):
    nxt = [0] * len(rankings); used = set(); res = []; teams = []
    while len(res) < length:
        order = list(range(len(rankings))); rng.shuffle(order)
        picked = False
        for k in order:
            if len(res) == length: break
            r = rankings[k]
            while nxt[k] < len(r) and r[nxt[k]] in used: nxt[k] += 1
            if nxt[k] < len(r):
                used.add(r[nxt[k]]); res.append(r[nxt[k]]); teams.append(k); picked = True
        if not picked: break
    return res, teams


n = 0
def new_query():
    global n
    n += 1
    return f"q{n}"

t = T0
clients = [f"c{i}" for i in range(600)]
for i in range(9000):
    t += rng.randint(0, 4000)
    ts = t + rng.randint(-3000, 0)
    q = new_query()
    client = rng.choice(clients[: 50 + int(550 * rng.random() ** 2)])
    kind = rng.random()
    if kind < 0.66:
        names = ["baseline", "candidate"]; exp = "ranker-duel"
    elif kind < 0.88:
        names = ["bm25", "hybrid", "neural"]; exp = "ranker-triple"
    else:
        variant = rng.choice(["control", "treatment"])
        docs = [f"d{rng.randint(0, 300)}" for _ in range(8)]
        imps.append({"query_id": q, "timestamp": ts, "results": docs, "experiment": "ab-test", "variant": variant, "client_id": client})
        for r, d in enumerate(docs):
            if rng.random() < 0.1: engagement(q, ts + rng.randint(1000, 600_000), d, "click")
        continue
    pool = [f"d{rng.randint(0, 300)}" for _ in range(14)]
    quality = {d: rng.random() for d in pool}
    rankings = []
    for k, _ in enumerate(names):
        noise = 0.9 - 0.15 * k
        rankings.append(sorted(pool, key=lambda d: -(quality[d] + noise * rng.gauss(0, 0.5))))
    results, teams = team_draft(rankings, 10)
    team_names = [names[k] for k in teams]
    if rng.random() < 0.03 and len(results) > 3:  # a duplicate across teams
        j = rng.randint(2, len(results) - 1)
        results[j] = results[0]
        team_names[j] = names[1] if team_names[0] == names[0] else names[0]
    imp = {"query_id": q, "timestamp": ts, "results": results, "experiment": exp, "client_id": client,
           "interleaving": names, "teams": team_names}
    if rng.random() < 0.2: imp["variant"] = "ignored"
    imps.append(imp)
    for r, d in enumerate(results):
        p = 0.08 + 0.25 * quality[d] * (0.93 ** r)
        if rng.random() < p:
            u = rng.random()
            if u < 0.03: et = ts + rng.randint(2_400_000, 3_000_000)   # after the 30m window
            elif u < 0.05: et = ts - rng.randint(1, 5000)               # before the impression
            elif u < 0.06: et = ts + WINDOW_MS                          # the window's last millisecond
            else: et = ts + rng.randint(0, 1_200_000)
            action = rng.choices(["click", "add_to_cart", "purchase", "share"], [0.75, 0.12, 0.08, 0.05])[0]
            engagement(q, et, d, action)
            if rng.random() < 0.1: engagement(q, et + 1000, d, "click")
    if rng.random() < 0.02:
        engagement(q, ts + 100, "not-shown", "click")

# invalid interleaved impressions
bad = []
def bad_imp(**kw):
    base = {"query_id": new_query(), "timestamp": t, "results": ["a", "b"], "experiment": "ranker-duel", "client_id": "c1"}
    base.update(kw)
    bad.append(base)
for _ in range(20):
    bad_imp(interleaving=["x", "y"], teams=["x"])
    bad_imp(interleaving=["x", "y"], teams=["x", "z"])
    bad_imp(interleaving=["x"], teams=["x", "x"])
    bad_imp(interleaving=["x", "x"], teams=["x", "x"])
    bad_imp(interleaving=["x", ""], teams=["x", "x"])
    bad_imp(interleaving=["a vs b", "y"], teams=["y", "y"])
    bad_imp(interleaving=["x", "y"])
    bad_imp(teams=["x", "y"])
    bad_imp(interleaving=["x", "y"], teams=[], results=[])
    bad_imp(interleaving=["x", "y"], teams="x")
    bad_imp(interleaving=["x", "y"], teams=["x", 1])
for b in bad:
    pos = rng.randint(0, len(imps))
    imps.insert(pos, b)
for i, imp in enumerate(imps):  # timestamps non-decreasing-ish already; keep
    pass
engs.sort(key=lambda e: e["timestamp"])

OUT.mkdir(parents=True, exist_ok=True)
(OUT / "impressions.jsonl").write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in imps))
(OUT / "engagements.jsonl").write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in engs))

CONFIGS = {
    "clicks": dict(unit="impression", buckets=None, confidence=0.95, nstar=5000.0, max_rankers=2, by_gain=False, depth=0),
    "gains": dict(unit="client_id", buckets=16, confidence=0.9, nstar=2000.0, max_rankers=3, by_gain=True, depth=5),
}
(OUT / "clicks.toml").write_text('[join]\nattribution_window = "30m"\n[metrics]\nwindows = ["1h"]\n[ab]\nunit = "impression"\nconfidence = 0.95\n[interleaving]\nmax_rankers = 2\ncredit = "clicks"\ndepth = 0\n')
(OUT / "gains.toml").write_text('[join]\nattribution_window = "30m"\n[metrics]\nwindows = ["1h"]\n[ab]\nunit = "client_id"\nunit_buckets = 16\nconfidence = 0.9\nsequential_sample_size = 2000\n[interleaving]\nmax_rankers = 3\ncredit = "gains"\ndepth = 5\n')


def valid(imp, cfg):
    """None if valid interleaved, 'ab' if not interleaved, else reject reason."""
    il, tm = imp.get("interleaving"), imp.get("teams")
    for v in (il, tm):
        if v is not None and (not isinstance(v, list) or not all(isinstance(x, str) for x in v)):
            return "wrong_type"
    if il is None and tm is None: return "ab"
    if il is None or tm is None: return "invalid_interleaving"
    if not (2 <= len(il) <= 7): return "invalid_interleaving"
    if any(x == "" or " vs " in x for x in il) or len(set(il)) != len(il): return "invalid_interleaving"
    if len(imp["results"]) == 0 or len(tm) != len(imp["results"]) or any(x not in il for x in tm): return "invalid_interleaving"
    if len(il) > cfg["max_rankers"]: return "invalid_interleaving"
    return None


def reference(cfg):
    by_q = {}
    for e in engs: by_q.setdefault(e["query_id"], []).append(e)
    rejected = {}
    impressions, groups, windows = {}, {}, {}
    for imp in imps:
        r = valid(imp, cfg)
        if r == "ab": continue
        if r is not None:
            rejected[r] = rejected.get(r, 0) + 1; continue
        names = imp["interleaving"]; res = imp["results"]; ts = imp["timestamp"]
        best = {}
        for e in by_q.get(imp["query_id"], []):
            if ts <= e["timestamp"] <= ts + WINDOW_MS and e["doc_id"] in res:
                best[e["doc_id"]] = max(best.get(e["doc_id"], 0), GAINS.get(e["action"], 0))
        seen = set(); credits = [0] * len(names)
        for rank, (d, team) in enumerate(zip(res, imp["teams"])):
            g = best.get(d, 0) if d not in seen else 0
            seen.add(d)
            if cfg["depth"] and rank >= cfg["depth"]: continue
            if g >= 1: credits[names.index(team)] += g if cfg["by_gain"] else 1
        top = max(credits)
        if top == 0: outcome = "none"
        elif credits.count(top) == 1: outcome = names[credits.index(top)]
        else: outcome = "tie"
        impressions[imp["query_id"]] = {"credits": dict(zip(names, credits)), "outcome": outcome}
        key = (imp["experiment"], " vs ".join(names))
        for store, k in ((groups, key), (windows, (ts // HOUR * HOUR,) + key)):
            store.setdefault(k, []).append((credits, outcome, imp["client_id"]))
    return rejected, impressions, groups, windows


def figures(rows, names, cfg, with_tests=True):
    engaged = sum(1 for _, o, _ in rows if o != "none")
    out = {"experiment": None, "variant": " vs ".join(names), "rankers": names, "impressions": len(rows),
           "engaged": engaged, "wins": {n: sum(1 for _, o, _ in rows if o == n) for n in names}}
    out["ties"] = engaged - sum(out["wins"].values())
    pairs = []
    alpha = 1 - cfg["confidence"]
    rho2 = (-2 * math.log(alpha) + math.log(1 - 2 * math.log(alpha))) / cfg["nstar"]
    for j in range(1, len(names)):
        for i in range(j):
            d = [(1 if c[j] > c[i] else -1 if c[i] > c[j] else 0, cl) for c, o, cl in rows if o != "none"]
            w = sum(1 for x, _ in d if x == 1); l = sum(1 for x, _ in d if x == -1)
            p = {"ranker": names[j], "opponent": names[i], "wins": w, "losses": l, "ties": engaged - w - l,
                 "preference": (w - l) / engaged if engaged else 0.0}
            mean = p["preference"]
            se = df = None
            if cfg["unit"] == "impression":
                if engaged >= 2:
                    arr = np.array([x for x, _ in d], float)
                    se = float(arr.std(ddof=1) / math.sqrt(engaged)); df = engaged - 1
                sign = st.binomtest(w, w + l, 0.5).pvalue if w + l else None
            else:
                buckets = {}
                for c, o, cl in rows:
                    b = (xxhash.xxh3_64_intdigest(cl.encode()) & 0xFFFFFFFF) % cfg["buckets"]
                    e, s = buckets.get(b, (0, 0))
                    x = (1 if c[j] > c[i] else -1 if c[i] > c[j] else 0) if o != "none" else 0
                    buckets[b] = (e + (o != "none"), s + x)
                K = len(buckets); N = sum(e for e, _ in buckets.values())
                if K >= 2 and N > 0:
                    spread = sum((s - mean * e) ** 2 for e, s in buckets.values())
                    se = math.sqrt(K / (K - 1) * spread) / N; df = K - 1
                    # CR1 sandwich of an intercept-only regression of d on the engaged
                    # impressions, clustered by bucket: (X'X)^-1 (sum_b u_b^2) (X'X)^-1 K/(K-1).
                    resid = {}
                    for c, o, cl in rows:
                        if o == "none": continue
                        b = (xxhash.xxh3_64_intdigest(cl.encode()) & 0xFFFFFFFF) % cfg["buckets"]
                        x = 1 if c[j] > c[i] else -1 if c[i] > c[j] else 0
                        resid[b] = resid.get(b, 0.0) + (x - mean)
                    sandwich = math.sqrt(K / (K - 1) * sum(u * u for u in resid.values())) / N
                    assert abs(sandwich - se) <= 1e-12 * max(se, 1e-300), (sandwich, se)
                ss = sum(s * s for _, s in buckets.values())
                sign = float(2 * st.norm.sf(abs(sum(s for _, s in buckets.values())) / math.sqrt(ss))) if ss > 0 else None
            p["sign_test_p_value"] = None if sign is None else float(min(1.0, sign))
            if se is not None:
                lo, hi = st.t.interval(cfg["confidence"], df, loc=mean, scale=se) if se > 0 else (mean, mean)
                p["preference_ci"] = [float(lo), float(hi)]
            else:
                p["preference_ci"] = None
            if se and se > 0 and engaged > 0:
                V = se * se; tt = engaged * rho2
                pv = min(1.0, math.sqrt(tt + 1) * math.exp(-(tt / (tt + 1)) * mean * mean / (2 * V)))
                half = math.sqrt(V * (tt + 1) / tt * (math.log(tt + 1) - 2 * math.log(alpha)))
                p["always_valid_p_value"] = pv; p["preference_cs"] = [mean - half, mean + half]
            else:
                p["always_valid_p_value"] = None; p["preference_cs"] = None
            p["preference_cs_empty"] = False
            if not with_tests:
                p = {k: p[k] for k in ("ranker", "opponent", "wins", "losses", "ties", "preference")}
            pairs.append(p)
    out["pairs"] = pairs
    return out


def running(f, exp, var, windows, cfg):
    """The cumulative report's anytime-valid figures (docs/src/anytime-valid.md, Looks): a
    look at every closed 1h window over the rows of every window so far, the running
    intersection of the looks' sequences (absent and flagged once empty) and the running minimum
    of their p-values (absent before a look had them). A window without rows of the group looks
    at the same rows again, which changes neither, so only the group's windows are taken."""
    names = var.split(" vs ")
    folded = [[-math.inf, math.inf, 1.0, 0] for _ in f["pairs"]]
    prefix = []
    for start in sorted(s for (s, e, v) in windows if (e, v) == (exp, var)):
        prefix += windows[(start, exp, var)]
        for r, p in zip(folded, figures(prefix, names, cfg)["pairs"]):
            if p["preference_cs"] is None: continue
            r[0] = max(r[0], p["preference_cs"][0]); r[1] = min(r[1], p["preference_cs"][1])
            r[2] = min(r[2], p["always_valid_p_value"]); r[3] += 1
    for (lo, hi, pv, looks), p in zip(folded, f["pairs"]):
        p["preference_cs"] = [lo, hi] if looks and lo <= hi else None
        p["preference_cs_empty"] = bool(looks and lo > hi)
        p["always_valid_p_value"] = pv if looks else None


for name, cfg in CONFIGS.items():
    rejected, impressions, groups, windows = reference(cfg)
    gl = []
    for (exp, var), rows in sorted(groups.items()):
        f = figures(rows, var.split(" vs "), cfg); f["experiment"] = exp
        running(f, exp, var, windows, cfg)
        gl.append(f)
    wl = {}
    for (start, exp, var), rows in sorted(windows.items()):
        f = figures(rows, var.split(" vs "), cfg); f["experiment"] = exp
        wl.setdefault(start, []).append(f)
    doc = {"config": name, "rejected": rejected, "impressions": impressions, "groups": gl,
           "windows": [{"start_ms": s, "groups": g} for s, g in sorted(wl.items())]}
    (OUT / f"expected_{name}.json").write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n")
    print(name, len(impressions), rejected, [(g["experiment"], g["impressions"], g["pairs"][0]["preference"]) for g in gl])
