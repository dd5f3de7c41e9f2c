//! Reading the configuration: the TOML file, then `RANKPULSE__SECTION__KEY` environment
//! overrides on top, then [`Config::validate`].

use std::path::Path;

use super::upgrade::{self, RetiredKey};
use super::{Config, ConfigError, Reads};

impl Config {
    /// Loads a TOML file (or only defaults when `path` is `None`), applies
    /// `RANKPULSE__SECTION__KEY` environment overrides, and validates the result.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_for(path, Reads::Topics)
    }

    /// [`Config::load`] for a command that reads its events from `reads`: `replay` and
    /// `judgments --from-clicks` read exported files, whose Avro inputs need no schema source.
    pub fn load_for(path: Option<&Path>, reads: Reads) -> Result<Config, ConfigError> {
        let text = match path {
            Some(p) => {
                std::fs::read_to_string(p).map_err(|error| ConfigError::Read { path: p.to_path_buf(), error })?
            }
            None => String::new(),
        };
        let origin = path.map_or_else(|| "defaults".to_string(), |p| p.display().to_string());
        let (cfg, retired) = Self::parse(&text, &origin, std::env::vars(), reads)?;
        for key in &retired {
            tracing::warn!(origin, "{key}");
        }
        Ok(cfg)
    }

    /// Parses TOML text plus environment overrides; split from [`Config::load`] so tests can
    /// inject an environment. Keys of earlier releases are read with a warning (see
    /// [`Config::upgraded_from_toml_with_env`]).
    pub fn from_toml_with_env(
        text: &str,
        origin: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let (cfg, retired) = Self::upgraded_from_toml_with_env(text, origin, env)?;
        for key in &retired {
            tracing::warn!(origin, "{key}");
        }
        Ok(cfg)
    }

    /// [`Config::from_toml_with_env`], returning the keys of earlier releases it found and read
    /// in their new place (`upgrade`) instead of logging them.
    pub fn upgraded_from_toml_with_env(
        text: &str,
        origin: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<(Config, Vec<RetiredKey>), ConfigError> {
        Self::parse(text, origin, env, Reads::Topics)
    }

    /// [`Config::upgraded_from_toml_with_env`], validated for a command reading `reads`.
    fn parse(
        text: &str,
        origin: &str,
        env: impl IntoIterator<Item = (String, String)>,
        reads: Reads,
    ) -> Result<(Config, Vec<RetiredKey>), ConfigError> {
        let parse_err =
            |e: &dyn std::fmt::Display| ConfigError::Parse { origin: origin.to_string(), message: e.to_string() };
        let mut table: toml::Table = toml::from_str(text).map_err(|e| parse_err(&e))?;
        let mut retired = upgrade::upgrade_file(&mut table);
        // Only a file with retired keys is rewritten: the strict parse of the file as written
        // points its errors at the file's own line numbers.
        let upgraded;
        let text = if retired.is_empty() {
            text
        } else {
            upgraded = toml::to_string(&table).map_err(|e| parse_err(&e))?;
            upgraded.as_str()
        };
        // Parse the file strictly first, so its errors point at the file with line numbers.
        let _: Config = toml::from_str(text).map_err(|e| parse_err(&e))?;
        let (env, retired_env) =
            upgrade::upgrade_env(env.into_iter().filter(|(k, _)| k.starts_with("RANKPULSE__")).collect());
        retired.extend(retired_env);
        let env_source = config::Environment::with_prefix("RANKPULSE")
            .prefix_separator("__")
            .separator("__")
            .try_parsing(true)
            .list_separator(",")
            .with_list_parse_key("metrics.cutoffs")
            .with_list_parse_key("metrics.windows")
            .source(Some(env.into_iter().collect()));
        let merged = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .add_source(env_source)
            .build()
            .map_err(|e| parse_err(&e))?;
        let cfg: Config = merged
            .try_deserialize()
            .map_err(|e| parse_err(&format!("{e} (after applying RANKPULSE__* environment overrides)")))?;
        cfg.validate_for(reads)?;
        Ok((cfg, retired))
    }

    /// The effective configuration as TOML, for `check-config`; bcrypt hashes are not shown.
    // Writes a configuration that was read and validated, never input: a failure would be a bug
    // in the schema's `Serialize`.
    #[allow(clippy::expect_used, reason = "serializes a validated configuration, not input")]
    pub fn to_toml(&self) -> String {
        let shown = Config { http: self.http.redacted(), ..self.clone() };
        toml::to_string_pretty(&shown).expect("configuration always serializes")
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::InputFormat;
    use super::*;

    pub(in crate::config) fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_with_env(text, "test.toml", std::iter::empty())
    }

    #[test]
    fn empty_file_gives_contract_defaults() {
        let cfg = parse("").unwrap();
        assert_eq!(cfg, Config::default());
        assert_eq!(cfg.kafka.impressions_topic, "search-impressions");
        assert_eq!(cfg.join.attribution_window.as_millis_i64(), 1_800_000);
        assert_eq!(cfg.metrics.cutoffs, vec![1, 3, 5, 10]);
        assert_eq!(cfg.metrics.action_gains["purchase"], 3);
        assert_eq!(cfg.http.listen, "0.0.0.0:9464");
    }

    #[test]
    fn shipped_default_file_equals_built_in_defaults() {
        let text = include_str!("../../config/rankpulse.toml");
        assert_eq!(parse(text).unwrap(), Config::default());
    }

    #[test]
    fn effective_config_round_trips() {
        let cfg = parse("[join]\nattribution_window = \"90s\"\n").unwrap();
        assert_eq!(parse(&cfg.to_toml()).unwrap(), cfg);
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let err = parse("[join]\nattribution_windo = \"5m\"\n").unwrap_err().to_string();
        assert!(err.contains("attribution_windo"), "{err}");
    }

    #[test]
    fn environment_overrides_file() {
        let env = [
            ("RANKPULSE__KAFKA__BROKERS".to_string(), "b1:9092,b2:9092".to_string()),
            ("RANKPULSE__JOIN__ATTRIBUTION_WINDOW".to_string(), "5m".to_string()),
            ("RANKPULSE__METRICS__CUTOFFS".to_string(), "1,10".to_string()),
            ("UNRELATED".to_string(), "x".to_string()),
        ];
        let cfg = Config::from_toml_with_env("[kafka]\nbrokers = \"file:9092\"\n", "t", env).unwrap();
        assert_eq!(cfg.kafka.brokers, "b1:9092,b2:9092");
        assert_eq!(cfg.join.attribution_window.as_millis_i64(), 300_000);
        assert_eq!(cfg.metrics.cutoffs, vec![1, 10]);
    }

    #[test]
    fn input_formats_and_ubi_keys() {
        let cfg = parse("[kafka]\nimpressions_format = \"ubi\"\n[ubi]\nexperiment_key = \"ab_test\"\n").unwrap();
        assert_eq!((cfg.kafka.impressions_format, cfg.kafka.engagements_format), (InputFormat::Ubi, InputFormat::Json));
        assert_eq!((cfg.ubi.experiment_key.as_str(), cfg.ubi.variant_key.as_str()), ("ab_test", "variant"));
        let env = [("RANKPULSE__KAFKA__ENGAGEMENTS_FORMAT".to_string(), "ubi".to_string())];
        let cfg = Config::from_toml_with_env("", "t", env).unwrap();
        assert_eq!(cfg.kafka.engagements_format, InputFormat::Ubi);
        for (text, needle) in [
            ("[kafka]\nimpressions_format = \"avro\"", "impressions_format"),
            ("[ubi]\nexperiment_key = \"\"", "ubi.experiment_key"),
            ("[ubi]\nvariant_key = \"experiment\"", "ubi.variant_key"),
            ("[ubi]\nsession_key = \"s\"", "session_key"),
        ] {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(needle), "{text:?} gave {err:?}, expected it to mention {needle}");
        }
    }
}
