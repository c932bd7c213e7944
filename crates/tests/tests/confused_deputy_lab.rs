//! The scheduler is never a confused deputy (SPEC 5.11, issue 24 point 1): a request
//! whose reply subject is not its requester's own inbox gets no answer anywhere, and the
//! connection that answers callers cannot publish into JetStream, KV or the lease at
//! all. Shown on a real authenticated lab with a user and a node trying to make the
//! scheduler write its own state, its lease, the JetStream API and other inboxes.

use async_nats::jetstream;
use futures::StreamExt;
use std::time::Duration;
use ytsched_common::api::{ApiRequest, ListNodes};
use ytsched_common::codec::encode;
use ytsched_common::protocol::PROTOCOL_VERSION;
use ytsched_common::subjects::Subjects;
use ytsched_tests::{wait_until, Lab, NodeOpts};

/// One KV entry's value, or None when the key is absent.
async fn value_of(kv: &jetstream::kv::Store, key: &str) -> Option<Vec<u8>> {
    kv.get(key).await.unwrap().map(|b| b.to_vec())
}

fn refused_count(metrics: &str, reason: &str) -> u64 {
    let needle = format!("ytsched_refused_requests_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&needle))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {needle} in /metrics:\n{metrics}"))
}

#[test]
fn reply_subjects_outside_the_requesters_inbox_get_no_answer_and_change_nothing() {
    let mut lab = Lab::start_with(
        &["--http", "127.0.0.1:0", "--lease-ttl", "2s"],
        vec![NodeOpts::args(&["--cpu", "2", "--memory", "2G"])],
    )
    .unwrap();
    lab.add_user("alice", false).unwrap();
    lab.add_user("mallory", false).unwrap();
    // Another user's operation, whose record mallory would like to overwrite.
    let victim = lab
        .submit_spec("tasks:\n  t:\n    command: 'sleep 300'\n    job_count: 1\n    cpu_limit: 0.1\n    memory_limit: 64M\n")
        .unwrap();
    let subjects = Subjects::new(&lab.prefix);
    let (state_bucket, lease_bucket) = (subjects.bucket("state"), subjects.bucket("leader"));
    let op_key = format!("op.{victim}");
    let p = lab.prefix.clone();
    lab.http_addr().unwrap();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let sent = rt.block_on(async {
        let store = jetstream::new(lab.client_as("scheduler").await.unwrap());
        let state = store.get_key_value(&state_bucket).await.unwrap();
        let leases = store.get_key_value(&lease_bucket).await.unwrap();
        let epoch = value_of(&state, "epoch").await.expect("an epoch");
        let config = value_of(&state, "config").await.expect("a config");
        let op = value_of(&state, &op_key).await.expect("alice's operation");
        let leader = value_of(&leases, "leader").await.expect("a leader");

        let mallory = lab.client_as("mallory").await.unwrap();
        let alice = lab.client_as("alice").await.unwrap();
        let node0 = lab.client_as("node0").await.unwrap();
        let mut alice_hears = alice.subscribe("_INBOX.u.alice.>").await.unwrap();
        let mut node_hears = node0
            .subscribe("_INBOX.n.node0.stolen".to_string())
            .await
            .unwrap();
        let mut mallory_hears = mallory.subscribe("_INBOX.u.mallory.>").await.unwrap();
        alice.flush().await.unwrap();
        node0.flush().await.unwrap();

        let request = encode(&ApiRequest {
            protocol_version: PROTOCOL_VERSION,
            body: ListNodes {},
        })
        .unwrap();
        let targets = [
            format!("$KV.{state_bucket}.epoch"),
            format!("$KV.{state_bucket}.config"),
            format!("$KV.{state_bucket}.{op_key}"),
            format!("$KV.{state_bucket}.planted"),
            format!("$KV.{lease_bucket}.leader"),
            format!("$JS.API.STREAM.DELETE.KV_{state_bucket}"),
            "_INBOX.u.alice.stolen".to_string(),
            "_INBOX.n.node0.stolen".to_string(),
            format!("{p}.nudge.node0"),
            // Not below her inbox, only sharing its first characters.
            "_INBOX.u.mallory2.x".to_string(),
        ];
        // Repeated past the lease's life: once a second was enough to topple a leader.
        let mut sent = 0;
        for _ in 0..3 {
            for reply in &targets {
                mallory
                    .publish_with_reply(
                        format!("{p}.api.mallory.list_nodes"),
                        reply.clone(),
                        request.clone().into(),
                    )
                    .await
                    .unwrap();
                sent += 1;
            }
            // A node may try the same through its heartbeat's reply subject.
            node0
                .publish_with_reply(
                    format!("{p}.heartbeat.node0"),
                    format!("$KV.{state_bucket}.epoch"),
                    b"not even a heartbeat".to_vec().into(),
                )
                .await
                .unwrap();
            sent += 1;
            tokio::time::sleep(Duration::from_millis(900)).await;
        }
        mallory.flush().await.unwrap();

        // The scheduler's answering identity is refused by nats-server itself.
        let bus = lab.client_as("scheduler-bus").await.unwrap();
        bus.publish(format!("$KV.{state_bucket}.planted"), "x".into())
            .await
            .unwrap();
        let _ = bus.flush().await;
        assert!(
            tokio::time::timeout(
                Duration::from_secs(2),
                bus.request("$JS.API.INFO".to_string(), "".into())
            )
            .await
            .map(|r| r.is_err())
            .unwrap_or(true),
            "the bus identity reached the JetStream API"
        );

        // No one heard an answer meant for someone else.
        let heard = tokio::time::timeout(Duration::from_secs(2), async {
            tokio::select! {
                m = alice_hears.next() => format!("alice heard {:?}", m.map(|m| m.subject)),
                m = node_hears.next() => format!("node0 heard {:?}", m.map(|m| m.subject)),
                m = mallory_hears.next() => format!("mallory heard {:?}", m.map(|m| m.subject)),
            }
        })
        .await;
        assert!(heard.is_err(), "{}", heard.unwrap());

        // Nothing stored changed, and the scheduler still leads.
        assert_eq!(value_of(&state, "epoch").await.as_ref(), Some(&epoch));
        assert_eq!(value_of(&state, "config").await.as_ref(), Some(&config));
        assert_eq!(value_of(&state, &op_key).await.as_ref(), Some(&op));
        assert_eq!(value_of(&state, "planted").await, None);
        assert_eq!(value_of(&leases, "leader").await.as_ref(), Some(&leader));
        assert!(store.get_stream(format!("KV_{state_bucket}")).await.is_ok());

        // Asked properly, on her own inbox, mallory is answered.
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            mallory.request(format!("{p}.api.mallory.list_nodes"), request.into()),
        )
        .await;
        assert!(matches!(answer, Ok(Ok(_))), "{answer:?}");
        sent
    });
    assert!(lab.scheduler_running(0), "{}", lab.scheduler_log());
    let (status, metrics) = lab.http_admin_get("/metrics").unwrap();
    assert_eq!(status, 200, "{metrics}");
    assert!(
        refused_count(&metrics, "foreign_reply") >= sent,
        "every foreign reply counted:\n{metrics}"
    );
    // The operation of alice is intact and hers.
    let info = lab.operation(&victim).unwrap();
    assert_eq!(info["user"], "admin");
    wait_until(Duration::from_secs(10), || {
        (lab.operation(&victim).ok()?["state"] == "running").then_some(())
    })
    .unwrap();
}
