//! The `experiment` and `variant` labels of finalized impressions: [`Groups`] interns each
//! (experiment, variant) pair as a dense [`GroupId`] and guards how many there are.

use std::collections::{HashMap, HashSet};

/// The hasher of the label index: foldhash, keyed randomly per map as a standard `HashMap`
/// (labels come from outside), a fraction of SipHash's cost for a short string.
type LabelHasher = foldhash::fast::RandomState;

use serde::{Deserialize, Serialize};

use super::breakdown;
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
    /// `ab.max_dimension_values`: values of one dimension with their own breakdown, per
    /// experiment; the rest are reported as [`FOLDED`].
    pub max_dimension_values: usize,
    /// `ab.max_queries`: the same for the [`breakdown::QUERY`] dimension.
    pub max_query_values: usize,
}

impl LabelLimits {
    /// No limits: every value gets its own group (tests and tools).
    pub fn unlimited() -> Self {
        LabelLimits {
            max_experiments: usize::MAX,
            max_variants: usize::MAX,
            allowed_experiments: None,
            idle_expiry_ms: i64::MAX,
            max_dimension_values: usize::MAX,
            max_query_values: usize::MAX,
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
    /// Active breakdown groups (see [`breakdown`]): name → variant → id, apart from `index`
    /// so that they count against no experiment limit.
    breakdowns: HashMap<Box<str>, HashMap<Box<str>, GroupId, LabelHasher>, LabelHasher>,
    /// Per `experiment␞dimension`, the values with a part in `breakdowns` (the folded
    /// [`FOLDED`] not counted): what `max_dimension_values` bounds.
    values: HashMap<Box<str>, usize, LabelHasher>,
    /// Impressions whose dimension value was reported as [`FOLDED`] for want of room.
    folded_values: u64,
    /// Per breakdown group id, the groups an impression of it is added to: its experiment's
    /// group, then one part per dimension. Derived from the names, so never written.
    #[serde(skip)]
    expansions: Vec<Option<Box<[GroupId]>>>,
    /// Breakdown groups expanded since the last [`Groups::take_new_expansions`]: the engine
    /// tells its evaluation where their impressions go.
    #[serde(skip)]
    new_expansions: Vec<GroupId>,
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
            breakdowns: HashMap::default(),
            values: HashMap::default(),
            folded_values: 0,
            expansions: Vec::new(),
            new_expansions: Vec::new(),
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
        if breakdown::is_breakdown(experiment) {
            return self.intern_breakdown(experiment, variant, timestamp, watermark);
        }
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

    /// [`Groups::intern`] of a breakdown name (a cell or a part, see [`breakdown`]): the group
    /// its impressions are tracked by, whose expansion is the experiment's group and a part per
    /// dimension. An experiment folded into [`FOLDED`] has no breakdown (its group is
    /// returned); a value beyond `max_dimension_values` is reported as [`FOLDED`].
    fn intern_breakdown(
        &mut self,
        name: &str,
        variant: &str,
        timestamp: EventTime,
        watermark: Option<EventTime>,
    ) -> GroupId {
        if let Some(id) = self.touch_breakdown(name, variant, timestamp) {
            return id;
        }
        // Decoding refuses marks in labels: a name that does not parse came from a state
        // record, and is counted under the folded experiment rather than trusted.
        let Some((experiment, pairs)) = breakdown::parse(name) else {
            return self.intern(FOLDED, FOLDED, timestamp, watermark);
        };
        let parent = self.intern(experiment, variant, timestamp, watermark);
        if self.name(parent) != (experiment, variant) {
            return parent;
        }
        let mut targets = vec![parent];
        let mut cell = String::from(experiment);
        for (dimension, value) in pairs {
            let mut part = breakdown::part_name(experiment, dimension, value);
            if !self.value_fits(experiment, dimension, &part, watermark) {
                self.folded_values += 1;
                part = breakdown::part_name(experiment, dimension, FOLDED);
            }
            let id = match self.touch_breakdown(&part, variant, timestamp) {
                Some(id) => id,
                None => self.add_breakdown(&part, variant, timestamp),
            };
            self.expand(id, &[parent, id]);
            cell.push_str(&part[experiment.len()..]);
            targets.push(id);
        }
        if let [_, part] = targets[..] {
            return part;
        }
        let id = match self.touch_breakdown(&cell, variant, timestamp) {
            Some(id) => id,
            None => self.add_breakdown(&cell, variant, timestamp),
        };
        self.expand(id, &targets);
        id
    }

    /// The id of an active breakdown group, its last impression (and its expansion's) moved up
    /// to `timestamp`: the experiment's group and the parts age with the cells that feed them.
    fn touch_breakdown(&mut self, name: &str, variant: &str, timestamp: EventTime) -> Option<GroupId> {
        let id = *self.breakdowns.get(name)?.get(variant)?;
        let targets = self.expansions.get(id as usize).and_then(Option::as_deref).unwrap_or(&[]);
        for &target in targets.iter().chain([&id]) {
            let seen = &mut self.last_seen[target as usize];
            *seen = (*seen).max(timestamp);
        }
        Some(id)
    }

    /// Whether a part (`experiment␞dimension␟value`) is or may become active: the folded value
    /// always, another while the dimension has fewer than `max_dimension_values`.
    fn value_fits(&mut self, experiment: &str, dimension: &str, part: &str, watermark: Option<EventTime>) -> bool {
        if self.breakdowns.contains_key(part) || breakdown::part(part).is_some_and(|(_, _, v)| v == FOLDED) {
            return true;
        }
        let key = &part[..experiment.len() + dimension.len() + 1];
        let count = |groups: &Self| groups.values.get(key).copied().unwrap_or(0);
        let limit =
            if dimension == breakdown::QUERY { self.limits.max_query_values } else { self.limits.max_dimension_values };
        if count(self) < limit {
            return true;
        }
        self.retire_idle(watermark);
        count(self) < limit
    }

    /// A new breakdown group.
    fn add_breakdown(&mut self, name: &str, variant: &str, timestamp: EventTime) -> GroupId {
        let id = GroupId::try_from(self.names.len()).expect("fewer than 2^32 groups");
        self.names.push((name.into(), variant.into()));
        self.last_seen.push(timestamp);
        if !self.breakdowns.contains_key(name) {
            if let Some((experiment, dimension, _)) = breakdown::part(name).filter(|(_, _, v)| *v != FOLDED) {
                let key = &name[..experiment.len() + dimension.len() + 1];
                *self.values.entry(key.into()).or_default() += 1;
            }
        }
        self.breakdowns.entry(name.into()).or_default().insert(variant.into(), id);
        id
    }

    /// Records where an impression of breakdown group `id` is added, once.
    fn expand(&mut self, id: GroupId, targets: &[GroupId]) {
        let i = id as usize;
        if self.expansions.len() <= i {
            self.expansions.resize(i + 1, None);
        }
        if self.expansions[i].is_none() {
            self.expansions[i] = Some(targets.into());
            self.new_expansions.push(id);
        }
    }

    /// The groups an impression of `id` is added to, when it is a breakdown group.
    pub fn expansion(&self, id: GroupId) -> Option<&[GroupId]> {
        self.expansions.get(id as usize).and_then(Option::as_deref)
    }

    /// Breakdown groups expanded since the last call, with their expansions.
    pub fn take_new_expansions(&mut self) -> Vec<(GroupId, Box<[GroupId]>)> {
        let new = std::mem::take(&mut self.new_expansions);
        new.into_iter().filter_map(|id| Some((id, self.expansion(id)?.into()))).collect()
    }

    /// Impressions whose dimension value was reported as [`FOLDED`] (`ab.max_dimension_values`).
    pub fn folded_values(&self) -> u64 {
        self.folded_values
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
        let (last_seen, retired, values) = (&self.last_seen, &mut self.retired, &mut self.values);
        let mut retire = |variants: &mut HashMap<Box<str>, GroupId, LabelHasher>| {
            variants.retain(|_, id| {
                let keep = last_seen[*id as usize] >= horizon;
                if !keep {
                    retired.push(*id);
                }
                keep
            });
            !variants.is_empty()
        };
        self.index.retain(|_, variants| retire(variants));
        self.breakdowns.retain(|name, variants| {
            let keep = retire(variants);
            if let (false, Some((experiment, dimension, value))) = (keep, breakdown::part(name)) {
                let key = &name[..experiment.len() + dimension.len() + 1];
                if let (Some(count), false) = (values.get_mut(key), value == FOLDED) {
                    *count = count.saturating_sub(1);
                }
            }
            keep
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

    /// Groups with their own series right now (breakdown groups included).
    pub fn active(&self) -> usize {
        self.index.values().chain(self.breakdowns.values()).map(HashMap::len).sum()
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
        let index = if breakdown::is_breakdown(experiment) { &self.breakdowns } else { &self.index };
        index.get(experiment)?.get(variant).copied()
    }
    /// Whether `id` is a breakdown group (see [`breakdown`]): its sums are an experiment's
    /// again, so whatever lists experiments leaves it out.
    pub fn is_breakdown(&self, id: GroupId) -> bool {
        breakdown::is_breakdown(self.name(id).0)
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
            LabelLimits { max_experiments: 2, max_variants: 2, idle_expiry_ms: 1_000_000, ..LabelLimits::unlimited() };
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
    fn a_cell_expands_to_its_experiment_and_a_part_per_dimension() {
        let limits = LabelLimits { max_dimension_values: 2, idle_expiry_ms: 1_000, ..LabelLimits::unlimited() };
        let mut g = Groups::new(limits);
        let cell = |values: [&str; 2]| {
            let mut name = String::from("e");
            breakdown::push_pair(&mut name, "device", values[0]);
            breakdown::push_pair(&mut name, "market", values[1]);
            name
        };
        let c = g.intern(&cell(["mobile", "us"]), "t", 0, None);
        let parent = g.id_of("e", "t").expect("the experiment's group is interned with its cell");
        let targets = g.expansion(c).expect("a cell has an expansion").to_vec();
        let names: Vec<_> = targets.iter().map(|&id| g.name(id).0.to_string()).collect();
        assert_eq!(names, ["e", "e\u{1e}device\u{1f}mobile", "e\u{1e}market\u{1f}us"]);
        assert_eq!(targets[0], parent);
        assert_eq!(g.expansion(targets[1]), Some(&[parent, targets[1]][..]), "a part expands to itself");
        assert_eq!(g.intern(&cell(["mobile", "us"]), "t", 5, None), c);
        assert_eq!(g.last_seen(parent), 5, "the experiment ages with its cells");
        // Two values per dimension: a third device is reported as `other`, and counted.
        g.intern(&cell(["desktop", "us"]), "t", 5, None);
        let third = g.intern(&cell(["tablet", "us"]), "t", 5, None);
        assert_eq!(g.name(g.expansion(third).unwrap()[1]).0, "e\u{1e}device\u{1f}other");
        assert_eq!(g.folded_values(), 1);
        // One dimension: the cell is the part; an ordinary experiment is untouched.
        let part = g.intern(&breakdown::part_name("e", "device", "mobile"), "c", 5, None);
        assert_eq!(g.expansion(part), Some(&[g.id_of("e", "c").unwrap(), part][..]));
        assert_eq!(g.expansion(parent), None);
        assert!(!g.take_new_expansions().is_empty() && g.take_new_expansions().is_empty());
        // Idle parts retire, and make room for new values.
        g.intern("f", "t", 10_000, None);
        let later = g.intern(&cell(["tv", "us"]), "t", 10_000, Some(9_000));
        assert!(g.take_retired().contains(&c));
        assert_eq!(g.name(g.expansion(later).unwrap()[1]).0, "e\u{1e}device\u{1f}tv");
        // A folded experiment has no breakdown.
        let mut small = Groups::new(LabelLimits { max_experiments: 1, ..LabelLimits::unlimited() });
        small.intern("a", "t", 0, None);
        let folded = small.intern(&cell(["mobile", "us"]), "t", 0, None);
        assert_eq!((small.name(folded), small.expansion(folded)), ((FOLDED, FOLDED), None));
    }

    #[test]
    fn allowlist_folds_everything_else() {
        let limits = LabelLimits {
            max_experiments: 10,
            max_variants: 10,
            allowed_experiments: Some(["ranker".into()].into_iter().collect()),
            ..LabelLimits::unlimited()
        };
        let mut g = Groups::new(limits);
        let (allowed, rogue) = (g.intern("ranker", "t", 0, None), g.intern("rogue", "t", 0, None));
        assert_eq!((g.name(allowed), g.name(rogue)), (("ranker", "t"), (FOLDED, FOLDED)));
        assert_eq!(g.folded(FoldedLabel::Experiment), 1);
    }
}
