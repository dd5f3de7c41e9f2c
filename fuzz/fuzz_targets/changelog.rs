//! The records of a changelog partition (u16-length-prefixed), reassembled by both readers, then restored.
//! The checks are in `rankpulse::fuzzing::changelog`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rankpulse::fuzzing::changelog(data);
});
