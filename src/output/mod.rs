//! Output: everything that leaves the process.

mod http;
mod prometheus;
mod publish;

pub use self::http::{experiment_report, HttpServer, ReportError};
pub use self::prometheus::{gather, registry, render};
pub use self::publish::{unpublished_records, PublishError, Publisher};
