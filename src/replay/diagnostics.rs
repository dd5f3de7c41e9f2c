//! What replay says about the lines it rejects: each (up to a few) with its file, line, byte
//! offset, reason and a quote, then how many more there were; and whether there were too many
//! to trust the report at all (`--max-rejects`).

use std::path::Path;
use std::str::FromStr;
use std::time::Instant;

use super::reader::Line;
use super::ReplayError;
use crate::engine::{Counters, RejectLog};
use crate::event::{excerpt, EventKind, RejectReason, Rejection};

/// How much of a rejected line its log line quotes.
const QUOTE_CHARS: usize = 60;

/// The log of rejected lines, compiler style: `file:line: reason: detail`.
pub(super) struct RejectedLines<'a> {
    /// The impressions file and the engagements file, by [`EventKind::index`].
    paths: [&'a Path; 2],
    /// The shared rate limit. Replay's time is frozen, so it logs the first few rejections and
    /// counts the rest, the same on every run.
    log: RejectLog,
    /// Replay's frozen instant.
    now: Instant,
}

impl<'a> RejectedLines<'a> {
    pub(super) fn new(paths: [&'a Path; 2], now: Instant) -> Self {
        RejectedLines { paths, log: RejectLog::default(), now }
    }

    /// Logs a rejected line, unless the first few have been logged already.
    pub(super) fn rejected(&mut self, kind: EventKind, line: Line<'_>, rejection: &Rejection) {
        let path = self.paths[kind.index()];
        self.log.log(self.now, || {
            tracing::warn!(
                "{}:{}: {}: {}; line {} starts at byte {}: {}",
                path.display(),
                line.info.number,
                rejection.reason.label(),
                rejection.detail,
                line.info.number,
                line.info.offset,
                excerpt(line.bytes, QUOTE_CHARS, line.info.oversized.is_some())
            );
        });
    }

    /// Says how many rejected lines were not logged, if any.
    pub(super) fn finish(mut self) {
        let more = self.log.take_suppressed();
        if more > 0 {
            tracing::warn!("... and {more} more rejected lines not shown (the summary counts them by reason)");
        }
    }
}

/// `--max-rejects`: how many rejected lines a replay accepts before it fails, because a report
/// over mostly rejected input (a binary file, pretty-printed JSON, the wrong format) would
/// look like a result while measuring nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxRejects {
    /// `half` (the default): fails when more than half of either file's lines are rejected.
    #[default]
    HalfOfAFile,
    /// A number: fails when more lines than this are rejected, both files together.
    Count(u64),
    /// `none`: never fails for rejected lines.
    Unlimited,
}

impl FromStr for MaxRejects {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "half" => Ok(MaxRejects::HalfOfAFile),
            "none" => Ok(MaxRejects::Unlimited),
            n => n
                .parse()
                .map(MaxRejects::Count)
                .map_err(|_| format!("{n:?} is not a number of lines, \"half\" or \"none\"")),
        }
    }
}

/// The hint when most rejected lines are not JSON objects at all: the file is in another format.
const JSON_LINES_HINT: &str = "input must be JSON Lines: one JSON object per line";

/// Fails a replay that rejected more lines than `limit` allows; the message gives the counts
/// per file and, when most rejections are not JSON objects at all, says what the input must be.
/// Foreign lines ([`RejectReason::is_foreign`]: events the mapping does not list) are left out
/// of the budget as the alert leaves them out of its share, over the same denominator (every
/// line read); the report still counts them.
pub fn check_rejects(limit: MaxRejects, counters: &Counters, paths: [&Path; 2]) -> Result<(), ReplayError> {
    let rejected = |kind: EventKind| {
        RejectReason::ALL
            .into_iter()
            .filter(|r| !r.is_foreign())
            .map(|r| counters.rejected[kind.index()][r.index()])
            .sum::<u64>()
    };
    let read = |kind: EventKind| counters.consumed[kind.index()];
    let over: Vec<EventKind> = match limit {
        MaxRejects::Unlimited => return Ok(()),
        MaxRejects::HalfOfAFile => {
            EventKind::ALL.into_iter().filter(|&k| rejected(k) > 0 && 2 * rejected(k) > read(k)).collect()
        }
        MaxRejects::Count(n) => match EventKind::ALL.into_iter().map(rejected).sum::<u64>() > n {
            true => EventKind::ALL.into_iter().filter(|&k| rejected(k) > 0).collect(),
            false => Vec::new(),
        },
    };
    if over.is_empty() {
        return Ok(());
    }
    let files: Vec<String> = over
        .iter()
        .map(|&k| {
            format!(
                "{} of {} lines of {} ({})",
                rejected(k),
                read(k),
                paths[k.index()].display(),
                by_reason(counters, k)
            )
        })
        .collect();
    let limit_text = match limit {
        MaxRejects::Count(n) => format!("more than --max-rejects {n}"),
        _ => "more than half of a file (--max-rejects half, the default; a number of lines or none allows more)"
            .to_string(),
    };
    let not_json: u64 = over
        .iter()
        .map(|&k| {
            let r = &counters.rejected[k.index()];
            r[RejectReason::InvalidJson.index()] + r[RejectReason::NotAnObject.index()]
        })
        .sum();
    let all: u64 = over.iter().map(|&k| rejected(k)).sum();
    Err(ReplayError::TooManyRejects {
        counts: files.join(" and "),
        limit: limit_text,
        hint: if 2 * not_json > all { format!("; {JSON_LINES_HINT}") } else { String::new() },
    })
}

/// `invalid_json 3, missing_field 1`: one file's rejected lines by reason, most first, the
/// foreign ones left out as the budget leaves them out (the report counts them).
fn by_reason(counters: &Counters, kind: EventKind) -> String {
    let mut reasons: Vec<(RejectReason, u64)> = RejectReason::ALL
        .into_iter()
        .filter(|r| !r.is_foreign())
        .map(|r| (r, counters.rejected[kind.index()][r.index()]))
        .filter(|&(_, n)| n > 0)
        .collect();
    reasons.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    reasons.iter().map(|(r, n)| format!("{} {n}", r.label())).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(read: [u64; 2], rejected: &[(EventKind, RejectReason, u64)]) -> Counters {
        let mut c = Counters { consumed: read, ..Counters::default() };
        for &(kind, reason, n) in rejected {
            c.rejected[kind.index()][reason.index()] += n;
        }
        c
    }

    const PATHS: [&str; 2] = ["imp.jsonl", "eng.jsonl"];
    const HALF: &str =
        "more than half of a file (--max-rejects half, the default; a number of lines or none allows more)";

    fn check(limit: MaxRejects, c: &Counters) -> Result<(), String> {
        check_rejects(limit, c, PATHS.map(Path::new)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_default_fails_when_more_than_half_of_a_file_is_rejected() {
        use {EventKind::*, RejectReason::*};
        assert_eq!(check(MaxRejects::HalfOfAFile, &counters([0, 0], &[])), Ok(()), "empty files are not an error");
        assert_eq!(check(MaxRejects::HalfOfAFile, &counters([10, 4], &[(Impression, InvalidJson, 5)])), Ok(()));
        let e = check(MaxRejects::HalfOfAFile, &counters([10, 4], &[(Engagement, MissingField, 3)])).unwrap_err();
        assert_eq!(e, format!("too many rejected lines: 3 of 4 lines of eng.jsonl (missing_field 3), {HALF}"));
        let e = check(
            MaxRejects::HalfOfAFile,
            &counters([6, 4], &[(Impression, InvalidJson, 5), (Impression, WrongType, 1)]),
        )
        .unwrap_err();
        let hint = "input must be JSON Lines: one JSON object per line";
        assert!(e.ends_with(&format!("(invalid_json 5, wrong_type 1), {HALF}; {hint}")), "{e}");
    }

    #[test]
    fn a_count_limits_both_files_together_and_none_never_fails() {
        use {EventKind::*, RejectReason::*};
        let c = counters([100, 100], &[(Impression, NotAnObject, 2), (Engagement, TooLarge, 2)]);
        assert_eq!(check(MaxRejects::Count(4), &c), Ok(()));
        let e = check(MaxRejects::Count(3), &c).unwrap_err();
        assert_eq!(e, "too many rejected lines: 2 of 100 lines of imp.jsonl (not_an_object 2) and 2 of 100 lines of eng.jsonl (too_large 2), more than --max-rejects 3");
        assert_eq!(check(MaxRejects::Unlimited, &counters([1, 1], &[(Impression, InvalidJson, 1)])), Ok(()));
        assert_eq!("7".parse(), Ok(MaxRejects::Count(7)));
        assert_eq!("none".parse(), Ok(MaxRejects::Unlimited));
        assert!("lots".parse::<MaxRejects>().is_err());
    }

    #[test]
    fn foreign_lines_are_outside_the_budget() {
        use {EventKind::*, RejectReason::*};
        // An Algolia-style stream: views (57%) the mapping does not list, and clicks.
        let c = counters([100, 100], &[(Engagement, UnmappedAction, 57)]);
        assert_eq!(check(MaxRejects::HalfOfAFile, &c), Ok(()));
        assert_eq!(check(MaxRejects::Count(0), &c), Ok(()));
        // The malformed ones still count, over every line read; the message names only them.
        let c = counters([100, 100], &[(Engagement, UnmappedAction, 40), (Engagement, MissingField, 51)]);
        let e = check(MaxRejects::HalfOfAFile, &c).unwrap_err();
        assert_eq!(e, format!("too many rejected lines: 51 of 100 lines of eng.jsonl (missing_field 51), {HALF}"));
        let c = counters([100, 100], &[(Engagement, UnmappedAction, 60), (Engagement, MissingField, 1)]);
        assert_eq!(check(MaxRejects::HalfOfAFile, &c), Ok(()));
        let e = check(MaxRejects::Count(0), &c).unwrap_err();
        assert_eq!(
            e,
            "too many rejected lines: 1 of 100 lines of eng.jsonl (missing_field 1), more than --max-rejects 0"
        );
    }
}
