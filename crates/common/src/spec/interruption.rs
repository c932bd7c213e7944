//! How a job is asked to stop (SPEC 5.3): the signal its task names, and whether its
//! operation's preempted jobs get time to checkpoint first.

use serde::{Deserialize, Serialize};

/// `preemption_mode` of an operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreemptionMode {
    /// A preempted job gets its interruption signal and the agent's short kill grace.
    #[default]
    Normal,
    /// A preempted job gets its interruption signal and the tree's
    /// `job_graceful_interrupt_timeout` to exit; its resources stay counted until then.
    Graceful,
}

/// The signals a job may ask to be interrupted with: the termination signals a job's
/// PID 1 passes on (`job_namespaces.rs`), so the job sees the one it asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum InterruptionSignal {
    #[default]
    #[serde(rename = "SIGTERM")]
    Term,
    #[serde(rename = "SIGINT")]
    Int,
    #[serde(rename = "SIGHUP")]
    Hup,
    #[serde(rename = "SIGQUIT")]
    Quit,
    #[serde(rename = "SIGUSR1")]
    Usr1,
    #[serde(rename = "SIGUSR2")]
    Usr2,
}

impl InterruptionSignal {
    /// Its number on Linux.
    pub fn number(self) -> i32 {
        match self {
            Self::Term => 15,
            Self::Int => 2,
            Self::Hup => 1,
            Self::Quit => 3,
            Self::Usr1 => 10,
            Self::Usr2 => 12,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_as_users_write_them_and_others_are_refused() {
        let s: InterruptionSignal = serde_json::from_str("\"SIGUSR1\"").unwrap();
        assert_eq!(s.number(), 10);
        let e = serde_json::from_str::<InterruptionSignal>("\"SIGKILL\"").unwrap_err();
        assert!(
            e.to_string().contains("SIGTERM"),
            "names what is allowed: {e}"
        );
        let m: PreemptionMode = serde_json::from_str("\"graceful\"").unwrap();
        assert_eq!(m, PreemptionMode::Graceful);
    }
}
