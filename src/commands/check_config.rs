//! `rankpulse check-config`: validate the configuration the way `serve` will use it and print
//! the effective configuration, secrets redacted.
//!
//! Beyond the file's own rules, every Kafka client `serve` creates is built with no broker to
//! connect to: librdkafka then checks each property (name, value, what this build supports) and
//! what it checks only when a client is created (SASL mechanism and credentials, TLS files,
//! OIDC settings), and secrets are read from their files and environment variables. A
//! configured judgment list is loaded as `serve` loads it.

use std::path::Path;

use crate::config::Config;

pub fn run(path: &Path) -> anyhow::Result<()> {
    let cfg = Config::load(Some(path))?;
    // The files [http] names (certificate, key, client CA, bearer token) as `serve` reads them.
    crate::output::HttpSecurity::load(&cfg.http)?;
    // The judgment list, read and checked as `serve` loads it at start.
    crate::judgments::JudgmentSource::from_config(&cfg.judgments)?;
    let warnings = cfg.kafka.check_clients()?;
    let shown = Config { kafka: cfg.kafka.redacted(), ..cfg };
    print!("{}", shown.to_toml());
    for warning in warnings {
        eprintln!("librdkafka warns: {warning}");
    }
    Ok(())
}
