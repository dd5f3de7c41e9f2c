//! Every integration test but the memory measurements (`tests/flood.rs`, whose counting global
//! allocator would count the others' allocations), as modules of one test binary: each file of
//! `tests/` is a module here, and `tests/common/` their shared helpers. One binary links once
//! where 47 linked 47 times (about 95 MB each), and an edit in `src/` rebuilds it alone.
//! cargo-nextest still runs every test in a process of its own (`.config/nextest.toml` selects
//! them by module: `test(/^replicas::/)`). One file's tests: `cargo nextest run --features oidc
//! -E 'binary(integration) & test(/^replicas::/)'`, or `cargo test --features oidc --test
//! integration replicas::`.

/// The simulated click traffic `clicks` and `click_models` share.
#[path = "clicks/sim.rs"]
mod click_sim;
mod common;

mod ab_feed;
mod ab_sequential;
mod ab_statistics;
mod advisories;
mod architecture;
mod breakdown;
mod changelog_chain;
mod cli;
mod click_models;
mod clicks;
mod config_reference;
mod conformance;
mod crash_restart;
mod demo;
mod deploy;
mod ecosystem;
mod eval;
mod experiment_page;
mod experiment_readout;
mod experiment_statistics;
mod first_hour;
mod hostile_input;
mod http_security;
mod input_files;
mod interleaving;
mod interleaving_sensitivity;
mod judgments;
mod judgments_incomplete;
mod judgments_reload;
mod kafka_pipeline;
mod kafka_security;
mod logs;
mod manual;
mod messy_traffic;
mod metric_properties;
mod produce;
mod repartition;
mod replay_diagnostics;
mod replicas;
mod restarts;
mod rolling_restart;
mod state_upgrade;
mod threading;
mod trec_eval_conformance;
mod ubi;
mod upgrade;
mod your_events;
