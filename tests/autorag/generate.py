#!/usr/bin/env python3
"""Generate the AutoRAG conformance fixture: grouped ground truths, retrieved lists, and the
values of AutoRAG's own retrieval metric functions for them.

The reference is the `autorag` package from PyPI (version 0.3.27): its wheel is downloaded
(`pip download autorag==0.3.27 --no-deps`) and its retrieval metric module,
`autorag/evaluation/metric/retrieval.py`, is run unmodified, with the decorator and
`MetricInput` of the same wheel. Installing the package whole is not practical (it pulls in
LLM clients, vector databases, gradio, streamlit, ...), and none of that is used by these
functions: the package's `__init__` files are not run, and the three modules its utility
module imports at load time for other features (`emoji`, `tiktoken`,
`llama_index.embeddings.openai`) are stand-ins. numpy, pandas and pydantic are the real ones.

tests/eval.rs runs `rankpulse eval --ground-truth ground_truth.jsonl --run run.jsonl` and
compares every query's six values with these to 1e-12. The cases cover: the seed's worked
example, no hit, every id a hit, repeated retrieved ids, an id in two groups, groups of one,
a ground truth larger than the list, lists of 1 to 60.

The no_value_* files are the inputs AutoRAG computes nothing for (`None`): a retrieved list
or ground truth that is empty, has an empty group, or holds an id that Python's `str.strip()`
empties (MetricInput.is_fields_notnone), beside valid ones with ids that only look blank or
are padded; with AutoRAG's values (null for None) and each measure's mean as AutoRAG's
retrieval evaluation would take it, over a pandas DataFrame of the values (None left out).

Deterministic: rerunning rewrites tests/autorag/fixtures/ byte for byte.
"""

import importlib
import json
import random
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
VERSION = "0.3.27"
CASES = 2500
SEED = 3103
METRICS = ["retrieval_precision", "retrieval_recall", "retrieval_f1", "retrieval_mrr", "retrieval_map", "retrieval_ndcg"]


def load_autorag(workdir):
    subprocess.run([sys.executable, "-m", "pip", "download", f"autorag=={VERSION}", "--no-deps", "-q", "-d", workdir],
                   check=True)
    wheel = next(Path(workdir).glob(f"autorag-{VERSION}-*.whl"))
    root = Path(workdir) / "pkg"
    zipfile.ZipFile(wheel).extractall(root)
    # Packages whose __init__ would import the unrelated features: namespaces over the real files.
    for name in ["autorag", "autorag.evaluation", "autorag.evaluation.metric", "autorag.schema", "autorag.utils"]:
        module = types.ModuleType(name)
        module.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = module
    # What autorag/utils/util.py imports at load time for other features.
    sys.modules["emoji"] = types.ModuleType("emoji")
    sys.modules["tiktoken"] = types.ModuleType("tiktoken")
    for name in ["llama_index", "llama_index.embeddings", "llama_index.embeddings.openai"]:
        sys.modules[name] = types.ModuleType(name)
    sys.modules["llama_index.embeddings.openai"].OpenAIEmbedding = object
    retrieval = importlib.import_module("autorag.evaluation.metric.retrieval")
    metric_input = importlib.import_module("autorag.schema.metricinput").MetricInput
    return retrieval, metric_input


def cases(rng):
    out = [("seed-example", [["test-1", "test-2"], ["test-3"]], ["test-1", "pred-1", "test-2", "pred-3"])]
    for i in range(CASES - 1):
        universe = [f"doc-{j}" for j in range(rng.randint(3, 80))]
        groups = []
        for _ in range(rng.choice([1, 1, 2, 3, rng.randint(1, 8)])):
            groups.append(rng.sample(universe, min(len(universe), rng.choice([1, 1, 2, rng.randint(1, 5)]))))
        if rng.random() < 0.1 and len(groups) > 1:
            groups[1].append(groups[0][0])  # an id in two groups
        n = rng.choice([1, 2, 4, rng.randint(1, 20), rng.randint(1, 60)])
        kind = rng.random()
        if kind < 0.1:
            retrieved = [f"miss-{j}" for j in range(n)]  # no hit
        elif kind < 0.15:
            retrieved = [rng.choice(g) for g in groups][:n] or [groups[0][0]]  # hits only
        else:
            retrieved = [rng.choice(universe) for _ in range(n)]  # repeats likely
        out.append((f"q{i:05d}", groups, retrieved))
    return out


def no_value_cases():
    return [
        ("valid-groups", [["a", "b"], ["c"]], ["a", "x", "c", "y"]),
        ("valid-second", [["a"]], ["x", "a"]),
        ("valid-padded", [[" a "]], [" a ", "a"]),
        ("valid-escape", [["a"]], ["\x1b", "a"]),
        ("valid-zero-width", [["\u200b"]], ["\u200b", "a"]),
        ("blank-ranked", [["a"]], ["a", " "]),
        ("empty-ranked-id", [["a"]], ["", "a"]),
        ("tab-ranked", [["a"]], ["\t"]),
        ("separator-ranked", [["a"]], ["a", "\x1f"]),
        ("nbsp-ranked", [["a"]], ["\u00a0", "a"]),
        ("ideographic-space-ranked", [["a"]], ["a", "\u3000"]),
        ("empty-ranking", [["a"]], []),
        ("blank-gt-id", [["a", " "]], ["a"]),
        ("empty-gt-id", [["a"], [""]], ["a"]),
        ("separator-gt-id", [["\x1c"]], ["a"]),
        ("empty-group", [["a"], []], ["a"]),
        ("no-group", [], ["a"]),
    ]


def write_no_value(retrieval, metric_input):
    import pandas as pd

    rows = no_value_cases()
    inputs = [metric_input(retrieval_gt=groups, retrieved_ids=retrieved) for _, groups, retrieved in rows]
    values = {m: getattr(retrieval, m)(inputs) for m in METRICS}
    with open(FIXTURES / "no_value_ground_truth.jsonl", "w") as f:
        for qid, groups, _ in rows:
            f.write(json.dumps({"query": qid, "retrieval_gt": groups}) + "\n")
    with open(FIXTURES / "no_value_run.jsonl", "w") as f:
        for qid, _, retrieved in rows:
            f.write(json.dumps({"query": qid, "results": retrieved}) + "\n")
    means = pd.DataFrame(values).mean()
    expected = {
        "queries": {qid: {m: values[m][i] for m in METRICS} for i, (qid, _, _) in enumerate(rows)},
        "all": {m: float(means[m]) for m in METRICS},
    }
    none = [qid for qid, row in expected["queries"].items() if row["retrieval_precision"] is None]
    assert none and all(not q.startswith("valid") for q in none), none
    (FIXTURES / "no_value_expected.json").write_text(json.dumps(expected, sort_keys=True) + "\n")
    print(f"{len(rows)} no-value cases, {len(none)} without a value")


def main():
    rng = random.Random(SEED)
    with tempfile.TemporaryDirectory() as workdir:
        retrieval, metric_input = load_autorag(workdir)
        rows = cases(rng)
        inputs = [metric_input(retrieval_gt=groups, retrieved_ids=retrieved) for _, groups, retrieved in rows]
        values = {m: getattr(retrieval, m)(inputs) for m in METRICS}
        FIXTURES.mkdir(parents=True, exist_ok=True)
        write_no_value(retrieval, metric_input)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with open(FIXTURES / "ground_truth.jsonl", "w") as f:
        for qid, groups, _ in rows:
            f.write(json.dumps({"query": qid, "retrieval_gt": groups}) + "\n")
    with open(FIXTURES / "run.jsonl", "w") as f:
        for qid, _, retrieved in rows:
            f.write(json.dumps({"query": qid, "results": retrieved}) + "\n")
    expected = {qid: {m: values[m][i] for m in METRICS} for i, (qid, _, _) in enumerate(rows)}
    assert all(v is not None for row in expected.values() for v in row.values())
    assert expected["seed-example"]["retrieval_precision"] == 0.5 and expected["seed-example"]["retrieval_mrr"] == 0.5
    (FIXTURES / "expected.json").write_text(json.dumps(expected, sort_keys=True) + "\n")
    print(f"{len(rows)} cases; seed example: {expected['seed-example']}")


if __name__ == "__main__":
    main()
