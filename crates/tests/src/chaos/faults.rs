//! Each fault as Docker verbs on the lab: how it strikes, and how it is healed.

use super::lab::ChaosLab;
use super::schedule::{FaultKind, PlannedFault};
use anyhow::{bail, Result};
use std::process::Command;
use std::time::Duration;

/// A fault that has struck, and what its heal needs.
pub struct Struck {
    pub kind: FaultKind,
    /// The service it struck (the leader resolved to its service).
    pub service: &'static str,
    container: String,
}

/// Strikes `fault`; the leader is whichever scheduler holds the lease now.
pub fn strike(lab: &ChaosLab, fault: &PlannedFault) -> Result<Struck> {
    let service = if fault.target == "leader" {
        match lab.leader() {
            Some(s) => s,
            None => bail!("no scheduler holds the leader lease to strike"),
        }
    } else {
        fault.target
    };
    let container = lab.container(service)?;
    let c = container.as_str();
    match fault.kind {
        FaultKind::KillLeader | FaultKind::KillAgent | FaultKind::KillNats => {
            lab.docker(&["kill", "-s", "KILL", c])?;
        }
        FaultKind::PauseLeader => {
            lab.docker(&["kill", "-s", "STOP", c])?;
        }
        FaultKind::PartitionAgentShort
        | FaultKind::PartitionAgentLong
        | FaultKind::PartitionLeader
        | FaultKind::PartitionNats => {
            lab.docker(&["network", "disconnect", "-f", &lab.network(), c])?;
        }
        FaultKind::SlowAgentLink => {
            in_netns(lab, service, "tc qdisc add dev eth0 root netem delay 300ms 150ms loss 20%")?;
        }
        FaultKind::NatsDiskFull => {
            // dd stops at ENOSPC, which is the point; the tmpfs is then full.
            lab.docker(&[
                "exec",
                c,
                "sh",
                "-c",
                "dd if=/dev/zero of=/data/fill bs=1M 2>/dev/null; sync; true",
            ])?;
        }
    }
    Ok(Struck {
        kind: fault.kind,
        service,
        container,
    })
}

/// Heals what `strike` did.
pub fn heal(lab: &ChaosLab, s: &Struck) -> Result<()> {
    let c = s.container.as_str();
    match s.kind {
        FaultKind::KillLeader | FaultKind::KillAgent | FaultKind::KillNats => {
            lab.docker(&["start", c])?;
        }
        FaultKind::PauseLeader => {
            lab.docker(&["kill", "-s", "CONT", c])?;
        }
        FaultKind::PartitionAgentShort
        | FaultKind::PartitionAgentLong
        | FaultKind::PartitionLeader
        | FaultKind::PartitionNats => {
            lab.docker(&["network", "connect", "--alias", s.service, &lab.network(), c])?;
        }
        FaultKind::SlowAgentLink => {
            in_netns(lab, s.service, "tc qdisc del dev eth0 root")?;
        }
        FaultKind::NatsDiskFull => {
            lab.docker(&["exec", c, "rm", "-f", "/data/fill"])?;
        }
    }
    Ok(())
}

/// A shell command in a service's network namespace, from the host (the image has no
/// `tc`, and its containers no NET_ADMIN).
fn in_netns(lab: &ChaosLab, service: &str, command: &str) -> Result<()> {
    let pid = lab.pid(service)?.to_string();
    let mut cmd = Command::new("nsenter");
    cmd.args(["-t", &pid, "-n", "sh", "-c", command]);
    super::lab::run_with_limit(&mut cmd, Duration::from_secs(20))?;
    Ok(())
}
