//! Output: everything that leaves the process.

mod prometheus;
mod publish;

pub use self::prometheus::{experiment_report, gather, registry, render, HttpServer};
pub use self::publish::{PublishError, Publisher};
