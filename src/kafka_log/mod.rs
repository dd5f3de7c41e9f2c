//! What rankpulse's Kafka clients log, for operators: a broker outage is one warning when it
//! starts, a summary every [`SUMMARY_PERIOD`] while it lasts and one line when it is over,
//! rather than librdkafka's ten lines a second.
//!
//! Every client rankpulse creates (the consumer, the A/B producer, the `produce` command's and
//! the demo's producers) sends its librdkafka log lines, its error callbacks and its own errors
//! through a [`KafkaLog`]. Repeats of a condition (the same message, but for the broker, the
//! delay, the counts) are counted, not printed; lines that are not repetitive pass at once, at
//! their own level (librdkafka's lines keep the `librdkafka` target, so `RUST_LOG` filters them
//! as before).
//!
//! Recovery is signalled by the owner of the client, not guessed from silence: a message
//! consumed or a partition assigned (the consumer), a message delivered (the producers). Those
//! prove the data path works again end to end; a broker that merely accepts a connection, or
//! answers metadata, may still have no leader for our partitions.

mod limiter;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::ClientContext;

pub use limiter::{condition_key, condition_words, Class, Limiter, Recovery, Verdict};

/// How often a lasting condition gets its summary line.
pub const SUMMARY_PERIOD: Duration = Duration::from_secs(30);

/// One Kafka client's log: every line the client would write goes through here.
#[derive(Debug)]
pub struct KafkaLog {
    /// Which client, on every line ("consumer", "A/B producer", ...): a daemon has two.
    client: &'static str,
    /// `bootstrap.servers`, named when an outage starts: librdkafka's own message names only
    /// the broker that failed last.
    brokers: String,
    /// What has been said and what is due; locked briefly from librdkafka's threads and the
    /// client's owner, never while logging.
    limiter: Mutex<Limiter>,
    /// An outage is being reported: read without the lock on every consumed or delivered
    /// message, so the recovery check costs one atomic load on the hot path.
    in_outage: AtomicBool,
}

impl KafkaLog {
    pub fn new(client: &'static str, brokers: &str) -> Self {
        KafkaLog {
            client,
            brokers: brokers.to_string(),
            limiter: Mutex::new(Limiter::new(SUMMARY_PERIOD)),
            in_outage: AtomicBool::new(false),
        }
    }

    /// The limiter. A panic while it is held cannot leave it inconsistent (every update is
    /// one small step), so poisoning is taken through rather than silencing the logs.
    fn limiter(&self) -> MutexGuard<'_, Limiter> {
        self.limiter.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn observe(&self, class: Class, key: u64) -> Verdict {
        let mut limiter = self.limiter();
        let verdict = limiter.observe(class, key, Instant::now());
        self.in_outage.store(limiter.in_outage(), Ordering::Relaxed);
        verdict
    }

    /// A line of librdkafka's own (its `log_cb`).
    pub fn librdkafka(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        let client = self.client;
        let warning = match level {
            RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
                false
            }
            RDKafkaLogLevel::Warning => true,
            // Notice and below are not alarms, and `RUST_LOG` hides them by default: as they come.
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                return tracing::info!(target: "librdkafka", client, "{facility} {message}");
            }
            RDKafkaLogLevel::Debug => return tracing::debug!(target: "librdkafka", client, "{facility} {message}"),
        };
        // FAIL is librdkafka's facility for a broker connection that failed or was lost,
        // REQTMOUT for the requests that timed out on one.
        let class = match facility {
            "FAIL" => Class::Connectivity,
            "REQTMOUT" => Class::RequestTimeout,
            _ => Class::Other,
        };
        let suppressed = match self.observe(class, condition_key(message)) {
            Verdict::Suppress => return,
            Verdict::Summary { outage: true, lasting, suppressed } => return self.outage_summary(lasting, suppressed),
            Verdict::Emit => 0,
            Verdict::Summary { outage: false, suppressed, .. } => suppressed,
        };
        let repeated = Repeated(suppressed);
        // A connection that fails in its TLS or SASL exchange is a configuration to check, not
        // an outage to wait out; librdkafka says which only in the text.
        let check = match facility {
            "FAIL" if message.contains("SASL") => CHECK_CREDENTIALS,
            "FAIL" if message.contains("SSL") => CHECK_TLS,
            _ => "",
        };
        if warning {
            tracing::warn!(target: "librdkafka", client, "{facility} {message}{repeated}{check}");
        } else {
            tracing::error!(target: "librdkafka", client, "{facility} {message}{repeated}{check}");
        }
    }

    /// A client-level error (librdkafka's `error_cb`).
    pub fn client_error(&self, error: &KafkaError, reason: &str) {
        let client = self.client;
        let suppressed = match self.observe(class_of(error), condition_key(reason)) {
            Verdict::Suppress => return,
            Verdict::Summary { outage: true, lasting, suppressed } => return self.outage_summary(lasting, suppressed),
            Verdict::Emit if class_of(error) == Class::Outage => {
                let brokers = self.brokers.as_str();
                tracing::warn!(client, brokers, %error, reason, "no Kafka broker reachable; retrying, with a summary every {}s while this lasts", SUMMARY_PERIOD.as_secs());
                return;
            }
            Verdict::Emit => 0,
            Verdict::Summary { outage: false, suppressed, .. } => suppressed,
        };
        let repeated = Repeated(suppressed);
        match misconfiguration(error) {
            // Retrying will not fix these: an error, with what to check.
            Some(check) => tracing::error!(client, %error, "kafka client error: {reason}{repeated}{check}"),
            None => tracing::warn!(client, %error, "kafka client error: {reason}{repeated}"),
        }
    }

    /// An error the consumer's poll returned. Broker errors among them are the events the
    /// error callback has already logged or counted ([`KafkaLog::client_error`]): they only
    /// keep readiness down, which the caller does.
    pub fn consume_error(&self, error: &KafkaError) {
        if class_of(error) != Class::Other {
            return;
        }
        if let Some(repeated) = self.admit("consume error", error) {
            tracing::warn!(client = self.client, %error, "consume error{repeated}");
        }
    }

    /// Whether the caller should log that `what` failed with `error` now: `Some` with the
    /// tail of the line (empty, or the count of a summary) for the first failure of its kind
    /// and once a period after; `None` for a repeat. Keyed by `what` and the error code, not
    /// the error's text, which would have to be formatted first.
    pub fn admit(&self, what: &'static str, error: &KafkaError) -> Option<Repeated> {
        let code = error.rdkafka_error_code().map_or(i32::MIN, |c| c as i32);
        let key = condition_key(what) ^ u64::from(code as u32);
        match self.observe(Class::Other, key) {
            Verdict::Suppress => None,
            Verdict::Emit => Some(Repeated(0)),
            Verdict::Summary { suppressed, .. } => Some(Repeated(suppressed)),
        }
    }

    /// The cluster answers again: `signal` says how we know ("a message was consumed"). Ends
    /// an outage with one line; costs one atomic load when there is none.
    pub fn recovered(&self, signal: &'static str) {
        if !self.in_outage.load(Ordering::Relaxed) {
            return;
        }
        let recovery = {
            let mut limiter = self.limiter();
            let recovery = limiter.recovered(Instant::now());
            self.in_outage.store(false, Ordering::Relaxed);
            recovery
        };
        if let Some(Recovery { lasted, suppressed }) = recovery {
            tracing::info!(
                client = self.client,
                brokers = self.brokers.as_str(),
                outage_secs = lasted.as_secs(),
                suppressed,
                "Kafka reachable again ({signal}) after {}s without a broker; {suppressed} similar messages were suppressed",
                lasted.as_secs()
            );
        }
    }

    fn outage_summary(&self, lasting: Duration, suppressed: u64) {
        tracing::warn!(
            client = self.client,
            brokers = self.brokers.as_str(),
            outage_secs = lasting.as_secs(),
            suppressed,
            "still no Kafka broker reachable for {}s, {suppressed} similar messages suppressed",
            lasting.as_secs()
        );
    }
}

/// What to check when the brokers refuse rankpulse's credentials.
const CHECK_CREDENTIALS: &str = "; the brokers refused rankpulse's credentials: check sasl.mechanisms, sasl.username and the password (or its [kafka.properties_from_file] / [kafka.properties_from_env] source); nothing is consumed or committed until they are accepted";
/// What to check when a TLS connection fails.
const CHECK_TLS: &str = "; the TLS connection failed: check ssl.ca.location (the brokers' CA) and, for mutual TLS, ssl.certificate.location and ssl.key.location; nothing is consumed or committed until it succeeds";

/// What an operator should check when `error` says the configuration is wrong rather than
/// the cluster unwell: the brokers refused the credentials, or the TLS handshake failed.
fn misconfiguration(error: &KafkaError) -> Option<&'static str> {
    match error.rdkafka_error_code() {
        Some(RDKafkaErrorCode::Authentication) => Some(CHECK_CREDENTIALS),
        Some(RDKafkaErrorCode::SSL) => Some(CHECK_TLS),
        _ => None,
    }
}

/// Whether `error` says the brokers cannot be reached right now (all of them, or one
/// connection): librdkafka retries on its own, and a reader that polls on sees its messages
/// once they are back. Such an event can also be one queued during an outage that is over.
pub fn is_broker_outage(error: &KafkaError) -> bool {
    class_of(error) != Class::Other
}

/// How an error bears on the outage: by its code, never its text.
fn class_of(error: &KafkaError) -> Class {
    match error.rdkafka_error_code() {
        Some(RDKafkaErrorCode::AllBrokersDown) => Class::Outage,
        Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::Resolve) => Class::Connectivity,
        _ => Class::Other,
    }
}

/// The tail of a limited line: nothing for a first line, the count for a summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeated(
    /// Messages suppressed since the condition's last line.
    pub u64,
);

impl std::fmt::Display for Repeated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => Ok(()),
            n => write!(f, " (repeated; {n} similar messages suppressed in the last {}s)", SUMMARY_PERIOD.as_secs()),
        }
    }
}

/// The context of a client that shares another client's log: the serve daemon's state clients
/// (the changelog's reader and admin, the aggregates reader) log through the consumer's, so one
/// broker outage is reported once for the daemon, not once per client.
#[derive(Clone)]
pub struct SharedLog(pub Arc<KafkaLog>);

impl ClientContext for SharedLog {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.0.librdkafka(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // These clients are idle most of the time and reconnect at their own pace: their view
        // of the brokers would start a second outage report after the consumer's recovery. The
        // consumer (and the producers) report outages; other errors pass.
        if !matches!(error.rdkafka_error_code(), Some(RDKafkaErrorCode::AllBrokersDown)) {
            self.0.client_error(&error, reason);
        }
    }
}

impl rdkafka::consumer::ConsumerContext for SharedLog {}

/// The context of rankpulse's producers: logs through a [`KafkaLog`], and a delivered message
/// ends an outage.
pub struct ProducerLog {
    /// Where this producer's lines go; shared with the producer's owner when deliveries do
    /// not reach this context (a `FutureProducer` resolves them as futures instead).
    pub log: Arc<KafkaLog>,
}

impl ProducerLog {
    pub fn new(client: &'static str, brokers: &str) -> Self {
        ProducerLog { log: Arc::new(KafkaLog::new(client, brokers)) }
    }
}

impl ClientContext for ProducerLog {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.log.librdkafka(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.log.client_error(&error, reason);
    }
}

impl ProducerContext for ProducerLog {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_ok() {
            self.log.recovered("a message was delivered");
        }
    }
}
