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
    lab_retaining_nothing_on(node())
}

/// The same lab on one node of the caller's making.
fn lab_retaining_nothing_on(node: NodeOpts) -> (tempfile::TempDir, Lab) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("trees.yaml");
    std::fs::write(
        &config,
        "pool_trees:\n  default:\n    config: {soft_retained_operation_count: 0, hard_retained_operation_count: 0, clean_delay: 0}\n",
    )
    .unwrap();
    let lab = Lab::start_with(&["--config", config.to_str().unwrap()], vec![node]).unwrap();
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

/// One API call as `user` (whom `lab.add_user` made).
fn call<M: ytsched_common::api::ApiMethod>(lab: &Lab, user: &str, req: M) -> M::Response {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = lab.client_as(user).await.unwrap();
        let subjects = ytsched_common::subjects::Subjects::new(&lab.prefix);
        ytsched_common::transport::call(&client, &subjects, &Caller::user(user), req)
            .await
            .unwrap()
    })
}

/// One `list_operations` page through the API, as `carol`.
fn page(lab: &Lab, req: ListOperations) -> OperationPage {
    call(lab, "carol", req)
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
            .find(|o| o.id == done[2])
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
    // Archived entries in a list are brief, as live ones are: no environment at all.
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
        assert!(o.spec.tasks.get("t").unwrap().environment.is_empty());
    }
}

#[test]
fn finished_attempts_of_a_live_operation_answer_from_the_store() {
    let lab = Lab::start(vec![node()]).unwrap();
    // Three quick jobs finish while a fourth keeps the operation running: the
    // scheduler lets go of the finished attempts, the store answers for them.
    let id = lab
        .submit_spec(
            "tasks:\n  quick:\n    command: 'echo out-$YT_JOB_INDEX; echo err-$YT_JOB_INDEX >&2'\n    job_count: 3\n    cpu_limit: 0.1\n    memory_limit: 64M\n  slow:\n    command: 'sleep 60'\n    job_count: 1\n    cpu_limit: 0.1\n    memory_limit: 64M\n",
        )
        .unwrap();
    let op = wait_until(Duration::from_secs(30), || {
        let op = lab.operation(&id).ok()?;
        (op["jobs"]["completed"] == 3 && op["jobs"]["running"] == 1).then_some(op)
    })
    .expect("three jobs complete while one runs");
    assert_eq!(op["state"], "running", "{op}");
    let jobs = lab.jobs(&id).unwrap();
    assert_eq!(jobs.len(), 4, "{jobs:?}");
    let completed: Vec<serde_json::Value> = lab
        .json(&["list-jobs", &id, "--state", "completed"])
        .unwrap();
    assert_eq!(completed.len(), 3, "{completed:?}");
    let mut outputs: Vec<(String, String)> = completed
        .iter()
        .map(|j| {
            assert_eq!(j["task_name"], "quick", "{j}");
            assert_eq!(j["statistics"]["exit_code"], 0, "{j}");
            let job = j["id"].as_str().unwrap();
            (
                lab.ok(&["get-job-stdout", &id, job]).trim().to_string(),
                lab.ok(&["get-job-stderr", &id, job]).trim().to_string(),
            )
        })
        .collect();
    outputs.sort();
    assert_eq!(
        outputs,
        (0..3)
            .map(|i| (format!("out-{i}"), format!("err-{i}")))
            .collect::<Vec<_>>()
    );
    let running: Vec<serde_json::Value> =
        lab.json(&["list-jobs", &id, "--state", "running"]).unwrap();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0]["task_name"], "slow");
    // Pages of one go through held and stored attempts alike, in start order.
    lab.add_user("carol", false).unwrap();
    let mut cursor = None;
    let mut paged = vec![];
    loop {
        let page = call(
            &lab,
            "carol",
            ytsched_common::api::ListJobs {
                operation_id: ytsched_common::OperationId(id.as_str().into()),
                limit: Some(1),
                cursor: cursor.clone(),
                state: None,
            },
        );
        assert!(page.jobs.len() <= 1);
        paged.extend(page.jobs.into_iter().map(|j| j.id.to_string()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let listed: Vec<String> = jobs
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paged, listed);
    lab.ok(&["abort-operation", &id]);
}

/// Issue 26 point 7: between leaving the core and its archive record being written (an
/// operation of many attempts takes a while to take over), an operation still answers
/// and is still listed.
#[test]
fn a_retired_operation_answers_at_every_moment_while_the_archive_takes_it_over() {
    let (_dir, lab) = lab_retaining_nothing_on(NodeOpts::args(&[
        "--cpu",
        "8",
        "--memory",
        "8G",
        "--user-slots",
        "100",
        "--nvidia-smi",
        "/nonexistent",
    ]));
    let id = lab
        .submit_spec("tasks:\n  t:\n    command: 'true'\n    job_count: 400\n    cpu_limit: 0.02\n    memory_limit: 16M\n")
        .unwrap();
    let operation_id = ytsched_common::OperationId(id.as_str().into());
    let (answers, finished_answers) = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let client = lab.client_as("admin").await.unwrap();
        let subjects = ytsched_common::subjects::Subjects::new(&lab.prefix);
        // The scheduler's identity may read its buckets; the admin's may not.
        let js = async_nats::jetstream::new(lab.client_as("scheduler").await.unwrap());
        let archive = js
            .get_key_value(format!("{}_archive", lab.prefix))
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let (mut answers, mut finished_answers) = (0, 0);
        loop {
            assert!(std::time::Instant::now() < deadline, "not archived in time");
            let archived = archive.get(format!("op.{id}")).await.unwrap().is_some();
            let got = ytsched_common::transport::call(
                &client,
                &subjects,
                &Caller::admin("admin"),
                ytsched_common::api::GetOperation {
                    operation_id: operation_id.clone(),
                },
            )
            .await;
            let info = got.unwrap_or_else(|e| {
                panic!(
                    "get-operation failed after {answers} answers: {e}\nscheduler log:\n{}",
                    lab.scheduler_log()
                )
            });
            answers += 1;
            if info.state.is_finished() {
                finished_answers += 1;
            }
            // And it is listed: from memory, the handover, or the archive's list.
            let page = ytsched_common::transport::call(
                &client,
                &subjects,
                &Caller::admin("admin"),
                ListOperations {
                    limit: Some(10),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
            assert!(
                page.operations.iter().any(|o| o.id == operation_id),
                "not listed after {answers} answers: {:?}",
                page.operations.iter().map(|o| &o.id).collect::<Vec<_>>()
            );
            if archived {
                break (answers, finished_answers);
            }
        }
    });
    assert!(
        answers > 1 && finished_answers >= 1,
        "{answers} {finished_answers}"
    );
    let op = lab.operation(&id).unwrap();
    assert_eq!(op["state"], "completed", "{op}");
    assert_eq!(op["jobs"]["completed"], 400, "{op}");
}

/// What the store's buckets hold of one operation once it is archived: the state
/// bucket's last entry of each of its keys (`None`: never written) and the archive's
/// `op.` entry, decoded.
struct Stored {
    state_op: Option<async_nats::jetstream::kv::Operation>,
    state_jobs: Vec<Option<async_nats::jetstream::kv::Operation>>,
    state_outputs: Vec<Option<async_nats::jetstream::kv::Operation>>,
    archived: serde_json::Value,
    archive_job_keys: usize,
}

fn stored(lab: &Lab, id: &str, attempts: u64) -> Stored {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let js = async_nats::jetstream::new(lab.client_as("scheduler").await.unwrap());
        let bucket = |what: &str| format!("{}_{what}", lab.prefix);
        let state = js.get_key_value(bucket("state")).await.unwrap();
        let archive = js.get_key_value(bucket("archive")).await.unwrap();
        let op_of = |e: Option<async_nats::jetstream::kv::Entry>| e.map(|e| e.operation);
        let mut state_jobs = vec![];
        let mut state_outputs = vec![];
        let mut archive_job_keys = 0;
        for seq in 0..attempts {
            state_jobs.push(op_of(state.entry(format!("job.{id}-{seq}")).await.unwrap()));
            state_outputs.push(op_of(state.entry(format!("out.{id}-{seq}")).await.unwrap()));
            if archive
                .get(format!("job.{id}.{seq}"))
                .await
                .unwrap()
                .is_some()
            {
                archive_job_keys += 1;
            }
        }
        let value = archive
            .get(format!("op.{id}"))
            .await
            .unwrap()
            .expect("archived");
        Stored {
            state_op: op_of(state.entry(format!("op.{id}")).await.unwrap()),
            state_jobs,
            state_outputs,
            archived: rmp_serde::from_slice(&value).unwrap(),
            archive_job_keys,
        }
    })
}

/// Issue 26, point 2: a small operation's attempts never get keys of their own. Its
/// final state record carries them, and the archive takes it over in one entry.
/// Output too large for that goes to keys of its own, and answers the same.
#[test]
fn a_small_operation_is_archived_as_one_entry_and_a_loud_one_spills_to_its_own_keys() {
    use async_nats::jetstream::kv::Operation::Purge;
    let (_dir, lab) = lab_retaining_nothing();
    let quiet = lab
        .submit_spec(
            "tasks:\n  t:\n    command: 'echo quiet-$YT_JOB_INDEX'\n    job_count: 2\n    cpu_limit: 0.1\n    memory_limit: 64M\n",
        )
        .unwrap();
    // 40 KB each on stdout: over what an operation's record keeps (1 KiB) and, for
    // both jobs, over what its archive entry keeps (64 KiB).
    let loud = lab
        .submit_spec(
            "tasks:\n  t:\n    command: 'head -c 40000 /dev/zero | tr \"\\\\0\" a'\n    job_count: 2\n    cpu_limit: 0.1\n    memory_limit: 64M\n",
        )
        .unwrap();
    for id in [&quiet, &loud] {
        let done = lab.wait_finished(id, Duration::from_secs(60)).unwrap();
        assert_eq!(done["state"], "completed", "{done}");
        wait_until(Duration::from_secs(20), || archived(&lab, id).then_some(())).expect("archived");
    }

    let q = stored(&lab, &quiet, 2);
    assert_eq!(q.state_op, Some(Purge));
    // Whether both jobs settled in the operation's last call decides whether the one
    // that finished first went to a key of its own; the last one rides in the record.
    assert!(
        q.state_jobs.contains(&None),
        "one never written: {:?}",
        q.state_jobs
    );
    assert!(q
        .state_outputs
        .iter()
        .zip(&q.state_jobs)
        .all(|(o, j)| o == j));
    assert_eq!(q.archived["jobs_inline"], true, "{}", q.archived);
    assert_eq!(q.archived["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(q.archive_job_keys, 0);

    let l = stored(&lab, &loud, 2);
    assert_eq!(
        l.state_outputs,
        [Some(Purge), Some(Purge)],
        "written, then taken over"
    );
    assert_eq!(l.archived["jobs_inline"], false, "{}", l.archived);
    assert_eq!(l.archive_job_keys, 2);

    for (id, want) in [(&quiet, "quiet-"), (&loud, "aaaa")] {
        let jobs = lab.jobs(id).unwrap();
        assert_eq!(jobs.len(), 2, "{jobs:?}");
        for j in &jobs {
            let out = lab.ok(&["get-job-stdout", id, j["id"].as_str().unwrap()]);
            assert!(out.starts_with(want), "{id}: {}", &out[..out.len().min(80)]);
        }
    }
    let ids = listed(&lab);
    assert!(ids.contains(&quiet) && ids.contains(&loud), "{ids:?}");
}
