//! A message on a topic of rankpulse's own JSON events, as an impression and as an engagement, through the engine.
//! The checks are in `rankpulse::fuzzing::json_events`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rankpulse::fuzzing::json_events(data);
});
