//! The click log's unit tests.

use super::*;
use crate::checkpoint::Inconsistency;
use crate::ids::doc_key;

const HOUR: i64 = 3_600_000;

fn log(max_queries: usize) -> ClickLog {
    ClickLog::new(LogSettings { max_rank: 3, max_queries, horizon_ms: HOUR, click_threshold: 1 })
}

/// Offers impression `id` of `query` showing `docs`, then finalizes it at `at` with `gains`.
fn show(log: &mut ClickLog, id: u128, query: &str, docs: &[&str], at: i64, gains: &[u8]) {
    let keys: Vec<DocKey> = docs.iter().map(|d| doc_key(d)).collect();
    let name = |rank: usize| docs[rank];
    log.offer(
        id,
        &Offered {
            query: Some((query, xxhash_rust::xxh3::xxh3_64(query.as_bytes()))),
            segment: "",
            docs: &keys,
            doc_name: &name,
        },
    );
    log.finalize(id, at, gains);
}

fn table(log: &ClickLog) -> Vec<(String, String, u16, Cell)> {
    let mut t = NamedTable::new(log.settings().max_rank);
    log.add_to(&mut t);
    let mut out = Vec::new();
    for (n, cells) in t.names.iter().zip(&t.table.pairs) {
        out.extend(cells.iter().map(|&(r, c)| (n.query.to_string(), n.doc.to_string(), r, c)));
    }
    out.sort_by(|a, b| (&a.0, &a.1, a.2).cmp(&(&b.0, &b.1, b.2)));
    out
}

#[test]
fn showings_and_clicks_are_counted_per_rank_up_to_max_rank() {
    let mut log = log(10);
    show(&mut log, 1, "shoes", &["a", "b", "c", "d"], 0, &[0, 2, 0, 1]);
    show(&mut log, 2, "shoes", &["b", "a"], 10, &[1, 0]);
    let cell = |impressions, clicks| Cell { impressions, clicks };
    assert_eq!(
        table(&log),
        [
            ("shoes".into(), "a".into(), 0, cell(1, 0)),
            ("shoes".into(), "a".into(), 1, cell(1, 0)),
            ("shoes".into(), "b".into(), 0, cell(1, 1)),
            ("shoes".into(), "b".into(), 1, cell(1, 1)),
            ("shoes".into(), "c".into(), 2, cell(1, 0)),
        ]
    );
    assert_eq!((log.counts.tracked, log.sizes()), (2, (1, 3, 0)), "d, at rank 4, is not tracked");
}

#[test]
fn a_busier_query_replaces_the_least_shown_and_pending_impressions_of_it_are_dropped() {
    let mut log = log(2);
    show(&mut log, 1, "head", &["a"], 0, &[1]);
    show(&mut log, 2, "head", &["a"], 0, &[1]);
    show(&mut log, 3, "tail", &["b"], 0, &[0]);
    // A third query is counted in the sketch; it replaces "tail" (1 showing) once its
    // own count there exceeds that.
    let keys = [doc_key("c")];
    let name = |_: usize| "c";
    let offered =
        Offered { query: Some(("new", xxhash_rust::xxh3::xxh3_64(b"new"))), segment: "", docs: &keys, doc_name: &name };
    log.offer(4, &offered);
    assert_eq!((log.counts.untracked, log.sizes().0), (1, 2));
    // An impression of "tail" offered, then "tail" replaced before it is finalized.
    let tail = [doc_key("b")];
    let tail_name = |_: usize| "b";
    log.offer(
        5,
        &Offered {
            query: Some(("tail", xxhash_rust::xxh3::xxh3_64(b"tail"))),
            segment: "",
            docs: &tail,
            doc_name: &tail_name,
        },
    );
    log.offer(6, &offered);
    assert_eq!(log.counts.queries_replaced, 1);
    log.finalize(5, 0, &[1]);
    log.finalize(6, 0, &[1]);
    assert_eq!(log.counts.dropped, 1, "the replaced query's pending impression");
    let queries: Vec<String> = table(&log).into_iter().map(|t| t.0).collect();
    assert_eq!(queries, ["head", "new"]);
}

#[test]
fn counts_slide_over_two_horizons_and_older_ones_are_dropped() {
    let mut log = log(10);
    show(&mut log, 1, "q", &["a"], 0, &[1]);
    show(&mut log, 2, "q", &["b"], HOUR, &[1]);
    assert_eq!(table(&log).len(), 2, "the previous epoch still counts");
    show(&mut log, 3, "q", &["b"], 2 * HOUR, &[0]);
    assert_eq!(table(&log).iter().map(|t| (t.1.as_str(), t.3.impressions)).collect::<Vec<_>>(), [("b", 2)]);
    assert_eq!(log.sizes().1, 1, "a's pair is forgotten");
    show(&mut log, 4, "q", &["b"], 0, &[0]);
    assert_eq!(log.counts.outside_horizon, 1);
    show(&mut log, 5, "r", &["c"], 10 * HOUR, &[0]);
    assert_eq!(table(&log).len(), 1, "a gap of several epochs drops everything before it");
}

#[test]
fn a_snapshot_restores_the_same_log_and_a_forged_one_is_refused() {
    let mut log = log(10);
    show(&mut log, 1, "q", &["a", "b"], 0, &[1, 0]);
    let keys = [doc_key("a")];
    let name = |_: usize| "a";
    log.offer(
        9,
        &Offered { query: Some(("q", xxhash_rust::xxh3::xxh3_64(b"q"))), segment: "", docs: &keys, doc_name: &name },
    );
    let bytes = postcard::to_stdvec(&log.state()).unwrap();
    let mut restored = ClickLog::restore(log.settings(), postcard::from_bytes(&bytes).unwrap()).unwrap();
    assert_eq!(table(&restored), table(&log));
    restored.finalize(9, 0, &[1]);
    assert_eq!(restored.counts.tracked, 2, "the pending impression is finalized after the restore");
    let refused = |forge: &dyn Fn(&mut LogState)| {
        let mut forged: LogState = postcard::from_bytes(&bytes).unwrap();
        forge(&mut forged);
        ClickLog::restore(log.settings(), forged).err()
    };
    let err = refused(&|forged| forged.pairs[0].as_mut().unwrap().query = 7);
    assert!(matches!(err, Some(Inconsistency::Dangling { what: "click log query slot", index: 0 })), "{err:?}");
    let err = refused(&|forged| forged.showings.values_mut().next().unwrap().pairs[0] = 99);
    assert!(
        matches!(err, Some(Inconsistency::Beyond { what: "a pending showing's pair slot", index: 99, .. })),
        "{err:?}"
    );
    let err = refused(&|forged| forged.showings.values_mut().next().unwrap().query = 99);
    assert!(
        matches!(err, Some(Inconsistency::Beyond { what: "a pending showing's query slot", index: 99, .. })),
        "{err:?}"
    );
    let err = refused(&|forged| forged.showings.values_mut().next().unwrap().ranks = u8::MAX);
    assert!(matches!(err, Some(Inconsistency::TooMany { what: "ranks in a pending showing", .. })), "{err:?}");
    let err = refused(&|forged| {
        forged.sketch.pop();
    });
    assert!(matches!(err, Some(Inconsistency::Shape { what: "counters in the click log's sketch", .. })), "{err:?}");
}
