//! Session ids ↔ file names: an injective, traversal-proof encoding.
//!
//! A session id becomes `<stem>.jsonl`, where the stem is the id's UTF-8
//! bytes with every byte outside `[a-z0-9_-]` written as `%XX` (two
//! upper-case hex digits). So:
//!
//! * the name never holds `/`, `\`, `.` (before the suffix), NUL, a control
//!   or non-ASCII character: it cannot leave the directory, be hidden, or
//!   clash with the suffix;
//! * upper-case letters are escaped too (`A` → `%41`), so two ids differing
//!   only in case get names that differ on case-insensitive file systems
//!   (macOS, Windows) as well;
//! * a stem that is a Windows device name (`con`, `prn`, `aux`, `nul`,
//!   `com0`–`com9`, `lpt0`–`lpt9`) has its first letter escaped
//!   (`con` → `%63on.jsonl`);
//! * decoding accepts only names this encoder writes (it re-encodes and
//!   compares), so each file name maps back to exactly one id.
//!
//! The empty id is refused with `invalid-id`, and so is an id whose name
//! would be longer than [`MAX_FILE_NAME_BYTES`] (255, the limit of common
//! file systems): up to 249 bytes of `[a-z0-9_-]`, a third of that for
//! characters that need escaping. Such ids are refused rather than hashed,
//! so every file name still says which session it holds.

use palimpsest_persistence::StoreError;

/// The suffix of every session file.
pub const SUFFIX: &str = ".jsonl";

/// The longest file name written, in bytes.
pub const MAX_FILE_NAME_BYTES: usize = 255;

const RESERVED: &[&str] = &["con", "prn", "aux", "nul"];

fn is_plain(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
}

fn is_device_name(stem: &str) -> bool {
    if RESERVED.contains(&stem) {
        return true;
    }
    let b = stem.as_bytes();
    b.len() == 4 && (stem.starts_with("com") || stem.starts_with("lpt")) && b[3].is_ascii_digit()
}

fn push_escaped(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0xF)]));
}

/// The file name of session `id`, or `invalid-id`.
pub fn file_name(id: &str) -> Result<String, StoreError> {
    if id.is_empty() {
        return Err(StoreError::InvalidId { reason: "the session id is empty".into() });
    }
    let mut stem = String::with_capacity(id.len() + 8);
    for &b in id.as_bytes() {
        if is_plain(b) {
            stem.push(char::from(b));
        } else {
            push_escaped(&mut stem, b);
        }
    }
    if is_device_name(&stem) {
        let first = stem.as_bytes()[0];
        let mut escaped = String::with_capacity(stem.len() + 2);
        push_escaped(&mut escaped, first);
        escaped.push_str(&stem[1..]);
        stem = escaped;
    }
    if stem.len() + SUFFIX.len() > MAX_FILE_NAME_BYTES {
        return Err(StoreError::InvalidId {
            reason: format!(
                "the session id's file name would be {} bytes, over the {MAX_FILE_NAME_BYTES}-byte limit \
                 (id starts {:?})",
                stem.len() + SUFFIX.len(),
                id.chars().take(32).collect::<String>()
            ),
        });
    }
    stem.push_str(SUFFIX);
    Ok(stem)
}

/// The session id a file name encodes, if it is a name [`file_name`] writes.
pub fn session_id(name: &str) -> Option<String> {
    let stem = name.strip_suffix(SUFFIX)?;
    let mut bytes = Vec::with_capacity(stem.len());
    let mut it = stem.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let hi = hex(it.next()?)?;
            let lo = hex(it.next()?)?;
            bytes.push(hi << 4 | lo);
        } else if is_plain(b) {
            bytes.push(b);
        } else {
            return None;
        }
    }
    let id = String::from_utf8(bytes).ok()?;
    // Only the canonical spelling: `%61` for `a`, lower-case hex or an
    // unescaped device name would decode to an id whose real file is another.
    match file_name(&id) {
        Ok(canonical) if canonical == name => Some(id),
        _ => None,
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn name(id: &str) -> String {
        match file_name(id) {
            Ok(n) => n,
            Err(e) => panic!("{id:?}: {e}"),
        }
    }

    #[test]
    fn plain_ids_are_readable() {
        assert_eq!(name("abc-123_x"), "abc-123_x.jsonl");
        assert_eq!(
            name("9f1c2d3e-aaaa-4bbb-8ccc-0123456789ab"),
            "9f1c2d3e-aaaa-4bbb-8ccc-0123456789ab.jsonl"
        );
    }

    #[test]
    fn everything_else_is_escaped() {
        assert_eq!(name("ABC"), "%41%42%43.jsonl");
        assert_eq!(name("a/b"), "a%2Fb.jsonl");
        assert_eq!(name(".."), "%2E%2E.jsonl");
        assert_eq!(name("../x"), "%2E%2E%2Fx.jsonl");
        assert_eq!(name("a\0b"), "a%00b.jsonl");
        assert_eq!(name("%"), "%25.jsonl");
        assert_eq!(name("é"), "%C3%A9.jsonl");
        assert_eq!(name("a.jsonl"), "a%2Ejsonl.jsonl");
        assert_eq!(name(" "), "%20.jsonl");
    }

    #[test]
    fn windows_device_names_are_escaped() {
        assert_eq!(name("con"), "%63on.jsonl");
        assert_eq!(name("nul"), "%6Eul.jsonl");
        assert_eq!(name("com7"), "%63om7.jsonl");
        assert_eq!(name("lpt0"), "%6Cpt0.jsonl");
        assert_eq!(name("CON"), "%43%4F%4E.jsonl");
        assert_eq!(name("com"), "com.jsonl");
        assert_eq!(name("com10"), "com10.jsonl");
        assert_eq!(name("conx"), "conx.jsonl");
        for id in ["con", "nul", "com7", "lpt0"] {
            assert_eq!(session_id(&name(id)).as_deref(), Some(id));
            assert_eq!(session_id(&format!("{id}.jsonl")), None, "the unescaped spelling is not canonical");
        }
    }

    #[test]
    fn empty_and_too_long_ids_are_invalid() {
        let code = |id: &str| file_name(id).map_err(|e| e.code());
        assert_eq!(code(""), Err("invalid-id"));
        assert_eq!(code(&"a".repeat(249)).map(|n| n.len()), Ok(255));
        assert_eq!(code(&"a".repeat(250)), Err("invalid-id"));
        assert_eq!(code(&"A".repeat(83)).map(|n| n.len()), Ok(255));
        assert_eq!(code(&"A".repeat(84)), Err("invalid-id"));
        assert_eq!(code(&"x".repeat(4096)), Err("invalid-id"));
    }

    #[test]
    fn only_canonical_names_decode() {
        assert_eq!(session_id("abc.jsonl").as_deref(), Some("abc"));
        assert_eq!(session_id("%41.jsonl").as_deref(), Some("A"));
        assert_eq!(session_id("%2E%2E.jsonl").as_deref(), Some(".."));
        for bad in [
            "abc",
            "abc.json",
            ".jsonl",
            "%61.jsonl",
            "%2e.jsonl",
            "%4.jsonl",
            "%.jsonl",
            "%ZZ.jsonl",
            "A.jsonl",
            "a.b.jsonl",
            ".hidden.jsonl",
            "%FF.jsonl",
            "a b.jsonl",
        ] {
            assert_eq!(session_id(bad), None, "{bad:?} must not decode");
        }
    }
}
