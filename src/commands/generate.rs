//! `rankpulse generate`: the demo's A/B traffic as JSON-lines files, to try `replay` without Kafka.

use std::path::Path;

use anyhow::Context;

pub fn run(
    impressions: &Path,
    engagements: &Path,
    count: u64,
    rate: u32,
    seed: u64,
    start: &str,
) -> anyhow::Result<()> {
    let start_ms =
        crate::time::parse_rfc3339_ms(start).with_context(|| format!("--start {start:?} is not RFC 3339"))?;
    let open = |p: &Path| {
        std::fs::File::create(p).map(std::io::BufWriter::new).with_context(|| format!("creating {}", p.display()))
    };
    let (mut imp, mut eng) = (open(impressions)?, open(engagements)?);
    let written = crate::demo::write_traffic(&mut imp, &mut eng, count, rate, seed, start_ms)
        .and_then(|()| std::io::Write::flush(&mut imp))
        .and_then(|()| std::io::Write::flush(&mut eng));
    written.with_context(|| format!("writing {} and {}", impressions.display(), engagements.display()))?;
    eprintln!(
        "wrote {count} impressions to {} and their engagements to {}",
        impressions.display(),
        engagements.display()
    );
    Ok(())
}
