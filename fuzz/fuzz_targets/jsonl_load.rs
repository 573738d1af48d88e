//! (a) Loading a JSONL session from arbitrary bytes: core-session's
//! `JsonlLog::parse` + `into_session` and persistence-jsonl's file reader
//! (uncapped and capped) must agree, and whatever loads must behave. See
//! `palimpsest_torture::oracle::jsonl_bytes`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    palimpsest_torture::oracle::jsonl_bytes(data);
});
