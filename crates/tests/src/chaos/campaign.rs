//! One fault campaign: the lab up, the workload running, the seed's faults struck and
//! healed one after another, then the whole history gathered and judged.

use super::faults;
use super::invariants::{self, Heal, History, Violation};
use super::lab::ChaosLab;
use super::ledger;
use super::report::{Figures, HealRecord};
use super::schedule::{self, PlannedFault};
use super::workload;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use ytsched_common::event_record::EventRecord;

pub struct Options {
    pub seed: u64,
    pub length: Duration,
    /// How soon after a heal a job must start again.
    pub recovery_bound: Duration,
    pub repo: PathBuf,
    pub profile: String,
    /// Leave the lab up afterwards (to look at it).
    pub keep: bool,
    /// Where the run's evidence stays: the ledger, the event log, the figures.
    pub out: PathBuf,
}

/// What a campaign found.
pub struct Outcome {
    pub figures: Figures,
    pub violations: Vec<Violation>,
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Wall-clock seconds since the campaign began, for the printed timeline.
fn stamp(start: Instant) -> String {
    format!("[{:>7.1}s]", start.elapsed().as_secs_f64())
}

/// Runs the campaign; the lab is torn down afterwards unless `keep`.
pub fn run(opts: &Options) -> Result<Outcome> {
    let plan = schedule::draw(opts.seed, opts.length);
    println!(
        "chaos: seed {} for {} s; the schedule (each fault: kind target hold quiet):",
        opts.seed,
        opts.length.as_secs()
    );
    for (i, f) in plan.iter().enumerate() {
        println!(
            "chaos:   #{i:<3} {:<22} {:<7} hold {:>5} ms, quiet {:>5} ms",
            f.kind.name(),
            f.target,
            f.hold.as_millis(),
            f.quiet.as_millis()
        );
    }
    std::fs::create_dir_all(&opts.out)?;
    let lab = ChaosLab::new(&opts.repo, &opts.profile, &opts.out)?;
    println!(
        "chaos: lab {} (NATS on 127.0.0.1:{}); evidence in {}",
        lab.project,
        lab.nats_port,
        opts.out.display()
    );
    let outcome = lab
        .up()
        .and_then(|()| campaign(&lab, opts, &plan, &opts.out));
    if let Err(e) = lab.save_logs(&opts.out.join("logs")) {
        println!("chaos: cannot save the lab's logs: {e:#}");
    }
    if opts.keep {
        println!("chaos: the lab is left up (--keep): {}", lab.project);
    } else {
        lab.down();
        let _ = std::fs::remove_dir_all(&lab.auth_dir);
    }
    outcome
}

fn campaign(
    lab: &ChaosLab,
    opts: &Options,
    plan: &[PlannedFault],
    work: &std::path::Path,
) -> Result<Outcome> {
    let start = Instant::now();
    let start_ns = now_ns();
    let stop = AtomicBool::new(false);
    let (submitted, heals) = std::thread::scope(|s| {
        let workload = s.spawn(|| workload::run(lab, opts.seed, &stop, work));
        // Work under way before the first fault.
        std::thread::sleep(Duration::from_secs(10));
        let heals = inject(lab, opts, plan, start);
        stop.store(true, Ordering::Relaxed);
        (workload.join(), heals)
    });
    let submitted = submitted.map_err(|_| anyhow::anyhow!("the workload thread panicked"))?;
    let heals = heals?;
    println!(
        "{} chaos: faults done; waiting for {} acknowledged operations to end",
        stamp(start),
        submitted.acknowledged.len()
    );
    let final_states = wait_finished(lab, &submitted.acknowledged, Duration::from_secs(300));
    let end_ns = now_ns();
    let events = read_events(lab)?;
    let (attempts, bad_lines) = ledger::read(&lab.ledger_text()?);
    let lines: Vec<String> = events
        .iter()
        .filter_map(|e| serde_json::to_string(e).ok())
        .collect();
    std::fs::write(opts.out.join("events.jsonl"), lines.join("\n"))?;
    let heal_points: Vec<Heal> = heals
        .iter()
        .map(|h| Heal {
            fault: format!("{} on {}", h.kind.name(), h.service),
            at_ns: h.at_ns,
        })
        .collect();
    let history = History {
        submissions: &submitted.acknowledged,
        final_states: &final_states,
        attempts: &attempts,
        events: &events,
        heals: &heal_points,
        end_ns,
        recovery_bound_ms: opts.recovery_bound.as_millis() as u64,
    };
    let violations = invariants::check(&history);
    let figures = Figures::gather(&history, &heals, &submitted, bad_lines.len(), start_ns);
    Ok(Outcome {
        figures,
        violations,
    })
}

/// Strikes and heals each planned fault in turn until the campaign's length is spent.
fn inject(
    lab: &ChaosLab,
    opts: &Options,
    plan: &[PlannedFault],
    start: Instant,
) -> Result<Vec<HealRecord>> {
    let mut heals = Vec::new();
    for (i, fault) in plan.iter().enumerate() {
        if start.elapsed() >= opts.length {
            break;
        }
        lab.start_stopped_schedulers();
        let struck = match faults::strike(lab, fault) {
            Ok(s) => s,
            Err(e) => {
                println!(
                    "{} chaos: #{i} {} not struck: {e:#}",
                    stamp(start),
                    fault.kind
                );
                std::thread::sleep(fault.quiet);
                continue;
            }
        };
        let struck_ns = now_ns();
        println!(
            "{} chaos: #{i} {} on {} struck at {struck_ns} ns",
            stamp(start),
            fault.kind,
            struck.service
        );
        std::thread::sleep(fault.hold);
        heal_with_retries(lab, &struck)
            .with_context(|| format!("healing #{i} {} on {}", fault.kind, struck.service))?;
        let at_ns = now_ns();
        println!(
            "{} chaos: #{i} {} on {} healed at {at_ns} ns",
            stamp(start),
            fault.kind,
            struck.service
        );
        lab.start_stopped_schedulers();
        heals.push(HealRecord {
            kind: fault.kind,
            service: struck.service,
            at_ns,
        });
        std::thread::sleep(fault.quiet);
    }
    Ok(heals)
}

fn heal_with_retries(lab: &ChaosLab, struck: &faults::Struck) -> Result<()> {
    let mut last = None;
    for _ in 0..5 {
        match faults::heal(lab, struck) {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("heal failed")))
}

/// Each acknowledged operation's state once all have ended, or at the deadline.
fn wait_finished(
    lab: &ChaosLab,
    ops: &[invariants::Submission],
    limit: Duration,
) -> BTreeMap<String, String> {
    let deadline = Instant::now() + limit;
    let mut states = BTreeMap::new();
    loop {
        for s in ops {
            let done = matches!(
                states.get(&s.operation).map(String::as_str),
                Some("completed" | "failed" | "aborted")
            );
            if done {
                continue;
            }
            let out = lab.cli(&["get-operation", &s.operation], Duration::from_secs(20));
            if let Some(state) = out
                .ok()
                .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok())
                .and_then(|v| v["state"].as_str().map(str::to_string))
            {
                states.insert(s.operation.clone(), state);
            }
        }
        let all_done = ops.iter().all(|s| {
            matches!(
                states.get(&s.operation).map(String::as_str),
                Some("completed" | "failed" | "aborted")
            )
        });
        if all_done || Instant::now() > deadline {
            return states;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The lab's whole event log (it is new with the campaign), in stream order.
fn read_events(lab: &ChaosLab) -> Result<Vec<EventRecord>> {
    let out = lab.cli(&["events"], Duration::from_secs(120))?;
    let mut events = Vec::new();
    for (i, line) in out
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match serde_json::from_str(line) {
            Ok(r) => events.push(r),
            Err(e) => bail!("event log line {} does not parse: {e}: {line}", i + 1),
        }
    }
    Ok(events)
}
