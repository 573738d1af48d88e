//! The cli section end to end: the built benchmark binary at N = 400,
//! running the `palimpsest` binary beside it (built with the workspace, as
//! `cargo xtask ci` and `cargo xtask bench` do). Nothing here checks a
//! timing: only that every figure was measured, memory included.

use std::process::Command;

#[test]
fn the_cli_section_runs_whole_palimpsest_processes() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_palimpsest-bench"))
        .args(["--only", "cli", "--sizes", "400", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    for wanted in ["validate FILE", "validate STORE.db", "derive --request", "sessions", "export", "peak RSS"]
    {
        assert!(names.iter().any(|n| n.contains(wanted)), "no row for {wanted}: {names:?}");
    }
    for r in rows {
        assert_eq!(r["section"], "cli");
        let value = r["value"].as_f64().unwrap();
        assert!(value.is_finite() && value > 0.0, "{r}");
    }
}
