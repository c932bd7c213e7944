//! `ytsched-chaos`: the fault campaign on the compose lab (issue 42, docs/reliability.md).
//! Prints its seed, its schedule and each fault's start and end; ends with the figures
//! and every violation with its evidence, exiting non-zero on any violation.
//!
//!     ytsched-chaos --minutes 3 --seed 42     # as CI runs it
//!     ytsched-chaos --minutes 30              # a random seed, printed

use anyhow::{bail, Result};
use clap::Parser;
use std::time::Duration;
use ytsched_tests::chaos::campaign::{self, Options};

#[derive(Parser, Debug)]
#[command(name = "ytsched-chaos")]
struct Args {
    /// How long faults are struck (the run then waits for its work to end).
    #[arg(long, default_value_t = 3.0)]
    minutes: f64,
    /// The seed of the schedule and the workload (default: drawn, and printed).
    #[arg(long)]
    seed: Option<u64>,
    /// How soon after each heal a job must start again.
    #[arg(long, default_value = "45")]
    recovery_bound_s: u64,
    /// Which build the lab image holds (compose/build-image.sh is run with it).
    #[arg(long, default_value = "release")]
    profile: String,
    /// Skip building the image (it is already built from this tree).
    #[arg(long)]
    no_build: bool,
    /// Leave the lab up afterwards.
    #[arg(long)]
    keep: bool,
    /// Where the run's evidence is kept: its ledger, event log and figures (default:
    /// target/chaos/seed-SEED).
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !(0.5..=24.0 * 60.0).contains(&args.minutes) {
        bail!(
            "--minutes must be between 0.5 and 1440, not {}",
            args.minutes
        );
    }
    let repo = std::env::current_dir()?;
    if !repo.join("compose/chaos.yaml").is_file() {
        bail!("run ytsched-chaos from the repository's root (no compose/chaos.yaml here)");
    }
    if !args.no_build {
        let status = std::process::Command::new("compose/build-image.sh")
            .args(["--profile", &args.profile])
            .status()?;
        if !status.success() {
            bail!("compose/build-image.sh failed");
        }
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let out = args
        .out
        .unwrap_or_else(|| repo.join("target/chaos").join(format!("seed-{seed}")));
    if out.join("ledger/ledger.log").exists() {
        std::fs::remove_dir_all(&out)?;
    }
    let opts = Options {
        seed,
        out,
        length: Duration::from_secs_f64(args.minutes * 60.0),
        recovery_bound: Duration::from_secs(args.recovery_bound_s),
        repo,
        profile: args.profile,
        keep: args.keep,
    };
    let outcome = campaign::run(&opts)?;
    let figures = outcome.figures.markdown();
    println!("chaos: seed {}, figures:\n{figures}", opts.seed);
    let mut report = format!("seed {}\n\n{figures}\n", opts.seed);
    for v in &outcome.violations {
        report.push_str(&format!("VIOLATION [{}]: {}\n", v.invariant, v.evidence));
    }
    std::fs::write(opts.out.join("report.md"), report)?;
    println!("chaos: recovery bound {} s", opts.recovery_bound.as_secs());
    if outcome.violations.is_empty() {
        println!("chaos: PASSED: 0 violations (seed {})", opts.seed);
        return Ok(());
    }
    for v in &outcome.violations {
        println!("chaos: VIOLATION [{}]: {}", v.invariant, v.evidence);
    }
    bail!(
        "{} violations (seed {}; replay with --seed {})",
        outcome.violations.len(),
        opts.seed,
        opts.seed
    )
}
