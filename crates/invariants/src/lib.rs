//! Dev-mode structural validators for Palimpsest session logs (contract section 2a):
//! turn and step brackets, tool call/result pairing, provenance shape, and tool
//! exchanges split by a replace. Implements `AppendGuard` so a `Session` can veto
//! a bad append in dev mode. (Being built: see issue 3.)
