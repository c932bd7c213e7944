//! `ytsched simulate --replay EVENTS [--set PATH=VALUE]...`: an event log run again
//! through the scheduler core here, with no server, and its per-pool figures printed
//! replayed beside observed.

use crate::output::Format;
use comfy_table::Table;
use serde_json::Value;
use std::path::Path;
use ytsched_simulator::{read_log, replay, ReplayChange};

/// Replays the log at `path` and prints the report; an unreadable log or a refused
/// change exits 2, naming it.
pub fn run(path: &Path, changes: &[ReplayChange], format: Format) -> ! {
    let fail = |message: String| -> ! {
        eprintln!("error: {}: {message}", path.display());
        std::process::exit(2);
    };
    let file = std::fs::File::open(path).unwrap_or_else(|e| fail(format!("cannot read: {e}")));
    let run = read_log(std::io::BufReader::new(file)).unwrap_or_else(|e| fail(e.to_string()));
    let report = replay(&run, changes).unwrap_or_else(|e| fail(e));
    let printed = match format {
        Format::Json => serde_json::to_string_pretty(&report).map_err(|e| e.to_string()),
        Format::Yaml => serde_yaml_ng::to_string(&report).map_err(|e| e.to_string()),
        Format::Table => Ok(table(&report)),
        Format::Csv => Err(crate::output::no_csv().to_string()),
    };
    match printed {
        Ok(text) => {
            println!("{}", text.trim_end());
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2)
        }
    }
}

/// Two figures side by side: "observed → replayed".
fn pair(row: &Value, field: &str) -> String {
    let show = |side: &str| match row[side][field].as_f64() {
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v}"),
        Some(v) => format!("{v:.2}"),
        None => "-".into(),
    };
    format!("{} → {}", show("observed"), show("replayed"))
}

fn table(report: &Value) -> String {
    let mut t = Table::new();
    t.set_header([
        "POOL",
        "OPERATIONS",
        "WAIT P50 S",
        "WAIT P95 S",
        "WAIT MEAN S",
        "ATTAINMENT",
        "PREEMPTED",
    ]);
    for row in report["pools"].as_array().into_iter().flatten() {
        t.add_row([
            row["pool"].as_str().unwrap_or_default().to_string(),
            pair(row, "operations"),
            pair(row, "wait_p50_s"),
            pair(row, "wait_p95_s"),
            pair(row, "wait_mean_s"),
            pair(row, "fair_share_attainment"),
            pair(row, "jobs_preempted"),
        ]);
    }
    let mut out = format!(
        "replayed {} s of the log: {} nodes, {} operations (observed → replayed)\n{t}\n",
        report["window"]["seconds"], report["nodes"], report["operations"]
    );
    for note in report["notes"].as_array().into_iter().flatten() {
        out.push_str(&format!("note: {}\n", note.as_str().unwrap_or_default()));
    }
    for e in report["errors"].as_array().into_iter().flatten() {
        out.push_str(&format!("error at {} s: {}\n", e["time"], e["error"]));
    }
    if let Some(more) = report["errors_not_listed"].as_u64().filter(|n| *n > 0) {
        out.push_str(&format!("... and {more} more errors\n"));
    }
    out
}
