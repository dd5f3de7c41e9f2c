//! The allocator's heap: what it holds for live data and what it keeps after frees, and a way
//! to hand the kept pages back to the system.
//!
//! A replica that catches up (the aggregates topic read from its beginning, a partition
//! restored) allocates and frees far more than it keeps; glibc's allocator keeps those freed
//! pages in its arenas, so resident memory then grows with how much history was read, not with
//! what is held. The soak (`tests/soak.sh`) saw fresh replicas start with up to 10 MiB more
//! kept free the older the run, with the heap in use flat. Releasing them once such a phase is
//! over keeps a replica's memory what its state needs.
//!
//! glibc's `mallinfo2` and `malloc_trim`; another platform reports nothing and releases nothing.

/// What the allocator holds, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Heap {
    /// Allocated to live data: in arenas, and in blocks of their own (large allocations).
    pub in_use: u64,
    /// Free in its arenas, kept rather than returned to the system (part of it resident).
    pub free: u64,
}

/// The heap's figures now.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn heap() -> Option<Heap> {
    // SAFETY: `mallinfo2` takes no arguments and returns a plain struct by value; glibc locks
    // each arena while it reads it, so any thread may call it.
    let info = unsafe { libc::mallinfo2() };
    Some(Heap { in_use: (info.uordblks + info.hblkhd) as u64, free: info.fordblks as u64 })
}

/// The heap's figures now (none on this platform).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap() -> Option<Heap> {
    None
}

/// Hands the pages of the heap's free chunks back to the system (they stay free in the
/// allocator's books, no longer resident). `why` names the phase that ended, for the log.
/// Takes a few milliseconds per hundred MiB of heap: for the end of a catch-up, not per event.
pub fn release_free_heap(why: &str) {
    let before = heap();
    release();
    if let (Some(before), Some(after)) = (before, heap()) {
        tracing::debug!(why, in_use = after.in_use, free = before.free, "free heap handed back to the system");
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release() {
    // SAFETY: `malloc_trim` takes a byte count to leave at the heap's top and touches only the
    // allocator's own free chunks, under its arena locks; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heap_counts_what_is_held() {
        let Some(before) = heap() else { return };
        // Through `black_box`: an optimized build may drop an allocation nothing reads.
        let held = std::hint::black_box(vec![1u8; 64 << 20]);
        let now = heap().unwrap();
        // Another test's thread may free meanwhile; 64 MiB stands far above that.
        assert!(now.in_use >= before.in_use + (48 << 20), "64 MiB held: in use {} then {}", before.in_use, now.in_use);
        drop(held);
        release_free_heap("test");
    }
}
