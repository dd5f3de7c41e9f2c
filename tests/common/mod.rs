//! Helpers shared by the integration tests: running the real `rankpulse` binary and waiting on
//! it (`process`), what it is fed (`inputs`), the broker it reads from (`broker`), reading what
//! it exports (`scrape`), the counting allocator of the memory measurements (`alloc`), a
//! throwaway PKI (`certs`) and brokers behind TLS (`secure`).
// Each test crate compiles this module and uses a different part of it.
#![allow(dead_code, unused_imports)]

pub mod alloc;
mod broker;
mod certs;
mod inputs;
mod process;
mod scrape;
mod secure;

pub use broker::*;
pub use certs::*;
pub use inputs::*;
pub use process::*;
pub use scrape::*;
pub use secure::*;
