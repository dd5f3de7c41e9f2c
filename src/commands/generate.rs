//! `rankpulse generate`: the demo's A/B traffic (and on request its interleaving duel) as
//! JSON-lines files, to try `replay` without Kafka.

use std::path::Path;

use anyhow::Context;

use crate::demo::FaultRate;

/// Writes `count` impressions at `rate` per second of event time from `start` (RFC 3339), of
/// `seed`'s traffic, with `faults` and, when `interleaving`, the duel.
pub fn run(
    impressions: &Path,
    engagements: &Path,
    (count, rate, seed, start): (u64, u32, u64, &str),
    faults: FaultRate,
    interleaving: bool,
) -> anyhow::Result<()> {
    let start_ms =
        crate::time::parse_rfc3339_ms(start).with_context(|| format!("--start {start:?} is not RFC 3339"))?;
    let open = |p: &Path| {
        std::fs::File::create(p).map(std::io::BufWriter::new).with_context(|| format!("creating {}", p.display()))
    };
    let (mut imp, mut eng) = (open(impressions)?, open(engagements)?);
    let at = (count, rate, seed, start_ms);
    let wrote = crate::demo::write_traffic_with_duel(&mut imp, &mut eng, at, faults, interleaving)
        .and_then(|wrote| std::io::Write::flush(&mut imp).map(|()| wrote))
        .and_then(|wrote| std::io::Write::flush(&mut eng).map(|()| wrote))
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
    eprintln!(
        "wrote {} impressions{malformed}{duel} to {} and {} engagements to {}",
        wrote.impressions,
        impressions.display(),
        wrote.engagements,
        engagements.display()
    );
    Ok(())
}
