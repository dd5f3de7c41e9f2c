//! `replay --trec-out`: what rankpulse measured, as TREC files for trec_eval or ranx.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver};

use super::ReplayError;
use crate::engine::Engine;
use crate::event::{Decoders, RawMessage};
use crate::ids::{query_key, QueryKey};
use crate::interleaving::Scored;

/// Writes what rankpulse measured in TREC format, so trec_eval or ranx can be run on exactly
/// the same judgments and rankings: one query per finalized impression; `qrels.txt` holds the
/// attributed gain of every shown result (`query 0 doc gain`), `run.txt` the ranking with
/// strictly descending scores (`query Q0 doc rank score rankpulse`). A result id repeated in
/// a list is written as `id#dupN` (N its rank) so ranks stay those rankpulse measured; ids
/// with whitespace, which TREC files cannot hold, have it replaced by `_`. `interleaving.jsonl`
/// holds each finalized interleaved impression's credit per ranker and outcome
/// (`{"query_id", "credits": {ranker: credit}, "outcome": ranker | "tie" | "none"}`).
pub(super) struct TrecWriter {
    /// A copy of the engine's decoders: ids are read exactly as the engine reads them, in
    /// either input format, so every impression the engine finalizes has its ids here.
    decoders: Decoders,
    /// Text ids of the impressions the engine holds pending, with the rankers of an
    /// interleaved one, per query in the order they were taken. Each is finalized once, in
    /// that order (a query has one pending impression at a time, and an impression evicted
    /// while the next of its query is taken is reported before that one can be), so the
    /// front of a query's queue is always the one finalized next.
    pending: HashMap<QueryKey, VecDeque<Pending>>,
    /// Impressions the engine finalized (query, gains in rank order and an interleaved one's
    /// score), queued by its observer so that the writer needs no lock: it stays with the merge
    /// loop, which also fills `pending`.
    finalized: Receiver<(QueryKey, Vec<u8>, Option<Scored>)>,
    /// `interleaving.jsonl`: each interleaved impression's credits and outcome.
    interleaving: BufWriter<File>,
    /// `qrels.txt`: the judgments.
    qrels: BufWriter<File>,
    /// `run.txt`: the rankings.
    run: BufWriter<File>,
    /// Named in write errors.
    dir: PathBuf,
}

/// An impression read, waiting to be finalized.
struct Pending {
    /// Its `query_id`.
    query_id: String,
    /// Its result ids in rank order.
    results: Vec<String>,
    /// An interleaved impression's rankers, in team order.
    rankers: Option<Vec<String>>,
}

impl TrecWriter {
    /// Creates the files and has `engine` report every impression it finalizes to the writer.
    pub(super) fn create(dir: &Path, engine: &mut Engine) -> Result<TrecWriter, ReplayError> {
        let write_err = |error| ReplayError::Write { path: dir.to_path_buf(), error };
        std::fs::create_dir_all(dir).map_err(write_err)?;
        let open = |name: &str| {
            File::create(dir.join(name))
                .map(BufWriter::new)
                .map_err(|error| ReplayError::Write { path: dir.join(name), error })
        };
        let (qrels, run, interleaving) = (open("qrels.txt")?, open("run.txt")?, open("interleaving.jsonl")?);
        let (sender, finalized) = channel();
        engine.set_observer(Box::new(move |f| {
            // Fails only once the writer is gone, after the replay.
            let _ = sender.send((f.query, f.gains.to_vec(), f.interleaving.copied()));
        }));
        Ok(TrecWriter {
            decoders: engine.decoders().clone(),
            pending: HashMap::new(),
            finalized,
            qrels,
            run,
            interleaving,
            dir: dir.to_path_buf(),
        })
    }

    /// Keeps the ids of an impression line the engine has just taken as pending
    /// ([`crate::engine::Accepted::PendingImpression`]). Called for no other line: one the
    /// engine rejected (over a limit, over `interleaving.max_rankers`) or did not keep (late,
    /// a duplicate) is never finalized, and kept here it would lend its ids and rankers to the
    /// next impression of its query.
    pub(super) fn impression_line(&mut self, line: &[u8]) {
        let mut ids = Vec::new();
        if let Ok(impression) = self.decoders.impression_with_ids(RawMessage::body(line), &mut ids) {
            let query_id = impression.query_id;
            let rankers = impression.interleaving.map(|il| il.rankers.into_iter().map(Cow::into_owned).collect());
            self.pending.entry(query_key(&query_id)).or_default().push_back(Pending {
                query_id: query_id.into_owned(),
                results: ids.into_iter().map(Cow::into_owned).collect(),
                rankers,
            });
        }
    }

    /// Writes the impressions finalized since the last call, in the order the engine finalized them.
    pub(super) fn write_finalized(&mut self) -> Result<(), ReplayError> {
        while let Ok((query, gains, scored)) = self.finalized.try_recv() {
            self.write(query, &gains, scored.as_ref())
                .map_err(|error| ReplayError::Write { path: self.dir.clone(), error })?;
        }
        Ok(())
    }

    fn write(&mut self, query: QueryKey, gains: &[u8], scored: Option<&Scored>) -> std::io::Result<()> {
        let Some(queue) = self.pending.get_mut(&query) else { return Ok(()) };
        let Some(Pending { query_id, results, rankers }) = queue.pop_front() else { return Ok(()) };
        if queue.is_empty() {
            self.pending.remove(&query);
        }
        if let (Some(scored), Some(rankers)) = (scored, &rankers) {
            let names: Vec<&str> = rankers.iter().map(String::as_str).collect();
            let credits: serde_json::Map<String, serde_json::Value> =
                names.iter().zip(scored.credits).map(|(name, c)| (name.to_string(), c.into())).collect();
            let line = serde_json::json!({"query_id": query_id, "credits": credits, "outcome": scored.outcome(&names)});
            writeln!(self.interleaving, "{line}")?;
        }
        let clean = |id: &str| id.replace(char::is_whitespace, "_");
        let query_id = clean(&query_id);
        let mut seen = HashSet::new();
        let n = results.len();
        for (i, (doc, gain)) in results.iter().zip(gains).enumerate() {
            let rank = i + 1;
            let doc = if seen.insert(doc.as_str()) { clean(doc) } else { format!("{}#dup{rank}", clean(doc)) };
            writeln!(self.qrels, "{query_id} 0 {doc} {gain}")?;
            writeln!(self.run, "{query_id} Q0 {doc} {rank} {} rankpulse", n - i)?;
        }
        Ok(())
    }

    /// Writes what is left and flushes both files.
    pub(super) fn finish(mut self) -> Result<(), ReplayError> {
        self.write_finalized()?;
        self.qrels
            .flush()
            .and_then(|_| self.run.flush())
            .and_then(|_| self.interleaving.flush())
            .map_err(|error| ReplayError::Write { path: self.dir.clone(), error })
    }
}
