//! A campaign's faults, drawn from its seed: which fault, on which process, held for how
//! long, and the quiet before the next. The same seed gives the same schedule, so a
//! failing run is replayed by its seed alone.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::fmt;
use std::time::Duration;

/// Every kind of fault the campaign injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// `kill -9` of the leading scheduler; started again at the heal.
    KillLeader,
    /// `kill -9` of an agent's machine (its jobs die with it); started again.
    KillAgent,
    /// `kill -9` of one NATS server of three; started again.
    KillNats,
    /// SIGSTOP of the leader for longer than its lease, then SIGCONT.
    PauseLeader,
    /// An agent cut off from every NATS server for less than the node heartbeat timeout.
    PartitionAgentShort,
    /// The same, for longer than the timeout: its jobs run again elsewhere.
    PartitionAgentLong,
    /// The leader cut off from NATS while the standby is not.
    PartitionLeader,
    /// One NATS server cut off from the other two (and from its clients).
    PartitionNats,
    /// Delay and loss on an agent's link (`tc netem`).
    SlowAgentLink,
    /// JetStream's disk full on one NATS server (its small tmpfs filled).
    NatsDiskFull,
}

pub const ALL_KINDS: [FaultKind; 10] = [
    FaultKind::KillLeader,
    FaultKind::KillAgent,
    FaultKind::KillNats,
    FaultKind::PauseLeader,
    FaultKind::PartitionAgentShort,
    FaultKind::PartitionAgentLong,
    FaultKind::PartitionLeader,
    FaultKind::PartitionNats,
    FaultKind::SlowAgentLink,
    FaultKind::NatsDiskFull,
];

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillLeader => "kill-leader",
            FaultKind::KillAgent => "kill-agent",
            FaultKind::KillNats => "kill-nats",
            FaultKind::PauseLeader => "pause-leader",
            FaultKind::PartitionAgentShort => "partition-agent-short",
            FaultKind::PartitionAgentLong => "partition-agent-long",
            FaultKind::PartitionLeader => "partition-leader",
            FaultKind::PartitionNats => "partition-nats",
            FaultKind::SlowAgentLink => "slow-agent-link",
            FaultKind::NatsDiskFull => "nats-disk-full",
        }
    }

    /// How long it is held, in ms, drawn within the kind's range: pauses and the long
    /// partition outlast the lease (3 s) and the node timeout (5 s) the lab runs with,
    /// the short partition stays under the timeout.
    fn hold_range_ms(self) -> (u64, u64) {
        match self {
            FaultKind::KillLeader | FaultKind::KillAgent | FaultKind::KillNats => (2_000, 8_000),
            FaultKind::PauseLeader => (5_000, 12_000),
            FaultKind::PartitionAgentShort => (1_000, 2_000),
            FaultKind::PartitionAgentLong => (8_000, 15_000),
            FaultKind::PartitionLeader => (6_000, 12_000),
            FaultKind::PartitionNats => (5_000, 12_000),
            FaultKind::SlowAgentLink => (8_000, 15_000),
            FaultKind::NatsDiskFull => (5_000, 12_000),
        }
    }

    /// The processes it may strike (the leader is found when it strikes). The driver
    /// reaches the lab through nats1, so NATS faults strike nats2 and nats3; only nats3
    /// has the small disk.
    fn targets(self) -> &'static [&'static str] {
        match self {
            FaultKind::KillLeader | FaultKind::PauseLeader | FaultKind::PartitionLeader => {
                &["leader"]
            }
            FaultKind::KillNats | FaultKind::PartitionNats => &["nats2", "nats3"],
            FaultKind::NatsDiskFull => &["nats3"],
            _ => &super::lab::AGENTS,
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One planned fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedFault {
    pub kind: FaultKind,
    pub target: &'static str,
    pub hold: Duration,
    /// Quiet after its heal before the next fault strikes.
    pub quiet: Duration,
}

/// Faults enough for `length`, drawn from `seed`, in rounds that each hold every kind
/// once in a drawn order: a short run still strikes every kind before any twice.
pub fn draw(seed: u64, length: Duration) -> Vec<PlannedFault> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut plan = Vec::new();
    let mut total = Duration::ZERO;
    while total < length {
        let mut round = ALL_KINDS;
        round.shuffle(&mut rng);
        for kind in round {
            let (lo, hi) = kind.hold_range_ms();
            let targets = kind.targets();
            let fault = PlannedFault {
                kind,
                target: targets[rng.gen_range(0..targets.len())],
                hold: Duration::from_millis(rng.gen_range(lo..=hi)),
                quiet: Duration::from_millis(rng.gen_range(2_000..=6_000)),
            };
            total += fault.hold + fault.quiet;
            plan.push(fault);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_same_seed_draws_the_same_schedule_and_another_seed_another() {
        let a = draw(42, Duration::from_secs(600));
        assert_eq!(a, draw(42, Duration::from_secs(600)));
        assert_ne!(a, draw(43, Duration::from_secs(600)));
    }

    #[test]
    fn each_round_strikes_every_kind_once_within_its_ranges() {
        let plan = draw(7, Duration::from_secs(1800));
        assert!(plan.len() >= 2 * ALL_KINDS.len());
        for round in plan
            .chunks(ALL_KINDS.len())
            .filter(|r| r.len() == ALL_KINDS.len())
        {
            let kinds: BTreeSet<FaultKind> = round.iter().map(|f| f.kind).collect();
            assert_eq!(kinds.len(), ALL_KINDS.len(), "{round:?}");
        }
        for f in &plan {
            let (lo, hi) = f.kind.hold_range_ms();
            let ms = f.hold.as_millis() as u64;
            assert!(lo <= ms && ms <= hi, "{f:?}");
            assert!(f.kind.targets().contains(&f.target), "{f:?}");
        }
        // The long partition outlasts the lab's 5 s node timeout; the short one does not.
        for f in plan
            .iter()
            .filter(|f| f.kind == FaultKind::PartitionAgentLong)
        {
            assert!(f.hold > Duration::from_secs(5));
        }
        for f in plan
            .iter()
            .filter(|f| f.kind == FaultKind::PartitionAgentShort)
        {
            assert!(f.hold < Duration::from_secs(5));
        }
    }
}
