#!/usr/bin/env python3
"""Generate the fixtures of the measures for incomplete judgments, trec_eval as the oracle.

tests/judgments_incomplete.rs replays the two suites of tests/judgments/fixtures/
(written by generate.py: live-like impressions with unjudged results, judged
documents never shown, repeated results and empty lists) and compares every
judged impression's bpref, map_condensed@k and ndcg_condensed@k with what this
script writes to tests/judgments/fixtures/<suite>/incomplete.json.

The oracle is trec_eval itself, built here from its C sources (no Python
binding): one trec_eval query per judged impression, its qrels every judgment
of the impression's query (shown or not), its run the shown results with
strictly decreasing scores, a repeated result renamed so that it is outside the
pool after its first rank (trec_eval refuses a run that ranks a document twice;
rankpulse counts a judged document at its first rank only). Then

* bpref:              trec_eval -q -l T -m bpref
* map_condensed@k:    trec_eval -q -l T -J -m map_cut.K1,K2,...
* ndcg_condensed@k:   trec_eval -q -l T -J -m ndcg_cut.K1,K2,...

-J is trec_eval's "calculate all values only over the judged documents": the
unjudged results are removed from the ranking before the measure is computed,
Sakai's condensed list ("Alternatives to Bpref", SIGIR 2007). T is the suite's
judgments.relevance_threshold, the cutoffs its metrics.cutoffs. An impression
with no results is no trec_eval query: every value 0.

trec_eval prints per-query values with %6.4f; the build here replaces that
format with %.17g in meas_print_single.c and meas_print_final.c (nothing else
is changed) so that the fixture holds the doubles trec_eval computed. Every
tarball given is built and run; their values must be identical (9.0.8 and 10.0
share m_bpref.c, m_map_cut.c, m_ndcg_cut.c and form_res_rels.c's -J path), and
the first one's are written.

Also written: the suites' judged group means of these measures (math.fsum over
judged impressions, cumulative and per 1h window) and, for the suite with
independent impressions, scipy's Welch test of bpref and ndcg_condensed@10,
treatment against control.

To regenerate (after generate.py changed the suites, or to check them):

    python3 tests/judgments/incomplete.py TREC_EVAL_TARBALL [TREC_EVAL_TARBALL ...]

for example with the vendored sources:

    python3 tests/judgments/incomplete.py \\
        /work/shared/vendor/trec_eval-9.0.8.tar.gz /work/shared/vendor/trec_eval-10.0-f425365.tar.gz

Needs gcc, make and scipy. Deterministic: rerunning rewrites the files byte
for byte.
"""

import json
import math
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

from scipy import stats

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SUITES = ["query_jsonl", "query_id_qrels"]
WINDOW_MS = 3_600_000


def build_trec_eval(tarball, workdir):
    """trec_eval built from `tarball`, its per-query values printed at full precision."""
    with tarfile.open(tarball) as tar:
        tar.extractall(workdir, filter="data")
        top = Path(workdir) / tar.getnames()[0].split("/")[0]
    for name in ["meas_print_single.c", "meas_print_final.c"]:
        path = top / name
        text = path.read_text()
        if "%6.4f" not in text:
            sys.exit(f"{tarball}: {name} does not print with %6.4f; check the patch")
        path.write_text(text.replace("%6.4f", "%.17g"))
    subprocess.run(["make"], cwd=top, check=True, stdout=subprocess.DEVNULL)
    return top / "trec_eval"


def normalize(text):
    return " ".join(text.split()).lower()


def load_suite(name):
    """The suite's configuration, judged impressions (first of each query id) and judgments."""
    d = FIXTURES / name
    cfg = tomllib.loads((d / "config.toml").read_text())
    j = cfg["judgments"]
    judged_ids = set(json.loads((d / "expected.json").read_text())["impressions"])
    by_query = {}
    for line in (d / j["file"]).read_text().splitlines():
        if not line.strip():
            continue
        if j["file"].endswith(".jsonl"):
            r = json.loads(line)
            query, doc, grade = normalize(r["query"]), r["doc_id"], r["grade"]
        else:
            query, _, doc, grade = line.split()
            grade = int(grade)
        by_query.setdefault(query, {}).setdefault(doc, max(grade, 0))
    impressions = {}
    for line in (d / "impressions.jsonl").read_text().splitlines():
        imp = json.loads(line)
        if imp["query_id"] in judged_ids and imp["query_id"] not in impressions:
            key = normalize(imp["query"]) if j["key"] == "query" else imp["query_id"]
            imp["_judgments"] = by_query[key]
            impressions[imp["query_id"]] = imp
    if len(impressions) != len(judged_ids):
        sys.exit(f"{name}: judged impressions missing from impressions.jsonl")
    return cfg, [impressions[q] for q in sorted(impressions)]


def trec_files(impressions, workdir):
    qrels, run = Path(workdir) / "qrels", Path(workdir) / "run"
    with open(qrels, "w") as q, open(run, "w") as r:
        for imp in impressions:
            if not imp["results"]:
                continue  # no trec_eval query (trec_eval 10.0 refuses qrels of a query without a run)
            qid = imp["query_id"]
            for doc, grade in sorted(imp["_judgments"].items()):
                q.write(f"{qid} 0 {doc} {grade}\n")
            seen = set()
            for rank, doc in enumerate(imp["results"], start=1):
                name = f"{doc}#dup{rank}" if doc in seen else doc
                seen.add(doc)
                r.write(f"{qid} Q0 {name} {rank} {len(imp['results']) - rank + 1} rankpulse\n")
    return qrels, run


def run_trec_eval(binary, args, qrels, run):
    out = subprocess.run([str(binary), "-q", *args, str(qrels), str(run)], check=True, capture_output=True,
                         text=True).stdout
    values = {}
    for line in out.splitlines():
        measure, qid, value = line.split()
        if qid != "all":
            values[(measure, qid)] = float(value)
    return values


def oracle(binary, impressions, threshold, cutoffs, workdir):
    """Per impression: bpref, then map_condensed@k and ndcg_condensed@k per cutoff."""
    qrels, run = trec_files(impressions, workdir)
    cut = ",".join(map(str, cutoffs))
    plain = run_trec_eval(binary, ["-l", str(threshold), "-m", "bpref"], qrels, run)
    condensed = run_trec_eval(binary, ["-J", "-l", str(threshold), "-m", f"map_cut.{cut}", "-m", f"ndcg_cut.{cut}"],
                              qrels, run)
    out = {}
    for imp in impressions:
        qid = imp["query_id"]
        if not imp["results"]:
            if ("bpref", qid) in plain:
                sys.exit(f"{qid}: trec_eval evaluated an empty run")
            out[qid] = [0.0] * (1 + 2 * len(cutoffs))
            continue
        values = [plain[("bpref", qid)]]
        for k in cutoffs:
            values += [condensed[(f"map_cut_{k}", qid)], condensed[(f"ndcg_cut_{k}", qid)]]
        out[qid] = values
    return out


def main():
    tarballs = sys.argv[1:]
    if not tarballs:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        binaries = []
        for i, tarball in enumerate(tarballs):
            (Path(tmp) / f"src{i}").mkdir()
            binaries.append(build_trec_eval(tarball, Path(tmp) / f"src{i}"))
        for name in SUITES:
            cfg, impressions = load_suite(name)
            threshold, cutoffs = cfg["judgments"]["relevance_threshold"], sorted(cfg["metrics"]["cutoffs"])
            keys = ["bpref"] + [f"{m}_condensed@{k}" for k in cutoffs for m in ["map", "ndcg"]]
            runs = [oracle(b, impressions, threshold, cutoffs, tmp) for b in binaries]
            for other, tarball in zip(runs[1:], tarballs[1:]):
                if other != runs[0]:
                    sys.exit(f"{name}: {tarball} disagrees with {tarballs[0]}")
            values = {qid: dict(zip(keys, v)) for qid, v in runs[0].items()}

            def means(imps):
                groups = {}
                for imp in imps:
                    groups.setdefault((imp["experiment"], imp["variant"]), []).append(values[imp["query_id"]])
                return [{"experiment": e, "variant": v, "impressions": len(vs),
                         "metrics": {k: math.fsum(x[k] for x in vs) / len(vs) for k in keys}}
                        for (e, v), vs in sorted(groups.items())]

            windows = {}
            for imp in impressions:
                windows.setdefault(imp["timestamp"] // WINDOW_MS * WINDOW_MS, []).append(imp)
            ab = {}
            if cfg["ab"]["unit"] == "impression":
                for experiment, (control, treatment) in [("e1", ("control", "treatment")), ("e2", ("a", "b"))]:
                    side = lambda v: [values[i["query_id"]] for i in impressions
                                      if i["experiment"] == experiment and i["variant"] == v]
                    c, t = side(control), side(treatment)
                    ab[experiment] = {}
                    for k in ["bpref", "ndcg_condensed@10"]:
                        xs, ys = [x[k] for x in t], [x[k] for x in c]
                        result = stats.ttest_ind(xs, ys, equal_var=False)
                        ab[experiment][k] = {"difference": math.fsum(xs) / len(xs) - math.fsum(ys) / len(ys),
                                             "p_value": float(result.pvalue)}
            unjudged = sum(1 for imp in impressions for d in imp["results"] if d not in imp["_judgments"])
            shown = sum(len(imp["results"]) for imp in impressions)
            expected = {
                "suite": name,
                "oracle": [Path(t).name for t in tarballs],
                "keys": keys,
                "impressions": {qid: runs[0][qid] for qid in sorted(values)},
                "groups": means(impressions),
                "windows": [{"start": s, "groups": means(imps)} for s, imps in sorted(windows.items())],
                "ab": ab,
            }
            with open(FIXTURES / name / "incomplete.json", "w", encoding="utf-8", newline="\n") as f:
                json.dump(expected, f, sort_keys=True, separators=(",", ":"))
                f.write("\n")
            print(f"{name}: {len(impressions)} judged impressions, {unjudged} of {shown} shown results unjudged; "
                  f"{len(tarballs)} trec_eval builds agree")


if __name__ == "__main__":
    main()
