//! A finished attempt's output: a value of its own, which the store keeps under its own
//! key and an operation may hold inline for its first attempts.

use serde::{Deserialize, Serialize};
use ytsched_common::JobId;

/// The output tails a finished job attempt left (up to 64 KB each), stored once under
/// their own key and never held in the core: memory per finished attempt does not
/// grow with what its job printed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobOutput {
    pub job: JobId,
    pub stdout: String,
    pub stderr: String,
}

impl JobOutput {
    pub fn stream(&self, stream: ytsched_common::api::OutputStream) -> &str {
        match stream {
            ytsched_common::api::OutputStream::Stdout => &self.stdout,
            ytsched_common::api::OutputStream::Stderr => &self.stderr,
        }
    }
}
