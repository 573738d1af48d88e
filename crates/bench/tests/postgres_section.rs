//! The postgres section end to end, its writer processes included: the
//! built benchmark binary at N = 400. Needs the PostgreSQL server of
//! `PALIMPSEST_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//! Nothing here checks a timing: only that every figure was measured.

mod support;

#[test]
fn the_postgres_section_runs_with_writer_processes() {
    let rows = support::run_section("postgres");
    // 6 figures, two of them beside a second baseline and the load beside
    // a third; 3 concurrency rows per writer count, from threads and from
    // processes.
    assert_eq!(rows.len(), 6 + 3 + 2 * 3 * 3);
    assert!(rows.iter().any(|r| r["name"].as_str().unwrap().contains("processes")));
    for r in &rows {
        let (value, ratio) = (r["value"].as_f64().unwrap(), r["ratio"].as_f64().unwrap());
        assert!(value.is_finite() && value > 0.0, "{r}");
        assert!(ratio.is_finite() && ratio > 0.0, "{r}");
    }
}
