//! Interleaving: one list merged from several rankers, each result marked with the ranker
//! (its *team*) that contributed it; the engagements on it credit that ranker. Pure: no I/O,
//! no state, no clock.
//!
//! | file | does |
//! |---|---|
//! | `mod.rs` | [`score`]: one finalized impression's credit per ranker and its outcome; [`Slots`]: the sums the accumulators keep per group for it |
//! | `team_draft.rs` | [`team_draft`]: the reference interleaver (`rankpulse interleave`), with its documented random choices |
//!
//! The credit rule is team-draft interleaving's (Radlinski, Kurup and Joachims 2008, "How does
//! clickthrough data reflect retrieval quality?", CIKM; for more than two rankers, team-draft
//! multileaving: Schuth, Sietsma, Whiteson, Lefortier and de Rijke 2014, "Multileaved comparisons
//! for fast online evaluation", CIKM): a ranker earns what the results of its team earned, and
//! the ranker with strictly the most credit wins the impression. Chapelle, Joachims, Radlinski
//! and Yue (2012, "Large-scale validation and analysis of interleaved search evaluation", TOIS)
//! validate it at scale, with the win-share preference this crate reports.

mod team_draft;

pub use team_draft::{seed_of, team_draft, SplitMix64, TeamDraft};

/// The most rankers one interleaved impression may name: a pending result keeps its team in
/// the 3 bits its gain byte leaves free (gains are at most 30), and 0 means "no team".
pub const MAX_RANKERS: usize = 7;

/// Separates ranker names in the variant of an interleaved impression's group
/// (`"baseline vs candidate"`): the group pins which name each team number stands for.
pub const RANKER_SEPARATOR: &str = " vs ";

/// How engagements credit rankers (`[interleaving]` with `metrics.relevance_threshold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditRule {
    /// A result is credited when its gain is at least this (`metrics.relevance_threshold`).
    pub threshold: u8,
    /// `interleaving.credit = "gains"`: a credited result is worth its gain, else 1.
    pub by_gain: bool,
    /// `interleaving.depth`: only ranks up to it earn credit; 0 for every shown rank.
    pub depth: u32,
}

/// One interleaved impression, scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scored {
    /// Credit per ranker (team number - 1); rankers the list does not name stay 0.
    pub credits: [u32; MAX_RANKERS],
    /// The ranker with strictly the most credit; `None` for a tie or no credit at all.
    pub winner: Option<usize>,
}

impl Scored {
    /// Whether any ranker earned credit: an impression without is neither a win nor a tie.
    pub fn engaged(&self) -> bool {
        self.credits.iter().any(|&c| c > 0)
    }

    /// `"none"`, `"tie"`, or the winner's name among `rankers`.
    pub fn outcome<'a>(&self, rankers: &[&'a str]) -> &'a str {
        match self.winner {
            Some(k) => rankers.get(k).copied().unwrap_or("unknown"),
            None if self.engaged() => "tie",
            None => "none",
        }
    }
}

/// Scores an interleaved impression: `gains` per rank as attributed, `teams` per rank (team
/// number k + 1 for ranker k; 0 for a result of no team, which earns nobody anything).
/// A document shown twice earns its gain at its first rank only (the join attributes an
/// engagement to the first rank that shows its document), so a duplicate credits the team of
/// its first occurrence.
pub fn score(gains: &[u8], teams: &[u8], rule: CreditRule) -> Scored {
    let mut credits = [0u32; MAX_RANKERS];
    let depth = if rule.depth == 0 { usize::MAX } else { rule.depth as usize };
    for (&gain, &team) in gains.iter().zip(teams).take(depth) {
        if gain < rule.threshold || gain == 0 {
            continue;
        }
        let Some(credit) = usize::from(team).checked_sub(1).and_then(|k| credits.get_mut(k)) else { continue };
        *credit += if rule.by_gain { u32::from(gain) } else { 1 };
    }
    let best = credits.iter().copied().max().unwrap_or(0);
    let mut leaders = credits.iter().enumerate().filter(|(_, &c)| c == best && best > 0);
    let winner = match (leaders.next(), leaders.next()) {
        (Some((k, _)), None) => Some(k),
        _ => None,
    };
    Scored { credits, winner }
}

/// Where a group's interleaving sums sit in the accumulators' value vector: after the
/// ranking metrics, `2 + n + n²` slots for up to n rankers, each a per-impression 0 or 1 so
/// that the accumulators' sums are counts and their unit buckets give the cluster-robust
/// errors. Team numbers are the order of the impression's `interleaving` list, which its
/// group's variant pins; rankers a list does not name have 0 credit, never a win, and are
/// never read, so one layout serves every list up to n names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// The first slot: the metric layout's length.
    pub first: usize,
    /// `interleaving.max_rankers`.
    pub rankers: usize,
}

impl Slots {
    /// Slots in all: 0 when interleaving is off.
    pub fn len(&self) -> usize {
        if self.rankers == 0 {
            0
        } else {
            2 + self.rankers + self.rankers * self.rankers
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// 1 per interleaved impression.
    pub fn interleaved(&self) -> usize {
        self.first
    }
    /// 1 per interleaved impression in which some ranker earned credit.
    pub fn engaged(&self) -> usize {
        self.first + 1
    }
    /// 1 when ranker `k` won outright.
    pub fn wins(&self, k: usize) -> usize {
        self.first + 2 + k
    }
    /// 1 when ranker `i` earned more credit than ranker `j`.
    pub fn beats(&self, i: usize, j: usize) -> usize {
        self.first + 2 + self.rankers + i * self.rankers + j
    }

    /// An impression's values in this layout's slots (`out` is the whole value vector; the
    /// slots are overwritten, 0 for an impression that is not interleaved).
    pub fn write(&self, scored: Option<&Scored>, out: &mut [f64]) {
        let Some(mine) = out.get_mut(self.first..self.first + self.len()) else { return };
        mine.fill(0.0);
        let Some(s) = scored else { return };
        let n = self.rankers;
        mine[0] = 1.0;
        mine[1] = if s.engaged() { 1.0 } else { 0.0 };
        if let Some(k) = s.winner.filter(|&k| k < n) {
            mine[2 + k] = 1.0;
        }
        for i in 0..n {
            for j in 0..n {
                if s.credits[i] > s.credits[j] {
                    mine[2 + n + i * n + j] = 1.0;
                }
            }
        }
    }
}

/// The ranker names of an interleaved group's variant, if it is one: two or more non-empty
/// names, at most `max` (a folded `other` variant or an A/B variant is not).
pub fn rankers_of(variant: &str, max: usize) -> Option<Vec<&str>> {
    let names: Vec<&str> = variant.split(RANKER_SEPARATOR).collect();
    (names.len() >= 2 && names.len() <= max && names.iter().all(|n| !n.is_empty())).then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLICKS: CreditRule = CreditRule { threshold: 1, by_gain: false, depth: 0 };

    fn credits(s: &Scored, n: usize) -> Vec<u32> {
        s.credits[..n].to_vec()
    }

    #[test]
    fn a_click_credits_the_team_that_contributed_the_result() {
        // Teams a b a b, click on rank 3 (team a): a wins.
        let s = score(&[0, 0, 1, 0], &[1, 2, 1, 2], CLICKS);
        assert_eq!((credits(&s, 2), s.winner), (vec![1, 0], Some(0)));
        assert_eq!(s.outcome(&["a", "b"]), "a");
    }

    #[test]
    fn clicks_on_both_teams_tie_or_go_to_the_majority() {
        let tie = score(&[1, 1, 0, 0], &[1, 2, 2, 1], CLICKS);
        assert_eq!((credits(&tie, 2), tie.winner, tie.outcome(&["a", "b"])), (vec![1, 1], None, "tie"));
        let b = score(&[1, 1, 1, 0], &[1, 2, 2, 1], CLICKS);
        assert_eq!((credits(&b, 2), b.outcome(&["a", "b"])), (vec![1, 2], "b"));
    }

    #[test]
    fn no_engagement_is_neither_a_win_nor_a_tie() {
        let s = score(&[0, 0, 0], &[1, 2, 1], CLICKS);
        assert!(!s.engaged());
        assert_eq!((s.winner, s.outcome(&["a", "b"])), (None, "none"));
        // An engagement whose gain is below the threshold (an unknown action, gain 0; or a
        // click under `relevance_threshold = 2`) earns nothing either.
        let s = score(&[1, 0], &[1, 2], CreditRule { threshold: 2, ..CLICKS });
        assert_eq!(s.outcome(&["a", "b"]), "none");
    }

    #[test]
    fn clicks_below_the_depth_earn_nothing() {
        // A click at rank 4 with depth 3: no credit; with depth 0 (every rank) b wins.
        let gains = [0, 0, 0, 1];
        let teams = [1, 2, 1, 2];
        assert_eq!(score(&gains, &teams, CreditRule { depth: 3, ..CLICKS }).outcome(&["a", "b"]), "none");
        assert_eq!(score(&gains, &teams, CreditRule { depth: 4, ..CLICKS }).outcome(&["a", "b"]), "b");
        assert_eq!(score(&gains, &teams, CLICKS).outcome(&["a", "b"]), "b");
    }

    #[test]
    fn graded_credit_weighs_a_purchase_above_clicks() {
        // Two clicks for a against one purchase (gain 3) for b.
        let gains = [1, 3, 1, 0];
        let teams = [1, 2, 1, 2];
        assert_eq!(score(&gains, &teams, CLICKS).outcome(&["a", "b"]), "a");
        let graded = score(&gains, &teams, CreditRule { by_gain: true, ..CLICKS });
        assert_eq!((credits(&graded, 2), graded.outcome(&["a", "b"])), (vec![2, 3], "b"));
    }

    #[test]
    fn a_duplicate_across_teams_credits_its_first_occurrence() {
        // "d" shown at rank 1 (team b) and rank 3 (team a): the join attributes the click to
        // rank 1 only, so the gains read [1, 0, 0] and b wins.
        let s = score(&[1, 0, 0], &[2, 1, 1], CLICKS);
        assert_eq!(s.outcome(&["a", "b"]), "b");
    }

    #[test]
    fn multileaving_wins_and_pairwise_beats() {
        // Three rankers: credits a 1, b 2, c 0.
        let s = score(&[1, 1, 1, 0], &[1, 2, 2, 3], CLICKS);
        assert_eq!((credits(&s, 3), s.outcome(&["a", "b", "c"])), (vec![1, 2, 0], "b"));
        let slots = Slots { first: 1, rankers: 3 };
        assert_eq!(slots.len(), 2 + 3 + 9);
        let mut out = vec![f64::NAN; 1 + slots.len()];
        slots.write(Some(&s), &mut out);
        assert!(out[0].is_nan(), "slots before the first are not touched");
        assert_eq!((out[slots.interleaved()], out[slots.engaged()]), (1.0, 1.0));
        assert_eq!([out[slots.wins(0)], out[slots.wins(1)], out[slots.wins(2)]], [0.0, 1.0, 0.0]);
        let beats = |i, j| out[slots.beats(i, j)];
        assert_eq!(
            [beats(0, 1), beats(1, 0), beats(0, 2), beats(2, 0), beats(1, 2), beats(2, 1)],
            [0.0, 1.0, 1.0, 0.0, 1.0, 0.0]
        );
        assert_eq!([beats(0, 0), beats(1, 1), beats(2, 2)], [0.0; 3]);
        // A two-ranker list in the same layout: the third ranker is never credited, and is
        // beaten by any ranker with credit, which no report reads.
        let two = score(&[0, 1], &[1, 2], CLICKS);
        slots.write(Some(&two), &mut out);
        assert_eq!((out[slots.wins(1)], out[slots.beats(1, 0)], out[slots.beats(0, 1)]), (1.0, 1.0, 0.0));
        slots.write(None, &mut out);
        assert!(out[1..].iter().all(|&v| v == 0.0), "an impression that is not interleaved adds nothing");
    }

    #[test]
    fn results_of_no_team_and_unknown_teams_earn_nothing() {
        let s = score(&[1, 1, 1], &[0, 2, 9], CLICKS);
        assert_eq!((credits(&s, 2), s.winner), (vec![0, 1], Some(1)));
    }

    #[test]
    fn ranker_names_come_back_from_the_variant() {
        assert_eq!(rankers_of("baseline vs candidate", 7), Some(vec!["baseline", "candidate"]));
        assert_eq!(rankers_of("a vs b vs c", 2), None, "more than interleaving.max_rankers");
        for not_interleaved in ["other", "control", " vs b", "a vs "] {
            assert_eq!(rankers_of(not_interleaved, 7), None, "{not_interleaved}");
        }
    }
}
