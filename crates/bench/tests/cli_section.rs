//! The cli section end to end: the built benchmark binary at N = 400,
//! running the `palimpsest` binary beside it (built with the workspace, as
//! `cargo xtask ci` and `cargo xtask bench` do). Nothing here checks a
//! timing: only that every figure was measured, memory included.

mod support;

#[test]
fn the_cli_section_runs_whole_palimpsest_processes() {
    let rows = support::run_section("cli");
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    for wanted in ["validate FILE", "validate STORE.db", "derive --request", "sessions", "export", "peak RSS"]
    {
        assert!(names.iter().any(|n| n.contains(wanted)), "no row for {wanted}: {names:?}");
    }
    for r in &rows {
        let value = r["value"].as_f64().unwrap();
        assert!(value.is_finite() && value > 0.0, "{r}");
    }
}
