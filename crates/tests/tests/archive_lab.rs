//! Bounded lifetime (issue 16): finished operations leave the scheduler's memory by the
//! tree's retention settings and keep answering from the archive, across a restart.

use std::time::Duration;
use ytsched_common::api::{ListOperations, OperationFilter, OperationPage};
use ytsched_common::identity::Caller;
use ytsched_common::states::OperationState;
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

/// Whether the state bucket no longer holds the operation and the archive does.
fn archived(lab: &Lab, id: &str) -> bool {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let js = async_nats::jetstream::new(lab.client_as("scheduler").await.unwrap());
        let bucket = |what: &str| format!("{}_{what}", lab.prefix);
        let state = js.get_key_value(bucket("state")).await.unwrap();
        let archive = js.get_key_value(bucket("archive")).await.unwrap();
        state.get(format!("op.{id}")).await.unwrap().is_none()
            && archive.get(format!("op.{id}")).await.unwrap().is_some()
    })
}

/// A one-node lab whose finished operations leave memory at once (clean delay 0, no
/// operation retained); the directory holds its configuration.
fn lab_retaining_nothing() -> (tempfile::TempDir, Lab) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("trees.yaml");
    std::fs::write(
        &config,
        "pool_trees:\n  default:\n    config: {soft_retained_operation_count: 0, hard_retained_operation_count: 0, clean_delay: 0}\n",
    )
    .unwrap();
    let lab = Lab::start_with(&["--config", config.to_str().unwrap()], vec![node()]).unwrap();
    (dir, lab)
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
    let (_dir, mut lab) = lab_retaining_nothing();
    let id = lab
        .submit_spec(
            "tasks:\n  t:\n    command: 'echo archived-$YT_JOB_INDEX; echo err >&2'\n    job_count: 2\n    cpu_limit: 0.1\n    memory_limit: 64M\n    environment: {SECRET: hunter2}\n",
        )
        .unwrap();
    let done = lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    wait_until(Duration::from_secs(20), || {
        archived(&lab, &id).then_some(())
    })
    .expect("the finished operation leaves memory for the archive");

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
        assert_eq!(
            outputs,
            ["archived-0", "archived-1"],
            "jobs {jobs:?}\nscheduler log:\n{}\nnode log:\n{}",
            lab.scheduler_log(),
            lab.node_log(0)
        );
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
    assert!(listed(&lab).contains(&id), "listed from the archive");
    check(&lab);
    let missing = lab.ytsched(&["get-operation", "no-such-op"]);
    assert!(!missing.status.success());
}

/// One `list_operations` page through the API, as `carol`.
fn page(lab: &Lab, req: ListOperations) -> OperationPage {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = lab.client_as("carol").await.unwrap();
        let subjects = ytsched_common::subjects::Subjects::new(&lab.prefix);
        ytsched_common::transport::call(&client, &subjects, &Caller::user("carol"), req)
            .await
            .unwrap()
    })
}

#[test]
fn list_operations_goes_on_from_memory_into_the_archive() {
    let (_dir, lab) = lab_retaining_nothing();
    lab.add_user("carol", false).unwrap();
    let quick = "tasks:\n  t:\n    command: 'true'\n    job_count: 1\n    cpu_limit: 0.1\n    memory_limit: 64M\n    environment: {SECRET: s3cret}\n";
    let mut done = vec![];
    for _ in 0..3 {
        let id = lab.submit_spec(quick).unwrap();
        lab.wait_finished(&id, Duration::from_secs(60)).unwrap();
        wait_until(Duration::from_secs(20), || {
            archived(&lab, &id).then_some(())
        })
        .unwrap();
        done.push(id);
    }
    let running = lab
        .submit_spec("tasks:\n  t:\n    command: 'sleep 60'\n    job_count: 1\n    cpu_limit: 0.1\n    memory_limit: 64M\n")
        .unwrap();
    // In memory first, then the archive, most recently archived first.
    let expected: Vec<String> = std::iter::once(running.clone())
        .chain(done.iter().rev().cloned())
        .collect();
    assert_eq!(listed(&lab), expected);
    // One at a time, each cursor goes on where the last page stopped, across the
    // boundary between memory and archive, and the last page says it is the last.
    let mut walked = vec![];
    let mut cursor = None;
    loop {
        let p = page(
            &lab,
            ListOperations {
                limit: Some(1),
                cursor: cursor.clone(),
                filter: Default::default(),
            },
        );
        walked.extend(p.operations.iter().map(|o| o.id.to_string()));
        match p.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(walked.len() <= expected.len(), "{walked:?}");
    }
    assert_eq!(walked, expected);
    // Filters hold in the archive as in memory.
    let only = |filter: OperationFilter| -> Vec<String> {
        page(
            &lab,
            ListOperations {
                limit: None,
                cursor: None,
                filter,
            },
        )
        .operations
        .into_iter()
        .map(|o| o.id.to_string())
        .collect()
    };
    let completed = only(OperationFilter {
        state: Some(OperationState::Completed),
        ..Default::default()
    });
    assert_eq!(completed, expected[1..]);
    let nobody = only(OperationFilter {
        user: Some("nobody".into()),
        ..Default::default()
    });
    assert!(nobody.is_empty());
    let first_two = only(OperationFilter {
        to_time: Some(
            page(
                &lab,
                ListOperations {
                    limit: None,
                    cursor: None,
                    filter: Default::default(),
                },
            )
            .operations
            .iter()
            .find(|o| o.id.to_string() == done[2])
            .unwrap()
            .start_time,
        ),
        state: Some(OperationState::Completed),
        ..Default::default()
    });
    assert_eq!(first_two, [done[1].clone(), done[0].clone()]);
    // A cursor the scheduler never gave is refused, naming it.
    let bad = lab.ytsched(&["list-operations", "--cursor", "azz"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("cursor 'azz'"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    // The archived views are redacted for those who do not own them.
    let p = page(
        &lab,
        ListOperations {
            limit: None,
            cursor: None,
            filter: Default::default(),
        },
    );
    for o in p
        .operations
        .iter()
        .filter(|o| done.contains(&o.id.to_string()))
    {
        assert_eq!(
            o.spec.tasks.get("t").unwrap().environment["SECRET"],
            "<redacted>"
        );
    }
}
