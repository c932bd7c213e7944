//! Bounded lifetime (issue 16): finished operations leave the scheduler's memory by the
//! tree's retention settings and keep answering from the archive, across a restart.

use std::time::Duration;
use ytsched_tests::*;

fn node() -> NodeOpts {
    NodeOpts::args(&[
        "--cpu",
        "2",
        "--memory",
        "4G",
        "--user-slots",
        "4",
        "--nvidia-smi",
        "/nonexistent",
    ])
}

fn listed(lab: &Lab) -> Vec<String> {
    lab.json::<Vec<serde_json::Value>>(&["list-operations"])
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_retired_operation_answers_from_the_archive_and_is_not_revived() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("trees.yaml");
    // Nothing finished is retained past its clean delay of 0.
    std::fs::write(
        &config,
        "pool_trees:\n  default:\n    config: {soft_retained_operation_count: 0, hard_retained_operation_count: 0, clean_delay: 0}\n",
    )
    .unwrap();
    let mut lab = Lab::start_with(&["--config", config.to_str().unwrap()], vec![node()]).unwrap();
    let id = lab
        .submit_spec(
            "tasks:\n  t:\n    command: 'echo archived-$YT_JOB_INDEX; echo err >&2'\n    job_count: 2\n    cpu_limit: 0.1\n    memory_limit: 64M\n    environment: {SECRET: hunter2}\n",
        )
        .unwrap();
    let done = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    wait_until(Duration::from_secs(20), || {
        (!listed(&lab).contains(&id)).then_some(())
    })
    .expect("the finished operation leaves memory");

    let check = |lab: &Lab| {
        let op = lab.operation(&id).unwrap();
        assert_eq!(op["state"], "completed", "{op}");
        assert_eq!(op["jobs"]["completed"], 2, "{op}");
        assert_eq!(op["spec"]["tasks"]["t"]["environment"]["SECRET"], "hunter2");
        let jobs = lab.jobs(&id).unwrap();
        assert_eq!(jobs.len(), 2, "{jobs:?}");
        let mut outputs: Vec<String> = jobs
            .iter()
            .map(|j| {
                let out = lab.ok(&["get-job-stdout", &id, j["id"].as_str().unwrap()]);
                out.trim().to_string()
            })
            .collect();
        outputs.sort();
        assert_eq!(outputs, ["archived-0", "archived-1"]);
        // --limit cuts the list, as for a live operation.
        let one: Vec<serde_json::Value> = lab.json(&["list-jobs", &id, "--limit", "1"]).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0]["id"], jobs[0]["id"]);
        // Access rules hold for archived operations too.
        let job = jobs[0]["id"].as_str().unwrap().to_string();
        let out = lab.ytsched_as("mallory", &["get-job-stdout", &id, &job]);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("access denied"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: serde_json::Value = serde_json::from_slice(
            &lab.ytsched_as("mallory", &["--format", "json", "get-operation", &id])
                .stdout,
        )
        .unwrap();
        assert_eq!(
            seen["spec"]["tasks"]["t"]["environment"]["SECRET"],
            "<redacted>"
        );
    };
    lab.add_user("mallory", false).unwrap();
    check(&lab);
    // The state bucket no longer holds it (nor its jobs); the archive does.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let js = async_nats::jetstream::new(lab.client_as("scheduler").await.unwrap());
        let bucket = |what: &str| format!("{}_{what}", lab.prefix);
        let state = js.get_key_value(bucket("state")).await.unwrap();
        let archive = js.get_key_value(bucket("archive")).await.unwrap();
        assert!(state.get(format!("op.{id}")).await.unwrap().is_none());
        let job = lab.jobs(&id).unwrap()[0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(state.get(format!("job.{job}")).await.unwrap().is_none());
        assert!(archive.get(format!("op.{id}")).await.unwrap().is_some());
    });

    // Its state keys are gone: a restarted scheduler does not bring it back to memory,
    // and it still answers from the archive.
    lab.kill_scheduler(0, nix::sys::signal::Signal::SIGKILL);
    lab.restart_scheduler(0).unwrap();
    wait_until(Duration::from_secs(20), || {
        lab.operation(&id).ok().map(|_| ())
    })
    .unwrap();
    assert!(!listed(&lab).contains(&id));
    check(&lab);
    let missing = lab.ytsched(&["get-operation", "no-such-op"]);
    assert!(!missing.status.success());
}
