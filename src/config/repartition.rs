//! `[repartition]`: re-keying inputs that are not co-partitioned by query id through internal
//! topics (the stage itself is `crate::repartition`).

use serde::{Deserialize, Serialize};

use crate::time::HumanDuration;

/// `[repartition]`: the join is per partition, so impression and engagement n must share a
/// partition number. When the producers key the topics by something else than the query id (a
/// user, a session), or the topics' partition counts differ, a repartition stage re-keys every
/// event by its query id into two internal topics, which the join then consumes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RepartitionConfig {
    /// `auto` (check the partition counts and sample message keys at start; repartition when
    /// either shows the topics are not co-partitioned by query id), `always` or `never` (consume
    /// the topics as they are; a key mismatch is then only reported). Default `auto`.
    pub mode: RepartitionMode,
    /// Partition count of the internal topics when rankpulse creates them: the join's
    /// parallelism. 0 is the larger of the two input topics' counts. Default 0.
    pub partitions: usize,
    /// `retention.ms` of the internal topics: they only carry events from the stage to the
    /// join, so a few hours of lag is plenty; longer costs disk. Default `1d`.
    pub retention: HumanDuration,
    /// Replication factor of the internal topics when rankpulse creates them (at most the number
    /// of brokers). Default 3.
    pub replication_factor: i32,
    /// Messages read from the end of each input topic at start to check their keys (`auto`,
    /// and the warning of `never`). Default 200.
    pub sample_messages: usize,
}

/// `repartition.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RepartitionMode {
    /// Decide at start from partition counts and sampled keys.
    Auto,
    /// Always re-key through the internal topics.
    Always,
    /// Never: the producers guarantee co-partitioning by query id.
    Never,
}

impl RepartitionConfig {
    /// The internal topic that carries one input's re-keyed events.
    pub fn topic(group_id: &str, input: &str) -> String {
        format!("{group_id}-{input}-repartition")
    }
}

impl Default for RepartitionConfig {
    fn default() -> Self {
        RepartitionConfig {
            mode: RepartitionMode::Auto,
            partitions: 0,
            retention: HumanDuration::from_millis(86_400_000),
            replication_factor: 3,
            sample_messages: 200,
        }
    }
}
