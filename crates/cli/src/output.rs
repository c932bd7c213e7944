//! Printing API results as a table (people), JSON or YAML (scripts).

use clap::ValueEnum;
use comfy_table::Table;
use serde::Serialize;
use ytsched_common::api::{JobInfo, NodeInfo, OperationInfo, WhatIf};
use ytsched_common::units::ByteSize;
use ytsched_common::ResourceVector;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
    /// Comma-separated values, for spreadsheets (`ytsched usage`).
    Csv,
}

/// Something that also knows how to look as a table.
pub trait Tabular: Serialize {
    fn table(&self) -> Table;
    /// Its rows as CSV, where that means something (a report's rows).
    fn csv(&self) -> Option<String> {
        None
    }
}

pub fn print<T: Tabular>(value: &T, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Format::Yaml => print!("{}", serde_yaml_ng::to_string(value)?),
        Format::Table => println!("{}", value.table()),
        Format::Csv => print!("{}", value.csv().ok_or_else(no_csv)?),
    }
    Ok(())
}

/// `--format csv` where there are no rows to give.
pub fn no_csv() -> anyhow::Error {
    anyhow::anyhow!("--format csv is for reports of rows (ytsched usage); use json or yaml here")
}

/// Tables wrap their cells to fit the terminal they are printed on (80 columns is the
/// narrowest we lay them out for); piped output is not wrapped, so lines stay whole
/// for grep (scripts should use --format json anyway).
/// A value whose table form is prose (`explain`): `words` for people, JSON or YAML
/// of the value for scripts.
pub fn print_words<T: Serialize>(value: &T, words: String, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Table => print!("{words}"),
        Format::Yaml => print!("{}", serde_yaml_ng::to_string(value)?),
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Format::Csv => return Err(no_csv()),
    }
    Ok(())
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    t
}

fn resources(r: &ResourceVector) -> String {
    let mut s = format!("cpu {} · mem {}", r.cpu, ByteSize(r.memory.max(0.0) as u64));
    if r.gpu > 0.0 {
        s.push_str(&format!(" · gpu {}", r.gpu));
    }
    s.push_str(&format!(" · slots {}", r.user_slots));
    s
}

pub(crate) fn time(ms: Option<u64>) -> String {
    ms.map(|m| format!("{}.{:03}", m / 1000, m % 1000))
        .unwrap_or_default()
}

impl Tabular for Vec<OperationInfo> {
    fn table(&self) -> Table {
        let mut t = table(&["id", "user", "pool", "state", "jobs run/done/all", "error"]);
        for o in self {
            t.add_row(vec![
                o.id.to_string(),
                o.user.clone(),
                o.pool.clone(),
                o.state.to_string(),
                format!("{}/{}/{}", o.jobs.running, o.jobs.completed, o.jobs.total),
                o.error.clone().unwrap_or_default(),
            ]);
        }
        t
    }
}

impl Tabular for OperationInfo {
    fn table(&self) -> Table {
        let mut t = table(&["field", "value"]);
        let j = &self.jobs;
        for (k, v) in [
            ("id", self.id.to_string()),
            ("title", self.title.clone().unwrap_or_default()),
            ("user", self.user.clone()),
            ("pool", self.pool.clone()),
            (
                "pool_trees",
                self.pool_trees
                    .iter()
                    .map(|(t, p)| format!("{t}: {p}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            ("weight", self.weight.to_string()),
            (
                "state",
                match &self.unschedulable_reason {
                    Some(why) if self.suspended || why != "pending" => {
                        format!("{} (unschedulable: {why})", self.state)
                    }
                    _ => self.state.to_string(),
                },
            ),
            (
                "jobs",
                format!(
                    "{} total: {} waiting, {} running, {} completed, {} failed, {} aborted",
                    j.total, j.waiting, j.running, j.completed, j.failed, j.aborted
                ),
            ),
            ("resource_usage", resources(&self.resource_usage)),
            ("resource_demand", resources(&self.resource_demand)),
            ("start_time", time(Some(self.start_time))),
            ("finish_time", time(self.finish_time)),
            ("error", self.error.clone().unwrap_or_default()),
            (
                "history",
                self.history
                    .iter()
                    .map(|h| format!("{}  {}", time(Some(h.time)), h.event))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        ] {
            t.add_row(vec![k.to_string(), v]);
        }
        t
    }
}

impl Tabular for Vec<JobInfo> {
    fn table(&self) -> Table {
        let mut t = table(&["job", "task#", "state", "node", "wall", "error"]);
        for j in self {
            t.add_row(vec![
                j.id.to_string(),
                format!("{}#{}", j.task_name, j.job_index),
                match j.abort_reason {
                    Some(r) => format!("{} ({r})", j.state),
                    None => j.state.to_string(),
                },
                j.node_id
                    .as_ref()
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
                j.statistics
                    .as_ref()
                    .map(|s| format!("{:.3}s", s.wall_time_ms as f64 / 1000.0))
                    .unwrap_or_default(),
                j.error.clone().unwrap_or_default(),
            ]);
        }
        t
    }
}

impl Tabular for WhatIf {
    fn table(&self) -> Table {
        let mut t = table(&[
            "tree",
            "kind",
            "name",
            "fair share before",
            "after",
            "change",
        ]);
        let pct = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.2}%", x * 100.0));
        for c in &self.changes {
            let change = match (c.before, c.after) {
                (Some(b), Some(a)) => format!("{:+.2}%", (a - b) * 100.0),
                (None, Some(_)) => "new".into(),
                (Some(_), None) => "gone".into(),
                (None, None) => String::new(),
            };
            t.add_row(vec![
                c.tree.clone(),
                c.kind.clone(),
                c.name.clone(),
                pct(c.before),
                pct(c.after),
                change,
            ]);
        }
        t
    }
}

impl Tabular for Vec<NodeInfo> {
    fn table(&self) -> Table {
        let mut t = table(&[
            "node",
            "state",
            "tree",
            "resources",
            "usage",
            "jobs",
            "system tags",
            "tags",
            "user tags",
            "maintenance",
        ]);
        for n in self {
            t.add_row(vec![
                n.id.to_string(),
                match &n.error {
                    Some(e) => format!("{} ({e})", n.state),
                    None => n.state.clone(),
                },
                n.tree.clone().unwrap_or_default(),
                resources(&n.resource_limits),
                resources(&n.resource_usage),
                n.running_job_count.to_string(),
                n.system_tags.join(" "),
                n.tags.join(" "),
                n.user_tags.join(" "),
                n.maintenance.summary(),
            ]);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ytsched_common::api::JobCounts;
    use ytsched_common::states::{AbortReason, JobState, OperationState};
    use ytsched_common::{JobId, NodeId, OperationId};

    fn widest_line(t: &mut Table) -> usize {
        t.set_width(80);
        t.to_string()
            .lines()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn job_and_operation_lists_fit_80_columns() {
        let op = OperationId::random();
        let jobs: Vec<JobInfo> = (0..3)
            .map(|i| JobInfo {
                id: JobId(format!("{op}-{i}").into()),
                operation_id: op.clone(),
                task_name: "main".into(),
                job_index: i,
                state: JobState::Aborted,
                node_id: Some(NodeId("worker-node-17".into())),
                start_time: Some(1),
                finish_time: Some(2),
                error: Some("node worker-node-17 is banned; the job runs again elsewhere".into()),
                abort_reason: Some(AbortReason::NodeBanned),
                statistics: None,
            })
            .collect();
        let mut shown = jobs.table();
        assert!(widest_line(&mut shown) <= 80, "{shown}");
        println!("{shown}");
        let ops: Vec<OperationInfo> = (0..3)
            .map(|_| {
                let mut o: OperationInfo = serde_json::from_value(serde_json::json!({
                    "id": OperationId::random(), "user": "alice", "state": OperationState::Failed,
                    "pool": "research-team", "title": null, "weight": 1.0,
                    "error": "job main#0 failed: exit code 1 (stderr: command not found)",
                    "start_time": 1, "finish_time": null,
                    "jobs": JobCounts::default(),
                    "resource_usage": ResourceVector::ZERO, "resource_demand": ResourceVector::ZERO,
                    "spec": {"tasks": {"main": {"command": "true"}}},
                }))
                .unwrap();
                o.jobs.total = 100_000;
                o
            })
            .collect();
        assert!(widest_line(&mut ops.table()) <= 80, "{}", ops.table());
    }
}
