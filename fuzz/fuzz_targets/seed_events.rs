//! (c) The seed constructor on arbitrary JSON events: each line through
//! `Event::from_json`, then `Session::from_log` (with and without the
//! invariants guard) on what was well-formed. See
//! `palimpsest_torture::oracle::json_events`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    palimpsest_torture::oracle::json_events(data);
});
