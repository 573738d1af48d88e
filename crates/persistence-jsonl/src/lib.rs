//! JSONL file backend for Palimpsest: one file per session in a directory,
//! the format of contract section 6 written verbatim. (Being built: see issue 4.)
