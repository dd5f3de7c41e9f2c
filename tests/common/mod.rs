//! Helpers shared by the integration tests: running the real `rankpulse` binary and waiting on
//! it (`process`), what it is fed (`inputs`), the broker it reads from (`broker`), reading what
//! it exports (`scrape`), the counting allocator of the memory measurements (`alloc`), a
//! throwaway PKI (`certs`), brokers behind TLS (`secure`), an HTTPS client (`https`), a
//! real Prometheus server (`prometheus`) the Kafka source in-process (`source`) and a steady event stream (`stream`).
// Each test crate compiles this module and uses a different part of it.
#![allow(dead_code, unused_imports)]

pub mod alloc;
mod broker;
mod certs;
mod https;
mod inputs;
mod judged;
mod process;
mod prometheus;
mod scrape;
mod secure;
mod source;
mod stream;

pub use broker::*;
pub use certs::*;
pub use https::*;
pub use inputs::*;
pub use judged::*;
pub use process::*;
pub use prometheus::*;
pub use scrape::*;
pub use secure::*;
pub use source::*;
pub use stream::*;
