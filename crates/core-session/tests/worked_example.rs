//! The contract's worked example (section 8), checked end to end.

use palimpsest_core_session::jsonl::{self, JsonlLog};
use palimpsest_core_session::repair::repair;

const EXAMPLE: &str = include_str!("../test_data/ok/compaction-and-prune.jsonl");

#[test]
fn worked_example_surface_derive_and_repair() {
    let log = JsonlLog::parse(EXAMPLE.as_bytes()).unwrap();
    assert_eq!(log.torn_tail, None);
    let session = log.into_session().unwrap();
    assert_eq!(session.surface(), &[20, 15, 17, 24]);
    let ids: Vec<_> = session.derive_messages().into_iter().map(|m| m.message.id).collect();
    assert_eq!(ids, ["sum1", "ctx1", "u2", "a3"]);
    assert!(repair(session.events()).is_empty());
}

#[test]
fn worked_example_round_trips_byte_for_byte() {
    let log = JsonlLog::parse(EXAMPLE.as_bytes()).unwrap();
    let bytes = jsonl::to_bytes(&log.header, &log.events);
    assert_eq!(String::from_utf8(bytes).unwrap(), EXAMPLE);
}
