//! Bytes read as a changelog snapshot and as an aggregates record (as read, and behind a valid header), restored.
//! The checks are in `rankpulse::fuzzing::snapshot`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rankpulse::fuzzing::snapshot(data);
});
