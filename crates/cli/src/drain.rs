//! `ytsched drain NODE [--wait]`: take a machine out of service the gentle way. The node
//! is decommissioned (no new jobs; running ones finish), and with `--wait` the command
//! returns once nothing runs there, so the admin knows when to power it off.

use crate::admin::Session;
use anyhow::Context;
use std::time::{Duration, Instant};
use ytsched_common::api::ListNodes;
use ytsched_common::NodeId;

#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    /// The node's id, as `list-nodes` shows it.
    #[arg(value_parser = parse_node_id)]
    pub node: NodeId,
    /// Wait until no job runs on the node.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after this many seconds (exit 1); 0 waits for ever.
    #[arg(long, default_value_t = 0, requires = "wait")]
    pub timeout: u64,
}

fn parse_node_id(s: &str) -> Result<NodeId, String> {
    NodeId::parse(s).map_err(|e| e.to_string())
}

/// How often `--wait` looks at the node.
const POLL: Duration = Duration::from_millis(500);

impl Session<'_> {
    pub async fn drain(&self, args: DrainArgs) -> anyhow::Result<()> {
        let path = format!("//sys/cluster_nodes/{}/@decommissioned", args.node);
        self.set(path, serde_json::Value::Bool(true)).await?;
        eprintln!(
            "node {} decommissioned: it takes no new jobs (undo: ytsched remove //sys/cluster_nodes/{}/@decommissioned)",
            args.node, args.node
        );
        if !args.wait {
            return Ok(());
        }
        let started = Instant::now();
        let mut last = None;
        loop {
            let nodes = self
                .call(ListNodes {})
                .await
                .context("reading the node's jobs")?;
            let node = nodes
                .iter()
                .find(|n| n.id == args.node)
                .with_context(|| format!("node {} is no longer known", args.node))?;
            let running = node.running_job_count;
            if running == 0 {
                eprintln!("node {} is empty", args.node);
                return Ok(());
            }
            if last != Some(running) {
                eprintln!("node {}: {running} job(s) still running", args.node);
                last = Some(running);
            }
            if args.timeout > 0 && started.elapsed() >= Duration::from_secs(args.timeout) {
                anyhow::bail!(
                    "node {} still runs {running} job(s) after {} s",
                    args.node,
                    args.timeout
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
