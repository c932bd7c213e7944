//! The steady workload a campaign runs under its faults: operations of several shapes,
//! drawn from the seed, each job keeping the ledger (`ledger::job_command`).

use super::invariants::Submission;
use super::lab::ChaosLab;
use super::ledger::job_command;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Where jobs find the ledger (chaos.yaml mounts it in every agent).
const LEDGER: &str = "/ledger/ledger.log";
/// How often a running job says it is alive in the ledger.
const TICK_MS: u64 = 250;

/// The shapes of operation the workload submits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shape {
    OneJob,
    ManyJobs,
    Gang,
    OtherTree,
    /// A graceful filler in `development`, then work in `production`, whose guarantee
    /// preempts the filler gracefully.
    GracefulPreemption,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::OneJob => "one-job",
            Shape::ManyJobs => "many-jobs",
            Shape::Gang => "gang",
            Shape::OtherTree => "other-tree",
            Shape::GracefulPreemption => "graceful-preemption",
        }
    }
}

/// What the workload submitted and the scheduler acknowledged.
#[derive(Default)]
pub struct Submitted {
    pub acknowledged: Vec<Submission>,
    pub by_shape: BTreeMap<&'static str, usize>,
    /// Submissions the CLI could not confirm (refused, busy, or unknown): not checked.
    pub unacknowledged: usize,
}

/// One task's spec: `jobs` jobs of `cpu` cores, each running `work` inside the ledger.
fn task(work: &str, jobs: u32, cpu: f64) -> serde_json::Value {
    json!({
        "command": job_command(work, TICK_MS),
        "job_count": jobs,
        "cpu_limit": cpu,
        "memory_limit": "64M",
        "environment": {"LEDGER": LEDGER},
    })
}

/// The specs one shape submits, in order.
fn specs(shape: Shape, rng: &mut StdRng) -> Vec<serde_json::Value> {
    let secs = |rng: &mut StdRng| rng.gen_range(1..=3);
    match shape {
        Shape::OneJob => vec![json!({"pool": "development",
            "tasks": {"main": task(&format!("sleep {}", secs(rng)), 1, 1.0)}})],
        Shape::ManyJobs => vec![json!({"pool": "development",
            "tasks": {"main": task(&format!("sleep {}", secs(rng)), 6, 0.5),
                      "side": task("sleep 1", 2, 0.5)}})],
        Shape::Gang => vec![json!({"pool": "development", "is_gang": true,
            "tasks": {"main": task("sleep 2", 3, 1.0)}})],
        Shape::OtherTree => vec![json!({"pool": "research", "pool_trees": ["other"],
            "tasks": {"main": task(&format!("sleep {}", secs(rng)), 2, 0.5)}})],
        Shape::GracefulPreemption => vec![
            json!({"pool": "development", "preemption_mode": "graceful",
                "tasks": {"main": task("trap 'exit 143' TERM; sleep 10 & wait $!", 4, 1.0)}}),
            json!({"pool": "production", "fair_share_starvation_timeout": "1s",
                "tasks": {"main": task("sleep 2", 2, 1.0)}}),
        ],
    }
}

/// The jobs per task a spec asks for.
fn tasks_of(spec: &serde_json::Value) -> BTreeMap<String, u32> {
    spec["tasks"]
        .as_object()
        .map(|t| {
            t.iter()
                .map(|(name, task)| (name.clone(), task["job_count"].as_u64().unwrap_or(1) as u32))
                .collect()
        })
        .unwrap_or_default()
}

/// Submits one spec; the operation id when the scheduler acknowledged it.
fn submit(lab: &ChaosLab, spec: &serde_json::Value, dir: &std::path::Path) -> Option<String> {
    let file = tempfile::Builder::new()
        .suffix(".json")
        .tempfile_in(dir)
        .ok()?;
    std::fs::write(file.path(), spec.to_string()).ok()?;
    let path = file.path().to_str()?;
    let out = lab
        .cli(
            &["run-vanilla", "--spec", path, "--async"],
            Duration::from_secs(30),
        )
        .ok()?;
    let id = out.trim().trim_matches('"').to_string();
    (!id.is_empty() && !id.contains(char::is_whitespace)).then_some(id)
}

fn append(path: &std::path::Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}

/// Submits drawn shapes every 2 to 4 s until `stop`: about 2.5 cores of work a second
/// on average, of the default tree's 4, so faults slow it without a backlog that never
/// drains.
pub fn run(lab: &ChaosLab, seed: u64, stop: &AtomicBool, dir: &std::path::Path) -> Submitted {
    // Drawn by weight: the preemption pair fills the default tree for 10 s, so it comes
    // a tenth of the time.
    const SHAPES: [Shape; 10] = [
        Shape::OneJob,
        Shape::OneJob,
        Shape::OneJob,
        Shape::ManyJobs,
        Shape::ManyJobs,
        Shape::Gang,
        Shape::Gang,
        Shape::OtherTree,
        Shape::OtherTree,
        Shape::GracefulPreemption,
    ];
    let mut rng = StdRng::seed_from_u64(seed ^ 0x005e_ed0f_10ad);
    let mut out = Submitted::default();
    while !stop.load(Ordering::Relaxed) {
        let shape = SHAPES[rng.gen_range(0..SHAPES.len())];
        for spec in specs(shape, &mut rng) {
            let asked_ns = super::campaign::now_ns();
            let answer = submit(lab, &spec, dir);
            // When each submission was asked and answered: the evidence for an
            // acknowledged operation the scheduler later does not know.
            let line = format!(
                "{asked_ns} {} {} {}\n",
                super::campaign::now_ns(),
                shape.name(),
                answer.as_deref().unwrap_or("-")
            );
            let _ = append(&dir.join("submissions.log"), &line);
            match answer {
                Some(operation) => out.acknowledged.push(Submission {
                    operation,
                    tasks: tasks_of(&spec),
                }),
                None => out.unacknowledged += 1,
            }
        }
        *out.by_shape.entry(shape.name()).or_default() += 1;
        std::thread::sleep(Duration::from_millis(rng.gen_range(2_000..=4_000)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_asks_for_jobs_that_keep_the_ledger() {
        let mut rng = StdRng::seed_from_u64(1);
        for shape in [
            Shape::OneJob,
            Shape::ManyJobs,
            Shape::Gang,
            Shape::GracefulPreemption,
        ] {
            for spec in specs(shape, &mut rng) {
                let tasks = tasks_of(&spec);
                assert!(
                    !tasks.is_empty() && tasks.values().all(|n| *n > 0),
                    "{spec}"
                );
                for task in spec["tasks"].as_object().unwrap().values() {
                    assert!(task["command"].as_str().unwrap().contains("$LEDGER"));
                    assert_eq!(task["environment"]["LEDGER"], LEDGER);
                }
            }
        }
        let many = &specs(Shape::ManyJobs, &mut rng)[0];
        assert_eq!(
            tasks_of(many),
            BTreeMap::from([("main".into(), 6), ("side".into(), 2)])
        );
    }
}
