//! The session header (contract section 6): the first line of a JSONL file,
//! the `sessions` row of a SQLite store.

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};

use crate::error::LoadError;
use crate::limits::MAX_HEADER_LINE_BYTES;
use crate::unique_keys;

/// The session format version this build reads and writes. Pinned at 0 while
/// the format is pre-release; any other version is refused, never migrated.
pub const SESSION_FORMAT_VERSION: u64 = 0;

/// Identity and lineage of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHeader {
    /// Session id.
    pub id: String,
    /// Unix epoch milliseconds.
    pub created_at: u64,
    /// Working directory the session ran in.
    pub cwd: Option<String>,
    /// The session this one was forked from.
    pub parent_session: Option<String>,
    /// How many events were copied from the parent when forking.
    pub seed_length: Option<u64>,
}

impl SessionHeader {
    /// A header with just an id and a creation time.
    pub fn new(id: impl Into<String>, created_at: u64) -> SessionHeader {
        SessionHeader { id: id.into(), created_at, cwd: None, parent_session: None, seed_length: None }
    }

    /// Canonical JSON text (no trailing newline).
    pub fn to_json(&self) -> String {
        // Strings, integers and options of them, under fixed keys: serializing
        // cannot fail, and an empty header line would hide a bug if it did.
        serde_json::to_string(self).expect("a SessionHeader always serializes")
    }

    /// Checks that the header's line is at most [`MAX_HEADER_LINE_BYTES`]
    /// long (`header-malformed` if not): what every store checks before it
    /// writes a header, so that no reader refuses a header Palimpsest wrote.
    pub fn check_size(&self) -> Result<(), LoadError> {
        check_header_len(self.to_json().len())
    }

    /// Reads a header line: `header-version-unsupported` for any version but
    /// [`SESSION_FORMAT_VERSION`], `header-malformed` for anything else wrong
    /// (a key named twice included, checked first).
    pub fn from_json(json: &str) -> Result<SessionHeader, LoadError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct Wire {
            #[serde(rename = "type")]
            kind: String,
            version: serde_json::Value,
            id: String,
            created_at: u64,
            #[serde(default)]
            cwd: Option<String>,
            #[serde(default)]
            parent_session: Option<String>,
            #[serde(default)]
            seed_length: Option<u64>,
        }
        let malformed = |detail: String| LoadError::HeaderMalformed { detail };
        check_header_len(json.len())?;
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| malformed(format!("not JSON: {e}")))?;
        // Read into a map, a key named twice would count once: refuse it
        // first, so that no header reads one way here and another elsewhere.
        if let Some(key) = unique_keys::duplicate_key(json) {
            return Err(malformed(format!("the header names the key {key:?} twice in one object")));
        }
        let obj = value.as_object().ok_or_else(|| malformed("the header must be a JSON object".into()))?;
        if obj.get("type").and_then(|t| t.as_str()) != Some("session") {
            return Err(malformed("the header's `type` must be \"session\"".into()));
        }
        if let Some(version) = obj.get("version") {
            if version.as_u64() != Some(SESSION_FORMAT_VERSION) {
                return Err(LoadError::HeaderVersionUnsupported { found: version.to_string() });
            }
        }
        for key in ["cwd", "parentSession", "seedLength"] {
            if obj.get(key).is_some_and(|v| v.is_null()) {
                return Err(malformed(format!("`{key}` is null; omit it instead")));
            }
        }
        let w: Wire = serde_json::from_value(value).map_err(|e| malformed(e.to_string()))?;
        debug_assert_eq!(w.kind, "session");
        let _ = w.version;
        Ok(SessionHeader {
            id: w.id,
            created_at: w.created_at,
            cwd: w.cwd,
            parent_session: w.parent_session,
            seed_length: w.seed_length,
        })
    }
}

/// The one size rule of a header line.
fn check_header_len(len: usize) -> Result<(), LoadError> {
    if len <= MAX_HEADER_LINE_BYTES {
        return Ok(());
    }
    Err(LoadError::HeaderMalformed {
        detail: format!("the header line is {len} bytes, longer than the {MAX_HEADER_LINE_BYTES}-byte limit"),
    })
}

impl Serialize for SessionHeader {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("SessionHeader", 7)?;
        st.serialize_field("type", "session")?;
        st.serialize_field("version", &SESSION_FORMAT_VERSION)?;
        st.serialize_field("id", &self.id)?;
        st.serialize_field("createdAt", &self.created_at)?;
        if let Some(cwd) = &self.cwd {
            st.serialize_field("cwd", cwd)?;
        }
        if let Some(parent) = &self.parent_session {
            st.serialize_field("parentSession", parent)?;
        }
        if let Some(n) = &self.seed_length {
            st.serialize_field("seedLength", n)?;
        }
        st.end()
    }
}

#[cfg(test)]
mod tests {
    //! A header naming any of its keys twice is `header-malformed`, whatever
    //! the key, its position and its value: a reader keeping the last key
    //! would otherwise read another session (or another version).

    use proptest::prelude::*;
    use serde_json::{Map, Value};

    use super::*;

    fn header() -> impl Strategy<Value = SessionHeader> {
        let text = "[a-z/\"é]{1,8}";
        (text, any::<u64>(), prop::option::of(text), prop::option::of(text), prop::option::of(any::<u64>()))
            .prop_map(|(id, created_at, cwd, parent_session, seed_length)| SessionHeader {
                id,
                created_at,
                cwd,
                parent_session,
                seed_length,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        #[test]
        fn a_header_key_named_twice_is_header_malformed(
            header in header(),
            key in any::<prop::sample::Index>(),
            first in any::<bool>(),
            same_value in any::<bool>(),
        ) {
            let json = header.to_json();
            prop_assert_eq!(SessionHeader::from_json(&json), Ok(header));
            let members: Map<String, Value> = serde_json::from_str(&json).unwrap_or_default();
            let (key, value) = members.iter().nth(key.index(members.len())).unwrap_or_else(|| panic!("{json}"));
            let value = if same_value { value.clone() } else { Value::from(1) };
            let member = format!("{}:{value}", Value::from(key.as_str()));
            let twice = if first {
                format!("{{{member},{}", &json[1..])
            } else {
                format!("{},{member}}}", &json[..json.len() - 1])
            };
            let err = SessionHeader::from_json(&twice).map_err(|e| e.code().to_owned());
            prop_assert_eq!(err, Err("header-malformed".to_owned()), "{}", twice);
        }
    }

    #[test]
    fn a_version_named_twice_is_malformed_not_a_newer_format() {
        for json in [
            r#"{"type":"session","version":1,"version":0,"id":"s","createdAt":0}"#,
            r#"{"type":"session","version":0,"id":"s","createdAt":0,"\u0076ersion":0}"#,
            r#"{"type":"session","type":"session","version":0,"id":"s","createdAt":0}"#,
        ] {
            let err = SessionHeader::from_json(json).map_err(|e| e.code().to_owned());
            assert_eq!(err, Err("header-malformed".to_owned()), "{json}");
        }
    }
}
