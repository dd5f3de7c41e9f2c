#!/usr/bin/env python3
"""Independent plain-Python reference implementations for rankpulse click models.

Used by the Rust integration tests as an oracle (compared to 1e-9).  Needs only
the Python 3 standard library (no numpy).

Usage:
    python3 tests/clicks/reference.py <command> < input.json > output.json

Commands: pbm, coec, harvest, ips.  Every command reads one JSON object on
stdin and writes one JSON object on stdout.  Impressions always have the form

    {"query": str, "docs": [str, ...], "clicks": [bool, ...]}

with ``docs[i]`` shown at position i (list index 0 = the top result) and
``clicks[i]`` telling whether it was clicked.  ``docs`` and ``clicks`` must have
the same length.  A document listed twice in one impression counts once per
position.

Floats are written with Python's shortest round-trip repr, so they parse back
to exactly the double computed here.  Values that are undefined are ``null``.
Lists of (query, doc) entries are sorted by (query, doc) in code-point order,
the same order as Rust's ``Ord`` for ``String``.
"""

import json
import math
import sys
from decimal import ROUND_HALF_UP, Decimal


# ---------------------------------------------------------------------------
# Input helpers
# ---------------------------------------------------------------------------

def _impressions(data):
    """Returns the validated impressions list of an input object."""
    imps = data.get("impressions")
    if not isinstance(imps, list):
        raise ValueError("input needs an 'impressions' list")
    for n, imp in enumerate(imps):
        docs, clicks = imp.get("docs"), imp.get("clicks")
        if not isinstance(imp.get("query"), str):
            raise ValueError("impression %d: 'query' must be a string" % n)
        if not isinstance(docs, list) or not isinstance(clicks, list):
            raise ValueError("impression %d: 'docs' and 'clicks' must be lists" % n)
        if len(docs) != len(clicks):
            raise ValueError("impression %d: %d docs but %d clicks" % (n, len(docs), len(clicks)))
    return imps


def _positive_int(data, key):
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("'%s' must be a non-negative integer" % key)
    return value


# ---------------------------------------------------------------------------
# 1. PBM fitted by EM over individual sessions
# ---------------------------------------------------------------------------
#
# Position-based model (Craswell et al. 2008; Chuklin, Markov, de Rijke,
# "Click Models for Web Search", Morgan & Claypool 2015, ch. 3 for the model and
# ch. 4 "Parameter Estimation" for EM):
#
#     C = E * A,  P(E_r = 1) = gamma_r,  P(A_qd = 1) = alpha_qd,
#     so P(C = 1) = gamma_r * alpha_qd.
#
# E-step for one shown (q, d) at rank r (Chuklin et al., ch. 4, PBM updates):
#     clicked:      P(A=1 | C=1) = 1,  P(E=1 | C=1) = 1
#     not clicked:  P(A=1 | C=0) = alpha (1 - gamma) / (1 - gamma alpha)
#                   P(E=1 | C=0) = gamma (1 - alpha) / (1 - gamma alpha)
# M-step:
#     alpha_qd <- mean of P(A=1 | ...) over every position where (q, d) was shown
#                 (ranks 1..K, every impression, every duplicate position)
#     gamma_r  <- mean of P(E=1 | ...) over every (q, d) shown at rank r
#
# All parameters are updated together from the previous iteration's values
# (Jacobi style): the E-step of iteration t only reads iteration t-1 values.

def _pbm_posteriors(clicked, gamma, alpha):
    """Returns (P(A=1 | obs), P(E=1 | obs)) for one shown document."""
    if clicked:
        return 1.0, 1.0
    denom = 1.0 - gamma * alpha
    if denom <= 0.0:
        # gamma = alpha = 1 makes a non-click impossible.  With the 0.5 start
        # values this cannot arise from data (alpha or gamma only reach 1 when
        # every observation involved is a click), so this is a guard only.
        return alpha, gamma
    return alpha * (1.0 - gamma) / denom, gamma * (1.0 - alpha) / denom


def cmd_pbm(data):
    imps = _impressions(data)
    k = _positive_int(data, "max_rank")
    iterations = _positive_int(data, "iterations")

    # Flatten to observations (rank index 0..k-1, pair key, clicked); ranks
    # beyond k are ignored entirely.
    obs = []
    for imp in imps:
        q = imp["query"]
        for i, (d, c) in enumerate(zip(imp["docs"], imp["clicks"])):
            if i < k:
                obs.append((i, (q, d), bool(c)))

    alpha = {key: 0.5 for _, key, _ in obs}
    gamma = [0.5] * k
    shown_at_rank = [0] * k
    for r, _, _ in obs:
        shown_at_rank[r] += 1

    for _ in range(iterations):
        a_sum = {key: 0.0 for key in alpha}
        a_cnt = {key: 0 for key in alpha}
        e_sum = [0.0] * k
        for r, key, c in obs:
            pa, pe = _pbm_posteriors(c, gamma[r], alpha[key])
            a_sum[key] += pa
            a_cnt[key] += 1
            e_sum[r] += pe
        # Simultaneous (Jacobi) update of all parameters.
        alpha = {key: a_sum[key] / a_cnt[key] for key in alpha}
        gamma = [e_sum[r] / shown_at_rank[r] if shown_at_rank[r] else 0.5 for r in range(k)]

    ll = 0.0
    for r, key, c in obs:
        p = gamma[r] * alpha[key]
        p = p if c else 1.0 - p
        if p <= 0.0:
            ll = None  # log(0): JSON has no -inf, report null
            break
        ll += math.log(p)

    return {
        "examination": [gamma[r] if shown_at_rank[r] else None for r in range(k)],
        "attractiveness": [
            {"query": q, "doc": d, "value": alpha[(q, d)]} for (q, d) in sorted(alpha)
        ],
        "log_likelihood": ll,
    }


# ---------------------------------------------------------------------------
# 2. COEC exactly as OpenSearch Search Relevance Workbench (SRW) computes it
# ---------------------------------------------------------------------------
#
# Source read: github.com/opensearch-project/search-relevance, snapshot at
# commit d8be5d1b18de545ca98270a76f20f6504b603f3a (2025-06-14), cross-checked
# against the index copy of CoecClickModel.java at commit
# dc8937c708c4943dd7810e49944ed55726002669 (same logic, plus a guard that
# skips events whose user_query / event_attributes / object is null).
#
#   src/main/java/org/opensearch/searchrelevance/judgments/clickmodel/coec/CoecClickModel.java
#     L77-153  getRankAggregatedClickThrough():
#              query: range event_attributes.position.ordinal <= maxRank   (L81, "lte")
#              aggs:  terms(action_name) > terms(position.ordinal).size(maxRank)  (L86-90)
#              for rank in 0 .. maxRank-1:                                 (L128)
#                  ctr[rank] = clicks[rank] / impressions[rank], or 0.0 when
#                  impressions[rank] == 0                                  (L134-141)
#              clicks / impressions = counts of events whose action_name equals
#              (ignoring case) "click" / "impression" at that ordinal  (L117-123)
#     L155-252 getClickthroughRate() / processClickthroughSearch():
#              same range filter ordinal <= maxRank (L160); for every event,
#              keyed by (event.user_query, event_attributes.object.object_id):
#              "click" -> clicks++, "impression" -> impressions++, and in both
#              cases rank = min(rank, ordinal)                             (L210-218)
#     L664-708 calculateCoecJudgments():
#              observedRank = lowest ordinal of the pair                   (L678)
#              expected     = ctr.getOrDefault(observedRank, 0.0) * impressions  (L679-681)
#              rating       = clicks / expected if expected > 0 else 0.0   (L684-690)
#              stored as String.format(Locale.ROOT, "%.3f", rating)        (L692)
#   src/main/java/org/opensearch/searchrelevance/model/ClickthroughRate.java
#     L30 rank starts at Integer.MAX_VALUE; L79-83 logRank keeps the minimum.
#   src/main/java/org/opensearch/searchrelevance/judgments/UbiJudgmentsProcessor.java
#     L47-50 maxRank comes from the request; roundingDigits is never passed
#     (CoecClickModelParameters default 3 is unused, "%.3f" is hard-coded).
#   Docs: https://docs.opensearch.org/latest/search-plugins/search-relevance/judgments/
#     ("Implicit judgments"): CTR per rank = all clicks / all impressions at that
#     rank; a pair seen at several positions is treated as if all its impressions
#     and clicks happened at its lowest (best) position.
#
# So, in formulas, with o = 0-based position ordinal and R = maxRank:
#     ctr[o]      = #click events at o / #impression events at o,   o = 0..R-1
#                   (over all queries; 0.0 when no impression events)
#     for pair (q, d), over its events with o <= R (note: R itself included):
#     clicks      = #click events,  impressions = #impression events
#     best        = min ordinal of any of its click or impression events
#     expected    = ctr[best] * impressions  (ctr[R] does not exist -> 0.0)
#     coec        = clicks / expected if expected > 0 else 0.0
#     rating      = "%.3f" of coec (Java Formatter: HALF_UP on the shortest
#                   decimal representation of the double)
# Nothing else: no smoothing, no minimum counts, pairs without clicks are kept
# (rating "0.000"), no normalisation of the query text (exact, case-sensitive
# user_query string), no normalisation of the rating scale.
#
# Quirks reproduced (see "notes" in the output):
#   * Ordinals are 0-based: the CTR loop runs 0..maxRank-1 and SRW's sample
#     data (src/test/data-esci/ubi_queries_events.ndjson) starts at ordinal 0.
#     The range filter is "<= maxRank", so ordinal maxRank enters the pair
#     counts but has no CTR.  Input option "ordinal_base" (default 0) sets the
#     ordinal of docs[0]; with 1 you get what SRW does for 1-based logging
#     (ctr[0] = 0.0 and ordinal maxRank included in pairs with CTR 0).
#   * The position sub-aggregation returns only the top `maxRank` ordinal
#     buckets per action (ordered by doc count desc, then key asc, the terms
#     aggregation default), while up to maxRank+1 ordinals pass the filter.
#     If ordinal maxRank has strictly more events of one action than a lower
#     ordinal, that lower ordinal's bucket is dropped and its count read as 0.
#     Input option "srw_terms_truncation" (default true) reproduces this;
#     false counts every ordinal.
#   * Each click event and each impression event counts once: our input emits
#     one impression event for every shown position and one click event for
#     every clicked position (both at that position's ordinal).
#   * calculateCoecJudgments calls listener.onResponse inside its per-query
#     loop (L706), so the judgment is re-written once per query with a growing
#     list; the last write holds every query.  We output every pair.

def _java_format_3f(x):
    """Emulates Java String.format(Locale.ROOT, "%.3f", x) for finite x >= 0.

    java.util.Formatter rounds the digits of the shortest decimal form of the
    double (FormattedFloatingDecimal) half-up; Python's own "%.3f" rounds the
    exact binary value half-even, which differs on ties such as 0.0625.
    """
    return str(Decimal(repr(float(x))).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP))


def _srw_terms_top(counts, size):
    """Keeps the buckets an OpenSearch terms aggregation of `size` returns.

    Default order: doc_count descending, then key ascending.  Buckets with zero
    documents never exist.
    """
    ranked = sorted(((-n, key) for key, n in counts.items() if n > 0))
    return {key: -neg for neg, key in ranked[:size]}


def cmd_coec(data):
    imps = _impressions(data)
    max_rank = _positive_int(data, "max_rank")
    base = data.get("ordinal_base", 0)
    if base not in (0, 1):
        raise ValueError("'ordinal_base' must be 0 or 1")
    truncate = data.get("srw_terms_truncation", True)

    # Build UBI-like events: (user_query, object_id, action, ordinal).
    events = []
    for imp in imps:
        q = imp["query"]
        for i, (d, c) in enumerate(zip(imp["docs"], imp["clicks"])):
            o = i + base
            if o > max_rank:  # range query: ordinal <= maxRank
                continue
            events.append((q, d, "impression", o))
            if c:
                events.append((q, d, "click", o))

    # Step 1: rank-aggregated CTR.
    clicks_at, imps_at = {}, {}
    for _, _, action, o in events:
        table = clicks_at if action == "click" else imps_at
        table[o] = table.get(o, 0) + 1
    if truncate:
        clicks_at = _srw_terms_top(clicks_at, max_rank)
        imps_at = _srw_terms_top(imps_at, max_rank)
    rank_ctr = []
    for o in range(max_rank):
        n = imps_at.get(o, 0)
        rank_ctr.append(clicks_at.get(o, 0) / n if n > 0 else 0.0)

    # Step 2: per (query, doc) clicks, impressions and lowest ordinal.
    pairs = {}
    for q, d, action, o in events:
        st = pairs.setdefault((q, d), {"clicks": 0, "impressions": 0, "rank": None})
        if action == "click":
            st["clicks"] += 1
        else:
            st["impressions"] += 1
        if st["rank"] is None or o < st["rank"]:
            st["rank"] = o

    # Step 3: COEC per pair.
    out_pairs = []
    for (q, d) in sorted(pairs):
        st = pairs[(q, d)]
        best = st["rank"]
        ctr = rank_ctr[best] if 0 <= best < max_rank else 0.0
        expected = ctr * st["impressions"]
        coec = st["clicks"] / expected if expected > 0 else 0.0
        out_pairs.append({
            "query": q,
            "doc": d,
            "clicks": st["clicks"],
            "impressions": st["impressions"],
            "rank": best,
            "expected_clicks": expected,
            "coec": coec,
            "rating": _java_format_3f(coec),
        })

    notes = [
        "SRW CoecClickModel (opensearch-project/search-relevance @ d8be5d1): "
        "ctr[o] = clicks/impressions at 0-based ordinal o for o < max_rank; "
        "expected = ctr[lowest ordinal of the pair] * pair impressions; "
        "coec = clicks/expected, 0 when expected == 0; rating = Java \"%.3f\" (HALF_UP).",
        "events are filtered with ordinal <= max_rank (inclusive), so ordinal "
        "max_rank counts toward pair clicks/impressions but has no CTR (treated as 0).",
        "ordinal_base=%d: docs[i] has ordinal i+%d." % (base, base),
        "srw_terms_truncation=%s: per action only the top max_rank ordinal buckets "
        "(count desc, key asc) enter the rank CTR." % ("true" if truncate else "false"),
        "query text is used verbatim (no lowercasing/trimming); pairs without clicks are kept.",
    ]
    return {"rank_ctr": rank_ctr, "pairs": out_pairs, "notes": notes}


# ---------------------------------------------------------------------------
# 3. Intervention harvesting, simple ratio estimator relative to rank 1
# ---------------------------------------------------------------------------
#
# Agarwal, Zaitsev, Wang, Li, Najork, Joachims, "Estimating Position Bias
# without Intrusive Interventions", WSDM 2019.  Under the PBM,
# E[c_qdk / n_qdk] = p_k * rel_qd, so for pairs seen at both rank 1 and rank k
#     ratio_k = sum_{S_k} c_qdk/n_qdk  /  sum_{S_k} c_qd1/n_qd1  ~  p_k / p_1,
#     S_k = {(q, d) : n_qd1 > 0 and n_qdk > 0}.
# The paper's click estimate c^{k,k'}_k weights each click by the inverse of how
# often (q, d) was placed at k, which is this per-pair CTR sum; its recommended
# estimator is the joint "AllPairs" extremum estimator, not implemented here.
#
# Output: ratio[0] = 1.0 and pairs[0] = #{(q, d) : n_qd1 > 0} (S_1 by the same
# definition); ratio[k-1] = null when S_k is empty or the denominator is 0.

def cmd_harvest(data):
    imps = _impressions(data)
    k = _positive_int(data, "max_rank")
    n = {}  # (q, d) -> [impressions at rank 1..k]
    c = {}  # (q, d) -> [clicks at rank 1..k]
    for imp in imps:
        q = imp["query"]
        for i, (d, clicked) in enumerate(zip(imp["docs"], imp["clicks"])):
            if i >= k:
                break
            key = (q, d)
            if key not in n:
                n[key] = [0] * k
                c[key] = [0] * k
            n[key][i] += 1
            if clicked:
                c[key][i] += 1

    ratio, pairs = [], []
    for r in range(k):
        members = [key for key in sorted(n) if n[key][0] > 0 and n[key][r] > 0]
        pairs.append(len(members))
        if r == 0:
            ratio.append(1.0)
            continue
        num = sum(c[key][r] / n[key][r] for key in members)
        den = sum(c[key][0] / n[key][0] for key in members)
        ratio.append(num / den if members and den > 0 else None)
    return {"ratio": ratio, "pairs": pairs}


# ---------------------------------------------------------------------------
# 4. Counterfactual IPS estimate of DCG for a candidate ranking
# ---------------------------------------------------------------------------
#
# Joachims, Swaminathan, Schnabel, "Unbiased Learning-to-Rank with Biased
# Feedback", WSDM 2017 (IPS-weighted clicks); clipping as in Strehl et al. 2010
# / Joachims et al. 2017 (propensity floored at tau).
#
# v_i = sum over clicked logged positions r <= K (K = len(propensities)) of
#         [d in candidate[q] top `cutoff`, at rank j] / log2(j+1) / max(p_r, tau)
# estimate = mean v_i over all n logged impressions (v_i = 0 if q has no
# candidate); variance_of_mean = sample variance (n-1) / n; naive = the same
# sum without the 1/max(p_r, tau) weight (same positions r <= K).  A document
# listed twice in the candidate ranking uses its first (best) rank.

def cmd_ips(data):
    imps = _impressions(data)
    props = data.get("propensities")
    if not isinstance(props, list) or not props:
        raise ValueError("'propensities' must be a non-empty list")
    tau = data.get("clip")
    floor = float(tau) if tau is not None else 0.0
    candidate = data.get("candidate") or {}
    cutoff = data.get("cutoff")

    cand_rank = {}
    for q, ranking in candidate.items():
        ranks = {}
        for j, d in enumerate(ranking, start=1):
            if cutoff is not None and j > cutoff:
                break
            ranks.setdefault(d, j)
        cand_rank[q] = ranks

    values, naive = [], []
    for imp in imps:
        ranks = cand_rank.get(imp["query"])
        v = w = 0.0
        if ranks is not None:
            for r, (d, clicked) in enumerate(zip(imp["docs"], imp["clicks"]), start=1):
                if r > len(props):
                    break
                if not clicked or d not in ranks:
                    continue
                gain = 1.0 / math.log2(ranks[d] + 1)
                p = max(float(props[r - 1]), floor)
                if p <= 0.0:
                    raise ValueError("propensity at rank %d is 0 and no positive clip" % r)
                v += gain / p
                w += gain
        values.append(v)
        naive.append(w)

    n = len(values)
    mean = sum(values) / n if n else None
    var_mean = None
    if n >= 2:
        var_mean = sum((x - mean) ** 2 for x in values) / (n - 1) / n
    return {
        "estimate": mean,
        "variance_of_mean": var_mean,
        "n": n,
        "naive": sum(naive) / n if n else None,
    }


COMMANDS = {"pbm": cmd_pbm, "coec": cmd_coec, "harvest": cmd_harvest, "ips": cmd_ips}


def main(argv):
    if len(argv) != 2 or argv[1] not in COMMANDS:
        sys.stderr.write("usage: reference.py {%s} < input.json > output.json\n" % ",".join(COMMANDS))
        return 2
    data = json.load(sys.stdin)
    result = COMMANDS[argv[1]](data)
    json.dump(result, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
