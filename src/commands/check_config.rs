//! `rankpulse check-config`: validate the configuration the way `serve` will use it and print
//! the effective configuration, secrets redacted.
//!
//! Beyond the file's own rules, every Kafka client `serve` creates is built with no broker to
//! connect to: librdkafka then checks each property (name, value, what this build supports) and
//! what it checks only when a client is created (SASL mechanism and credentials, TLS files,
//! OIDC settings), and secrets are read from their files and environment variables. A
//! configured judgment list is loaded as `serve` loads it. Avro and Protobuf schemas are loaded
//! (local files) or the registry asked. Sample messages (`--impressions`, `--engagements`) are
//! decoded as `serve` decodes them, and what each field read is printed under its key (the
//! native field's name, which is also the `[mapping.*]` key): a mapping is checked against the
//! user's own events before it meets a topic. A sample line rejected as malformed fails the
//! command (exit 1, after everything is printed), so a CI gate on a broken mapping fails; a
//! foreign line (an event name the mapping does not list) is counted but fails nothing, as in
//! `replay --max-rejects` and the rejected-events alert.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use serde_json::json;

use crate::config::Config;
use crate::event::{Decoders, EventKind, RawMessage};
use crate::replay::records::Converted;

pub fn run(path: &Path, samples: [Option<&Path>; 2], lines: usize) -> anyhow::Result<()> {
    let cfg = Config::load(Some(path))?;
    // The files [http] names (certificate, key, client CA, bearer token) as `serve` reads them.
    crate::output::HttpSecurity::load(&cfg.http)?;
    // The judgment list, read and checked as `serve` loads it at start.
    crate::judgments::JudgmentSource::from_config(&cfg.judgments)?;
    let warnings = cfg.kafka.check_clients()?;
    if let Some(schemas) = Decoders::new(&cfg).schemas() {
        match schemas.check() {
            Ok(report) => report.iter().for_each(|line| eprintln!("{line}")),
            Err(e @ crate::schemas::SchemaError::Unreachable(_)) => eprintln!("warning: {e}"),
            Err(e) => return Err(e.into()),
        }
    }
    let shown = Config { kafka: cfg.kafka.redacted(), ..cfg.clone() };
    print!("{}", shown.to_toml());
    for warning in warnings {
        eprintln!("librdkafka warns: {warning}");
    }
    let mut malformed = Vec::new();
    for (kind, sample) in EventKind::ALL.into_iter().zip(samples) {
        if let Some(sample) = sample {
            let outcome = print_sample(&cfg, kind, sample, lines)?;
            if outcome.malformed > 0 {
                malformed.push(format!("{} of {} lines of {}", outcome.malformed, outcome.lines, sample.display()));
            }
        }
    }
    if !malformed.is_empty() {
        anyhow::bail!(
            "sample lines rejected: {}; the configuration does not read these events (each rejected line is printed above with its reason)",
            malformed.join(" and ")
        );
    }
    Ok(())
}

/// How a sample file decoded.
struct SampleOutcome {
    /// Non-blank lines read.
    lines: u64,
    /// Lines rejected for a reason that is not foreign: what fails the check.
    malformed: u64,
}

/// Decodes every line of a sample file as `serve` would and prints the first `shown` (the
/// fields read, or the rejection) and a count by outcome. Headers and the message key do not
/// exist in a file: fields mapped from them take their defaults.
fn print_sample(cfg: &Config, kind: EventKind, sample: &Path, shown: usize) -> anyhow::Result<SampleOutcome> {
    let mut cfg = cfg.clone();
    let mut converted = Converted::default();
    let lines_file = converted.as_lines(&mut cfg, kind, sample)?;
    let decoders = Decoders::new(&cfg);
    let file =
        std::fs::File::open(&lines_file).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", sample.display()))?;
    let name = if kind == EventKind::Impression { "impressions" } else { "engagements" };
    println!("\n# {name} sample {}: what each field reads (headers and the key are not in a file)", sample.display());
    let (mut decoded, mut rejected, mut malformed) = (0u64, BTreeMap::<&str, u64>::new(), 0u64);
    for (number, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let raw = RawMessage::body(line.as_bytes());
        let printed = match kind {
            EventKind::Impression => {
                let mut ids = Vec::new();
                decoders.impression_with_ids(raw, &mut ids).map(|i| {
                    // `teams` as the native field writes it: each result's ranker by name.
                    let teams = i.interleaving.as_ref().map(|il| {
                        il.teams.iter().map(|&t| il.rankers.get(usize::from(t)).cloned()).collect::<Vec<_>>()
                    });
                    json!({"line": number + 1, "query_id": i.query_id, "timestamp": i.timestamp,
                        "time": crate::time::format_rfc3339_ms(i.timestamp), "experiment": i.experiment,
                        "variant": i.variant, "client_id": i.client_id, "session_id": i.session_id,
                        "query": i.query, "segment": i.segment, "results": ids,
                        "interleaving": i.interleaving.as_ref().map(|il| il.rankers.clone()), "teams": teams})
                })
            }
            EventKind::Engagement => decoders.engagement(raw).map(|e| {
                json!({"line": number + 1, "query_id": e.query_id, "timestamp": e.timestamp,
                    "time": crate::time::format_rfc3339_ms(e.timestamp), "doc_id": e.doc_id, "action": e.action,
                    "event_id": e.event_id, "position": e.position})
            }),
        };
        let printed = match printed {
            Ok(fields) => {
                decoded += 1;
                fields
            }
            Err(r) => {
                *rejected.entry(r.reason.label()).or_default() += 1;
                if !r.reason.is_foreign() {
                    malformed += 1;
                }
                json!({"line": number + 1, "rejected": r.reason.label(), "detail": r.detail})
            }
        };
        if number < shown {
            println!("{printed}");
        }
    }
    let refused: Vec<String> = rejected.iter().map(|(r, n)| format!("{r} {n}")).collect();
    let refused = if refused.is_empty() { String::new() } else { format!(" ({})", refused.join(", ")) };
    let refused_lines = rejected.values().sum::<u64>();
    println!("# {name}: {decoded} decoded, {refused_lines} rejected{refused}");
    Ok(SampleOutcome { lines: decoded + refused_lines, malformed })
}
