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
