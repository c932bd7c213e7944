//! Issue 42's campaign found it: a NATS server that goes silent without closing its
//! connections (cut off from the network, or paused) left the agent connected to it
//! unheard past the node heartbeat timeout, so its node was lost and its jobs ran again,
//! though the two other servers of the cluster served. Services now ping their server
//! every second and leave a silent one within seconds for another.
use nix::sys::signal::Signal;
use std::time::Duration;
use ytsched_tests::*;

#[test]
fn an_agent_whose_nats_server_goes_silent_moves_to_another_and_its_node_stays_online() {
    let marks = job_writable_dir();
    let lab = Lab::start_cluster(
        &["--kv-replicas", "3", "--node-heartbeat-timeout", "12s"],
        vec![NodeOpts::args(&["--cpu", "2", "--user-slots", "4"])],
    )
    .unwrap();
    let node = lab.node_id(0);
    let server = wait_until(Duration::from_secs(20), || {
        (0..3).find(|&i| {
            lab.nats_server_clients(i)
                .iter()
                .any(|c| c == &format!("ytsched-node {node}"))
        })
    })
    .expect("the agent is connected to one of the three servers");
    let mark = marks.path().join("ran");
    let spec = format!(
        "tasks: {{t: {{command: 'umask 000; echo $YT_JOB_ID >> {}; sleep 25', cpu_limit: 1, memory_limit: 64M}}}}",
        mark.display()
    );
    let op = lab.submit_spec(&spec).unwrap();
    wait_until(Duration::from_secs(30), || {
        (lab.operation(&op).ok()?["jobs"]["running"] == 1).then_some(())
    })
    .unwrap();

    // The agent's server goes silent for longer than the node heartbeat timeout.
    lab.signal_nats_server(server, Signal::SIGSTOP);
    let moved = wait_until(Duration::from_secs(20), || {
        (0..3).filter(|&i| i != server).find(|&i| {
            lab.nats_server_clients(i)
                .iter()
                .any(|c| c == &format!("ytsched-node {node}"))
        })
    });
    std::thread::sleep(Duration::from_secs(14));
    // (The CLI, too, may first try the silent server: asked until it answers.)
    let info = wait_until(Duration::from_secs(20), || lab.node_info(0)).ok();
    lab.signal_nats_server(server, Signal::SIGCONT);
    assert!(
        moved.is_ok(),
        "the agent did not move off its silent server {server}:\n{}",
        lab.node_log(0)
    );
    let info = info.expect("the node is listed");
    assert_eq!(info["state"], "online", "{info}");

    // Its job was never taken from it: one attempt, completed.
    let done = lab.wait_finished(&op, Duration::from_secs(60)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    let jobs = lab.jobs(&op).unwrap();
    assert_eq!(
        jobs.len(),
        1,
        "the job ran again: {jobs:?}\nNODE LOG:\n{}",
        lab.node_log(0)
    );
    let ran = std::fs::read_to_string(&mark).unwrap();
    assert_eq!(ran.lines().count(), 1, "attempts: {ran}");
}
