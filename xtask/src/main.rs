//! Project automation: `cargo xtask ci` and friends.
fn main() {}
