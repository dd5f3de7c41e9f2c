//! A message on a topic of OpenSearch UBI documents, as a query and as an event, through the engine.
//! The checks are in `rankpulse::fuzzing::ubi_documents`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rankpulse::fuzzing::ubi_documents(data);
});
