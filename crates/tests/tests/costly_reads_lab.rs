//! Costly reads (issue 38 point 1): a user whose operations carry specs of hundreds of
//! kilobytes cannot make a list expensive (its entries are brief and its page bounded in
//! bytes), and one who keeps asking for large answers is held to her budget of answer
//! bytes ("busy, retry", naming the budget) while others are answered and the node keeps
//! heartbeating.

use std::time::{Duration, Instant};
use ytsched_common::api::{ApiRequest, ApiResponse, GetOperation, ListOperations, OperationPage};
use ytsched_common::codec::{decode, encode};
use ytsched_common::protocol::PROTOCOL_VERSION;
use ytsched_common::OperationId;
use ytsched_tests::{Lab, NodeOpts};

/// A spec whose stdin is 250 KB, near what the attacker used.
fn big_spec(i: usize) -> String {
    let stdin = "x".repeat(250 * 1024);
    format!(
        "title: big {i}\ntasks:\n  t:\n    command: 'sleep 600'\n    job_count: 1\n    cpu_limit: 0.1\n    memory_limit: 64M\n    stdin: '{stdin}'\n    environment: {{SECRET: hunter2}}\n"
    )
}

async fn call<B: serde::Serialize>(
    client: &async_nats::Client,
    subject: String,
    body: B,
) -> bytes::Bytes {
    let req = encode(&ApiRequest {
        protocol_version: PROTOCOL_VERSION,
        body,
    })
    .unwrap();
    client
        .request(subject, req.into())
        .await
        .expect("answered")
        .payload
}

#[test]
fn large_answers_are_brief_in_lists_and_held_to_a_byte_budget_per_user() {
    let lab = Lab::start_with(
        &["--http", "127.0.0.1:0", "--api-byte-budget", "256K"],
        vec![NodeOpts::args(&["--cpu", "2", "--memory", "2G"])],
    )
    .unwrap();
    lab.add_user("alice", false).unwrap();
    lab.add_user("mallory", false).unwrap();
    let ops: Vec<String> = (0..6)
        .map(|i| lab.submit_spec_as("mallory", &big_spec(i)).unwrap())
        .collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mallory = rt.block_on(lab.client_as("mallory")).unwrap();
    let prefix = lab.prefix.clone();

    // A list of her six operations is brief: no stdin, no environment, a few KB.
    let t = Instant::now();
    let page = rt.block_on(call(
        &mallory,
        format!("{prefix}.api.mallory.list_operations"),
        ListOperations {
            limit: Some(1000),
            ..Default::default()
        },
    ));
    assert!(
        page.len() < 32 * 1024,
        "a list page of {} bytes",
        page.len()
    );
    let page: ApiResponse<OperationPage> = decode(&page).unwrap();
    let page = page.result.expect("listed");
    assert_eq!(page.operations.len(), 6);
    for op in &page.operations {
        let task = &op.spec.tasks.iter().next().unwrap().1;
        assert!(
            task.stdin.is_none() && task.environment.is_empty(),
            "{op:?}"
        );
        assert!(op.history.is_empty());
    }
    eprintln!("list of 6 large operations: {:?}", t.elapsed());

    // Whole operations, ~250 KB each, until her byte budget (256 KiB/s, 4 s of it at
    // once) is spent: then "busy", naming it.
    let id = OperationId(ops[0].as_str().into());
    let refusal = rt.block_on(async {
        for _ in 0..40 {
            let bytes = call(
                &mallory,
                format!("{prefix}.api.mallory.get_operation"),
                GetOperation {
                    operation_id: id.clone(),
                },
            )
            .await;
            let answer: ApiResponse<serde_json::Value> = decode(&bytes).unwrap();
            if let Err(e) = answer.result {
                return Some(e);
            }
        }
        None
    });
    let refusal = refusal.expect("the byte budget was never reached");
    assert!(
        refusal.message.contains("busy")
            && refusal.message.contains("mallory")
            && refusal.message.contains("bytes of answers per second")
            && refusal.message.contains("retry"),
        "{refusal:?}"
    );
    // Alice is answered meanwhile, and the node stays online.
    let out = lab.ytsched_as("alice", &["list-operations"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lab.node_info(0).unwrap()["state"], "online");
    // Mallory herself is answered again once her budget has refilled.
    std::thread::sleep(Duration::from_secs(3));
    let out = lab.ytsched_as("mallory", &["get-operation", &ops[1]]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, metrics) = lab.http_admin_get("/metrics").unwrap();
    assert!(
        metrics.contains("reason=\"over_budget\"} ")
            && !metrics.contains("reason=\"over_budget\"} 0"),
        "{metrics}"
    );
}
