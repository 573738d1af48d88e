//! SQLite backend for Palimpsest: the embedded default store, with a
//! bump-and-reject `SCHEMA_VERSION`. (Being built: see issue 5.)
