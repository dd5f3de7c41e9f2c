//! The exposition's schema families, when an input is Avro or Protobuf: whether the registry
//! answers, how many schema ids are cached, and how fetches went.

use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};

use super::prometheus::{counter, family, gauge, label};
use crate::schemas::{Outcome, Schemas};

/// Reads [`Schemas::stats`] at every scrape.
pub(super) struct SchemaCollector {
    /// The decoders' schemas (shared with the decoding threads).
    schemas: Arc<Schemas>,
    /// Empty, as the engine collector's: families appear as the state allows.
    descs: Vec<Desc>,
}

impl SchemaCollector {
    pub(super) fn new(schemas: Arc<Schemas>) -> Self {
        SchemaCollector { schemas, descs: Vec::new() }
    }
}

impl Collector for SchemaCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }
    fn collect(&self) -> Vec<MetricFamily> {
        let stats = self.schemas.stats();
        let mut families = vec![
            family(
                "rankpulse_schemas_cached",
                "Schema Registry ids whose schema is cached (decoded without asking the registry).",
                MetricType::GAUGE,
                vec![gauge(vec![], stats.cached as f64)],
            ),
            family(
                "rankpulse_schema_fetches_total",
                "Schema fetches from the registry by outcome: fetched, unknown (not found or unusable), failed (unreachable).",
                MetricType::COUNTER,
                Outcome::ALL
                    .iter()
                    .zip(stats.fetches)
                    .map(|(o, n)| counter(vec![label("outcome", o.label())], n as f64))
                    .collect(),
            ),
        ];
        if let Some(up) = stats.registry_up {
            families.push(family(
                "rankpulse_schema_registry_up",
                "1 when the Schema Registry answered the last request or probe, 0 when it did not (cached ids are still decoded).",
                MetricType::GAUGE,
                vec![gauge(vec![], if up { 1.0 } else { 0.0 })],
            ));
        }
        families
    }
}
