//! Issue 16 (partial): an agent answers a burst of nudges with one heartbeat, not one
//! heartbeat per nudge.

use futures::StreamExt;
use std::time::Duration;
use ytsched_tests::*;

#[test]
fn a_burst_of_nudges_costs_one_heartbeat() {
    let lab = Lab::start(vec![NodeOpts::args(&["--cpu", "2", "--memory", "4G"])]).unwrap();
    lab.wait_for_nodes(1).unwrap();
    let node = lab.node_id(0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let counted = rt.block_on(async {
        // The scheduler's answering identity may see heartbeats and send nudges.
        let client = lab.client_as("scheduler-bus").await.unwrap();
        let mut heartbeats = client
            .subscribe(format!("{}.heartbeat.{node}", lab.prefix))
            .await
            .unwrap();
        client.flush().await.unwrap();
        // Let the regular heartbeat that may be under way pass.
        tokio::time::sleep(Duration::from_millis(300)).await;
        while let Some(Some(_)) = futures::FutureExt::now_or_never(heartbeats.next()) {}
        for _ in 0..200 {
            client
                .publish(format!("{}.nudge.{node}", lab.prefix), "".into())
                .await
                .unwrap();
        }
        client.flush().await.unwrap();
        let mut count = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(700);
        while let Ok(Some(_)) = tokio::time::timeout_at(deadline, heartbeats.next()).await {
            count += 1;
        }
        count
    });
    // Two nudged heartbeats at most (one may already be on its way when the burst lands)
    // plus a periodic one; one heartbeat per nudge would be 200.
    assert!(
        (1..=4).contains(&counted),
        "{counted} heartbeats for 200 nudges"
    );
}
