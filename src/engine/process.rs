//! A message into the [`Engine`]: counted, checked against the limits, and offered to its
//! partition's task (an impression's group interned and its judged block scored, an engagement
//! attributed or held), within the limits on the state. Rejections are counted here and
//! returned to the caller, which logs them.

use std::sync::Arc;
use std::time::Instant;

use super::partitions::Partitions;
use super::prepare::{ClickNames, Prepared, PreparedEngagement, PreparedImpression, UnitHash};
use super::routing::Routing;
use super::task::Task;
use super::telemetry::Counters;
use super::{Engine, Preparer};
use crate::accumulate::FoldedLabel;
use crate::clicks::log::Offered;
use crate::event::{EventKind, RawMessage, RejectReason, Rejection};
use crate::ids::DocKey;
use crate::join::ImpressionOutcome;

/// What the engine did with a message it did not reject ([`Engine::process_prepared`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// An impression now pending: it is finalized (and shown to the observer) exactly once.
    PendingImpression,
    /// An engagement, or an impression that is not pending (a duplicate of a pending one, late,
    /// or evicted at once): nothing of it is ever finalized.
    NotPending,
}

impl Engine {
    /// Processes one message. Rejections are counted here and returned: the caller logs them
    /// (through a [`RejectLog`]), as only it knows where the message came from (a topic,
    /// partition and offset; a file and line).
    pub fn process(&mut self, kind: EventKind, partition: i32, payload: &[u8], now: Instant) -> Result<(), Rejection> {
        let mut single = std::mem::take(&mut self.single);
        single.clear();
        self.preparer.prepare(kind, RawMessage::body(payload), &mut single);
        let result = self.process_prepared(kind, partition, single.get(0), now);
        self.single = single;
        result.map(|_| ())
    }

    /// [`Engine::process`] of a message prepared ahead (by a clone of [`Engine::preparer`], on
    /// any thread): everything that needs the engine's state. An accepted message says whether
    /// it left an impression pending: only such an impression is ever finalized, so a caller
    /// that keeps something of each impression for its finalization (replay's TREC export)
    /// keeps it for these alone, never for a rejected, duplicate or late one.
    pub fn process_prepared(
        &mut self,
        kind: EventKind,
        partition: i32,
        event: Prepared<'_>,
        now: Instant,
    ) -> Result<Accepted, Rejection> {
        self.counters_of(partition).consumed[kind.index()] += 1;
        let result = match event {
            Prepared::Rejected(rejection) => Err(rejection.clone()),
            Prepared::Impression(i) => self
                .process_impression(partition, i.impression, (i.docs(), i.teams(), i.names()), i.labels(), now)
                .map(|outcome| match outcome {
                    ImpressionOutcome::Pending => Accepted::PendingImpression,
                    _ => Accepted::NotPending,
                }),
            Prepared::Engagement(engagement) => {
                self.process_engagement(partition, engagement, now).map(|()| Accepted::NotPending)
            }
        };
        if let Err(rejection) = &result {
            self.count_rejection(kind, partition, rejection, now);
        }
        result
    }

    /// [`Engine::process`] of a message of `size` bytes that the caller did not read because it
    /// is over `limits.max_message_bytes` (replay skips such a line while streaming, never
    /// holding it): counted exactly as the engine would count it, `too_large`.
    pub fn process_oversized(&mut self, kind: EventKind, partition: i32, size: u64, now: Instant) -> Rejection {
        self.counters_of(partition).consumed[kind.index()] += 1;
        let rejection = match self.input_limits.check_size(size) {
            Err(rejection) => rejection,
            // A caller's mistake, still counted as a rejection rather than lost or processed unread.
            Ok(()) => Rejection::new(RejectReason::TooLarge, format!("{size} bytes, not read")),
        };
        self.count_rejection(kind, partition, &rejection, now);
        rejection
    }

    fn count_rejection(&mut self, kind: EventKind, partition: i32, rejection: &Rejection, now: Instant) {
        self.counters_of(partition).rejected[kind.index()][rejection.reason.index()] += 1;
        // A rejected message proves the input alive, but its timestamp must not move anything.
        if let Some(task) = self.partitions.tasks.get_mut(partition) {
            task.observe(kind, None, now);
        }
    }

    /// Where a message of this partition is counted: its task's counters (the task is created
    /// if need be), or the engine's own for a negative partition.
    fn counters_of(&mut self, partition: i32) -> &mut Counters {
        self.partitions.counters_of(partition, self.view.global.as_ref())
    }

    /// The routing counters, shared with the threads that count into them.
    pub fn routing(&self) -> &Arc<Routing> {
        &self.routing
    }

    /// What decodes messages for this engine: replay clones it onto its reader threads.
    pub fn preparer(&self) -> &Preparer {
        &self.preparer
    }

    /// A negative partition number names no partition: its messages are rejected, not
    /// attributed to some other partition's state.
    fn no_such_partition(partition: i32) -> Rejection {
        Rejection::new(RejectReason::InvalidValue, format!("partition {partition} is not a partition number"))
    }

    /// Tells the evaluation where the impressions of breakdown groups interned since the last
    /// call are added (and CUPED their experiment): after every interning.
    pub(super) fn note_expansions(&mut self) {
        for (group, targets) in self.groups.take_new_expansions() {
            if self.partitions.template.cuped.is_some() {
                for &target in targets.iter() {
                    self.aggregation.note_group(target, self.groups.name(target).0);
                }
            }
            self.aggregation.note_expansion(group, &targets);
        }
    }

    fn process_impression(
        &mut self,
        partition: i32,
        impression: &PreparedImpression,
        (docs, teams, names): (&[DocKey], &[u8], Option<ClickNames<'_>>),
        [experiment, variant]: [&str; 2],
        now: Instant,
    ) -> Result<ImpressionOutcome, Rejection> {
        self.input_limits.check_timestamp(impression.timestamp, self.wall_clock_ms(now))?;
        if self.partitions.tasks.get(partition).is_none() {
            return Err(Self::no_such_partition(partition));
        }
        let folded_before = FoldedLabel::ALL.map(|label| self.groups.folded(label));
        let group = self.groups.intern(experiment, variant, impression.timestamp, self.partitions.watermarks.least);
        for retired in self.groups.take_retired() {
            if let Some(worker) = &mut self.aggregation.worker {
                worker.retire(retired);
            }
            for task in self.partitions.tasks.iter_mut() {
                if let Some(changes) = &mut task.totals.changes {
                    changes.retired(retired);
                }
                task.totals.accumulators.retire(retired);
                if let Some(cuped) = &mut task.totals.cuped {
                    cuped.retire(retired);
                }
            }
        }
        self.note_expansions();
        if self.partitions.template.cuped.is_some() {
            self.aggregation.note_group(group, self.groups.name(group).0);
        }
        let Engine {
            partitions: Partitions { tasks, state, state_limits, join, .. }, groups, aggregation, judge, ..
        } = self;
        let task = tasks.get_mut(partition).expect("checked above");
        let counters = &mut task.totals.counters;
        for (label, before) in FoldedLabel::ALL.into_iter().zip(folded_before) {
            counters.labels_folded[label as usize] += groups.folded(label) - before;
        }
        let UnitHash { hash: unit, missing, unused_client_id } = impression.unit;
        counters.impressions_without_unit += u64::from(missing);
        counters.impressions_with_unused_client_id += u64::from(unused_client_id);
        task.observe(EventKind::Impression, Some(impression.timestamp), now);
        let Task { join: shard, totals, .. } = task;
        let (key, timestamp) = (impression.query, impression.timestamp);
        let offer =
            |s: &mut crate::join::Shard| s.offer_interleaved_impression(key, timestamp, group, unit, docs, teams, join);
        let mut outcome = state.track(shard, offer);
        while outcome == ImpressionOutcome::StateFull {
            // As for `join.max_pending_impressions`: the earliest deadline is finalized early.
            if !state.track(shard, |s| s.evict_oldest_pending(join, |f| aggregation.finalize(totals, f))) {
                break;
            }
            totals.counters.impressions_evicted += 1;
            outcome = state.track(shard, offer);
        }
        if let (ImpressionOutcome::Pending, Some(judge), Some(judged_query)) =
            (outcome, judge.as_mut(), impression.judged_query)
        {
            let first = judge.first();
            if let Some(values) = judge.score(key, judged_query, docs) {
                aggregation.add_judged(totals, group, timestamp, unit, first, values);
            }
        }
        if let (ImpressionOutcome::Pending, Some(log), Some(names)) = (outcome, &mut totals.clicks, names) {
            let doc_name = |rank| names.doc(rank);
            let offered = Offered { query: Some(names.query), segment: names.segment, docs, doc_name: &doc_name };
            log.offer(key, &offered);
            if let Some(changes) = &mut totals.changes {
                // The click log reads the results of a query it tracks, and only then.
                let ranks = if log.is_showing(key) { log.settings().max_rank } else { 0 };
                changes.offered(key, &offered, ranks);
            }
        }
        let counters = &mut totals.counters;
        match outcome {
            ImpressionOutcome::Pending => state_limits.enforce(state, shard, join, aggregation, totals),
            ImpressionOutcome::Duplicate => counters.impressions_duplicate += 1,
            ImpressionOutcome::Late => counters.impressions_late += 1,
            // Nothing pending and still no room cannot happen (an empty shard compacts to
            // nothing); counted rather than lost silently if it ever did.
            ImpressionOutcome::StateFull => counters.impressions_evicted += 1,
        }
        Ok(outcome)
    }

    fn process_engagement(
        &mut self,
        partition: i32,
        engagement: &PreparedEngagement,
        now: Instant,
    ) -> Result<(), Rejection> {
        self.input_limits.check_timestamp(engagement.timestamp, self.wall_clock_ms(now))?;
        let PreparedEngagement { query, timestamp, doc, gain, identity } = *engagement;
        let Engine { partitions: Partitions { tasks, state, state_limits, join, .. }, aggregation, .. } = self;
        let Some(task) = tasks.get_mut(partition) else { return Err(Self::no_such_partition(partition)) };
        task.observe(EventKind::Engagement, Some(timestamp), now);
        let Task { join: shard, totals, .. } = task;
        state.track(shard, |s| s.offer_engagement(query, identity, timestamp, doc, gain, join));
        state_limits.enforce(state, shard, join, aggregation, totals);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{eng, engine, imp, impressions};
    use super::*;
    use crate::config::Config;
    use crate::engine::PreparedBatch;

    /// The breakdown parts `ab.dimensions` made of the impressions given, by name.
    /// (`fields` are each impression's JSON fields beyond its id, time and results.)
    fn parts_of(toml: &str, fields: &[&str]) -> (Vec<String>, [u64; 3]) {
        let cfg = Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap();
        let mut e = Engine::new(&cfg).without_past_limit();
        for (i, fields) in fields.iter().enumerate() {
            let impression = format!(r#"{{"query_id":"q{i}","timestamp":1000,"results":["a"],{fields}}}"#);
            let _ = e.process(EventKind::Impression, 0, impression.as_bytes(), Instant::now());
        }
        e.finish();
        let groups = e.groups();
        let mut parts: Vec<String> = e
            .cumulative()
            .iter()
            .filter(|&(g, _)| groups.is_breakdown(g))
            .map(|(g, _)| groups.name(g).0.replace('\u{1e}', "|").replace('\u{1f}', "="))
            .collect();
        parts.sort();
        let c = e.counters();
        (
            parts,
            [c.consumed[0], c.rejected[0][RejectReason::InvalidValue.index()], e.cumulative().iter().count() as u64],
        )
    }

    #[test]
    fn dimensions_come_from_the_native_object_the_segment_the_query_and_a_mapping() {
        let native = "[ab]\ndimensions = [\"segment\", \"device\", \"query\"]\nmin_dimension_impressions = 2\n";
        let (parts, [consumed, rejected, _]) = parts_of(
            native,
            &[
                r#""experiment":"e","segment":"app","query":"Red  Shoes","dimensions":{"device":"mobile"}"#,
                // Escapes in the object: serde_json reads it; a number is its JSON text.
                r#""experiment":"e","dimensions":{"dev\u0069ce":42,"other":"x"}"#,
                // A label with the reserved marks is refused, and counted.
                r#""experiment":"e\u001ex""#,
            ],
        );
        assert_eq!((consumed, rejected), (3, 1));
        assert_eq!(
            parts,
            ["e|device=42", "e|device=mobile", "e|query=none", "e|query=red shoes", "e|segment=app", "e|segment=none"]
        );
        let mapped = "[ab]\ndimensions = [\"device\"]\n[mapping.impressions]\nquery_id = \"/query_id\"\n\
                      timestamp = { path = \"/timestamp\", format = \"epoch_millis\" }\nresults = \"/results\"\n\
                      experiment = \"/exp\"\n[mapping.impressions.dimensions]\ndevice = \"/ctx/device\"\n";
        let (parts, _) = parts_of(mapped, &[r#""exp":"e","ctx":{"device":"tv"}"#, r#""exp":"e""#]);
        assert_eq!(parts, ["e|device=none", "e|device=tv"]);
        // A dimension a mapped input does not map is a configuration error naming the key.
        let unmapped = mapped.replace("dimensions = [\"device\"]", "dimensions = [\"market\"]");
        let error = Config::from_toml_with_env(&unmapped, "test", std::iter::empty()).unwrap_err().to_string();
        assert!(error.contains("ab.dimensions") && error.contains("market"), "{error}");
    }

    #[test]
    fn dimensions_leave_the_experiments_reports_and_cuped_as_they_were() {
        // A day of a baseline experiment, then a day of `e`, by the same 40 clients: CUPED's
        // pre-period. With dimensions, each impression is also added to its values' groups; the
        // experiment's own report (CUPED included) must not move.
        let report = |dimensions: &str| {
            let toml = format!(
                "[ab]\nunit = \"client_id\"\n{dimensions}\n[ab.cuped]\nmetrics = [\"mrr\"]\n[metrics]\nwindows = [\"1h\"]\n"
            );
            let cfg = Config::from_toml_with_env(&toml, "test", std::iter::empty()).unwrap();
            let mut e = Engine::new(&cfg).without_past_limit();
            let now = Instant::now();
            for i in 0..800i64 {
                let (day, experiment) = if i < 400 { (0, "baseline") } else { (1, "e") };
                let ts = 86_400_000 * (day + 1) + i * 60_000;
                let variant = ["control", "treatment"][(i % 40 % 2) as usize];
                let impression = format!(
                    r#"{{"query_id":"q{i}","timestamp":{ts},"results":["a","b"],"experiment":"{experiment}","variant":"{variant}","client_id":"u{}","segment":"s{}","query":"q {}"}}"#,
                    i % 40,
                    i % 3,
                    i % 5
                );
                e.process(EventKind::Impression, 0, impression.as_bytes(), now).unwrap();
                if (i * 7 + i / 40) % 3 != 0 {
                    let click = format!(
                        r#"{{"query_id":"q{i}","timestamp":{},"doc_id":"{}"}}"#,
                        ts + 5,
                        ["a", "b"][(i % 2) as usize]
                    );
                    e.process(EventKind::Engagement, 0, click.as_bytes(), now).unwrap();
                }
            }
            e.finish();
            let reports = e.experiment_reports(&e.ab_cumulative(), crate::experiments::Span::Cumulative);
            serde_json::to_value(reports).unwrap()
        };
        let (without, with) = (report(""), report("dimensions = [\"segment\", \"query\"]"));
        let cuped = &without[1]["comparisons"][0]["metrics"]["mrr"]["cuped"];
        assert!(cuped.is_object(), "the test's traffic has CUPED figures: {}", without[1]);
        // Compared whole; on a difference, the first line that differs.
        let (with, without) =
            (serde_json::to_string_pretty(&with).unwrap(), serde_json::to_string_pretty(&without).unwrap());
        let first = with.lines().zip(without.lines()).position(|(a, b)| a != b);
        assert!(
            first.is_none(),
            "the reports differ with dimensions at line {first:?}: {:?}",
            first.map(|i| (with.lines().nth(i), without.lines().nth(i)))
        );
    }

    #[test]
    fn rejected_messages_are_counted_and_do_not_stop_the_stream() {
        let mut e = engine("10s", "0s", "5s");
        let t0 = Instant::now();
        e.process(EventKind::Impression, 0, &imp("q", 1000, &["a"]), t0).unwrap();
        assert!(e.process(EventKind::Impression, 0, b"{nope", t0).is_err());
        assert!(e.process(EventKind::Engagement, 0, br#"{"query_id":"q","timestamp":1}"#, t0).is_err());
        e.process(EventKind::Engagement, 0, &eng("q", 1000, "a"), t0).unwrap();
        e.finish();
        let c = e.counters();
        assert_eq!(c.consumed, [2, 2]);
        assert_eq!(c.rejected[0][RejectReason::InvalidJson.index()], 1);
        assert_eq!(c.rejected[1][RejectReason::MissingField.index()], 1);
        assert_eq!(e.cumulative().get(0).unwrap().clone().engaged, 1);
    }

    #[test]
    fn client_ids_are_counted_when_the_unit_ignores_them() {
        let with_client = |q: &str| {
            serde_json::json!({"query_id": q, "timestamp": 1000, "results": ["a"], "client_id": "u1"}).to_string()
        };
        let t0 = Instant::now();
        let mut e = engine("10s", "0s", "5s");
        e.process(EventKind::Impression, 0, with_client("q1").as_bytes(), t0).unwrap();
        e.process(EventKind::Impression, 0, with_client("q2").as_bytes(), t0).unwrap();
        e.process(EventKind::Impression, 0, &imp("q3", 1000, &["a"]), t0).unwrap();
        assert_eq!(e.counters().impressions_with_unused_client_id, 2);
        // With the client as the unit, the id is used: nothing to warn about.
        let toml = "[ab]\nunit = \"client_id\"\n";
        let mut e =
            Engine::new(&Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap()).without_past_limit();
        e.process(EventKind::Impression, 0, with_client("q1").as_bytes(), t0).unwrap();
        assert_eq!(e.counters().impressions_with_unused_client_id, 0);
    }

    #[test]
    fn input_limits_reject_before_any_state_changes() {
        let toml = "[limits]\nmax_message_bytes = 200\nmax_results = 3\nmax_future = \"1h\"\nmax_past = \"1d\"\n";
        let mut e = Engine::new(&Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap());
        let t0 = Instant::now();
        let now_ms = e.wall_clock_ms(t0);
        let reason =
            |e: &mut Engine, payload: &[u8]| e.process(EventKind::Impression, 0, payload, t0).unwrap_err().reason;
        assert_eq!(reason(&mut e, &imp("q", now_ms, &["a"; 60])), RejectReason::TooLarge);
        assert_eq!(reason(&mut e, &imp("q", now_ms, &["a", "b", "c", "d"])), RejectReason::TooManyResults);
        assert_eq!(reason(&mut e, &imp("q", now_ms + 3_600_001, &["a"])), RejectReason::TimestampInFuture);
        assert_eq!(reason(&mut e, &imp("q", now_ms - 86_400_001, &["a"])), RejectReason::TimestampTooOld);
        let far_future_click = eng("q", now_ms + 86_400_000, "a");
        assert_eq!(
            e.process(EventKind::Engagement, 0, &far_future_click, t0).unwrap_err().reason,
            RejectReason::TimestampInFuture
        );
        e.process(EventKind::Impression, 0, &imp("q", now_ms, &["a", "b", "c"]), t0).unwrap();
        // The rejected future timestamps did not move the input clocks.
        assert_eq!(e.partitions.tasks.get(0).unwrap().inputs[0].max_event_time, Some(now_ms));
        assert_eq!(e.partitions.tasks.get(0).unwrap().inputs[1].max_event_time, None);
    }

    #[test]
    fn state_limits_evict_oldest_first_and_count_it() {
        let toml = "[join]\nattribution_window = \"10s\"\nmax_pending_impressions = 3\nmax_held_engagements = 2\n";
        let mut e =
            Engine::new(&Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap()).without_past_limit();
        let t0 = Instant::now();
        for i in 0..10 {
            e.process(EventKind::Impression, 0, &imp(&format!("q{i}"), 1000 + i, &["a"]), t0).unwrap();
        }
        assert_eq!((e.pending_impressions(), e.counters().impressions_evicted), (3, 7));
        assert_eq!(impressions(&e), 7, "evicted impressions are finalized, not lost");
        for i in 0..5 {
            e.process(EventKind::Engagement, 0, &eng(&format!("orphan{i}"), 5000 + i, "a"), t0).unwrap();
        }
        assert_eq!((e.held_engagements(), e.engagement_tally().evicted), (2, 3));
        e.finish();
        assert_eq!((e.pending_impressions(), e.held_engagements(), impressions(&e)), (0, 0, 10));
        assert_eq!(e.engagement_tally().orphaned, 2);
    }

    #[test]
    fn duplicates_count_once_everywhere() {
        let mut e = engine("10s", "0s", "5s");
        let t0 = Instant::now();
        let click =
            serde_json::json!({"query_id": "q", "timestamp": 1500, "doc_id": "a", "event_id": "e1"}).to_string();
        let same_click_no_id = eng("q", 1600, "b");
        e.process(EventKind::Impression, 0, &imp("q", 1000, &["a", "b"]), t0).unwrap();
        e.process(EventKind::Impression, 0, &imp("q", 1000, &["a", "b"]), t0).unwrap();
        for _ in 0..3 {
            e.process(EventKind::Engagement, 0, click.as_bytes(), t0).unwrap();
            e.process(EventKind::Engagement, 0, &same_click_no_id, t0).unwrap();
        }
        e.finish();
        let t = e.engagement_tally();
        assert_eq!((t.attributed, t.duplicate, e.counters().impressions_duplicate), (2, 4, 1));
        assert_eq!(impressions(&e), 1);
    }

    /// Serve's path (and replay's): a message rejected for its rankers or its results touches
    /// nothing, so the next impression of its query is taken whole, with its own results and
    /// teams; and the engine says which accepted impressions are pending, the only ones ever
    /// finalized.
    #[test]
    fn a_rejected_impression_leaves_nothing_for_the_next_one_of_its_query() {
        let toml = "[interleaving]\nmax_rankers = 2\n[limits]\nmax_results = 3\n";
        let mut e =
            Engine::new(&Config::from_toml_with_env(toml, "test", std::iter::empty()).unwrap()).without_past_limit();
        /// A finalized impression's gains and teams.
        type Seen = (Vec<u8>, Vec<u8>);
        let seen: Arc<std::sync::Mutex<Vec<Seen>>> = Arc::default();
        let sink = Arc::clone(&seen);
        e.set_observer(Box::new(move |f| sink.lock().unwrap().push((f.gains.to_vec(), f.teams.to_vec()))));
        let t0 = Instant::now();
        let interleaved = |rankers: &[&str], teams: &[&str], results: &[&str], ts: i64| {
            serde_json::json!({"query_id": "q", "timestamp": ts, "results": results, "experiment": "e",
                "interleaving": rankers, "teams": teams})
            .to_string()
            .into_bytes()
        };
        let multileaved = interleaved(&["x", "y", "z"], &["z", "y", "x"], &["a", "b", "c"], 1000);
        let rejected = e.process(EventKind::Impression, 0, &multileaved, t0).unwrap_err();
        assert_eq!(rejected.reason, RejectReason::InvalidInterleaving);
        let too_many = imp("q", 1000, &["a", "b", "c", "d"]);
        assert_eq!(
            e.process(EventKind::Impression, 0, &too_many, t0).unwrap_err().reason,
            RejectReason::TooManyResults
        );
        let mut single = PreparedBatch::default();
        let valid = interleaved(&["base", "cand"], &["base", "cand"], &["d", "e"], 1001);
        e.preparer().clone().prepare(EventKind::Impression, RawMessage::body(&valid), &mut single);
        assert_eq!(e.process_prepared(EventKind::Impression, 0, single.get(0), t0), Ok(Accepted::PendingImpression));
        e.preparer().clone().prepare(EventKind::Impression, RawMessage::body(&valid), &mut single);
        assert_eq!(e.process_prepared(EventKind::Impression, 0, single.get(1), t0), Ok(Accepted::NotPending));
        assert_eq!(e.pending_impressions(), 1);
        e.process(EventKind::Engagement, 0, &eng("q", 1500, "e"), t0).unwrap();
        e.finish();
        assert_eq!(*seen.lock().unwrap(), [(vec![0, 1], vec![1, 2])], "the valid impression alone");
        let c = e.counters();
        assert_eq!(c.rejected[0][RejectReason::InvalidInterleaving.index()], 1);
        assert_eq!((c.impressions_duplicate, impressions(&e)), (1, 1));
    }

    #[test]
    fn timestamps_before_1970_are_rejected_even_without_a_past_limit() {
        let mut e = engine("10s", "0s", "5s");
        let t0 = Instant::now();
        for ts in [i64::MIN, -1] {
            let reason = e.process(EventKind::Impression, 0, &imp("q", ts, &["a"]), t0).unwrap_err().reason;
            assert_eq!(reason, RejectReason::TimestampTooOld);
            let reason = e.process(EventKind::Engagement, 0, &eng("q", ts, "a"), t0).unwrap_err().reason;
            assert_eq!(reason, RejectReason::TimestampTooOld);
        }
        e.process(EventKind::Impression, 0, &imp("q", 0, &["a"]), t0).unwrap();
        e.finish();
        assert_eq!(impressions(&e), 1);
    }
}
