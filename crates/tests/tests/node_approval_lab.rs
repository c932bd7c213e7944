//! Node approval (SPEC 5.11, issue 24 point 5) on a real lab: a node identity approved
//! for 1 cpu that reports 8 offers 1, with an alert, and gets no job that needs more.

use std::time::Duration;
use ytsched_tests::{wait_until, Lab, NodeOpts};

#[test]
fn a_node_is_held_to_what_it_was_approved_for() {
    let mut lab = Lab::start(vec![]).unwrap();
    lab.auth(&["add-node", "node0", "--max-resources", "cpu=1,memory=1G"])
        .unwrap();
    lab.add_node(NodeOpts::args(&["--cpu", "8", "--memory", "4G"]))
        .unwrap();
    let node = wait_until(Duration::from_secs(20), || {
        let n = lab.node_info(0)?;
        (n["resource_limits"]["cpu"] == 1.0).then_some(n)
    })
    .unwrap_or_else(|_| panic!("{:?}\n{}", lab.node_info(0), lab.scheduler_log()));
    assert_eq!(node["resource_limits"]["memory"], (1u64 << 30) as f64);
    assert!(
        node["alert"]
            .as_str()
            .unwrap_or_default()
            .contains("more than the 1 it is approved for"),
        "{node}"
    );
    assert!(lab.scheduler_log().contains("ALERT"));
    // A job needing 4 cpu fits no node: refused for want of cpu, not run on the claim.
    let id = lab
        .submit_spec("tasks: {t: {command: 'true', job_count: 1, cpu_limit: 4, memory_limit: 64M}}")
        .unwrap();
    let done = lab.wait_finished(&id, Duration::from_secs(30)).unwrap();
    assert_eq!(done["state"], "failed", "{done}");
    assert!(
        done["error"].as_str().unwrap_or_default().contains("cpu"),
        "{done}"
    );
}

/// Issue 38 point 7 on a real lab: a node without an approval that comes back claiming
/// 4 times the cpu it first offered is used for its first offer, with an alert naming
/// the command that approves more; only an admin may approve it, and then it offers
/// what it reports.
#[test]
fn a_node_is_trusted_on_first_use_until_an_admin_approves_more() {
    let mut lab = Lab::start(vec![NodeOpts::args(&["--cpu", "2", "--memory", "2G"])]).unwrap();
    lab.add_user("bob", false).unwrap();
    lab.restart_node_with(0, NodeOpts::args(&["--cpu", "8", "--memory", "2G"]))
        .unwrap();
    let node = wait_until(Duration::from_secs(20), || {
        let n = lab.node_info(0)?;
        n["alert"]
            .as_str()
            .is_some_and(|a| a.contains("cpu = 8"))
            .then_some(n)
    })
    .unwrap_or_else(|_| panic!("{:?}\n{}", lab.node_info(0), lab.scheduler_log()));
    assert_eq!(node["resource_limits"]["cpu"], 2.0, "{node}");
    let alert = node["alert"].as_str().unwrap();
    assert!(
        alert.contains("first registration") && alert.contains("ytsched node approve node0"),
        "{alert}"
    );
    let refused = lab.ytsched_as("bob", &["node", "approve", "node0"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("only admins may"));
    let out = lab.ok(&["node", "approve", "node0"]);
    assert!(out.contains("approved"), "{out}");
    wait_until(Duration::from_secs(20), || {
        let n = lab.node_info(0)?;
        (n["resource_limits"]["cpu"] == 8.0 && n["alert"].is_null()).then_some(())
    })
    .unwrap_or_else(|_| panic!("{:?}", lab.node_info(0)));
}
