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
    /// The three families, declared: a registry tells collectors apart by their descriptors,
    /// and the engine collector already is the one without any.
    descs: Vec<Desc>,
}

const CACHED: (&str, &str) =
    ("rankpulse_schemas_cached", "Schema Registry ids whose schema is cached (decoded without asking the registry).");
const FETCHES: (&str, &str) = (
    "rankpulse_schema_fetches_total",
    "Schema fetches from the registry by outcome: fetched, unknown (not found or unusable), failed (unreachable).",
);
const UP: (&str, &str) = (
    "rankpulse_schema_registry_up",
    "1 when the Schema Registry answered the last request or probe, 0 when it did not (cached ids are still decoded).",
);

impl SchemaCollector {
    pub(super) fn new(schemas: Arc<Schemas>) -> Self {
        let desc = |(name, help): (&str, &str), labels: Vec<String>| {
            Desc::new(name.into(), help.into(), labels, Default::default())
                .expect("the schema families' names and labels are valid")
        };
        let descs = vec![desc(CACHED, vec![]), desc(FETCHES, vec!["outcome".into()]), desc(UP, vec![])];
        SchemaCollector { schemas, descs }
    }
}

impl Collector for SchemaCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }
    fn collect(&self) -> Vec<MetricFamily> {
        let stats = self.schemas.stats();
        let mut families = vec![
            family(CACHED.0, CACHED.1, MetricType::GAUGE, vec![gauge(vec![], stats.cached as f64)]),
            family(
                FETCHES.0,
                FETCHES.1,
                MetricType::COUNTER,
                Outcome::ALL
                    .iter()
                    .zip(stats.fetches)
                    .map(|(o, n)| counter(vec![label("outcome", o.label())], n as f64))
                    .collect(),
            ),
        ];
        if let Some(up) = stats.registry_up {
            families.push(family(UP.0, UP.1, MetricType::GAUGE, vec![gauge(vec![], if up { 1.0 } else { 0.0 })]));
        }
        families
    }
}
