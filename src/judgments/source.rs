//! The judgment list a running process scores against: [`JudgmentSource`], loaded at start
//! and swapped whole whenever its file changes, with what the reloads found for `/metrics`.
//!
//! A reload builds a new [`Judgments`] beside the current one and swaps an `Arc`: an impression
//! is scored against one list or the other, never a mix. A file that cannot be read, or has
//! more than `judgments.max_rejected_share` of bad lines, is refused: the previous list
//! stays, the failure is logged and counted, and the next change is tried again. A change is
//! loaded once the file's modification time and length have stayed the same for one poll, so
//! a file copied in place is not read half way.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::parse::Format;
use super::store::{Judgments, LoadError, LoadOptions, LoadReport};
use crate::config::{JudgmentsConfig, JudgmentsFormat, JudgmentsKey};
use crate::shutdown::Shutdown;

/// What `/metrics` shows of the judgment list.
#[derive(Debug, Clone, Default)]
pub struct SourceStatus {
    /// The report of the list in use (lines, judgments, queries, rejects by reason).
    pub loaded: LoadReport,
    /// Bytes the list in use holds.
    pub bytes: usize,
    /// Loads that replaced the list, the one at start included.
    pub reloads: u64,
    /// Loads refused (the previous list stayed).
    pub failures: u64,
    /// Unix seconds of the last successful load.
    pub loaded_at: f64,
    /// Why the last load failed, until one succeeds.
    pub last_error: Option<String>,
}

/// The file's identity for change detection: modification time and length.
type Stamp = (Option<SystemTime>, u64);
/// The stamp of a file that is not there (or cannot be read).
const MISSING: Stamp = (None, u64::MAX);

/// A judgment list and the file it is reloaded from.
#[derive(Debug)]
pub struct JudgmentSource {
    /// The file.
    path: PathBuf,
    /// How it is read.
    options: LoadOptions,
    /// The list in use.
    current: RwLock<Arc<Judgments>>,
    /// Bumped at every swap, so a reader checks one atomic per impression and takes the lock
    /// only after a reload.
    generation: AtomicU64,
    /// What the loads found.
    status: Mutex<SourceStatus>,
    /// The stamp of the file in use, and a changed stamp seen once (loaded when seen again).
    stamps: Mutex<(Stamp, Option<Stamp>)>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok(), meta.len()))
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl JudgmentSource {
    /// Loads the file: the error says why it cannot be used at start.
    pub fn load(path: &Path, options: LoadOptions) -> Result<Arc<JudgmentSource>, LoadError> {
        let seen = stamp(path).unwrap_or(MISSING);
        let (judgments, report) = Judgments::load(path, &options)?;
        let status = SourceStatus {
            bytes: judgments.heap_bytes(),
            loaded: report,
            reloads: 1,
            loaded_at: unix_now(),
            ..SourceStatus::default()
        };
        Ok(Arc::new(JudgmentSource {
            path: path.to_path_buf(),
            options,
            current: RwLock::new(Arc::new(judgments)),
            generation: AtomicU64::new(1),
            status: Mutex::new(status),
            stamps: Mutex::new((seen, None)),
        }))
    }

    /// The configuration's judgment list (`[judgments]`), loaded; `None` without
    /// `judgments.file`.
    pub fn from_config(cfg: &JudgmentsConfig) -> Result<Option<Arc<JudgmentSource>>, LoadError> {
        if cfg.file.is_empty() {
            return Ok(None);
        }
        let path = Path::new(&cfg.file);
        let format = match cfg.format {
            JudgmentsFormat::Auto => Format::of_path(path),
            JudgmentsFormat::Qrels => Format::Qrels,
            JudgmentsFormat::Jsonl => Format::JsonLines,
        };
        let options = LoadOptions {
            format,
            normalize: cfg.key == JudgmentsKey::Query,
            max_grade: cfg.max_grade,
            max_rejected_share: cfg.max_rejected_share,
            keep_query_names: false,
        };
        let source = Self::load(path, options)?;
        let status = source.status();
        tracing::info!(
            path = %path.display(),
            judgments = status.loaded.judgments,
            queries = status.loaded.queries,
            rejected = status.loaded.rejected_total(),
            "judgment list loaded"
        );
        for (line, why) in &status.loaded.first_rejects {
            tracing::warn!(path = %path.display(), line, "judgment line rejected: {why}");
        }
        Ok(Some(source))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The list in use.
    pub fn current(&self) -> Arc<Judgments> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Changes at every swap: a reader holding an older generation's list takes the new one.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// What the loads found.
    pub fn status(&self) -> SourceStatus {
        self.status.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// One poll: loads the file if it changed and has stayed unchanged since the last poll.
    /// Returns whether a new list is in use. Blocking (reads the file).
    pub fn poll(&self) -> bool {
        let now = stamp(&self.path).unwrap_or(MISSING);
        let candidate = {
            let mut stamps = self.stamps.lock().unwrap_or_else(PoisonError::into_inner);
            let (in_use, seen) = &mut *stamps;
            if now == *in_use {
                *seen = None;
                None
            } else if *seen == Some(now) {
                Some(now)
            } else {
                // Changed since the last poll: wait until it stays put.
                *seen = Some(now);
                None
            }
        };
        let Some(candidate) = candidate else { return false };
        // A missing file fails to load like an unreadable one: refused, reported once.
        let loaded = Judgments::load(&self.path, &self.options);
        *self.stamps.lock().unwrap_or_else(PoisonError::into_inner) = (candidate, None);
        match loaded {
            Ok((judgments, report)) => {
                tracing::info!(
                    path = %self.path.display(),
                    judgments = report.judgments,
                    queries = report.queries,
                    rejected = report.rejected_total(),
                    "judgment list reloaded"
                );
                for (line, why) in &report.first_rejects {
                    tracing::warn!(path = %self.path.display(), line, "judgment line rejected: {why}");
                }
                let bytes = judgments.heap_bytes();
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(judgments);
                self.generation.fetch_add(1, Ordering::AcqRel);
                let mut status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
                status.loaded = report;
                status.bytes = bytes;
                status.reloads += 1;
                status.loaded_at = unix_now();
                status.last_error = None;
                true
            }
            Err(error) => {
                self.refuse(&error);
                false
            }
        }
    }

    fn refuse(&self, error: &LoadError) {
        tracing::error!(path = %self.path.display(), "judgment list not reloaded, the previous one stays in use: {error}");
        let mut status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        status.failures += 1;
        status.last_error = Some(error.to_string());
    }

    /// Polls every `interval` on a blocking thread of the runtime until shutdown.
    pub async fn watch(self: Arc<Self>, interval: Duration, shutdown: Shutdown) {
        loop {
            tokio::select! {
                () = shutdown.wait() => return,
                () = tokio::time::sleep(interval) => {}
            }
            let source = Arc::clone(&self);
            if tokio::task::spawn_blocking(move || source.poll()).await.is_err() {
                tracing::error!("the judgment reload task failed; judgments are no longer reloaded");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::doc_key;
    use crate::judgments::{judged_query_key, Format};

    fn options() -> LoadOptions {
        LoadOptions {
            format: Format::Qrels,
            normalize: true,
            max_grade: 3,
            max_rejected_share: 0.1,
            keep_query_names: false,
        }
    }

    fn grade(source: &JudgmentSource, query: &str, doc: &str) -> Option<u8> {
        source.current().query(judged_query_key(query, true, &mut String::new()))?.grade(doc_key(doc))
    }

    /// Rewrites the file so that its length changes (modification times can be coarse).
    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_changed_file_is_swapped_in_once_stable_and_a_broken_one_keeps_the_list() {
        let dir = std::env::temp_dir().join(format!("rankpulse-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("qrels.txt");
        write(&path, "q 0 a 1\n");
        let source = JudgmentSource::load(&path, options()).unwrap();
        assert_eq!(grade(&source, "q", "a"), Some(1));
        assert!(!source.poll(), "unchanged");

        write(&path, "q 0 a 3\nq 0 b 2\n");
        assert!(!source.poll(), "changed: seen once, not yet loaded");
        assert_eq!(grade(&source, "q", "a"), Some(1));
        let generation = source.generation();
        assert!(source.poll(), "unchanged since the last poll: loaded");
        assert_eq!((grade(&source, "q", "a"), grade(&source, "q", "b")), (Some(3), Some(2)));
        assert!(source.generation() > generation);

        write(&path, "q 0 a 1\nthis is not\na judgment list\nat all\n");
        assert!(!source.poll() && !source.poll(), "refused");
        assert_eq!(grade(&source, "q", "a"), Some(3), "the previous list stays");
        let status = source.status();
        assert_eq!((status.reloads, status.failures), (2, 1));
        assert!(status.last_error.as_deref().unwrap().contains("3 of 4 lines rejected"), "{status:?}");
        assert!(!source.poll(), "a refused file is not retried until it changes again");
        assert_eq!(source.status().failures, 1);

        std::fs::remove_file(&path).unwrap();
        assert!(!source.poll() && !source.poll());
        assert_eq!(source.status().failures, 2, "a vanished file is reported once");
        assert!(!source.poll());
        assert_eq!(source.status().failures, 2);
        assert_eq!(grade(&source, "q", "a"), Some(3));

        write(&path, "q 0 c 2\n");
        assert!(!source.poll() && source.poll(), "back: loaded");
        assert_eq!((grade(&source, "q", "a"), grade(&source, "q", "c")), (None, Some(2)));
        assert_eq!(source.status().last_error, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
