//! `rankpulse generate`: the demo's A/B traffic (and on request its interleaving duel, and head
//! queries with their judgment list) as JSON-lines files, to try `replay` without Kafka.

use std::path::Path;

use anyhow::Context;

use crate::demo::{Extras, FaultRate};

/// Writes `count` impressions at `rate` per second of event time from `start` (RFC 3339), of
/// `seed`'s traffic, with `faults`, the duel when `interleaving`, and with `judgments` head
/// queries and their judgment list written there, and `pre_period` searches the day before.
pub fn run(
    impressions: &Path,
    engagements: &Path,
    (count, rate, seed, start): (u64, u32, u64, &str),
    faults: FaultRate,
    (interleaving, judgments, pre_period): (bool, Option<&Path>, u64),
) -> anyhow::Result<()> {
    let start_ms =
        crate::time::parse_rfc3339_ms(start).with_context(|| format!("--start {start:?} is not RFC 3339"))?;
    let open = |p: &Path| {
        std::fs::File::create(p).map(std::io::BufWriter::new).with_context(|| format!("creating {}", p.display()))
    };
    let (mut imp, mut eng) = (open(impressions)?, open(engagements)?);
    let mut list = judgments.map(open).transpose()?;
    let at = (count, rate, seed, start_ms);
    let extras =
        Extras { duel: interleaving, judgments: list.as_mut().map(|l| l as &mut dyn std::io::Write), pre_period };
    let wrote = crate::demo::write_traffic_with(&mut imp, &mut eng, at, faults, extras)
        .and_then(|wrote| std::io::Write::flush(&mut imp).map(|()| wrote))
        .and_then(|wrote| std::io::Write::flush(&mut eng).map(|()| wrote))
        .and_then(|wrote| list.as_mut().map_or(Ok(()), std::io::Write::flush).map(|()| wrote))
        .with_context(|| format!("writing {} and {}", impressions.display(), engagements.display()))?;
    // Says what is in the files, malformed lines included, so a replay's rejects are no surprise.
    let malformed = if wrote.malformed == 0 {
        String::new()
    } else {
        format!(", {} of them followed by a malformed line (--faults {faults}),", wrote.malformed)
    };
    let duel = if interleaving {
        format!(" and {} of the interleaving duel (ranker-duel and its A/B twin ranker-duel-ab)", wrote.duel)
    } else {
        String::new()
    };
    let before = if pre_period == 0 {
        String::new()
    } else {
        format!(" (after {pre_period} searches of the day before, outside the experiment)")
    };
    let head = match judgments {
        Some(_) => format!(" and {} of head queries", wrote.head),
        None => String::new(),
    };
    eprintln!(
        "wrote {} impressions{malformed}{duel}{head}{before} to {} and {} engagements to {}",
        wrote.impressions,
        impressions.display(),
        wrote.engagements,
        engagements.display()
    );
    if let Some(path) = judgments {
        eprintln!("wrote {} judgments of the head queries to {}", wrote.judgments, path.display());
    }
    Ok(())
}
