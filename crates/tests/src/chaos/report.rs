//! A campaign's figures, as `docs/reliability.md` lists them: faults per kind, jobs and
//! operations run, and how soon work started again after each kind's heal.

use super::invariants::History;
use super::schedule::FaultKind;
use super::workload::Submitted;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One healed fault.
pub struct HealRecord {
    pub kind: FaultKind,
    pub service: &'static str,
    pub at_ns: u64,
}

/// Recovery after one kind of fault: the time from each heal to the first job start.
#[derive(Default)]
pub struct Recovery {
    pub injected: usize,
    /// Milliseconds, sorted; heals after which no job started are left out.
    pub ms: Vec<u64>,
}

impl Recovery {
    pub fn p50(&self) -> Option<u64> {
        (!self.ms.is_empty()).then(|| self.ms[(self.ms.len() - 1) / 2])
    }
    pub fn max(&self) -> Option<u64> {
        self.ms.last().copied()
    }
}

pub struct Figures {
    pub by_kind: BTreeMap<FaultKind, Recovery>,
    pub operations: usize,
    pub unacknowledged: usize,
    pub by_shape: BTreeMap<&'static str, usize>,
    pub final_states: BTreeMap<String, usize>,
    pub attempts: usize,
    pub jobs_succeeded: usize,
    /// Successes the scheduler never heard of (their node was lost) and ran again.
    pub lost_successes: usize,
    pub torn_ledger_lines: usize,
    pub events: usize,
    pub epochs: usize,
    /// Jobs the scheduler took away, by reason (`node_lost`, `preempted`, ...).
    pub aborts: BTreeMap<String, usize>,
    pub run_s: u64,
}

impl Figures {
    pub fn gather(
        h: &History,
        heals: &[HealRecord],
        submitted: &Submitted,
        torn_ledger_lines: usize,
        start_ns: u64,
    ) -> Figures {
        let mut starts: Vec<u64> = h.attempts.values().map(|a| a.start_ns).collect();
        starts.sort_unstable();
        let mut by_kind: BTreeMap<FaultKind, Recovery> = BTreeMap::new();
        for heal in heals {
            let r = by_kind.entry(heal.kind).or_default();
            r.injected += 1;
            let i = starts.partition_point(|s| *s < heal.at_ns);
            if let Some(s) = starts.get(i) {
                r.ms.push((s - heal.at_ns) / 1_000_000);
            }
        }
        by_kind.values_mut().for_each(|r| r.ms.sort_unstable());
        let mut final_states = BTreeMap::new();
        for state in h.final_states.values() {
            *final_states.entry(state.clone()).or_default() += 1;
        }
        let epochs: std::collections::BTreeSet<u64> = h.events.iter().map(|e| e.epoch).collect();
        let mut aborts = BTreeMap::new();
        for e in h.events {
            if let ytsched_common::event_record::Event::JobAborted { reason, .. } = &e.event {
                *aborts.entry(reason.to_string()).or_default() += 1;
            }
        }
        Figures {
            by_kind,
            operations: submitted.acknowledged.len(),
            unacknowledged: submitted.unacknowledged,
            by_shape: submitted.by_shape.clone(),
            final_states,
            attempts: h.attempts.len(),
            jobs_succeeded: h.attempts.values().filter(|a| a.exit == Some(0)).count(),
            lost_successes: super::invariants::successes_lost_with_their_node(h),
            torn_ledger_lines,
            events: h.events.len(),
            epochs: epochs.len(),
            aborts,
            run_s: h.end_ns.saturating_sub(start_ns) / 1_000_000_000,
        }
    }

    /// The figures as Markdown tables.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "| fault | injected | recovery p50 | recovery max |");
        let _ = writeln!(s, "|---|---|---|---|");
        let ms = |v: Option<u64>| v.map(|v| format!("{v} ms")).unwrap_or_else(|| "-".into());
        for (kind, r) in &self.by_kind {
            let _ = writeln!(
                s,
                "| {kind} | {} | {} | {} |",
                r.injected,
                ms(r.p50()),
                ms(r.max())
            );
        }
        let shapes: Vec<String> = self
            .by_shape
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let states: Vec<String> = self
            .final_states
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s);
        let _ = writeln!(s, "- run: {} s", self.run_s);
        let _ = writeln!(
            s,
            "- operations acknowledged: {} ({}), not acknowledged: {}",
            self.operations,
            shapes.join(", "),
            self.unacknowledged
        );
        let _ = writeln!(s, "- final states: {}", states.join(", "));
        let _ = writeln!(
            s,
            "- job attempts in the ledger: {}, of which ran to success: {} (torn lines: {})",
            self.attempts, self.jobs_succeeded, self.torn_ledger_lines
        );
        let _ = writeln!(
            s,
            "- successes lost with their node (cut off as its job ended) and run again: {}",
            self.lost_successes
        );
        let aborts: Vec<String> = self
            .aborts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "- jobs taken away, by reason: {}", aborts.join(", "));
        let _ = writeln!(
            s,
            "- event log: {} events in {} epochs",
            self.events, self.epochs
        );
        s
    }
}
