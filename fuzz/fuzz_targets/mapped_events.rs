//! A message of events in the user's own shape (a GA4 JSON event, a bare Avro datum) through the
//! mapped decoders and the engine. The checks are in `rankpulse::fuzzing::mapped_events`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rankpulse::fuzzing::mapped_events(data);
});
