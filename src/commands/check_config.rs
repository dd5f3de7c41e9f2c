//! `rankpulse check-config`: validate and print the effective configuration.

use std::path::Path;

use crate::config::Config;

pub fn run(path: &Path) -> anyhow::Result<()> {
    let cfg = Config::load(Some(path))?;
    // The files [http] names (certificate, key, client CA, bearer token) as `serve` reads them.
    crate::output::HttpSecurity::load(&cfg.http)?;
    print!("{}", cfg.to_toml());
    Ok(())
}
