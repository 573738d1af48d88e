//! The `palimpsest` command-line tool.
fn main() {}
