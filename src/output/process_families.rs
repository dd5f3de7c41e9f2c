//! The process's own resources, as Prometheus's client libraries name them
//! (`process_resident_memory_bytes`, `process_cpu_seconds_total`), and the heap beside them:
//! what the allocator holds for live data and what it keeps after frees. Resident memory alone
//! cannot tell a replica that holds more state from one whose allocator kept the memory of a
//! restore it has finished; with the heap's two figures it can.
//!
//! Read from `/proc/self` and the allocator ([`crate::memory`]) at scrape time; a platform
//! without them leaves the families out.

use prometheus::proto::{MetricFamily, MetricType};

use super::prometheus::{counter, family, gauge, label};

/// The process families that this platform can report.
pub(super) fn families() -> Vec<MetricFamily> {
    let mut families = Vec::new();
    if let Some(resident) = resident_bytes() {
        families.push(family(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            MetricType::GAUGE,
            vec![gauge(vec![], resident as f64)],
        ));
    }
    if let Some(seconds) = cpu_seconds() {
        families.push(family(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            MetricType::COUNTER,
            vec![counter(vec![], seconds)],
        ));
    }
    if let Some(heap) = crate::memory::heap() {
        families.push(family(
            "rankpulse_heap_bytes",
            "The allocator's heap: in_use is what live data takes (state, buffers, librdkafka's queues), free what it keeps after frees and has not returned to the system (part of it resident).",
            MetricType::GAUGE,
            vec![
                gauge(vec![label("kind", "in_use")], heap.in_use as f64),
                gauge(vec![label("kind", "free")], heap.free as f64),
            ],
        ));
    }
    families
}

/// Resident pages, from `/proc/self/statm` (its second field), times the page size (4 KiB on
/// x86-64, 16 or 64 KiB on some arm64 kernels).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: `sysconf` reads a constant of the running system; any thread may call it.
    let page_bytes = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok().filter(|&b| b > 0)?;
    Some(pages * page_bytes)
}

/// User plus system time, from `/proc/self/stat` (fields 14 and 15, in clock ticks of 1/100 s:
/// `USER_HZ`, which Linux fixes at 100 for every architecture's user space).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((user + system) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_reports_its_memory_and_time() {
        let families = families();
        let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
        assert!(names.contains(&"process_resident_memory_bytes"), "{names:?}");
        assert!(names.contains(&"process_cpu_seconds_total"), "{names:?}");
        assert!(resident_bytes().unwrap() > 1 << 20);
        assert!(cpu_seconds().is_some());
    }
}
