//! The postgres section end to end, its writer processes included: the
//! built benchmark binary at N = 400. Needs the PostgreSQL server of
//! `PALIMPSEST_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//! Nothing here checks a timing: only that every figure was measured.

use std::process::Command;

#[test]
fn the_postgres_section_runs_with_writer_processes() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_palimpsest-bench"))
        .args(["--only", "postgres", "--sizes", "400", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    // Six single-writer figures, then 3 figures x 3 writer counts, in threads and in processes.
    // 6 figures, two of them beside a second baseline; 3 concurrency rows
    // per writer count, from threads and from processes.
    assert_eq!(rows.len(), 6 + 2 + 2 * 3 * 3);
    assert!(rows.iter().any(|r| r["name"].as_str().unwrap().contains("processes")));
    for r in rows {
        assert_eq!(r["section"], "postgres");
        let (value, ratio) = (r["value"].as_f64().unwrap(), r["ratio"].as_f64().unwrap());
        assert!(value.is_finite() && value > 0.0, "{r}");
        assert!(ratio.is_finite() && ratio > 0.0, "{r}");
    }
}
