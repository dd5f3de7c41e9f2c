//! The `experiment` and `variant` labels of finalized impressions: [`Groups`] interns each
//! (experiment, variant) pair as a dense [`GroupId`] and guards how many there are.

use std::collections::{HashMap, HashSet};

/// The hasher of the label index: foldhash, keyed randomly per map as a standard `HashMap`
/// (labels come from outside), a fraction of SipHash's cost for a short string.
type LabelHasher = foldhash::fast::RandomState;

use serde::{Deserialize, Serialize};

use crate::ids::GroupId;
use crate::time::EventTime;

/// The label value that folded experiments and variants are reported under.
pub const FOLDED: &str = "other";

/// The cardinality guard's settings; see `[labels]` in the configuration.
#[derive(Debug, Clone)]
pub struct LabelLimits {
    /// `labels.max_experiments`: active experiments with their own series.
    pub max_experiments: usize,
    /// `labels.max_variants`: active variants with their own series, per experiment.
    pub max_variants: usize,
    /// Only these experiments get their own series, when set.
    pub allowed_experiments: Option<HashSet<Box<str>>>,
    /// A group idle for this long (event time, behind the watermark) is retired.
    pub idle_expiry_ms: i64,
}

impl LabelLimits {
    /// No limits: every value gets its own group (tests and tools).
    pub fn unlimited() -> Self {
        LabelLimits {
            max_experiments: usize::MAX,
            max_variants: usize::MAX,
            allowed_experiments: None,
            idle_expiry_ms: i64::MAX,
        }
    }
}

/// Which label a folded value belonged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldedLabel {
    /// The experiment was folded (and so its variant with it).
    Experiment = 0,
    /// Only the variant was folded.
    Variant = 1,
}

impl FoldedLabel {
    pub const ALL: [FoldedLabel; 2] = [FoldedLabel::Experiment, FoldedLabel::Variant];
}

/// Interns (experiment, variant) names so that the hot path carries a `u32`, and guards their
/// cardinality: beyond the configured number of active values, new ones are folded into
/// [`FOLDED`] and counted; values idle for `idle_expiry` are retired to make room.
#[derive(Debug, Serialize, Deserialize)]
pub struct Groups {
    /// Names by id. Kept after retirement, because closed windows may still name the group;
    /// ids are never reused.
    names: Vec<(Box<str>, Box<str>)>,
    /// Latest impression timestamp per id, for retirement.
    last_seen: Vec<EventTime>,
    /// Active groups: experiment → variant → id; two levels so a lookup borrows both strings.
    /// Hashed with foldhash (keyed per map): looked up for every impression.
    index: HashMap<Box<str>, HashMap<Box<str>, GroupId, LabelHasher>, LabelHasher>,
    /// From the configuration, not the checkpoint: limits may change across a restart.
    #[serde(skip, default = "LabelLimits::unlimited")]
    limits: LabelLimits,
    /// Impressions whose experiment / variant value was folded, by [`FoldedLabel`].
    folded: [u64; 2],
    /// Retired since the last [`Groups::take_retired`]: their cumulative series are dropped.
    retired: Vec<GroupId>,
    /// Event time of the last retirement scan: a flood of new values scans at most once a minute.
    last_retirement_scan: EventTime,
}

impl Default for Groups {
    fn default() -> Self {
        Self::new(LabelLimits::unlimited())
    }
}

impl Groups {
    const RETIREMENT_SCAN_INTERVAL_MS: i64 = 60_000;

    pub fn new(limits: LabelLimits) -> Self {
        Groups {
            names: Vec::new(),
            last_seen: Vec::new(),
            index: HashMap::default(),
            limits,
            folded: [0; 2],
            retired: Vec::new(),
            last_retirement_scan: EventTime::MIN,
        }
    }

    /// The group of an impression at `timestamp`. `watermark` (everything before it is final)
    /// bounds which idle groups may be retired to make room.
    pub fn intern(
        &mut self,
        experiment: &str,
        variant: &str,
        timestamp: EventTime,
        watermark: Option<EventTime>,
    ) -> GroupId {
        if let Some(id) = self.touch(experiment, variant, timestamp) {
            return id;
        }
        let (experiment, variant) = self.admit(experiment, variant, watermark);
        if let Some(id) = self.touch(experiment, variant, timestamp) {
            return id;
        }
        let id = GroupId::try_from(self.names.len()).expect("fewer than 2^32 groups");
        self.names.push((experiment.into(), variant.into()));
        self.last_seen.push(timestamp);
        self.index.entry(experiment.into()).or_default().insert(variant.into(), id);
        id
    }

    /// The id of an active (experiment, variant) pair, its last impression moved up to
    /// `timestamp` (which is what keeps it from retirement).
    fn touch(&mut self, experiment: &str, variant: &str, timestamp: EventTime) -> Option<GroupId> {
        let id = *self.index.get(experiment)?.get(variant)?;
        let seen = &mut self.last_seen[id as usize];
        *seen = (*seen).max(timestamp);
        Some(id)
    }

    /// Decides the labels a new (experiment, variant) pair is reported under.
    fn admit<'a>(&mut self, experiment: &'a str, variant: &'a str, watermark: Option<EventTime>) -> (&'a str, &'a str) {
        let fold_experiment = |groups: &mut Self| {
            groups.folded[FoldedLabel::Experiment as usize] += 1;
            (FOLDED, FOLDED)
        };
        if experiment == FOLDED {
            return (
                FOLDED,
                if variant == FOLDED || self.variant_fits(FOLDED, variant, watermark) {
                    variant
                } else {
                    self.fold_variant()
                },
            );
        }
        if self.limits.allowed_experiments.as_ref().is_some_and(|allowed| !allowed.contains(experiment)) {
            return fold_experiment(self);
        }
        if !self.index.contains_key(experiment) && !self.experiment_fits(watermark) {
            return fold_experiment(self);
        }
        if variant != FOLDED && !self.variant_fits(experiment, variant, watermark) {
            return (experiment, self.fold_variant());
        }
        (experiment, variant)
    }

    fn fold_variant(&mut self) -> &'static str {
        self.folded[FoldedLabel::Variant as usize] += 1;
        FOLDED
    }

    fn active_experiments(&self) -> usize {
        self.index.len() - usize::from(self.index.contains_key(FOLDED))
    }

    fn experiment_fits(&mut self, watermark: Option<EventTime>) -> bool {
        if self.active_experiments() < self.limits.max_experiments {
            return true;
        }
        self.retire_idle(watermark);
        self.active_experiments() < self.limits.max_experiments
    }

    fn variant_fits(&mut self, experiment: &str, variant: &str, watermark: Option<EventTime>) -> bool {
        let count =
            |groups: &Self| groups.index.get(experiment).map_or(0, |v| v.len() - usize::from(v.contains_key(FOLDED)));
        if self.index.get(experiment).is_some_and(|v| v.contains_key(variant)) || count(self) < self.limits.max_variants
        {
            return true;
        }
        self.retire_idle(watermark);
        count(self) < self.limits.max_variants
    }

    /// Retires groups whose last impression is more than `idle_expiry` behind the watermark:
    /// every impression and window of theirs is final by then (checked at configuration time).
    fn retire_idle(&mut self, watermark: Option<EventTime>) {
        let Some(watermark) = watermark else { return };
        if watermark.saturating_sub(self.last_retirement_scan) < Self::RETIREMENT_SCAN_INTERVAL_MS {
            return;
        }
        self.last_retirement_scan = watermark;
        let horizon = watermark.saturating_sub(self.limits.idle_expiry_ms);
        let (last_seen, retired) = (&self.last_seen, &mut self.retired);
        self.index.retain(|_, variants| {
            variants.retain(|_, id| {
                let keep = last_seen[*id as usize] >= horizon;
                if !keep {
                    retired.push(*id);
                }
                keep
            });
            !variants.is_empty()
        });
    }

    /// Takes the limits out (to carry them over to a restored table).
    pub fn into_limits(self) -> LabelLimits {
        self.limits
    }

    /// Applies the configured limits (after restoring from a checkpoint).
    pub fn limits(&self) -> &LabelLimits {
        &self.limits
    }
    pub fn set_limits(&mut self, limits: LabelLimits) {
        self.limits = limits;
    }

    /// Groups retired since the last call.
    pub fn take_retired(&mut self) -> Vec<GroupId> {
        std::mem::take(&mut self.retired)
    }

    /// Impressions folded into [`FOLDED`], for one label.
    pub fn folded(&self, label: FoldedLabel) -> u64 {
        self.folded[label as usize]
    }

    /// Groups with their own series right now.
    pub fn active(&self) -> usize {
        self.index.values().map(HashMap::len).sum()
    }

    /// The latest impression timestamp of a group.
    pub fn last_seen(&self, id: GroupId) -> EventTime {
        self.last_seen[id as usize]
    }

    /// Whether an impression has named `experiment` (and it has not been retired): the A/B API
    /// tells an experiment it has never seen from one whose impressions are not final yet.
    pub fn has_experiment(&self, experiment: &str) -> bool {
        self.index.contains_key(experiment)
    }

    /// The id of an active (experiment, variant) pair.
    pub fn id_of(&self, experiment: &str, variant: &str) -> Option<GroupId> {
        self.index.get(experiment)?.get(variant).copied()
    }
    pub fn name(&self, id: GroupId) -> (&str, &str) {
        let (e, v) = &self.names[id as usize];
        (e, v)
    }
    pub fn len(&self) -> usize {
        self.names.len()
    }
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_intern_once() {
        let mut g = Groups::default();
        let a = g.intern("e1", "control", 0, None);
        let b = g.intern("e1", "treatment", 0, None);
        assert_eq!(g.intern("e1", "control", 0, None), a);
        assert_ne!(a, b);
        assert_eq!(g.name(b), ("e1", "treatment"));
    }

    #[test]
    fn cardinality_guard_folds_excess_values_and_retires_idle_ones() {
        let limits =
            LabelLimits { max_experiments: 2, max_variants: 2, allowed_experiments: None, idle_expiry_ms: 1_000_000 };
        let mut g = Groups::new(limits);
        let e1a = g.intern("e1", "a", 0, None);
        g.intern("e1", "b", 0, None);
        // A third variant of e1 folds into e1/other; a third experiment into other/other.
        let folded_variant = g.intern("e1", "c", 0, None);
        assert_eq!(g.name(folded_variant), ("e1", FOLDED));
        assert_eq!(g.intern("e1", "d", 0, None), folded_variant);
        g.intern("e2", "a", 0, None);
        let folded_experiment = g.intern("e3", "a", 0, None);
        assert_eq!(g.name(folded_experiment), (FOLDED, FOLDED));
        assert_eq!((g.folded(FoldedLabel::Experiment), g.folded(FoldedLabel::Variant)), (1, 2));
        // A flood of unique variant names creates no new groups beyond e2/other.
        g.intern("e2", "b", 0, None);
        let before = g.len();
        for i in 0..10_000 {
            g.intern("e2", &format!("v{i}"), 0, None);
        }
        assert_eq!(g.len(), before + 1, "only e2/other is new");
        // Once e1 is idle past the expiry (behind the watermark), it is retired and e3 fits.
        g.intern("e2", "a", 2_000_000, None);
        let e3 = g.intern("e3", "a", 2_000_000, Some(1_500_000));
        assert_eq!(g.name(e3), ("e3", "a"));
        let retired = g.take_retired();
        assert!(retired.contains(&e1a) && retired.contains(&folded_variant), "{retired:?}");
        assert!(g.active() <= 2 * 3, "at most 2 experiments x (2 variants + other), plus other/other");
    }

    #[test]
    fn allowlist_folds_everything_else() {
        let limits = LabelLimits {
            max_experiments: 10,
            max_variants: 10,
            allowed_experiments: Some(["ranker".into()].into_iter().collect()),
            idle_expiry_ms: i64::MAX,
        };
        let mut g = Groups::new(limits);
        let (allowed, rogue) = (g.intern("ranker", "t", 0, None), g.intern("rogue", "t", 0, None));
        assert_eq!((g.name(allowed), g.name(rogue)), (("ranker", "t"), (FOLDED, FOLDED)));
        assert_eq!(g.folded(FoldedLabel::Experiment), 1);
    }
}
