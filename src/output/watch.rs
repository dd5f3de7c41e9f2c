//! Noticing that files changed: their modification time, length and inode, looked at no more
//! than once per [`CHECK_EVERY`]. The TLS certificate, key and client CA and the bearer token
//! file are re-read when this says so (a Kubernetes Secret update, a certificate renewal).

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// How often at most the files are looked at: a check is a `stat` per file, made when a
/// connection or a request needs the current contents.
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What tells one version of a file from the next without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    /// A file replaced by a rename (how Kubernetes updates a mounted Secret, and how most tools
    /// write atomically) is a new inode, even with the same length and time stamp.
    inode: u64,
}

fn stamp(path: &std::path::Path) -> Option<Stamp> {
    // `metadata` follows symbolic links: a Secret's file is a link into its current version.
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Stamp { modified: meta.modified().ok(), len: meta.len(), inode })
}

/// A set of files and the stamps they had when last loaded.
#[derive(Debug)]
pub(super) struct WatchedFiles {
    paths: Vec<PathBuf>,
    stamps: Vec<Option<Stamp>>,
    checked: Instant,
}

impl WatchedFiles {
    /// Starts watching `paths` as they are now (call it before reading them, so that a change
    /// made while they are read is noticed at the next check).
    pub(super) fn new(paths: Vec<PathBuf>) -> WatchedFiles {
        let stamps = paths.iter().map(|p| stamp(p)).collect();
        WatchedFiles { paths, stamps, checked: Instant::now() }
    }

    /// Whether any file changed since the previous call that said so (or since `new`); looks
    /// at most once per [`CHECK_EVERY`], answering `false` in between. A change is reported
    /// once, whether or not the caller manages to load the new version: a broken file is then
    /// tried again when it changes again, not every second.
    pub(super) fn changed(&mut self) -> bool {
        if self.checked.elapsed() < CHECK_EVERY {
            return false;
        }
        self.checked = Instant::now();
        let now: Vec<Option<Stamp>> = self.paths.iter().map(|p| stamp(p)).collect();
        if now == self.stamps {
            return false;
        }
        self.stamps = now;
        true
    }

    /// Makes the next [`WatchedFiles::changed`] look at the files at once (tests).
    #[cfg(test)]
    pub(super) fn look_now(&mut self) {
        self.checked = Instant::now() - CHECK_EVERY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_reported_once_and_not_before_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "one").unwrap();
        std::fs::write(&b, "two").unwrap();
        let mut watched = WatchedFiles::new(vec![a.clone(), b.clone()]);
        std::fs::write(&b, "three").unwrap();
        assert!(!watched.changed(), "looked at no more than once a second");
        watched.look_now();
        assert!(watched.changed());
        watched.look_now();
        assert!(!watched.changed(), "reported once");
        // Replaced by a rename with the same length: a new inode.
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, "uno").unwrap();
        std::fs::rename(&tmp, &a).unwrap();
        watched.look_now();
        assert!(watched.changed());
        std::fs::remove_file(&a).unwrap();
        watched.look_now();
        assert!(watched.changed(), "a file gone is a change too");
    }
}
