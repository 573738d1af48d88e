//! The Palimpsest agent loop: turns, steps, streamed chunks, tool calls and
//! their results, appended through a `dyn SessionStore` with the provenance of
//! contract section 4. (Being built: see issue 6.)
