//! rankpulse: streaming online evaluation of search ranking quality.
//!
//! Search-impression events (a ranked result list as shown) and engagement events
//! (click, add-to-cart, purchase, ...) arrive on two Kafka topics. rankpulse attributes each
//! engagement to its impression on event time, computes trec_eval-conformant ranking metrics per
//! impression once its attribution window has passed, aggregates them per experiment and variant,
//! cumulatively and in event-time tumbling windows, and exports them for Prometheus.
//!
//! The modules follow the pipeline, one stage each, so every rule has exactly one home. They are
//! listed from the bottom up: a module imports only modules above it in this table
//! (`tests/architecture.rs` checks it).
//!
//! | module | stage | owns |
//! |---|---|---|
//! | [`time`] | vocabulary | event timestamps (ms since epoch) and duration strings |
//! | [`ids`] | vocabulary | the hashed and numbered identities every stage passes around: query, result, group, engagement |
//! | [`health`], [`shutdown`] | lifecycle | readiness (set by the source, read by the probes); the one signal every task listens to |
//! | [`memory`] | lifecycle | the allocator's heap (in use, kept free) and handing its free pages back after a catch-up |
//! | [`kafka_log`] | lifecycle | what every Kafka client logs: repeated conditions limited, an outage reported once, with summaries and one recovery line |
//! | [`checkpoint`] | durability | the encoding of a state snapshot: a payload with a format version and a checksum, verified when read back |
//! | [`interleaving`] | metric math | pure: an interleaved impression's credit per ranker and its outcome, the sums kept for it; the reference team-draft interleaver |
//! | [`clicks`] | click models | pure: position bias from clicks (PBM by EM, intervention harvesting), SRW's COEC, inverse-propensity weighting and the counterfactual estimate; the bounded per-partition click log they read, and its text form |
//! | [`metrics`] | metric math | pure trec_eval definitions over a ranked gain list; no I/O, no state |
//! | [`stats`] | A/B math | pure: estimates, Welch's t-test, cluster-robust (delta-method) errors, the chi-square split test; anytime-valid confidence sequences, always-valid p-values and the sequential split test (`stats::sequential`) |
//! | [`config`] | start-up | the TOML schema with its defaults (`schema`), loading and env overrides (`load`), cross-field checks naming the key (`validate`), each Kafka client's librdkafka configuration with its secrets and `check-config`'s dry run (`kafka_client`) |
//! | [`judgments`] | reference data | judgment lists (TREC qrels, JSON lines): lines parsed with counted rejects, keyed by normalized query and document for lookups |
//! | [`schemas`] | reference data | Avro and Protobuf schemas: a Schema Registry client (by id, cached, outages retried and probed) and local schema files |
//! | [`event`] | decoding | a message (body, key, headers) into a borrowed impression or engagement, or a reject reason: the per-input format choice ([`event::Decoders`]), rankpulse's own events (a strict one-pass scanner, serde_json behind it as the reference), OpenSearch UBI documents, and events of the user's own shape through a field mapping (`event::mapped`: JSON, and Avro and Protobuf records in Confluent's wire format or bare) |
//! | [`join`] | attribution | one partition's pending impressions (an arena of word records, a query index, a deadline queue), held engagements, de-duplication; no offsets, no clocks |
//! | [`accumulate`] | aggregation | label groups and their limits, exact (fixed-point) sums and unit buckets per group, cumulative and per tumbling window |
//! | [`experiments`] | A/B feed | which variant is compared with which: per-experiment reports from the accumulators; when the cumulative anytime-valid figures look (`experiments::sequential`) |
//! | [`engine`] | orchestration | the core over per-partition tasks, its state on one thread: decode (which may run ahead on other threads) → join → watermark → finalize → accumulate; its snapshot and restore |
//! | [`source`] | input | the Kafka consumer on its own thread, the engine's work on another, decoding on whichever would wait: positions recorded after processing, each partition's snapshot to the changelog then commit, incremental rebalancing that keeps co-partitioning, restore on assignment (from the changelog or a warm standby's copy), the aggregates reader |
//! | [`repartition`] | input | inputs not co-partitioned by query id: the start-up check (partition counts, sampled keys), the stage that re-keys every event by its query id onto internal topics (consumer group of its own, a backlog forwarded in event-time order, commit after acknowledgement) for the join to consume |
//! | [`replay`] | input | JSON-lines files read and decoded on reader threads, merged on event time through the same engine; the replay report and TREC files |
//! | [`eval`] | offline | `rankpulse eval`: trec_eval's measures over run and qrels files by the same metric code, and AutoRAG's grouped measures |
//! | [`output`] | output | Prometheus exposition; HTTP `/metrics`, `/healthz`, `/readyz` and the A/B API; the A/B output topic |
//! | [`demo`] | demo | the in-process Kafka cluster and a realistic A/B traffic generator |
//! | [`pipeline`] | wiring | the daemon: HTTP, publisher and source started and stopped together |
//! | [`fuzzing`] | hostile input | one entry point per fuzz target (`fuzz/`), replayed by the tests: decoders, snapshots and changelog records through the real engine |
//! | [`commands`] | CLI | parses and calls: `demo`, `serve`, `replay`, `generate`, `produce`, `interleave`, `eval`, `check-config`; `completions` and `man` generated from the same clap definitions, with the examples of every `--help` |
//!
//! The engine is deliberately synchronous and owns all evaluation state: the Kafka source and
//! `replay` feed it the same way, which is why offline backfills and online numbers agree.
//!
//! ## Hostile input
//!
//! Every byte from outside is untrusted: messages on the input topics (anyone who can produce
//! to them), records on the changelog and aggregates topics (their checksum tells that bytes
//! arrived as written, not who wrote them), the configuration. Such bytes may be rejected,
//! counted and logged, never crash the process, nor make it allocate by what a length, count or
//! id in them claims.
//!
//! * **The no-panic rule.** The files that read them (every file of [`event`], [`time`],
//!   [`checkpoint`], [`config`], [`schemas`], [`source::chunks`], the repartition stage's re-encoder, the
//!   changelog's records (a pending impression's among them, in `join`), its readers (the warm
//!   standby's included) and the aggregates reader, and `engine`'s restore of snapshots and
//!   deltas, their operation logs included) deny `clippy::unwrap_used`, `clippy::expect_used`, `clippy::panic`
//!   and `clippy::indexing_slicing` outside tests, as their first line; `tests/architecture.rs`
//!   checks that it is there. It covers the explicit panics and the implicit ones of indexing,
//!   slicing, `unwrap` and `expect`; a justified exception is a local `allow` with its reason
//!   (two, both serializing our own state). It does not cover arithmetic overflow or panics
//!   inside dependencies (serde_json, postcard, chrono): those are what fuzzing looks for.
//! * **Decoded state is checked before it is used.** A snapshot restores only into its own
//!   partition and configuration, and only if it is consistent (shapes, kept counts, deadline
//!   order, named groups, counts with room to grow: `engine`'s `check_consistent`); an
//!   aggregates record likewise. Every such check says what it refused with a
//!   [`checkpoint::Inconsistency`], which the log line quotes and tests match on. Lengths and ids from the bytes are compared, never used to
//!   size anything.
//! * **Fuzzing.** [`fuzzing`] has one entry point per fuzz target (`fuzz/`, cargo-fuzz):
//!   the decoders of both formats through the engine, the scanner against serde_json, snapshot
//!   and aggregates records behind a valid checksum, and changelog records through both
//!   readers' reassembly. `tests/hostile_input.rs` replays the committed corpus through the
//!   same functions and mutates inputs with proptest, in CI.

pub mod accumulate;
pub mod checkpoint;
pub mod clicks;
pub mod commands;
pub mod config;
pub mod demo;
pub mod engine;
pub mod eval;
pub mod event;
pub mod experiments;
pub mod fuzzing;
pub mod health;
pub mod ids;
pub mod interleaving;
pub mod join;
pub mod judgments;
pub mod kafka_log;
pub mod memory;
pub mod metrics;
pub mod output;
pub mod pipeline;
pub mod repartition;
pub mod replay;
pub mod schemas;
pub mod shutdown;
pub mod source;
pub mod stats;
pub mod time;
