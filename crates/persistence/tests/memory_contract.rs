//! The contract kit run against [`MemoryStore`](palimpsest_persistence::MemoryStore):
//! the reference backend must pass every check.

use palimpsest_persistence::testkit::MemoryFactory;

palimpsest_persistence::store_contract_tests!(MemoryFactory::default());
