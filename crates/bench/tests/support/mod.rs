//! Running one section of the built benchmark binary, as a user would.

use std::process::Command;

/// Runs `palimpsest-bench --only SECTION --sizes 400 --json FILE` and
/// returns its rows, after checking that it succeeded and that every row
/// is of `section`.
pub(crate) fn run_section(section: &str) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_palimpsest-bench"))
        .args(["--only", section, "--sizes", "400", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = rows.as_array().unwrap().clone();
    for r in &rows {
        assert_eq!(r["section"], section);
    }
    rows
}
