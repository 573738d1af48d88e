//! (b) The `SurfaceManager` under arbitrary op sequences: the incremental
//! surface must equal a fresh fold and an independent model after every op,
//! and a refused op must change nothing. See
//! `palimpsest_torture::oracle::surface_ops`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    palimpsest_torture::oracle::surface_ops(data);
});
