//! Whether the inputs are co-partitioned by query id, checked at start: the partition counts of
//! both topics from the metadata, and the keys of messages sampled from the end of each.
//!
//! A key is compared with the query id its message decodes to. A message without a key says
//! nothing (its producer may place it by query id itself), nor does one that does not decode.
//! A key written in another encoding than the query id's UTF-8 text (an Avro-serialized key,
//! say) reads as a mismatch: `auto` then repartitions, which is always correct, only dearer.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::encode::Reencoder;
use super::RepartitionError;
use crate::event::{EventKind, RawMessage};

/// How long reading the metadata and the samples may take at start.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
const SAMPLE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the inputs look like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inspection {
    /// Partition count of each input topic (impressions, engagements); 0 when it is missing.
    pub partitions: [usize; 2],
    /// Sampled messages per input that had a key and decoded.
    pub keyed: [usize; 2],
    /// Of those, the ones whose key was not their query id.
    pub mismatched: [usize; 2],
}

impl Inspection {
    /// Both topics exist and have different partition counts.
    pub fn counts_differ(&self) -> bool {
        let [i, e] = self.partitions;
        i > 0 && e > 0 && i != e
    }

    /// Some sampled key is not its query id.
    pub fn keys_differ(&self) -> bool {
        self.mismatched.iter().any(|&n| n > 0)
    }
}

/// Reads the partition counts, then samples up to `sample` messages of each topic from its end.
pub fn inspect<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topics: &[String; 2],
    reencoder: &mut Reencoder,
    sample: usize,
) -> Result<Inspection, RepartitionError> {
    let mut inspection = Inspection::default();
    for kind in EventKind::ALL {
        let topic = &topics[kind.index()];
        let metadata = consumer
            .fetch_metadata(Some(topic), METADATA_TIMEOUT)
            .map_err(|error| RepartitionError::Metadata { topic: topic.clone(), error })?;
        let partitions = metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none());
        inspection.partitions[kind.index()] = partitions.map_or(0, |t| t.partitions().len());
    }
    if sample == 0 {
        return Ok(inspection);
    }
    // Each partition's newest messages, as many from each as makes `sample` per topic.
    let mut tpl = TopicPartitionList::new();
    let mut expected = 0usize;
    for kind in EventKind::ALL {
        let (topic, count) = (&topics[kind.index()], inspection.partitions[kind.index()]);
        let per_partition = sample.div_ceil(count.max(1)) as i64;
        for p in 0..count as i32 {
            let Ok((low, high)) = consumer.fetch_watermarks(topic, p, METADATA_TIMEOUT) else { continue };
            if high > low {
                let start = low.max(high - per_partition);
                expected += (high - start) as usize;
                let _ = tpl.add_partition_offset(topic, p, Offset::Offset(start));
            }
        }
    }
    if expected == 0 {
        return Ok(inspection);
    }
    consumer.assign(&tpl).map_err(|error| RepartitionError::Metadata { topic: topics[0].clone(), error })?;
    drop(tpl);
    let deadline = Instant::now() + SAMPLE_TIMEOUT;
    let mut read = 0usize;
    while read < expected && Instant::now() < deadline {
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) else { continue };
        read += 1;
        let kind = if message.topic() == topics[0] { EventKind::Impression } else { EventKind::Engagement };
        let (Some(key), Some(payload)) = (message.key(), message.payload()) else { continue };
        // The key check reads the query id, which a mapping may take from a header.
        let headers: Vec<(&str, &[u8])> = match (reencoder.reads_envelope(), message.headers()) {
            (true, Some(headers)) => headers.iter().filter_map(|h| Some((h.key, h.value?))).collect(),
            _ => Vec::new(),
        };
        if reencoder.reencode(kind, RawMessage { payload, key: Some(key), headers: &headers }).is_err() {
            continue;
        }
        inspection.keyed[kind.index()] += 1;
        if key != reencoder.key().as_bytes() {
            inspection.mismatched[kind.index()] += 1;
        }
    }
    let _ = consumer.unassign();
    Ok(inspection)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differing_counts_need_both_topics() {
        let of = |partitions| Inspection { partitions, ..Inspection::default() };
        assert!(of([3, 5]).counts_differ());
        assert!(!of([4, 4]).counts_differ());
        assert!(!of([0, 5]).counts_differ(), "a missing topic is not a mismatch of counts");
        let keys = Inspection { mismatched: [0, 1], ..Inspection::default() };
        assert!(keys.keys_differ());
    }
}
