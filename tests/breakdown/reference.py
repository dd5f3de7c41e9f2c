"""The breakdown's figures recomputed from the impressions' own metric values, for
tests/breakdown.rs: per dimension value and variant the mean and standard deviation (numpy),
per value the Welch comparison of each variant with the control (scipy.stats.ttest_ind with
equal_var=False: difference, confidence interval, p-value), per dimension Cochran's Q
(statsmodels.stats.meta_analysis.combine_effects: q, i2, test_homogeneity's p-value, the
fixed-effect mean and its standard error) and the Benjamini-Hochberg q-values across values
(statsmodels.stats.multitest.multipletests, method fdr_bh).

Reads {"confidence": c, "control": name, "metrics": [...], "dimensions": [...],
"min_impressions": n, "rows": [[variant, {dimension: value}, [metric values]], ...]} on stdin;
prints the figures as JSON. A value takes part in the test and the q-values only with at least
n impressions in both arms (ab.min_dimension_impressions); the others are listed as left out. Installed by the test command (tests/experiment_statistics/requirements.txt).
"""

import json
import sys

import numpy as np
from scipy import stats
from statsmodels.stats.meta_analysis import combine_effects
from statsmodels.stats.multitest import multipletests


def main():
    case = json.load(sys.stdin)
    confidence, control, metrics = case["confidence"], case["control"], case["metrics"]
    least = case["min_impressions"]
    out = {}
    for dimension in case["dimensions"]:
        values = sorted({row[1][dimension] for row in case["rows"]})
        per_value = {}
        for value in values:
            rows = [row for row in case["rows"] if row[1][dimension] == value]
            variants = sorted({row[0] for row in rows})
            arms = {v: np.array([row[2] for row in rows if row[0] == v], dtype=float) for v in variants}
            figures = {"variants": {}, "comparisons": {}}
            for v, a in arms.items():
                figures["variants"][v] = {
                    "n": len(a),
                    "mean": a.mean(axis=0).tolist(),
                    "sd": a.std(axis=0, ddof=1).tolist(),
                }
            for v in variants:
                if v == control or control not in arms:
                    continue
                t, c = arms[v], arms[control]
                per_metric = {"enough": bool(len(t) >= least and len(c) >= least)}
                for k, metric in enumerate(metrics):
                    res = stats.ttest_ind(t[:, k], c[:, k], equal_var=False)
                    ci = res.confidence_interval(confidence)
                    var = t[:, k].var(ddof=1) / len(t) + c[:, k].var(ddof=1) / len(c)
                    per_metric[metric] = {
                        "difference": float(t[:, k].mean() - c[:, k].mean()),
                        "ci": [float(ci.low), float(ci.high)],
                        "p_value": float(res.pvalue),
                        "variance": float(var),
                    }
                figures["comparisons"][v] = per_metric
            per_value[value] = figures
        heterogeneity, q_values = {}, {}
        compared = sorted({v for f in per_value.values() for v in f["comparisons"]})
        for v in compared:
            for metric in metrics:
                compared = [(value, f["comparisons"][v]) for value, f in per_value.items() if v in f["comparisons"]]
                tested = [(value, c[metric]) for value, c in compared if c["enough"]]
                effects = np.array([c["difference"] for _, c in tested])
                variances = np.array([c["variance"] for _, c in tested])
                res = combine_effects(effects, variances)
                heterogeneity[f"{v}/{metric}"] = {
                    "q": float(res.q),
                    "df": len(tested) - 1,
                    "p_value": float(res.test_homogeneity().pvalue),
                    "i_squared": float(res.i2),
                    "pooled_difference": float(res.mean_effect_fe),
                    "pooled_se": float(res.sd_eff_w_fe),
                    "left_out": sorted(value for value, c in compared if not c["enough"]),
                }
                adjusted = multipletests([c["p_value"] for _, c in tested], method="fdr_bh")[1]
                q_values[f"{v}/{metric}"] = {value: float(q) for (value, _), q in zip(tested, adjusted)}
        out[dimension] = {"values": per_value, "heterogeneity": heterogeneity, "q_values": q_values}
    json.dump(out, sys.stdout)


main()
