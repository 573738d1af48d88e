//! The contract kit run against [`MemoryStore`](palimpsest_persistence::MemoryStore):
//! the reference backend must pass every check.

use palimpsest_persistence::testkit::MemoryFactory;

palimpsest_persistence::store_contract_tests!(MemoryFactory::default());

/// One size limit for writers and readers: over it nothing is written, at
/// it everything reads back (issue 15).
#[test]
fn size_limits_hold_for_writers_and_readers() {
    palimpsest_persistence::testkit::size_limits_hold_for_writers_and_readers(&MemoryFactory::default());
}
