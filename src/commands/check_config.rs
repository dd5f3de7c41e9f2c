//! `rankpulse check-config`: validate and print the effective configuration.

use std::path::Path;

use crate::config::Config;

pub fn run(path: &Path) -> anyhow::Result<()> {
    let cfg = Config::load(Some(path))?;
    print!("{}", cfg.to_toml());
    Ok(())
}
