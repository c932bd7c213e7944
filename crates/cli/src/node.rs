//! `ytsched node approve NODE [--max-resources …]`: an admin lets a node offer more than
//! it did at its first registration (trust on first use, issue 38 point 7): what it
//! reports now, or at most `--max-resources`.

use crate::admin::Session;
use ytsched_common::api::ApproveNode;
use ytsched_common::resources::ResourceVector;
use ytsched_common::NodeId;

#[derive(clap::Subcommand, Debug)]
pub enum NodeCommand {
    /// Let NODE offer what it reports now, or at most --max-resources.
    Approve {
        /// The node's id, as `list-nodes` shows it.
        #[arg(value_parser = |s: &str| NodeId::parse(s).map_err(|e| e.to_string()))]
        node: NodeId,
        /// `cpu=64,memory=512G,gpu=8,user_slots=64` (what is not named: the defaults).
        #[arg(long, value_parser = ytsched_common::node_approval::parse_max_resources)]
        max_resources: Option<ResourceVector>,
    },
}

impl Session<'_> {
    pub async fn node(&self, command: NodeCommand) -> anyhow::Result<()> {
        match command {
            NodeCommand::Approve {
                node,
                max_resources,
            } => {
                let approved = self
                    .call(ApproveNode {
                        node_id: node.clone(),
                        max_resources,
                    })
                    .await?;
                println!("node {node} approved for {approved}");
                Ok(())
            }
        }
    }
}
