//! A message decoded into what the engine keeps of it, ahead of the engine: [`Preparer`] and
//! [`PreparedBatch`].
//!
//! Decoding needs nothing of the engine's state: the formats, the `[ab]` unit, the action gains
//! and the limits on one message's size and result count are fixed at start. So it can run on
//! another thread (replay's reader threads prepare their lines while the engine joins and
//! evaluates), and [`super::Engine::process`] is this preparation followed by
//! [`super::Engine::process_prepared`]: the same code whichever thread decoded.
//!
//! A prepared event keeps no text but its experiment and variant (interned by the engine, in
//! message order), and its result keys and labels live in buffers shared by the batch, so a
//! batch allocates nothing per event once its buffers have grown.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use super::limits::InputLimits;
use crate::accumulate::breakdown;
use crate::clicks::log::query_hash;
use crate::config::{AbUnit, Config, JudgmentsKey};
use crate::event::{
    dimension_value, impression_mapping, Decoders, Dimensions, EventKind, Impression, NamedResults, RawMessage,
    RejectReason, Rejection,
};
use crate::ids::{doc_key, query_key, DocKey, EngagementId, QueryKey};
use crate::judgments::{judged_query_key, normalize_query, JudgedQueryKey};
use crate::time::EventTime;

/// The value of a dimension an impression does not have, as for an absent experiment.
const ABSENT_VALUE: &str = "none";

/// Decodes messages into [`PreparedBatch`]es: the engine's decoding, movable to any thread.
#[derive(Debug, Clone)]
pub struct Preparer {
    /// The decoder of each input (`kafka.impressions_format`, `kafka.engagements_format`).
    decoders: Decoders,
    /// `[limits]`: the size and result-count checks, which need no clock (the timestamp
    /// checks do, and stay with the engine).
    limits: InputLimits,
    /// `ab.unit`: which impression field is hashed into the unit.
    unit: AbUnit,
    /// `metrics.action_gains`: the gain of each engagement action (unknown actions gain 0).
    /// Hashed with foldhash: looked up for every engagement, where SipHash showed in profiles.
    action_gains: HashMap<Box<str>, u8, foldhash::fast::RandomState>,
    /// `interleaving.max_rankers`: an interleaved impression naming more is rejected (the
    /// accumulators keep sums for that many).
    max_rankers: usize,
    /// `judgments.key` when a judgment list is configured: which field an impression's
    /// judged query is keyed from.
    judged_key: Option<JudgmentsKey>,
    /// `clicks.enabled`: impressions keep their normalized query text and result ids, which
    /// the click log names its pairs by.
    clicks: bool,
    /// `ab.dimensions`, each with where its value is: an impression's experiment label becomes
    /// the breakdown cell of its values (`crate::accumulate::breakdown`), which the engine
    /// interns.
    dimensions: Box<[(Box<str>, DimensionSource)]>,
}

/// Where an impression's value of one of `ab.dimensions` is.
#[derive(Debug, Clone, Copy)]
enum DimensionSource {
    /// Its `segment`.
    Segment,
    /// Its `query`, normalized.
    Query,
    /// The field of its native `dimensions` object of the dimension's name.
    Native,
    /// This index of its `[mapping.impressions.dimensions]`.
    Mapped(usize),
}

/// An impression's A/B unit, as the accumulators need it, with what counters it moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitHash {
    /// The 32-bit hash of the unit (0 with the impression unit).
    pub hash: u32,
    /// The configured unit field was absent: the impression is its own cluster (counted).
    pub missing: bool,
    /// A client id the impression unit ignores (counted: it suggests per-client assignment).
    pub unused_client_id: bool,
}

/// An impression as the engine keeps it.
#[derive(Debug, Clone)]
pub struct PreparedImpression {
    /// Its query, hashed: what its engagements find it by.
    pub query: QueryKey,
    /// Its event time.
    pub timestamp: EventTime,
    /// Its A/B unit.
    pub unit: UnitHash,
    /// The key its judgments are found by (`judgments.key`), when a judgment list is
    /// configured and the impression has the field.
    pub judged_query: Option<JudgedQueryKey>,
    /// Its result keys in rank order, in the batch's `docs`.
    docs: Range<usize>,
    /// With the click log on: its normalized query text in the batch's `names` (empty when
    /// it has none) with the text's hash, and its result ids' ends in the batch's `name_ends`.
    click_names: Option<ClickRanges>,
    /// Its results' teams (ranker index + 1) in the batch's `teams`; empty when the list was
    /// not interleaved.
    teams: Range<usize>,
    /// Its experiment, in the batch's `labels`.
    experiment: Range<usize>,
    /// Its variant, in the batch's `labels`.
    variant: Range<usize>,
}

/// An engagement as the engine keeps it.
#[derive(Debug, Clone, Copy)]
pub struct PreparedEngagement {
    /// The query of its impression, hashed.
    pub query: QueryKey,
    /// Its event time.
    pub timestamp: EventTime,
    /// The result engaged with, hashed.
    pub doc: DocKey,
    /// Its action's gain.
    pub gain: u8,
    /// Its de-duplication identity ([`crate::event::Engagement::identity`]).
    pub identity: EngagementId,
}

/// One message, prepared.
#[derive(Debug, Clone)]
enum PreparedEvent {
    Impression(PreparedImpression),
    Engagement(PreparedEngagement),
    /// Refused by decoding or by a limit on the message alone.
    Rejected(Rejection),
}

/// Prepared messages, with their result keys and labels stored side by side.
#[derive(Debug, Default)]
pub struct PreparedBatch {
    /// The events in message order.
    events: Vec<PreparedEvent>,
    /// Every impression's result keys, back to back.
    docs: Vec<DocKey>,
    /// Every interleaved impression's teams, back to back.
    teams: Vec<u8>,
    /// Every impression's experiment and variant, back to back.
    labels: String,
    /// One message's result keys while it is decoded.
    scratch: Vec<DocKey>,
    /// A query's normalized text while its judged key is computed.
    query_scratch: String,
    /// With the click log on: every impression's normalized query and result ids, back to back.
    names: String,
    /// Where each result id ends in `names`.
    name_ends: Vec<usize>,
}

/// One prepared message, borrowed from its batch: what [`super::Engine::process_prepared`] takes.
#[derive(Debug, Clone, Copy)]
pub enum Prepared<'a> {
    Impression(ImpressionRef<'a>),
    Engagement(&'a PreparedEngagement),
    Rejected(&'a Rejection),
}

/// A prepared impression and the batch its result keys and labels are in: two words, so that
/// handing a message from the merge to the engine copies no more (its slices are found when
/// the engine reads them).
#[derive(Debug, Clone, Copy)]
pub struct ImpressionRef<'a> {
    /// The impression.
    pub impression: &'a PreparedImpression,
    /// Its batch.
    batch: &'a PreparedBatch,
}

impl<'a> ImpressionRef<'a> {
    /// Its result keys in rank order.
    pub fn docs(&self) -> &'a [DocKey] {
        &self.batch.docs[self.impression.docs.clone()]
    }

    /// Per result, its team (ranker index + 1, in the order its variant names them); empty
    /// when the list was not interleaved.
    pub fn teams(&self) -> &'a [u8] {
        &self.batch.teams[self.impression.teams.clone()]
    }

    /// Its experiment and variant.
    pub fn labels(&self) -> [&'a str; 2] {
        let labels = &self.batch.labels;
        [&labels[self.impression.experiment.clone()], &labels[self.impression.variant.clone()]]
    }

    /// Its normalized query text and result ids, with the click log on.
    pub fn names(&self) -> Option<ClickNames<'a>> {
        let batch = self.batch;
        self.impression.click_names.as_ref().map(|r| ClickNames {
            query: (&batch.names[r.query.clone()], r.hash),
            segment: &batch.names[r.segment.clone()],
            text: &batch.names,
            ends: &batch.name_ends[r.ends.clone()],
            start: r.ids_start,
        })
    }
}

/// Where an impression's names are in its batch (see [`ClickNames`]).
#[derive(Debug, Clone)]
struct ClickRanges {
    /// The normalized query text in `names`, the segment's after it, and the hash of both
    /// (`clicks::log::query_hash`).
    query: Range<usize>,
    segment: Range<usize>,
    hash: u64,
    /// Where the result ids start in `names`, and their ends in `name_ends`.
    ids_start: usize,
    ends: Range<usize>,
}

/// An impression's normalized query text and result ids, for the click log.
#[derive(Debug, Clone, Copy)]
pub struct ClickNames<'a> {
    /// The normalized query text (empty when the impression has none) and the hash the click
    /// log tracks it by (with its segment).
    pub query: (&'a str, u64),
    /// Its traffic segment (empty: none).
    pub segment: &'a str,
    /// The result ids, back to back, and where each ends.
    text: &'a str,
    ends: &'a [usize],
    /// Where the first id starts in `text`.
    start: usize,
}

impl<'a> ClickNames<'a> {
    /// The result id at a rank ("" past the end).
    pub fn doc(&self, rank: usize) -> &'a str {
        let start = if rank == 0 { self.start } else { self.ends.get(rank - 1).copied().unwrap_or(self.start) };
        let end = self.ends.get(rank).copied().unwrap_or(start);
        self.text.get(start..end).unwrap_or("")
    }
}

impl Prepared<'_> {
    /// The event time the engine will read, `None` for a rejected message: what replay merges
    /// its two files on.
    pub fn time(&self) -> Option<EventTime> {
        match self {
            Prepared::Impression(i) => Some(i.impression.timestamp),
            Prepared::Engagement(engagement) => Some(engagement.timestamp),
            Prepared::Rejected(_) => None,
        }
    }

    /// Its query key, `None` for a rejected message: what replay shards on.
    pub fn query(&self) -> Option<QueryKey> {
        match self {
            Prepared::Impression(i) => Some(i.impression.query),
            Prepared::Engagement(engagement) => Some(engagement.query),
            Prepared::Rejected(_) => None,
        }
    }
}

impl PreparedBatch {
    pub fn clear(&mut self) {
        self.events.clear();
        self.docs.clear();
        self.teams.clear();
        self.labels.clear();
        self.names.clear();
        self.name_ends.clear();
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The `i`th message (panics when out of range, as indexing does).
    pub fn get(&self, i: usize) -> Prepared<'_> {
        match &self.events[i] {
            PreparedEvent::Impression(impression) => Prepared::Impression(ImpressionRef { impression, batch: self }),
            PreparedEvent::Engagement(engagement) => Prepared::Engagement(engagement),
            PreparedEvent::Rejected(rejection) => Prepared::Rejected(rejection),
        }
    }

    /// The query of the newest message, `None` when it was rejected: what the source checks
    /// the message's Kafka key against.
    pub fn last_query(&self) -> Option<QueryKey> {
        match self.events.last()? {
            PreparedEvent::Impression(impression) => Some(impression.query),
            PreparedEvent::Engagement(engagement) => Some(engagement.query),
            PreparedEvent::Rejected(_) => None,
        }
    }

    fn label(&mut self, text: &str) -> Range<usize> {
        let start = self.labels.len();
        self.labels.push_str(text);
        start..self.labels.len()
    }
}

impl Preparer {
    pub fn new(cfg: &Config, limits: InputLimits) -> Self {
        let mapping = impression_mapping(cfg);
        Preparer {
            decoders: Decoders::new(cfg),
            limits,
            unit: cfg.ab.unit,
            action_gains: cfg.metrics.action_gains.iter().map(|(a, &g)| (a.as_str().into(), g)).collect(),
            max_rankers: cfg.interleaving.max_rankers,
            judged_key: (!cfg.judgments.file.is_empty()).then_some(cfg.judgments.key),
            clicks: cfg.clicks.enabled,
            dimensions: cfg
                .ab
                .dimensions
                .iter()
                .map(|d| {
                    let source = match d.as_str() {
                        "segment" => DimensionSource::Segment,
                        breakdown::QUERY => DimensionSource::Query,
                        name => match mapping.as_ref().and_then(|m| m.dimension_slot(name)) {
                            Some(slot) => DimensionSource::Mapped(slot - 8),
                            None => DimensionSource::Native,
                        },
                    };
                    (d.as_str().into(), source)
                })
                .collect(),
        }
    }

    /// The decoders, for callers that need an impression's ids as text (`replay --trec-out`).
    pub fn decoders(&self) -> &Decoders {
        &self.decoders
    }

    /// `limits.max_message_bytes`: a reader that streams its input (replay) skips longer
    /// messages without reading them whole.
    pub fn max_message_bytes(&self) -> usize {
        self.limits.max_message_bytes
    }

    /// Decodes one message onto the end of `batch`: an impression, an engagement, or the
    /// rejection of a message that does not decode or is over a limit on its size or results.
    pub fn prepare(&self, kind: EventKind, raw: RawMessage<'_>, batch: &mut PreparedBatch) {
        let event = match self.limits.check_size(raw.payload.len() as u64) {
            Err(rejection) => PreparedEvent::Rejected(rejection),
            Ok(()) => match kind {
                EventKind::Impression => self.impression(raw, batch),
                EventKind::Engagement => self.engagement(raw),
            },
        };
        batch.events.push(event);
    }

    fn impression(&self, raw: RawMessage<'_>, batch: &mut PreparedBatch) -> PreparedEvent {
        // The decoder replaces what is in the buffer it fills (a repeated field replaces the
        // list), so it fills the batch's scratch, whose keys are then appended to the batch's.
        let PreparedBatch { scratch, docs, teams, query_scratch, names, name_ends, .. } = batch;
        // With the click log on, the ids' text goes to `names` as they are decoded, the
        // query's normalized text after them; a rejected message's are taken back.
        let names_start = (names.len(), name_ends.len());
        let decoded = if self.clicks {
            self.decoders.impression_named(raw, &mut NamedResults::new(scratch, names, name_ends))
        } else {
            self.decoders.impression(raw, scratch)
        };
        let decoded = decoded.and_then(|impression| {
            self.limits.check_results(scratch.len())?;
            self.check_rankers(&impression)?;
            for (field, label) in [("experiment", &impression.experiment), ("variant", &impression.variant)] {
                breakdown::check_label(field, label)
                    .map_err(|detail| Rejection::new(RejectReason::InvalidValue, detail))?;
            }
            Ok(impression)
        });
        match decoded {
            Err(rejection) => {
                names.truncate(names_start.0);
                name_ends.truncate(names_start.1);
                PreparedEvent::Rejected(rejection)
            }
            Ok(impression) => {
                let click_names = self.clicks.then(|| {
                    let ids_end = names.len();
                    if let Some(q) = impression.query.as_deref() {
                        normalize_query(q, query_scratch);
                        names.push_str(query_scratch);
                    }
                    let query_end = names.len();
                    names.push_str(impression.segment.as_deref().unwrap_or(""));
                    let (query, segment) = (ids_end..query_end, query_end..names.len());
                    let hash = query_hash(&names[segment.clone()], &names[query.clone()]);
                    // The ids were written from `names_start`; the query and segment follow them.
                    ClickRanges { query, segment, hash, ids_start: names_start.0, ends: names_start.1..name_ends.len() }
                });
                let start = docs.len();
                docs.extend_from_slice(scratch);
                let teams_start = teams.len();
                if let Some(interleaving) = &impression.interleaving {
                    teams.extend(interleaving.teams.iter().map(|&k| k + 1));
                }
                let judged_query = match self.judged_key {
                    None => None,
                    Some(JudgmentsKey::QueryId) => Some(judged_query_key(&impression.query_id, false, query_scratch)),
                    Some(JudgmentsKey::Query) => {
                        impression.query.as_deref().map(|q| judged_query_key(q, true, query_scratch))
                    }
                };
                PreparedEvent::Impression(PreparedImpression {
                    query: query_key(&impression.query_id),
                    judged_query,
                    timestamp: impression.timestamp,
                    unit: self.unit_hash(&impression),
                    docs: start..docs.len(),
                    click_names,
                    teams: teams_start..teams.len(),
                    experiment: self.experiment_label(&impression, batch),
                    variant: batch.label(&impression.variant),
                })
            }
        }
    }

    /// Writes an impression's experiment label into the batch: its experiment, or with
    /// `ab.dimensions` the breakdown cell of its values (absent ones as `none`).
    fn experiment_label(&self, impression: &Impression<'_>, batch: &mut PreparedBatch) -> Range<usize> {
        if self.dimensions.is_empty() {
            return batch.label(&impression.experiment);
        }
        let PreparedBatch { labels, query_scratch, .. } = batch;
        let start = labels.len();
        labels.push_str(&impression.experiment);
        for (dimension, source) in &self.dimensions {
            let value = match (source, &impression.dimensions) {
                (DimensionSource::Segment, _) => impression.segment.clone(),
                // As judgment lists key queries: the per-query figures meet them.
                (DimensionSource::Query, _) => impression.query.as_deref().map(|q| {
                    normalize_query(q, query_scratch);
                    Cow::Borrowed(query_scratch.as_str())
                }),
                (DimensionSource::Native, Dimensions::Native(object)) => dimension_value(object, dimension),
                (DimensionSource::Mapped(i), Dimensions::Mapped(values)) => values.get(*i).cloned().flatten(),
                _ => None,
            };
            let value = value.as_deref().filter(|v| !v.is_empty()).unwrap_or(ABSENT_VALUE);
            breakdown::push_pair(labels, dimension, value);
        }
        start..labels.len()
    }

    /// Refuses an interleaved impression naming more rankers than `interleaving.max_rankers`.
    fn check_rankers(&self, impression: &Impression<'_>) -> Result<(), Rejection> {
        let Some(interleaving) = &impression.interleaving else { return Ok(()) };
        let named = interleaving.rankers.len();
        if named <= self.max_rankers {
            return Ok(());
        }
        let detail = if self.max_rankers == 0 {
            "an interleaved impression, and interleaving is off (interleaving.max_rankers = 0)".to_string()
        } else {
            format!(
                "`interleaving` names {named} rankers, more than interleaving.max_rankers = {} (raise it for multileaving)",
                self.max_rankers
            )
        };
        Err(Rejection::new(RejectReason::InvalidInterleaving, detail))
    }

    fn engagement(&self, raw: RawMessage<'_>) -> PreparedEvent {
        match self.decoders.engagement(raw) {
            Err(rejection) => PreparedEvent::Rejected(rejection),
            Ok(engagement) => PreparedEvent::Engagement(PreparedEngagement {
                query: query_key(&engagement.query_id),
                timestamp: engagement.timestamp,
                doc: doc_key(&engagement.doc_id),
                gain: self.action_gains.get(engagement.action.as_ref()).copied().unwrap_or(0),
                identity: engagement.identity(),
            }),
        }
    }

    /// The 32-bit hash of an impression's A/B unit. An impression without the configured unit
    /// field is its own cluster (hashed by query id), which is what the impression unit assumes;
    /// it is counted, because many of them mean the statistics are not clustered as configured.
    fn unit_hash(&self, impression: &Impression<'_>) -> UnitHash {
        let unit = match self.unit {
            AbUnit::Impression => {
                return UnitHash { hash: 0, missing: false, unused_client_id: impression.client_id.is_some() };
            }
            AbUnit::ClientId => impression.client_id.as_deref(),
            AbUnit::SessionId => impression.session_id.as_deref(),
        };
        let (hash, missing) = match unit {
            Some(unit) => (xxhash_rust::xxh3::xxh3_64(unit.as_bytes()), false),
            None => (xxhash_rust::xxh3::xxh3_64(impression.query_id.as_bytes()) ^ 0x9e37_79b9_7f4a_7c15, true),
        };
        UnitHash { hash: hash as u32, missing, unused_client_id: false }
    }
}
