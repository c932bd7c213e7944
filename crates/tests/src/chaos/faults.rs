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
            in_netns(lab, service, SLOW_LINK)?;
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
            lab.docker(&[
                "network",
                "connect",
                "--alias",
                s.service,
                &lab.network(),
                c,
            ])?;
        }
        FaultKind::SlowAgentLink => {
            in_netns(lab, s.service, FAST_LINK)?;
        }
        FaultKind::NatsDiskFull => {
            lab.docker(&["exec", c, "rm", "-f", "/data/fill"])?;
        }
    }
    Ok(())
}

/// Delay with jitter and 20 % loss on every link, by `tc netem`. A kernel without netem
/// (this project's CI machines have none) gets the nearest it has: a token bucket slow
/// enough to queue packets for up to half a second, and 20 % of packets dropped each
/// way by iptables' `statistic` match.
const SLOW_LINK: &str =
    "set -e; links=$(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -vx lo); \
    for d in $links; do \
      if ! tc qdisc add dev $d root netem delay 300ms 150ms loss 20% 2>/dev/null; then \
        tc qdisc add dev $d root tbf rate 256kbit burst 8kb latency 500ms; \
        iptables -w -A INPUT -i $d -m statistic --mode random --probability 0.2 -j DROP; \
        iptables -w -A OUTPUT -o $d -m statistic --mode random --probability 0.2 -j DROP; \
      fi; \
    done";

/// Undoes `SLOW_LINK` on every link.
const FAST_LINK: &str = "links=$(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -vx lo); \
    for d in $links; do tc qdisc del dev $d root 2>/dev/null; \
      iptables -w -D INPUT -i $d -m statistic --mode random --probability 0.2 -j DROP 2>/dev/null; \
      iptables -w -D OUTPUT -o $d -m statistic --mode random --probability 0.2 -j DROP 2>/dev/null; \
    done; true";

/// A shell command in a service's network namespace, from the host (the image has no
/// `tc`, and its containers no NET_ADMIN).
fn in_netns(lab: &ChaosLab, service: &str, command: &str) -> Result<()> {
    let pid = lab.pid(service)?.to_string();
    let mut cmd = Command::new("nsenter");
    cmd.args(["-t", &pid, "-n", "sh", "-c", command]);
    super::lab::run_with_limit(&mut cmd, Duration::from_secs(20))?;
    Ok(())
}
