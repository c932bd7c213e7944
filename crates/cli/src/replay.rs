//! `ytsched simulate --replay EVENTS [--set PATH=VALUE]...`: an event log run again
//! through the scheduler core here, with no server, and its per-pool figures printed
//! replayed beside observed.

use crate::output::Format;
use comfy_table::Table;
use serde_json::Value;
use std::path::Path;
use ytsched_simulator::{read_log, replay, Figures, PoolFigures, ReplayChange, ReplayReport};

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
fn pair(row: &PoolFigures, field: impl Fn(&Figures) -> Option<f64>) -> String {
    let show = |side: &Option<Figures>| match side.as_ref().and_then(&field) {
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v}"),
        Some(v) => format!("{v:.2}"),
        None => "-".into(),
    };
    format!("{} → {}", show(&row.observed), show(&row.replayed))
}

fn table(report: &ReplayReport) -> String {
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
    for row in &report.pools {
        t.add_row([
            row.pool.clone(),
            pair(row, |f| Some(f.operations as f64)),
            pair(row, |f| f.wait_p50_s),
            pair(row, |f| f.wait_p95_s),
            pair(row, |f| f.wait_mean_s),
            pair(row, |f| f.fair_share_attainment),
            pair(row, |f| Some(f.jobs_preempted as f64)),
        ]);
    }
    let mut out = format!(
        "replayed {} s of the log: {} nodes, {} operations (observed → replayed)\n{t}\n",
        Value::from(report.window.seconds),
        report.nodes,
        report.operations
    );
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    for e in &report.errors {
        out.push_str(&format!("error at {} s: {}\n", e["time"], e["error"]));
    }
    if report.errors_not_listed > 0 {
        out.push_str(&format!(
            "... and {} more errors\n",
            report.errors_not_listed
        ));
    }
    out
}
