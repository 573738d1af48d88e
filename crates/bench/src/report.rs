//! One row per figure, each beside its same-run baseline.

use std::fmt::Write as _;

/// One measured figure.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// Section, e.g. `jsonl`.
    pub(crate) section: &'static str,
    /// What was measured.
    pub(crate) name: String,
    /// Events in the workload.
    pub(crate) n: usize,
    /// The figure.
    pub(crate) value: f64,
    /// Its unit: `ev/s`, `ns`, `x json`...
    pub(crate) unit: &'static str,
    /// The same-run baseline, when there is one.
    pub(crate) baseline: Option<(String, f64)>,
    /// Whether larger is better (throughput) or smaller (latency, memory).
    pub(crate) higher_is_better: bool,
}

impl Row {
    /// Ours over the baseline, oriented so that > 1 means better than it.
    pub(crate) fn ratio(&self) -> Option<f64> {
        let (_, b) = self.baseline.as_ref()?;
        Some(if self.higher_is_better { self.value / b } else { b / self.value })
    }
}

fn fmt_value(v: f64, unit: &str) -> String {
    match unit {
        "ev/s" if v >= 1e6 => format!("{:.2}M ev/s", v / 1e6),
        "ev/s" if v >= 1e4 => format!("{:.0}k ev/s", v / 1e3),
        "ev/s" => format!("{:.2}k ev/s", v / 1e3),
        "ns" => format!("{v:.1} ns"),
        "ms" => format!("{v:.2} ms"),
        "MB/s" => format!("{v:.0} MB/s"),
        _ => format!("{v:.2} {unit}"),
    }
}

/// The table, as Markdown.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| section | measurement | N | ours | baseline | baseline value | ratio |");
    let _ = writeln!(out, "|---|---|---:|---:|---|---:|---:|");
    for r in rows {
        let (bname, bval) = match &r.baseline {
            Some((name, v)) => (name.clone(), fmt_value(*v, r.unit)),
            None => ("-".into(), "-".into()),
        };
        let ratio = r.ratio().map_or("-".into(), |x| format!("{x:.2}x"));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.section,
            r.name,
            r.n,
            fmt_value(r.value, r.unit),
            bname,
            bval,
            ratio
        );
    }
    out
}

/// The same rows, machine-readable.
pub(crate) fn json(rows: &[Row]) -> serde_json::Value {
    serde_json::Value::Array(
        rows.iter()
            .map(|r| {
                serde_json::json!({
                    "section": r.section,
                    "name": r.name,
                    "n": r.n,
                    "value": r.value,
                    "unit": r.unit,
                    "baseline": r.baseline.as_ref().map(|(n, _)| n),
                    "baselineValue": r.baseline.as_ref().map(|(_, v)| v),
                    "ratio": r.ratio(),
                    "higherIsBetter": r.higher_is_better,
                })
            })
            .collect(),
    )
}
