//! SPEC 5.11/5.12 on a real authenticated lab: nats-server enforces each identity's
//! permissions, the scheduler takes the caller from the subject and applies pool ACLs and
//! operation ownership, revoked keys stop working at once, and hostile messages on every
//! subject an identity may publish on change nothing.

use std::time::Duration;
use ytsched_common::codec::encode;
use ytsched_common::protocol::{HeartbeatRequest, PROTOCOL_VERSION};
use ytsched_common::resources::ResourceVector;
use ytsched_common::{IncarnationId, NodeId};
use ytsched_tests::{wait_until, Lab, NodeOpts};

fn node() -> NodeOpts {
    NodeOpts::args(&["--cpu", "2", "--memory", "4G", "--user-slots", "4"])
}

/// A lab of `nodes` agents and the given (non-admin) users.
fn lab_with(nodes: usize, users: &[&str]) -> Lab {
    let lab = Lab::start((0..nodes).map(|_| node()).collect()).unwrap();
    for u in users {
        lab.add_user(u, false).unwrap();
    }
    lab
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs the CLI as `who`, expecting it to fail with a message containing `needle`.
fn refused(lab: &Lab, who: &str, args: &[&str], needle: &str) {
    let out = lab.ytsched_as(who, args);
    assert!(
        !out.status.success(),
        "{who} {args:?} should be refused, got {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr(&out).contains(needle),
        "{who} {args:?}: expected '{needle}' in: {}",
        stderr(&out)
    );
}

fn ok_as(lab: &Lab, who: &str, args: &[&str]) -> String {
    let out = lab.ytsched_as(who, args);
    assert!(out.status.success(), "{who} {args:?}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Submits a spec file's text as `who` and returns the operation id.
fn submit_as(lab: &Lab, who: &str, yaml: &str) -> String {
    let path = lab
        .dir
        .path()
        .join(format!("spec-{who}-{}.yaml", yaml.len()));
    std::fs::write(&path, yaml).unwrap();
    ok_as(
        lab,
        who,
        &["run-vanilla", "--async", "--spec", path.to_str().unwrap()],
    )
}

/// A request that nats-server must refuse: it gets no answer (an error or a timeout).
async fn no_answer(client: &async_nats::Client, subject: String, payload: Vec<u8>) -> bool {
    matches!(
        tokio::time::timeout(
            Duration::from_secs(2),
            client.request(subject, payload.into())
        )
        .await,
        Err(_) | Ok(Err(_))
    )
}

fn heartbeat(node: &str, seq: u64) -> HeartbeatRequest {
    HeartbeatRequest {
        protocol_version: PROTOCOL_VERSION,
        node_id: NodeId::parse(node).unwrap(),
        incarnation_id: IncarnationId::random(),
        seq,
        hostname: "forger".into(),
        system_tags: vec![],
        tags: vec![],
        resource_limits: ResourceVector {
            cpu: 64.0,
            memory: 1e12,
            gpu: 0.0,
            user_slots: 64.0,
        },
        resource_usage: ResourceVector::ZERO,
        running_jobs: vec![],
        finished_jobs: vec![],
        timeout_ms: 0,
        last_reply_seq: None,
        file_cache: None,
    }
}

#[test]
fn users_are_who_their_keys_say_and_pool_acls_and_ownership_decide() {
    let lab = lab_with(1, &["alice", "bob"]);

    // The user is the identity's name, whatever --user claims.
    let op = ok_as(
        &lab,
        "alice",
        &[
            "--user",
            "root",
            "run-vanilla",
            "--async",
            "--command",
            "echo secret-of-alice; sleep 30",
        ],
    );
    let info: serde_json::Value = lab.operation(&op).unwrap();
    assert_eq!(info["user"], "alice", "{info}");

    // Everyone sees metadata; only the owner, owners and admins abort or read output.
    ok_as(&lab, "bob", &["get-operation", &op]);
    refused(
        &lab,
        "bob",
        &["abort-operation", &op],
        &format!("access denied: user 'bob' may not abort operation {op}"),
    );
    let job = wait_until(Duration::from_secs(20), || {
        let jobs = lab.jobs(&op).ok()?;
        jobs.first()?["id"].as_str().map(str::to_string)
    })
    .unwrap();
    refused(
        &lab,
        "bob",
        &["get-job-stdout", &op, &job],
        "may not read the job output of",
    );
    ok_as(&lab, "alice", &["abort-operation", &op]);

    // A spec's owners share those rights.
    let op2 = submit_as(
        &lab,
        "alice",
        "owners: [bob]\ntasks: {t: {command: 'sleep 30', cpu_limit: 0.5}}\n",
    );
    ok_as(&lab, "bob", &["abort-operation", &op2]);

    // Pool ACLs: deny beats allow, inherited by children.
    lab.ok(&[
        "create",
        "scheduler_pool",
        "--name",
        "research",
        "--pool-tree",
        "default",
        "--attributes",
        r#"{"acl": [{"action": "allow", "subjects": ["everyone"], "permissions": ["use"]},
                    {"action": "deny", "subjects": ["bob"], "permissions": ["use"]},
                    {"action": "allow", "subjects": ["alice"], "permissions": ["administer"]}]}"#,
    ]);
    lab.ok(&[
        "create",
        "scheduler_pool",
        "--name",
        "ml",
        "--parent-name",
        "research",
        "--pool-tree",
        "default",
    ]);
    refused(
        &lab,
        "bob",
        &[
            "run-vanilla",
            "--async",
            "--pool",
            "ml",
            "--command",
            "true",
        ],
        "access denied: user 'bob' has no 'use' permission on pool 'ml' of pool tree 'default'",
    );
    let op3 = ok_as(
        &lab,
        "alice",
        &[
            "run-vanilla",
            "--async",
            "--pool",
            "ml",
            "--command",
            "true",
        ],
    );
    lab.wait_finished(&op3, Duration::from_secs(30)).unwrap();

    // administer: alice may shape what is below research and create under it, bob may
    // not; research's own attributes are its parent's (the root's) administrator's;
    // neither may touch the root, trees or nodes.
    refused(
        &lab,
        "alice",
        &["set", "//sys/pool_trees/default/research/@weight", "3"],
        "parent of pool 'research'",
    );
    ok_as(
        &lab,
        "alice",
        &[
            "create",
            "scheduler_pool",
            "--name",
            "nlp",
            "--parent-name",
            "research",
            "--pool-tree",
            "default",
        ],
    );
    ok_as(
        &lab,
        "alice",
        &["set", "//sys/pool_trees/default/research/nlp/@weight", "3"],
    );
    refused(
        &lab,
        "bob",
        &["set", "//sys/pool_trees/default/research/ml/@weight", "5"],
        "access denied: user 'bob' has no 'administer' permission on pool 'research' of pool tree 'default', the parent of pool 'ml'",
    );
    refused(
        &lab,
        "alice",
        &[
            "create",
            "scheduler_pool",
            "--name",
            "mine",
            "--pool-tree",
            "default",
        ],
        "no 'administer' permission on pool '<Root>'",
    );
    refused(
        &lab,
        "alice",
        &["create", "scheduler_pool_tree", "--name", "evil"],
        "only admins may",
    );
    refused(
        &lab,
        "alice",
        &[
            "set",
            "//sys/pool_trees/default/@config/nodes_filter",
            "\"x\"",
        ],
        "only admins may change",
    );
    refused(
        &lab,
        "bob",
        &["set", "//sys/cluster_nodes/node0/@user_tags", "[\"x\"]"],
        "only admins may change",
    );
    assert_eq!(
        lab.ok(&["get", "//sys/pool_trees/default/research/ml/@weight"])
            .trim(),
        "1.0",
        "a refused change changes nothing (the default weight stands)"
    );
}

#[test]
fn nats_server_refuses_forgeries_and_hostile_messages_change_nothing() {
    let lab = lab_with(2, &["mallory"]);
    let before = lab.ok(&["list-operations", "--format", "json"]);
    let trees_before = lab.ok(&["get", "//sys/pool_trees", "--format", "json"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let p = &lab.prefix;
        let node1 = lab.client_as("node1").await.unwrap();
        let mallory = lab.client_as("mallory").await.unwrap();

        // The control: on her own subject mallory is answered (so silence below is refusal).
        let own = ytsched_common::api::ApiRequest {
            protocol_version: PROTOCOL_VERSION,
            body: ytsched_common::api::ListNodes {},
        };
        assert!(
            !no_answer(
                &mallory,
                format!("{p}.api.mallory.list_nodes"),
                encode(&own).unwrap()
            )
            .await
        );
        // Node 1 heartbeating as node 0 (a new incarnation would take node 0 over).
        let forged = encode(&heartbeat("node0", 1)).unwrap();
        assert!(no_answer(&node1, format!("{p}.heartbeat.node0"), forged.clone()).await);
        // A user heartbeating as a node, calling as another user, or as an admin.
        assert!(no_answer(&mallory, format!("{p}.heartbeat.node0"), forged).await);
        for subject in [
            format!("{p}.api.alice.list_operations"),
            format!("{p}.admin.mallory.set"),
            format!("{p}.admin.admin.create"),
            // JetStream and KV are the scheduler's alone.
            "$JS.API.STREAM.LIST".to_string(),
            format!("$KV.{p}_state.config"),
            format!("$JS.API.STREAM.PURGE.KV_{p}_state"),
        ] {
            assert!(
                no_answer(&mallory, subject.clone(), b"{}".to_vec()).await,
                "mallory got an answer on {subject}"
            );
        }
        // Subscribing to others' traffic is refused too: nothing arrives.
        let mut spy = mallory.subscribe(format!("{p}.heartbeat.>")).await.unwrap();
        let mut inbox_spy = mallory.subscribe("_INBOX.>".to_string()).await.unwrap();
        let heard = tokio::time::timeout(Duration::from_secs(3), async {
            use futures::StreamExt;
            tokio::select! {
                m = spy.next() => m.is_some(),
                m = inbox_spy.next() => m.is_some(),
            }
        })
        .await;
        assert!(
            !matches!(heard, Ok(true)),
            "mallory overheard another identity's traffic"
        );

        // Hostile payloads on the subjects each identity may use: random, truncated,
        // wrong-shaped, oversized. Each gets an error reply or is dropped, never a crash.
        let node0 = lab.client_as("node0").await.unwrap();
        let good = encode(&heartbeat("node0", 1)).unwrap();
        let mut payloads: Vec<Vec<u8>> = vec![
            vec![],
            vec![0xc1],
            good[..good.len() / 2].to_vec(),
            encode(&vec![1u8, 2, 3]).unwrap(),
            vec![0x91; 100_000], // deep nesting of one-element arrays
        ];
        let mut x: u32 = 0x9e3779b9;
        for len in [1usize, 7, 64, 4096, 200_000] {
            payloads.push(
                (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        x as u8
                    })
                    .collect(),
            );
        }
        for payload in &payloads {
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                node0.request(format!("{p}.heartbeat.node0"), payload.clone().into()),
            )
            .await;
            for method in [
                "start_operation",
                "abort_operation",
                "set",
                "create",
                "get_job_output",
            ] {
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    mallory.request(format!("{p}.api.mallory.{method}"), payload.clone().into()),
                )
                .await;
            }
        }
        // Far more than the bus's payload limit is refused by the client or the server.
        let huge = vec![0u8; 2 << 20];
        assert!(no_answer(&mallory, format!("{p}.api.mallory.set"), huge).await);
    });
    // The lab still runs operations, and nothing stored changed.
    assert_eq!(lab.ok(&["list-operations", "--format", "json"]), before);
    assert_eq!(
        lab.ok(&["get", "//sys/pool_trees", "--format", "json"]),
        trees_before
    );
    let out = lab.ytsched(&[
        "run-vanilla",
        "--command",
        "echo still-here",
        "--job-count",
        "2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    for i in 0..2 {
        assert_eq!(lab.node_info(i).unwrap()["state"], "online");
    }
}

#[test]
fn a_revoked_identity_is_cut_off_at_once_without_restarts() {
    let lab = lab_with(2, &["dave"]);
    // Keep a copy of the key: revoking deletes the file, but the server must refuse it.
    let kept = lab.dir.path().join("dave-kept.creds");
    std::fs::copy(lab.creds("dave"), &kept).unwrap();
    ok_as(&lab, "dave", &["list-nodes"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(lab.client_as("dave")).unwrap();

    lab.auth(&["revoke", "dave"]).unwrap();
    wait_until(Duration::from_secs(10), || {
        (client.connection_state() != async_nats::connection::State::Connected).then_some(())
    })
    .expect("nats-server closes the revoked identity's connection");
    std::fs::copy(&kept, lab.creds("dave")).unwrap();
    refused(&lab, "dave", &["list-nodes"], "cannot connect");

    // A revoked node is cut off too: it goes offline, and its jobs run elsewhere.
    lab.auth(&["revoke", "node1"]).unwrap();
    wait_until(Duration::from_secs(20), || {
        (lab.node_info(1)?["state"] == "offline").then_some(())
    })
    .expect("the revoked node goes offline");
    assert_eq!(lab.node_info(0).unwrap()["state"], "online");
    let out = lab.ytsched(&["run-vanilla", "--command", "true", "--job-count", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn daemons_refuse_to_run_unauthenticated_unless_told_and_never_off_loopback() {
    let run = |bin: &str, args: &[&str]| {
        std::process::Command::new("timeout")
            .arg("20")
            .arg(ytsched_tests::binary(bin))
            .args(args)
            .env_remove("YTSCHED_CREDS")
            .output()
            .unwrap()
    };
    for bin in ["ytsched-scheduler", "ytsched-node"] {
        let out = run(bin, &["--nats", "nats://127.0.0.1:1"]);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("needs credentials"),
            "{bin}: {}",
            stderr(&out)
        );
        let out = run(bin, &["--nats", "nats://10.1.2.3:4222", "--insecure"]);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("--insecure is refused"),
            "{bin}: {}",
            stderr(&out)
        );
    }
    // As root, an agent whose sandboxes its slot users could not reach says so at start.
    if ytsched_tests::is_root() {
        let closed = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            closed.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let work = closed.path().join("w");
        // Bounded: should the check not fire, the agent would wait for NATS forever.
        let out = run(
            "ytsched-node",
            &[
                "--nats",
                "nats://127.0.0.1:1",
                "--insecure",
                "--sandbox",
                "process",
                "--node-id",
                "x",
                "--work-dir",
                work.to_str().unwrap(),
            ],
        );
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains("does not let other users pass"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn jobs_run_as_slot_users_confined_to_their_own_sandbox_and_cgroup() {
    if !ytsched_tests::is_root() {
        eprintln!("skipped: slot users need the agent to run as root (this test is not root)");
        return;
    }
    let lab = Lab::start(vec![node()]).unwrap();
    let shared = ytsched_tests::job_writable_dir();
    let m = shared.path().display();
    let creds = lab.creds("node0");
    let creds = creds.display();
    let script = format!(
        r#"echo uid=$(id -u)
grep NoNewPrivs /proc/self/status
echo $$ > {m}/pid-$YT_JOB_INDEX
cat /etc/shadow >/dev/null 2>&1 && echo shadow=read || echo shadow=denied
cat {creds} >/dev/null 2>&1 && echo creds=read || echo creds=denied
ls ../.. 2>&1 | grep -q 'Permission denied' && echo sandboxes=denied || echo sandboxes=listed
p=$(grep -E ':memory:' /proc/self/cgroup | head -1 | cut -d: -f3)
if [ -n "$p" ]; then f=/sys/fs/cgroup/memory$p/memory.limit_in_bytes; r=/sys/fs/cgroup/memory/cgroup.procs
else p=$(grep '^0::' /proc/self/cgroup | cut -d: -f3); f=/sys/fs/cgroup$p/memory.max; r=/sys/fs/cgroup/cgroup.procs; fi
(echo 999999999 > $f) 2>/dev/null && echo cgroup=written || echo cgroup=denied
(echo $$ > $r) 2>/dev/null && echo escape=moved || echo escape=denied
sleep 2
for j in 0 1; do
  [ "$j" = "$YT_JOB_INDEX" ] && continue
  ls ../../$YT_OPERATION_ID-$j 2>&1 | grep -qE 'Permission denied|No such file' && echo other=denied || echo other=seen
  for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ 2>/dev/null | grep -qx "YT_JOB_INDEX=$j" && kill -0 ${{p#/proc/}} 2>/dev/null && echo signal=sent; done
  echo signal=denied
done
sleep 1
"#
    );
    let spec =
        serde_json::json!({"tasks": {"t": {"command": script, "job_count": 2, "cpu_limit": 0.5}}});
    let op = lab.submit_spec(&spec.to_string()).unwrap();
    let done = lab.wait_finished(&op, Duration::from_secs(60)).unwrap();
    assert_eq!(done["state"], "completed", "{done}");
    let mut uids = vec![];
    for job in lab.jobs(&op).unwrap() {
        let out = lab.ok(&["get-job-stdout", &op, job["id"].as_str().unwrap()]);
        let uid: u32 = out
            .lines()
            .find_map(|l| l.strip_prefix("uid="))
            .and_then(|u| u.parse().ok())
            .unwrap_or_else(|| panic!("no uid in {out}"));
        assert!(uid >= 20_000, "a job runs as a slot user, not {uid}: {out}");
        uids.push(uid);
        for expected in [
            "NoNewPrivs:\t1",
            "shadow=denied",
            "creds=denied",
            "sandboxes=denied",
            "cgroup=denied",
            "escape=denied",
            "other=denied",
            "signal=denied",
        ] {
            assert!(out.contains(expected), "expected {expected} in:\n{out}");
        }
        assert!(
            !out.contains("signal=sent"),
            "a job signalled another: {out}"
        );
    }
    uids.sort();
    uids.dedup();
    assert_eq!(uids.len(), 2, "two concurrent jobs, two slot users");
}

#[test]
fn oversized_input_and_damaged_records_never_wedge_the_scheduler() {
    let mut lab = Lab::start(vec![node()]).unwrap();
    // Ids are checked where they are typed: one that could name a path never leaves.
    let out = lab.ytsched(&["get-job-stdout", "../../etc", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("operation id '../../etc' is invalid"),
        "{}",
        stderr(&out)
    );
    // Requests whose records could not be stored are refused, naming the limit.
    let big_command = "x".repeat(900_000);
    let spec = serde_json::json!({"tasks": {"t": {"command": big_command}}});
    let err = lab.submit_spec(&spec.to_string()).unwrap_err().to_string();
    assert!(
        err.contains("tasks.t.command") && err.contains("65536"),
        "{err}"
    );
    let huge_count = lab
        .submit_spec("tasks: {t: {command: 'true', job_count: 4000000000}}")
        .unwrap_err()
        .to_string();
    assert!(
        huge_count.contains("1000000 jobs per operation"),
        "{huge_count}"
    );
    let long_name = "p".repeat(120_000);
    let out = lab.ytsched(&[
        "create",
        "scheduler_pool",
        "--name",
        &long_name,
        "--pool-tree",
        "default",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("longer than the limit of 100"),
        "{}",
        stderr(&out)
    );
    let filter = format!("\"{}\"", "a|".repeat(60_000) + "a");
    let out = lab.ytsched(&[
        "set",
        "//sys/pool_trees/default/@config/nodes_filter",
        &filter,
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("limit of 4096"), "{}", stderr(&out));

    // A record nobody can decode, written behind the scheduler's back, and a scheduler
    // crash: it starts anyway, sets the record aside and answers for the operation.
    let victim = "0b4d0000-0000-4000-8000-000000000001";
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = lab.client_as("scheduler").await.unwrap();
        let js = async_nats::jetstream::new(client);
        let kv = js
            .get_key_value(format!("{}_state", lab.prefix))
            .await
            .unwrap();
        kv.put(format!("op.{victim}"), b"\xc1 not msgpack".to_vec().into())
            .await
            .unwrap();
        kv.put("job.x-1", vec![0x91; 3].into()).await.unwrap();
        // A configuration that decodes but no longer validates (a timeout below today's
        // minimum), as an older version could have stored it.
        let raw = kv.get("config").await.unwrap().expect("stored config");
        let mut config: serde_json::Value = rmp_serde::from_slice(&raw).unwrap();
        config["trees"]["default"]["config"]["node_heartbeat_timeout"] = 10.into();
        kv.put("config", rmp_serde::to_vec_named(&config).unwrap().into())
            .await
            .unwrap();
    });
    lab.kill_scheduler(0, nix::sys::signal::Signal::SIGKILL);
    lab.restart_scheduler(0).unwrap();
    let answer = wait_until(Duration::from_secs(20), || {
        let out = lab.ytsched(&["get-operation", victim]);
        let e = stderr(&out);
        e.contains("failed at revival").then_some(e)
    })
    .expect("the revived scheduler answers for the damaged operation");
    assert!(answer.contains("could not be read"), "{answer}");
    assert!(lab
        .scheduler_log()
        .contains("ALERT: a stored record cannot be read"));
    let out = lab.ytsched(&["run-vanilla", "--command", "echo alive"]);
    assert!(out.status.success(), "{}", stderr(&out));
    rt.block_on(async {
        let client = lab.client_as("scheduler").await.unwrap();
        let js = async_nats::jetstream::new(client);
        let kv = js
            .get_key_value(format!("{}_state", lab.prefix))
            .await
            .unwrap();
        assert!(kv
            .get(format!("damaged.op.{victim}"))
            .await
            .unwrap()
            .is_some());
        assert!(kv.get(format!("op.{victim}")).await.unwrap().is_none());
        assert!(kv.get("damaged.config").await.unwrap().is_some());
    });
    let log = lab.scheduler_log();
    assert!(
        log.contains("ALERT") && log.contains("key=config"),
        "the invalid configuration is set aside with an alert:\n{log}"
    );
}

#[test]
fn a_job_opens_only_the_gpu_device_nodes_it_was_given() {
    if !ytsched_tests::is_root() {
        eprintln!("skipped: hiding GPU device nodes needs a root agent (mount namespaces)");
        return;
    }
    let tools = tempfile::tempdir().unwrap();
    let smi = ytsched_tests::fake_nvidia_smi(
        tools.path(),
        &[
            "0, GPU-11111111, NVIDIA H100 80GB HBM3, 81559",
            "1, GPU-22222222, NVIDIA H100 80GB HBM3, 81559",
        ],
    );
    // Stand-ins for /dev/nvidia0 and /dev/nvidia1, readable by everyone as real ones are.
    let dev = ytsched_tests::job_writable_dir();
    for i in 0..2 {
        let p = dev.path().join(format!("nvidia{i}"));
        std::fs::write(&p, format!("device-{i}\n")).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    }
    let d = dev.path().display().to_string();
    let lab = Lab::start(vec![NodeOpts::args(&[
        "--cpu",
        "2",
        "--memory",
        "4G",
        "--nvidia-smi",
        smi.to_str().unwrap(),
        "--gpu-device-dir",
        &d,
    ])])
    .unwrap();
    let script = format!(
        "for i in 0 1; do cat {d}/nvidia$i 2>&1 | grep -q 'Permission denied' && echo gpu$i=denied || echo gpu$i=$(cat {d}/nvidia$i); done"
    );
    let run = |gpus: u32| {
        let spec = serde_json::json!({"tasks": {"t": {"command": script, "gpu_limit": gpus, "cpu_limit": 0.5}}});
        let op = lab.submit_spec(&spec.to_string()).unwrap();
        let done = lab.wait_finished(&op, Duration::from_secs(30)).unwrap();
        assert_eq!(done["state"], "completed", "{done}");
        let job = lab.jobs(&op).unwrap()[0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        lab.ok(&["get-job-stdout", &op, &job])
    };
    let none = run(0);
    assert!(
        none.contains("gpu0=denied") && none.contains("gpu1=denied"),
        "{none}"
    );
    let one = run(1);
    let opened: Vec<&str> = one.lines().filter(|l| l.contains("=device-")).collect();
    let denied: Vec<&str> = one.lines().filter(|l| l.ends_with("=denied")).collect();
    assert_eq!(
        (opened.len(), denied.len()),
        (1, 1),
        "one GPU given, one hidden:\n{one}"
    );
    // The host's files are untouched by the jobs' private mounts.
    assert_eq!(
        std::fs::read_to_string(dev.path().join("nvidia1")).unwrap(),
        "device-1\n"
    );
}

#[test]
fn others_see_an_operations_metadata_but_not_its_secrets() {
    let lab = lab_with(1, &["alice", "bob"]);
    let op = submit_as(
        &lab,
        "alice",
        "tasks: {t: {command: 'true', environment: {TOKEN: hunter2}, stdin: 'password'}}\n",
    );
    let mine = ok_as(&lab, "alice", &["--format", "json", "get-operation", &op]);
    assert!(
        mine.contains("hunter2") && mine.contains("password"),
        "{mine}"
    );
    for (who, args) in [
        (
            "bob",
            vec!["--format", "json", "get-operation", op.as_str()],
        ),
        ("bob", vec!["--format", "json", "list-operations"]),
    ] {
        let seen = ok_as(&lab, who, &args);
        // A whole operation shows what it hides; a list's brief entries carry neither
        // environment nor stdin at all.
        let marked = args.contains(&"list-operations") || seen.contains("<redacted>");
        assert!(seen.contains(&op) && marked, "{seen}");
        assert!(
            !seen.contains("hunter2") && !seen.contains("password"),
            "{seen}"
        );
    }
}

#[test]
fn ytsched_up_runs_an_authenticated_lab_over_mutual_tls() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut up = std::process::Command::new(ytsched_tests::binary("ytsched"))
        .args([
            "up",
            "--nodes",
            "1",
            "--tls",
            "--kill-grace",
            "1s",
            "--work-dir",
        ])
        .arg(dir.path().join("lab"))
        .env_remove("YTSCHED_CREDS")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut env = std::collections::BTreeMap::new();
    for line in std::io::BufReader::new(up.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some((k, v)) = line.split_once('=') {
            env.insert(k.to_string(), v.to_string());
        }
        if env.len() == 6 {
            break;
        }
    }
    // `up` starts the web UI by default and prints its URL.
    let web = env["YTSCHED_WEB_UI"].clone();
    let (web, token) = web
        .split_once("/#token=")
        .expect("the URL signs the admin in");
    let port: u16 = web.rsplit(':').next().unwrap().parse().unwrap();
    let page = ytsched_tests::wait_until(std::time::Duration::from_secs(10), || {
        ytsched_tests::http_get(port, "/pools").ok()
    })
    .unwrap();
    assert!(page.contains("/assets/app.js"), "{page}");
    let addr = format!("127.0.0.1:{port}");
    let (status, _) = ytsched_tests::http_request(&addr, "/api/orchid", None).unwrap();
    assert_eq!(status, 401, "no token, no data");
    let (status, orchid) = ytsched_tests::http_request(&addr, "/api/orchid", Some(token)).unwrap();
    assert_eq!(status, 200, "the printed URL's token reads: {orchid}");
    let cli = |with_tls: bool, args: &[&str]| {
        let mut c = std::process::Command::new(ytsched_tests::binary("ytsched"));
        c.args([
            "--nats",
            &env["YTSCHED_NATS"],
            "--creds",
            &env["YTSCHED_CREDS"],
        ]);
        if with_tls {
            c.args(["--tls-ca", &env["YTSCHED_TLS_CA"]])
                .args(["--tls-cert", &env["YTSCHED_TLS_CERT"]])
                .args(["--tls-key", &env["YTSCHED_TLS_KEY"]]);
        }
        c.args(args).output().unwrap()
    };
    let out = cli(true, &["run-vanilla", "--command", "echo over-tls"]);
    let plain = cli(false, &["list-nodes"]);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(up.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = up.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!plain.status.success(), "a client without TLS was served");
    let conf = std::fs::read_to_string(dir.path().join("lab/nats.conf")).unwrap();
    assert!(
        conf.contains("verify: true") && conf.contains("auth.conf"),
        "{conf}"
    );
}
