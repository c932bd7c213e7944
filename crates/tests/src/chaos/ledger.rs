//! The ledger a fault campaign's jobs keep (issue 42): each attempt appends lines to a
//! file on a volume the driver reads, so the history is told by the jobs themselves,
//! not by the scheduler under test.
//!
//! One line per fact, space-separated: `start OP TASK INDEX JOB NODE NS`, `alive ... NS`
//! (every tick while it runs), `end ... NS EXIT`. A job killed by its agent writes no
//! `end`: its last `alive` bounds when it last ran.

use std::collections::BTreeMap;

/// Which job of which operation an attempt runs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobKey {
    pub operation: String,
    pub task: String,
    pub index: u32,
}

/// One attempt as its ledger lines tell it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub key: JobKey,
    pub job: String,
    pub node: String,
    pub start_ns: u64,
    /// Its last sign of life: its `end`, else its last `alive`, else its `start`.
    pub last_ns: u64,
    /// Its exit code, when it wrote its `end`.
    pub exit: Option<i32>,
}

/// The shell a campaign job runs: its ledger lines around `work`, with a tick every
/// `tick_ms` while it runs. `$LEDGER` names the ledger file.
pub fn job_command(work: &str, tick_ms: u64) -> String {
    let fields = "$YT_OPERATION_ID $YT_TASK_NAME $YT_JOB_INDEX $YT_JOB_ID $(hostname)";
    let tick = tick_ms as f64 / 1000.0;
    format!(
        "echo \"start {fields} $(date +%s%N)\" >> \"$LEDGER\"; \
         (while :; do echo \"alive {fields} $(date +%s%N)\" >> \"$LEDGER\"; sleep {tick}; done) & ticker=$!; \
         {work}; code=$?; kill $ticker; \
         echo \"end {fields} $(date +%s%N) $code\" >> \"$LEDGER\"; exit $code"
    )
}

/// A ledger line that does not parse, with where it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    pub line: usize,
    pub text: String,
}

/// Every attempt of `text` (one ledger, or several concatenated), by job id. Lines that
/// do not parse are returned apart: a torn last line of a killed job is expected, any
/// other is the campaign's to report.
pub fn read(text: &str) -> (BTreeMap<String, Attempt>, Vec<BadLine>) {
    let mut attempts: BTreeMap<String, Attempt> = BTreeMap::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let parsed = match f.as_slice() {
            [kind @ ("start" | "alive"), rest @ ..] if rest.len() == 6 => fact(kind, rest, None),
            ["end", rest @ ..] if rest.len() == 7 => rest[6]
                .parse()
                .ok()
                .and_then(|e| fact("end", &rest[..6], Some(e))),
            _ => None,
        };
        let Some((kind, a)) = parsed else {
            bad.push(BadLine {
                line: i + 1,
                text: line.chars().take(200).collect(),
            });
            continue;
        };
        let entry = attempts.entry(a.job.clone()).or_insert_with(|| a.clone());
        match kind {
            "start" => entry.start_ns = entry.start_ns.min(a.start_ns),
            _ => entry.last_ns = entry.last_ns.max(a.last_ns),
        }
        if a.exit.is_some() {
            entry.exit = a.exit;
        }
    }
    (attempts, bad)
}

/// One line's fact: `fields` are its operation, task, index, job, node and time.
fn fact<'a>(kind: &'a str, fields: &[&str], exit: Option<i32>) -> Option<(&'a str, Attempt)> {
    let [op, task, index, job, node, ns] = fields else {
        return None;
    };
    let ns: u64 = ns.parse().ok()?;
    Some((
        kind,
        Attempt {
            key: JobKey {
                operation: op.to_string(),
                task: task.to_string(),
                index: index.parse().ok()?,
            },
            job: job.to_string(),
            node: node.to_string(),
            start_ns: ns,
            last_ns: ns,
            exit,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_is_told_by_its_lines_and_a_torn_line_is_set_apart() {
        let text = "start op t 0 op-0 n1 100\nalive op t 0 op-0 n1 150\nalive op t 0 op-0 n1 200\n\
                    start op t 0 op-1 n2 400\nend op t 0 op-1 n2 500 0\nalive op t 0 op-";
        let (attempts, bad) = read(text);
        assert_eq!(attempts.len(), 2);
        let first = &attempts["op-0"];
        assert_eq!(
            (first.start_ns, first.last_ns, first.exit),
            (100, 200, None)
        );
        let second = &attempts["op-1"];
        assert_eq!(
            (second.start_ns, second.last_ns, second.exit),
            (400, 500, Some(0))
        );
        assert_eq!(
            second.key,
            JobKey {
                operation: "op".into(),
                task: "t".into(),
                index: 0
            }
        );
        assert_eq!(
            bad,
            vec![BadLine {
                line: 6,
                text: "alive op t 0 op-".into()
            }]
        );
    }

    #[test]
    fn the_job_command_writes_the_lines_the_reader_takes() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("ledger");
        let status = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(job_command("sleep 0.3", 50))
            .env("LEDGER", &ledger)
            .env("YT_OPERATION_ID", "op")
            .env("YT_TASK_NAME", "t")
            .env("YT_JOB_INDEX", "3")
            .env("YT_JOB_ID", "op-7")
            .status()
            .unwrap();
        assert!(status.success());
        let (attempts, bad) = read(&std::fs::read_to_string(&ledger).unwrap());
        assert!(bad.is_empty(), "{bad:?}");
        let a = &attempts["op-7"];
        assert_eq!((a.key.index, a.exit), (3, Some(0)));
        assert!(a.last_ns - a.start_ns >= 250_000_000, "{a:?}");
    }
}
