//! `ytsched-load` against a lab it starts: simulated agents with their own identities
//! run every job of the submitted operations through the real scheduler and NATS, and
//! the closing JSON line says so.

use std::process::Command;
use ytsched_tests::binary;

#[test]
fn simulated_nodes_run_every_job_and_the_summary_says_so() {
    let out = Command::new(binary("ytsched-load"))
        .args([
            "--lab",
            "--nodes",
            "20",
            "--ops",
            "10",
            "--jobs",
            "200",
            "--job-time-ms",
            "100",
            "--node-cpu",
            "4",
            "--duration",
            "90",
        ])
        .output()
        .expect("run ytsched-load");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ytsched-load failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("a summary line");
    let s: serde_json::Value = serde_json::from_str(last).expect("the last line is JSON");
    assert_eq!(s["nodes"], 20);
    assert_eq!(s["jobs_placed"], 200, "{last}");
    assert_eq!(s["jobs_completed"], 200, "{last}");
    assert_eq!(s["jobs_aborted_by_scheduler"], 0, "no job lost: {last}");
    assert_eq!(s["timeouts"], 0, "{last}");
    for key in [
        "heartbeats_per_s",
        "placements_per_s",
        "reply_p50_ms",
        "reply_p99_ms",
        "scheduler_rss_mib",
        "submissions_per_s",
    ] {
        assert!(s[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {last}");
    }
}
