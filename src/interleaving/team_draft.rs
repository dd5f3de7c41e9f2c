//! The reference interleaver: team-draft interleaving (Radlinski, Kurup and Joachims 2008),
//! in the form team-draft multileaving gives it for any number of rankers (Schuth et al. 2014).
//!
//! The algorithm, exactly (so that a search service can reproduce a list bit for bit):
//!
//! 1. The random choices come from SplitMix64 (Steele, Lea and Flood 2014, the generator
//!    `java.util.SplittableRandom` uses) seeded with the caller's seed; [`seed_of`] derives one
//!    from a query id with 64-bit FNV-1a, so the same query always gets the same list.
//! 2. Rounds repeat until the list has `length` results or no ranker has a result left. Each
//!    round first orders the rankers by a Fisher–Yates shuffle of `0..m`: for `i` from `m - 1`
//!    down to 1, `j = next() % (i + 1)`, swap positions `i` and `j`.
//! 3. In that order each ranker picks, while the list is not full: its highest-ranked result
//!    not already in the list, which joins the list with that ranker as its team. A ranker with
//!    nothing left skips.
//!
//! With two rankers a round is one coin flip for who picks first, which is team-draft
//! interleaving as published (the team with fewer picks picks next, a coin deciding between
//! equals): both keep equal picks until one runs out.

use std::collections::HashSet;
use std::hash::Hash;

/// SplitMix64: a 64-bit state advanced by the golden-ratio increment, then mixed.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    /// The state: the seed plus the increment times the numbers drawn.
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait, reason = "not an iterator: it never ends")]
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The seed of a query's interleaving: 64-bit FNV-1a of its id's UTF-8 bytes (offset basis
/// 0xcbf29ce484222325, prime 0x100000001b3).
pub fn seed_of(query_id: &str) -> u64 {
    query_id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// An interleaved list: the results in order and, per result, the index of the ranker that
/// contributed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamDraft<T> {
    pub results: Vec<T>,
    pub teams: Vec<usize>,
}

/// Interleaves `rankings` (each best first) into at most `length` results (see the module
/// documentation for the exact algorithm).
pub fn team_draft<T: Clone + Eq + Hash>(rankings: &[&[T]], length: usize, seed: u64) -> TeamDraft<T> {
    let mut rng = SplitMix64::new(seed);
    let mut next = vec![0usize; rankings.len()];
    let mut used: HashSet<&T> = HashSet::new();
    let mut out = TeamDraft { results: Vec::new(), teams: Vec::new() };
    let mut order: Vec<usize> = Vec::with_capacity(rankings.len());
    while out.results.len() < length {
        order.clear();
        order.extend(0..rankings.len());
        for i in (1..order.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        let mut picked = false;
        for &k in &order {
            if out.results.len() == length {
                break;
            }
            let ranking = rankings[k];
            while next[k] < ranking.len() && used.contains(&ranking[next[k]]) {
                next[k] += 1;
            }
            if let Some(doc) = ranking.get(next[k]) {
                used.insert(doc);
                out.results.push(doc.clone());
                out.teams.push(k);
                picked = true;
            }
        }
        if !picked {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_its_reference_output() {
        // The first outputs for seed 1234567 of the reference C implementation
        // (https://prng.di.unimi.it/splitmix64.c).
        let mut rng = SplitMix64::new(1234567);
        let first: Vec<u64> = (0..3).map(|_| rng.next()).collect();
        assert_eq!(first, [6457827717110365317, 3203168211198807973, 9817491932198370423]);
    }

    #[test]
    fn fnv1a_matches_its_reference_values() {
        // http://www.isthe.com/chongo/tech/comp/fnv/ test vectors.
        assert_eq!(seed_of(""), 0xcbf29ce484222325);
        assert_eq!(seed_of("a"), 0xaf63dc4c8601ec8c);
        assert_eq!(seed_of("foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn test_vectors() {
        // The manual's test vectors (docs/src/interleaving.md), computed by an independent Python transcription of the
        // module documentation (SplitMix64, FNV-1a, the shuffle and the picks).
        let a = ["d1", "d2", "d3", "d4"];
        let b = ["d2", "d5", "d1", "d6"];
        let draft = team_draft(&[&a[..], &b[..]], 6, seed_of("q1"));
        assert_eq!(draft.results, ["d1", "d2", "d3", "d5", "d6", "d4"]);
        assert_eq!(draft.teams, [0, 1, 0, 1, 1, 0]);
        let c = ["d9", "d1"];
        let draft = team_draft(&[&a[..], &b[..], &c[..]], 5, seed_of("q2"));
        assert_eq!(draft.results, ["d1", "d2", "d9", "d5", "d3"]);
        assert_eq!(draft.teams, [0, 1, 2, 1, 0]);
    }

    #[test]
    fn every_result_comes_from_its_team_in_the_teams_order_and_once() {
        let a: Vec<u32> = (0..20).collect();
        let b: Vec<u32> = (0..20).rev().collect();
        let c: Vec<u32> = (5..15).collect();
        for seed in 0..200 {
            let draft = team_draft(&[&a[..], &b[..], &c[..]], 12, seed);
            assert_eq!(draft.results.len(), 12);
            let distinct: HashSet<_> = draft.results.iter().collect();
            assert_eq!(distinct.len(), 12, "no result twice");
            // Each team's picks appear in its ranker's own order.
            for (k, ranking) in [&a, &b, &c].iter().enumerate() {
                let picks: Vec<usize> = draft
                    .results
                    .iter()
                    .zip(&draft.teams)
                    .filter(|(_, &t)| t == k)
                    .map(|(d, _)| ranking.iter().position(|x| x == d).unwrap())
                    .collect();
                assert!(picks.windows(2).all(|w| w[0] < w[1]), "seed {seed}, team {k}: {picks:?}");
            }
            // Rounds keep the teams' picks within one of each other while all have results.
            let counts: Vec<usize> = (0..3).map(|k| draft.teams.iter().filter(|&&t| t == k).count()).collect();
            assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1, "{counts:?}");
        }
    }

    #[test]
    fn short_and_overlapping_rankings_end_when_nothing_is_left() {
        let a = ["x", "y"];
        let b = ["y", "x"];
        let draft = team_draft(&[&a[..], &b[..]], 10, 7);
        assert_eq!(draft.results.len(), 2);
        assert!(team_draft::<&str>(&[&[][..], &[][..]], 10, 7).results.is_empty());
        assert_eq!(team_draft(&[&a[..], &b[..]], 0, 7).results.len(), 0);
    }

    #[test]
    fn coin_flips_are_fair_enough() {
        // Who picks first over many queries: about half each.
        let a = ["a1", "a2"];
        let b = ["b1", "b2"];
        let first_a = (0..10_000u64).filter(|&s| team_draft(&[&a[..], &b[..]], 2, s).teams[0] == 0).count();
        assert!((4_800..5_200).contains(&first_a), "{first_a}");
    }
}
