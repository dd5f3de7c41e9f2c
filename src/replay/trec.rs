//! `replay --trec-out`: what rankpulse measured, as TREC files for trec_eval or ranx.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::ReplayError;

/// Writes what rankpulse measured in TREC format, so trec_eval or ranx can be run on exactly
/// the same judgments and rankings: one query per finalized impression; `qrels.txt` holds the
/// attributed gain of every shown result (`query 0 doc gain`), `run.txt` the ranking with
/// strictly descending scores (`query Q0 doc rank score rankpulse`). A result id repeated in
/// a list is written as `id#dupN` (N its rank) so ranks stay those rankpulse measured; ids
/// with whitespace, which TREC files cannot hold, have it replaced by `_`.
pub(super) struct TrecWriter {
    /// Text ids of impressions read but not yet finalized (late and duplicate ones never are).
    pending: std::collections::HashMap<crate::ids::QueryKey, (String, Vec<String>)>,
    qrels: std::io::BufWriter<File>,
    run: std::io::BufWriter<File>,
    dir: PathBuf,
    /// First write error, reported at the end instead of failing inside the engine callback.
    error: Option<std::io::Error>,
}

impl TrecWriter {
    pub(super) fn create(dir: &Path) -> Result<std::sync::Arc<std::sync::Mutex<TrecWriter>>, ReplayError> {
        let write_err = |source| ReplayError::Write { path: dir.to_path_buf(), source };
        std::fs::create_dir_all(dir).map_err(write_err)?;
        let open = |name: &str| {
            File::create(dir.join(name))
                .map(std::io::BufWriter::new)
                .map_err(|source| ReplayError::Write { path: dir.join(name), source })
        };
        Ok(std::sync::Arc::new(std::sync::Mutex::new(TrecWriter {
            pending: Default::default(),
            qrels: open("qrels.txt")?,
            run: open("run.txt")?,
            dir: dir.to_path_buf(),
            error: None,
        })))
    }

    pub(super) fn impression_line(&mut self, line: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Ids {
            query_id: String,
            results: Vec<String>,
        }
        if let Ok(ids) = serde_json::from_slice::<Ids>(line) {
            self.pending.entry(crate::ids::query_key(&ids.query_id)).or_insert((ids.query_id, ids.results));
        }
    }

    pub(super) fn finalized(&mut self, query: crate::ids::QueryKey, gains: &[u8]) {
        use std::io::Write;
        let Some((query_id, results)) = self.pending.remove(&query) else { return };
        let clean = |id: &str| id.replace(char::is_whitespace, "_");
        let query_id = clean(&query_id);
        let mut seen = std::collections::HashSet::new();
        let n = results.len();
        for (i, (doc, gain)) in results.iter().zip(gains).enumerate() {
            let rank = i + 1;
            let doc = if seen.insert(doc.as_str()) { clean(doc) } else { format!("{}#dup{rank}", clean(doc)) };
            let written = writeln!(self.qrels, "{query_id} 0 {doc} {gain}")
                .and_then(|_| writeln!(self.run, "{query_id} Q0 {doc} {rank} {} rankpulse", n - i));
            if let Err(e) = written {
                self.error.get_or_insert(e);
            }
        }
    }

    pub(super) fn finish(&mut self) -> Result<(), ReplayError> {
        use std::io::Write;
        let flushed = self.qrels.flush().and_then(|_| self.run.flush());
        match self.error.take().map_or(flushed, Err) {
            Ok(()) => Ok(()),
            Err(source) => Err(ReplayError::Write { path: self.dir.clone(), source }),
        }
    }
}
