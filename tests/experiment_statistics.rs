//! rankpulse's experiment statistics against the reference tools, on the same sums.
//!
//! `tests/experiment_statistics/reference.py` generates the cases and computes every expected
//! figure with gbstats 0.8.0 (GrowthBook's statistics), statsmodels and scipy; this test
//! recomputes them with `rankpulse::stats` and requires agreement to 1e-9 (see the script for
//! which tool answers what). The script runs here, so the references are the installed tools,
//! not a copy of their answers.
//!
//! The simulations (the CUPED interval's width at a known correlation, A/A false positives with
//! CUPED, the ETA on a stream) are in `tests/experiment_readout.rs`, through the binary.

use std::process::Command;

use rankpulse::stats::bayes::{readout, Arm, Prior};
use rankpulse::stats::cuped::{self, CupedMoments};
use rankpulse::stats::multiple::{benjamini_hochberg, holm};
use rankpulse::stats::power::minimum_detectable_effect;
use rankpulse::stats::sequential::MixtureBoundary;
use rankpulse::stats::{compare, estimate, guardrail_p_value, Moments};
use serde_json::Value;

const TOLERANCE: f64 = 1e-9;

fn cases() -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/experiment_statistics/reference.py");
    let out = Command::new("python3").arg(script).output().expect("python3 runs");
    assert!(
        out.status.success(),
        "{script} failed (the test command installs gbstats==0.8.0 and statsmodels): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the reference prints JSON")
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn close(what: &str, got: f64, want: f64) {
    assert!((got - want).abs() <= TOLERANCE * want.abs().max(1.0), "{what}: rankpulse {got}, reference {want}");
}

fn buckets(rows: &Value) -> CupedMoments {
    let mut moments = CupedMoments::default();
    for row in rows.as_array().unwrap() {
        let r: Vec<f64> = row.as_array().unwrap().iter().map(num).collect();
        moments.add_bucket(r[0], r[1], r[2], r[3]);
    }
    moments
}

fn check_welch(what: &str, got: &cuped::WelchResult, want: &Value) {
    close(&format!("{what} estimate"), got.estimate, num(&want["estimate"]));
    close(&format!("{what} ci low"), got.ci[0], num(&want["ci"][0]));
    close(&format!("{what} ci high"), got.ci[1], num(&want["ci"][1]));
    close(&format!("{what} p-value"), got.p_value, num(&want["p_value"]));
}

fn check_cuped(kind: &str, cases: &Value, confidence: f64, tuning: f64) {
    for (i, case) in cases.as_array().unwrap().iter().enumerate() {
        let (control, treatment) = (buckets(&case["control"]), buckets(&case["treatment"]));
        let got = cuped::compare(&control, &treatment, confidence).expect("both arms have spread");
        close(&format!("{kind} {i} theta"), got.theta, num(&case["theta"]));
        check_welch(&format!("{kind} {i} difference"), &got.difference, &case["difference"]);
        check_welch(
            &format!("{kind} {i} relative difference"),
            got.relative_difference.as_ref().unwrap(),
            &case["relative_difference"],
        );
        if let Some(df) = case["df"].as_f64() {
            close(&format!("{kind} {i} df"), got.df, df);
        }
        // gbstats's sequential test counts units; here every unit is one impression.
        if case["sequential"].is_object() {
            let boundary = MixtureBoundary::tightest_at(tuning, 1.0 - confidence);
            let look = cuped::sequential(&got, [control.n, treatment.n], &boundary).expect("a look");
            let want = &case["sequential"];
            close(&format!("{kind} {i} sequential low"), look.difference_cs[0], num(&want["ci"][0]));
            close(&format!("{kind} {i} sequential high"), look.difference_cs[1], num(&want["ci"][1]));
            close(&format!("{kind} {i} sequential p-value"), look.p_value, num(&want["p_value"]));
        }
    }
}

#[test]
fn statistics_equal_gbstats_statsmodels_and_scipy() {
    let cases = cases();
    let confidence = num(&cases["confidence"]);

    // CUPED: per-unit means against gbstats; bucket ratios against the written-out delta method.
    let tuning = num(&cases["tuning"]);
    check_cuped("cuped_unit", &cases["cuped_unit"], confidence, tuning);
    check_cuped("cuped_ratio", &cases["cuped_ratio"], confidence, tuning);
    assert!(cases["cuped_unit"][0]["sequential"].is_object(), "the sequential cases are there");
    let all_missing = cases["cuped_ratio"].as_array().unwrap().iter().any(|c| num(&c["theta"]) == 0.0);
    assert!(all_missing, "a case without any pre-period data (theta 0) is covered");

    // The Bayesian read-out against gbstats's EffectBayesianABTest.
    for (i, case) in cases["bayes"].as_array().unwrap().iter().enumerate() {
        let arm = |v: &Value| Arm {
            n: num(&v["n"]),
            mean: num(&v["mean"]),
            unadjusted_mean: num(&v["unadjusted_mean"]),
            variance: num(&v["variance"]),
        };
        let prior = Prior {
            mean: num(&case["prior"]["mean"]),
            variance: num(&case["prior"]["variance"]),
            proper: case["prior"]["proper"].as_bool().unwrap(),
        };
        let got = readout(
            arm(&case["control"]),
            arm(&case["treatment"]),
            prior,
            case["relative"].as_bool().unwrap(),
            case["inverse"].as_bool().unwrap(),
            confidence,
        )
        .expect("a read-out");
        close(&format!("bayes {i} chance to win"), got.chance_to_win, num(&case["chance_to_win"]));
        close(&format!("bayes {i} expected"), got.expected, num(&case["expected"]));
        close(&format!("bayes {i} ci low"), got.ci[0], num(&case["ci"][0]));
        close(&format!("bayes {i} ci high"), got.ci[1], num(&case["ci"][1]));
        close(&format!("bayes {i} risk control"), got.risk_control, num(&case["risk"][0]));
        close(&format!("bayes {i} risk treatment"), got.risk_treatment, num(&case["risk"][1]));
    }

    // Holm and Benjamini-Hochberg against statsmodels' multipletests.
    for (i, case) in cases["multiple"].as_array().unwrap().iter().enumerate() {
        let p: Vec<f64> = case["p_values"].as_array().unwrap().iter().map(num).collect();
        for (name, got) in [("holm", holm(&p)), ("benjamini_hochberg", benjamini_hochberg(&p))] {
            for (j, (g, w)) in got.iter().zip(case[name].as_array().unwrap()).enumerate() {
                close(&format!("multiple {i} {name} [{j}]"), *g, num(w));
            }
        }
    }

    // The MDE: the closed form, and statsmodels's power at it exceeds the target by its far tail only.
    for case in cases["power"].as_array().unwrap() {
        let (se, confidence, power) = (num(&case["se"]), num(&case["confidence"]), num(&case["power"]));
        close("mde", minimum_detectable_effect(se, confidence, power), num(&case["mde"]));
        let far_tail = num(&case["power_at_mde"]) - power;
        assert!((0.0..3e-6).contains(&far_tail), "statsmodels's power at the MDE is {far_tail} above {power}");
    }

    // The guardrail's one-sided Welch test against scipy's ttest_ind(alternative=...).
    for (i, case) in cases["guardrail"].as_array().unwrap().iter().enumerate() {
        let est = |v: &Value| {
            let values: Vec<f64> = v.as_array().unwrap().iter().map(num).collect();
            let m = Moments {
                n: values.len() as u64,
                sum: values.iter().sum(),
                sum_squares: values.iter().map(|x| x * x).sum(),
            };
            estimate(m, None, confidence)
        };
        let cmp = compare(&est(&case["treatment"]), &est(&case["control"]), confidence);
        // Higher is better: worse is "less"; lower is better: worse is "greater".
        close(&format!("guardrail {i} less"), guardrail_p_value(&cmp, false).unwrap(), num(&case["less"]));
        close(&format!("guardrail {i} greater"), guardrail_p_value(&cmp, true).unwrap(), num(&case["greater"]));
    }
}
