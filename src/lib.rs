//! rankpulse: streaming online evaluation of search ranking quality.
//!
//! Search-impression events (a ranked result list as shown) and engagement events
//! (click, add-to-cart, purchase, ...) arrive on two Kafka topics. rankpulse attributes each
//! engagement to its impression on event time, computes trec_eval-conformant ranking metrics per
//! impression once its attribution window has passed, aggregates them per experiment and variant,
//! cumulatively and in event-time tumbling windows, and exports them for Prometheus.
//!
//! The modules follow the pipeline, one stage each, so every rule has exactly one home:
//!
//! | module | stage | owns |
//! |---|---|---|
//! | [`config`] | start-up | the TOML schema, defaults, env overrides, cross-field checks |
//! | [`time`] | everywhere | event timestamps (ms since epoch) and duration strings |
//! | [`ids`] | everywhere | the hashed and numbered identities every stage passes around: query, result, group, engagement |
//! | [`event`] | decoding | turning a message's bytes into a borrowed impression or engagement, or a reject reason: the per-input format choice ([`event::Decoders`]), rankpulse's own events (a strict one-pass scanner, serde_json behind it as the reference) and OpenSearch UBI query and event documents |
//! | [`metrics`] | metric math | pure trec_eval definitions over a ranked gain list; no I/O, no state |
//! | [`join`] | attribution | per-partition pending impressions (word records in a chunked arena, ordered by deadline), held engagements, input clocks |
//! | [`accumulate`] | aggregation | exact (fixed-point) sums, sums of squares and unit buckets per group, cumulative and per tumbling window |
//! | [`stats`] | A/B math | pure: estimates, Welch's t-test, cluster-robust (delta-method) errors, the chi-square split test |
//! | [`experiments`] | A/B feed | which variant is compared with which: per-experiment reports from the accumulators |
//! | [`engine`] | orchestration | the single-threaded core: decode → join → watermark → finalize → accumulate |
//! | [`output`] | output | Prometheus text exposition; HTTP `/metrics`, `/healthz`, `/readyz` and the A/B API `/api/v1/experiments`; the A/B output topic (one record per experiment and closed window, at least once) |
//! | [`checkpoint`] | durability | the engine's state and input offsets, written atomically, read back on start |
//! | [`source`] | input | the Kafka consumer on its own thread: offsets stored after processing, commits on revoke and shutdown |
//! | [`replay`] | input | JSON-lines files, read and timed on reader threads, merged on event time through the same engine; the replay report and the TREC files |
//! | [`demo`] | demo | in-process Kafka cluster and a realistic A/B traffic generator |
//! | [`shutdown`] | lifecycle | the one signal every task listens to |
//! | [`commands`] | CLI | `demo`, `serve`, `replay`, `generate`, `produce`, `check-config` |
//!
//! The engine is deliberately synchronous and owns all evaluation state: the Kafka source and
//! `replay` feed it the same way, which is why offline backfills and online numbers agree.

pub mod accumulate;
pub mod checkpoint;
pub mod commands;
pub mod config;
pub mod demo;
pub mod engine;
pub mod event;
pub mod experiments;
pub mod health;
pub mod ids;
pub mod join;
pub mod metrics;
pub mod output;
pub mod pipeline;
pub mod replay;
pub mod shutdown;
pub mod source;
pub mod stats;
pub mod time;
