//! Keys of earlier releases: a configuration written for one keeps working, with a warning that
//! names what replaced each key, instead of the refusal an unknown key gets. Each retired key is
//! listed here with what became of it (moved to a new key, or no longer needed) and is read for
//! at least one release after it was retired (CHANGELOG.md, "Deprecated").
//!
//! The upgrade happens before the strict parse, on the file's TOML table and on the
//! `RANKPULSE__*` environment overrides, so the schema itself knows only today's keys and every
//! other unknown key is still refused.

use std::fmt;

use toml::Table;

/// What became of a retired key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Its value moves to this key (`section.key`), unless that key is set too, which wins.
    MovedTo(&'static str),
    /// Nothing reads it any more; the value is dropped.
    Dropped,
}

/// One retired key.
struct Retired {
    /// `section.key` as it was written.
    key: &'static str,
    /// The last release that read it.
    last_read_in: &'static str,
    fate: Fate,
    /// What to do instead, shown in the warning.
    advice: &'static str,
}

/// Every retired key (found in the release history by `git log -p -- src/config`).
const RETIRED: &[Retired] = &[
    Retired {
        key: "state.dir",
        last_read_in: "0.1.0",
        fate: Fate::Dropped,
        advice: "state now lives in the compacted Kafka topic `state.changelog_topic` (default: the group id \
                 followed by `-changelog`), restored by whichever replica is assigned a partition; no local \
                 directory is read or written",
    },
    Retired {
        key: "kafka.commit_interval",
        last_read_in: "0.1.0",
        fate: Fate::MovedTo("state.checkpoint_interval"),
        advice: "offsets are committed right after each checkpoint is acknowledged, every \
                 `state.checkpoint_interval`",
    },
    Retired {
        key: "state.keep_checkpoints",
        last_read_in: "0.1.0 (unreleased builds after it)",
        fate: Fate::Dropped,
        advice: "the changelog topic is compacted: Kafka keeps each partition's newest snapshot",
    },
    Retired {
        key: "state.rebalance_grace",
        last_read_in: "0.1.0 (unreleased builds after it)",
        fate: Fate::Dropped,
        advice: "a partition's state moves with the partition through the changelog topic, so no grace period \
                 holds windows back",
    },
];

/// librdkafka properties that 0.1.0 passed through from `[kafka.properties]` and that rankpulse
/// now sets itself: (property, what became of it, advice).
const RETIRED_PROPERTIES: &[(&str, Fate, &str)] = &[
    (
        "group.instance.id",
        Fate::MovedTo("kafka.group_instance_id"),
        "static membership has a key of its own, which rankpulse's rebalance handling reads",
    ),
    (
        "partition.assignment.strategy",
        Fate::Dropped,
        "rankpulse chooses the assignor itself: partition n of both topics must be assigned together",
    ),
];

/// A retired key that was found, for the warning printed at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetiredKey {
    /// The key as the user wrote it: `state.dir`, or `RANKPULSE__STATE__DIR`.
    pub written: String,
    /// The key that now holds its value, if any.
    pub replacement: Option<&'static str>,
    /// Whether the replacement was set too, so the old value was not used.
    pub overridden: bool,
    /// The last release that read the key.
    pub last_read_in: &'static str,
    /// What to do instead.
    pub advice: &'static str,
}

impl fmt::Display for RetiredKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "configuration key `{}` was last read by rankpulse {}; ", self.written, self.last_read_in)?;
        match (self.replacement, self.overridden) {
            (Some(new), false) => write!(f, "its value is used as `{new}`: write `{new}` instead")?,
            (Some(new), true) => write!(f, "`{new}` is set too and is used: remove the old key")?,
            (None, _) => write!(f, "it is ignored: remove it")?,
        }
        write!(f, " ({}). A later release will refuse it.", self.advice)
    }
}

/// Rewrites the retired keys of `table` (a parsed configuration file) into today's, returning
/// what it found.
pub fn upgrade_file(table: &mut Table) -> Vec<RetiredKey> {
    let mut found = Vec::new();
    for retired in RETIRED {
        let (section, key) = split(retired.key);
        let Some(value) = table.get_mut(section).and_then(|s| s.as_table_mut()).and_then(|s| s.remove(key)) else {
            continue;
        };
        found.push(apply(table, retired.key.to_string(), retired.fate, value, retired.last_read_in, retired.advice));
    }
    for &(property, fate, advice) in RETIRED_PROPERTIES {
        let properties = table
            .get_mut("kafka")
            .and_then(|s| s.as_table_mut())
            .and_then(|k| k.get_mut("properties"))
            .and_then(|p| p.as_table_mut());
        let Some(value) = properties.and_then(|p| p.remove(property)) else { continue };
        found.push(apply(table, format!("kafka.properties.\"{property}\""), fate, value, "0.1.0", advice));
    }
    found
}

/// Moves (or drops) one retired value and describes it.
fn apply(
    table: &mut Table,
    written: String,
    fate: Fate,
    value: toml::Value,
    last_read_in: &'static str,
    advice: &'static str,
) -> RetiredKey {
    let mut overridden = false;
    let replacement = match fate {
        Fate::MovedTo(new) => {
            let (section, key) = split(new);
            let target = table.entry(section).or_insert_with(|| toml::Value::Table(Table::new()));
            // A section written as something else than a table is left for the strict parse to
            // refuse with its own message.
            if let Some(target) = target.as_table_mut() {
                overridden = target.contains_key(key);
                target.entry(key).or_insert(value);
            }
            Some(new)
        }
        Fate::Dropped => None,
    };
    RetiredKey { written, replacement, overridden, last_read_in, advice }
}

/// Rewrites retired `RANKPULSE__SECTION__KEY` overrides into today's names (or drops them),
/// returning the variables to use and what was found. Variable names are matched the way the
/// configuration crate reads them: case-insensitively.
pub fn upgrade_env(env: Vec<(String, String)>) -> (Vec<(String, String)>, Vec<RetiredKey>) {
    let variable = |key: &str| format!("RANKPULSE__{}", key.replace('.', "__").to_uppercase());
    let mut found = Vec::new();
    let mut kept: Vec<(String, String)> = Vec::with_capacity(env.len());
    let mut moved = Vec::new();
    for (name, value) in env {
        let Some(retired) = RETIRED.iter().find(|r| variable(r.key).eq_ignore_ascii_case(&name)) else {
            kept.push((name, value));
            continue;
        };
        let replacement = match retired.fate {
            Fate::MovedTo(new) => {
                moved.push((variable(new), value));
                Some(new)
            }
            Fate::Dropped => None,
        };
        found.push(RetiredKey {
            written: name,
            replacement,
            overridden: false,
            last_read_in: retired.last_read_in,
            advice: retired.advice,
        });
    }
    for (name, value) in moved {
        if kept.iter().any(|(k, _)| k.eq_ignore_ascii_case(&name)) {
            if let Some(notice) = found.iter_mut().find(|n| n.replacement.is_some_and(|r| variable(r) == name)) {
                notice.overridden = true;
            }
        } else {
            kept.push((name, value));
        }
    }
    (kept, found)
}

/// `section.key` into its two parts (every retired key has both).
fn split(key: &'static str) -> (&'static str, &'static str) {
    key.split_once('.').unwrap_or(("", key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Table {
        text.parse().unwrap()
    }

    #[test]
    fn a_moved_key_takes_its_new_place_unless_that_is_set() {
        let mut t = table("[kafka]\ncommit_interval = \"2s\"\n");
        let found = upgrade_file(&mut t);
        assert_eq!(t["state"]["checkpoint_interval"].as_str(), Some("2s"));
        assert!(!t["kafka"].as_table().unwrap().contains_key("commit_interval"));
        assert_eq!(found.len(), 1);
        let shown = found[0].to_string();
        assert!(shown.contains("`kafka.commit_interval`") && shown.contains("`state.checkpoint_interval`"), "{shown}");

        let mut t = table("[kafka]\ncommit_interval = \"2s\"\n[state]\ncheckpoint_interval = \"9s\"\n");
        let found = upgrade_file(&mut t);
        assert_eq!(t["state"]["checkpoint_interval"].as_str(), Some("9s"));
        assert!(found[0].overridden && found[0].to_string().contains("remove the old key"));
    }

    #[test]
    fn a_dropped_key_is_removed_and_named() {
        let mut t = table("[state]\ndir = \"./rankpulse-state\"\ncheckpoint_interval = \"5s\"\n");
        let found = upgrade_file(&mut t);
        assert_eq!(t, table("[state]\ncheckpoint_interval = \"5s\"\n"));
        let shown = found[0].to_string();
        assert!(shown.contains("`state.dir`") && shown.contains("state.changelog_topic"), "{shown}");
    }

    #[test]
    fn retired_librdkafka_properties() {
        let mut t = table(
            "[kafka.properties]\n\"group.instance.id\" = \"pod-0\"\n\"partition.assignment.strategy\" = \"range\"\n\"security.protocol\" = \"SSL\"\n",
        );
        let found = upgrade_file(&mut t);
        assert_eq!(t["kafka"]["group_instance_id"].as_str(), Some("pod-0"));
        assert_eq!(t["kafka"]["properties"], toml::Value::Table(table("\"security.protocol\" = \"SSL\"")));
        assert_eq!(found.len(), 2);
    }

    #[test]
    fn today_s_keys_are_untouched() {
        let text = include_str!("../../config/rankpulse.toml");
        let mut t = table(text);
        assert_eq!(upgrade_file(&mut t), vec![]);
        assert_eq!(t, table(text));
    }

    #[test]
    fn environment_overrides_are_renamed_or_dropped() {
        let env = vec![
            ("RANKPULSE__STATE__DIR".to_string(), "/var/lib/rankpulse".to_string()),
            ("rankpulse__kafka__commit_interval".to_string(), "3s".to_string()),
            ("RANKPULSE__KAFKA__BROKERS".to_string(), "b:9092".to_string()),
        ];
        let (kept, found) = upgrade_env(env);
        assert_eq!(
            kept,
            vec![
                ("RANKPULSE__KAFKA__BROKERS".to_string(), "b:9092".to_string()),
                ("RANKPULSE__STATE__CHECKPOINT_INTERVAL".to_string(), "3s".to_string()),
            ]
        );
        assert_eq!(
            found.iter().map(|f| f.written.as_str()).collect::<Vec<_>>(),
            ["RANKPULSE__STATE__DIR", "rankpulse__kafka__commit_interval"]
        );

        let (kept, found) = upgrade_env(vec![
            ("RANKPULSE__KAFKA__COMMIT_INTERVAL".to_string(), "3s".to_string()),
            ("RANKPULSE__STATE__CHECKPOINT_INTERVAL".to_string(), "7s".to_string()),
        ]);
        assert_eq!(kept, vec![("RANKPULSE__STATE__CHECKPOINT_INTERVAL".to_string(), "7s".to_string())]);
        assert!(found[0].overridden);
    }
}
