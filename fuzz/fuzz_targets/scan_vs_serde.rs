//! The native format's scanner against serde_json: wherever the scanner answers, the same answer.
//! The checks are in `rankpulse::fuzzing::scan_vs_serde`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rankpulse::fuzzing::scan_vs_serde(data);
});
