//! Output: everything that leaves the process, all of it read from the engine's state.
//!
//! | file | role |
//! |---|---|
//! | `prometheus.rs` | the Prometheus text exposition: one collector builds every family at scrape time, one function per group of families |
//! | `interleaving_families.rs` | the exposition's interleaving families: outcome counters per partition, preference gauges from the reports |
//! | `judged_families.rs` | the exposition's judged families: judged sums per partition, judged window means and A/B comparisons, the judgment list's loads |
//! | `window_families.rs` | the exposition's window and A/B families: the newest closed window of each size, the A/B feed over those windows and the cumulative report |
//! | `rebalance_families.rs` | the exposition's rebalance families: rebalances by kind, restores by source, each held partition's last restore and unowned time |
//! | `click_families.rs` | the click log's families (with `clicks.enabled`): impressions by outcome, its size, and the position-bias estimates with their standard errors, refitted at most every `clicks.refit_interval` |
//! | `process_families.rs` | the process's resident memory and CPU time, and the allocator's heap (in use, kept free) |
//! | `schema_families.rs` | the exposition's Schema Registry families (up, cached ids, fetches), for Avro and Protobuf inputs |
//! | `http.rs` | the HTTP server: `/metrics`, `/healthz`, `/readyz`, the experiment page `/` and `/experiments/{name}`, the A/B JSON API `/api/v1/experiments[/{id}]`, the click log `/api/v1/clicks`, over HTTP or HTTPS |
//! | `ab_api.rs` | the A/B API's reports by window, and why there is none: an unknown experiment or window, impressions not final, a window not closed yet and when it closes |
//! | `page/` | the experiment page and `replay --html`'s file: HTML with inline SVG charts, every figure the A/B API's |
//! | `tls.rs` | `[http.tls_server_config]`: certificate, key and client CA into rustls, reloaded when the files change |
//! | `auth.rs` | `[http]`'s credentials for `/metrics`, the page and the API: basic auth against bcrypt hashes, a bearer token file |
//! | `watch.rs` | noticing that files changed (time stamp, length, inode), at most once a second |
//! | `publish.rs` | the A/B output topic: one JSON record per experiment and closed window, delivered at least once |
//!
//! Nothing here changes what the engine computes: the exposition and the API only read it, and
//! the publisher only tells the engine which closed windows it may forget.

mod ab_api;
mod api_routes;
mod auth;
mod click_families;
mod dimension_families;
mod http;
mod interleaving_families;
mod judged_families;
pub mod page;
mod process_families;
mod prometheus;
mod publish;
mod readout_families;
mod rebalance_families;
mod schema_families;
mod tls;
mod watch;
mod window_families;

pub use self::ab_api::{experiment_report, ReportError, WindowClose};
pub use self::http::{HttpSecurity, HttpServer};
pub use self::prometheus::{gather, registry, render};
pub use self::publish::{unpublished_records, PublishError, Publisher};
