//! The exposition's rebalance families: how often this replica's partitions moved, and for each
//! partition it took over, how long it was unowned and how long its restore took.

use prometheus::proto::{MetricFamily, MetricType};

use super::prometheus::{counter, family, gauge, label, with_partition};
use crate::engine::{Engine, RebalanceKind, RestoreSource};

/// The rebalance counters (always, so `increase()` sees the first one) and, per partition
/// restored since it was assigned here, the handover gauges.
pub(super) fn families(engine: &Engine) -> Vec<MetricFamily> {
    let stats = engine.telemetry().rebalance_stats();
    let rebalances = RebalanceKind::ALL
        .iter()
        .zip(stats.rebalances)
        .map(|(kind, n)| counter(vec![label("kind", kind.label())], n as f64))
        .collect();
    let restores = [RestoreSource::Changelog, RestoreSource::Standby]
        .iter()
        .zip(stats.restores)
        .map(|(source, n)| counter(vec![label("source", source.label())], n as f64))
        .collect();
    let took = stats
        .last_restore
        .iter()
        .map(|(&p, r)| gauge(with_partition(vec![label("source", r.source.label())], p), r.took.as_secs_f64()))
        .collect();
    let unowned = stats
        .last_restore
        .iter()
        .filter_map(|(&p, r)| Some(gauge(with_partition(vec![], p), r.unowned?.as_secs_f64())))
        .collect();
    vec![
        family(
            "rankpulse_rebalances_total",
            "Rebalances that changed this replica's partitions, by kind: assign (taken on and restored), revoke (snapshotted and handed on), lost (expelled from the group, dropped unwritten).",
            MetricType::COUNTER,
            rebalances,
        ),
        family(
            "rankpulse_partition_restores_total",
            "Partitions restored from a snapshot, by where it came from: the changelog topic, or a warm standby's copy.",
            MetricType::COUNTER,
            restores,
        ),
        family(
            "rankpulse_partition_restore_seconds",
            "Time the last restore of each partition this replica holds took (reading, decoding, restoring its snapshot).",
            MetricType::GAUGE,
            took,
        ),
        family(
            "rankpulse_partition_unowned_seconds",
            "For each partition this replica holds, from its restored snapshot's write by the previous owner to the restore's end: how long no replica processed it in the last handover (a crash adds the time since that owner's last snapshot).",
            MetricType::GAUGE,
            unowned,
        ),
    ]
}
