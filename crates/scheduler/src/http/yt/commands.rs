//! The commands `/api/v4` lists, as YTsaurus describes each: its input and output type,
//! whether it changes state (`is_volatile`: the client sends it by POST or PUT, never GET)
//! and whether it moves data (`is_heavy`). The client sends only commands it finds here,
//! so the data commands ytsched does not serve are listed too: called, each is answered
//! with an error naming it, instead of the client's own "not supported" guess.

use serde_json::{json, Value};

/// What a command reads and writes: YTsaurus's `input_type` / `output_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io {
    Null,
    Structured,
    Binary,
    Tabular,
}

impl Io {
    fn name(self) -> &'static str {
        match self {
            Io::Null => "null",
            Io::Structured => "structured",
            Io::Binary => "binary",
            Io::Tabular => "tabular",
        }
    }
}

/// One command as `/api/v4` describes it.
#[derive(Clone, Copy, Debug)]
pub struct Descriptor {
    pub name: &'static str,
    pub input: Io,
    pub output: Io,
    pub volatile: bool,
    pub heavy: bool,
    /// ytsched answers it (otherwise: an error naming it).
    pub served: bool,
}

const fn served(name: &'static str, input: Io, output: Io, volatile: bool) -> Descriptor {
    Descriptor {
        name,
        input,
        output,
        volatile,
        heavy: false,
        served: true,
    }
}

const fn not_served(
    name: &'static str,
    input: Io,
    output: Io,
    volatile: bool,
    heavy: bool,
) -> Descriptor {
    Descriptor {
        name,
        input,
        output,
        volatile,
        heavy,
        served: false,
    }
}

use Io::{Binary, Null, Structured, Tabular};

pub const COMMANDS: &[Descriptor] = &[
    served("get_current_user", Null, Structured, false),
    served("discover_proxies", Null, Structured, false),
    served("start_operation", Null, Structured, true),
    served("get_operation", Null, Structured, false),
    served("list_operations", Null, Structured, false),
    served("abort_operation", Null, Null, true),
    served("complete_operation", Null, Null, true),
    served("suspend_operation", Null, Null, true),
    served("resume_operation", Null, Null, true),
    served("update_operation_parameters", Null, Null, true),
    served("list_jobs", Null, Structured, false),
    served("get_job", Null, Structured, false),
    served("get_job_stderr", Null, Binary, false),
    served("abort_job", Null, Null, true),
    served("get", Null, Structured, false),
    served("list", Null, Structured, false),
    served("exists", Null, Structured, false),
    served("set", Structured, Null, true),
    served("create", Null, Structured, true),
    served("remove", Null, Null, true),
    not_served("read_table", Null, Tabular, false, true),
    not_served("write_table", Tabular, Null, true, true),
    not_served("read_file", Null, Binary, false, true),
    Descriptor {
        heavy: true,
        ..served("write_file", Binary, Null, true)
    },
    served("put_file_to_cache", Null, Structured, true),
    served("get_file_from_cache", Null, Structured, false),
    not_served("select_rows", Null, Tabular, false, true),
    not_served("lookup_rows", Tabular, Tabular, false, true),
    not_served("insert_rows", Tabular, Null, true, true),
    not_served("delete_rows", Tabular, Null, true, true),
    served("start_transaction", Null, Structured, true),
    served("ping_transaction", Null, Null, true),
    served("commit_transaction", Null, Null, true),
    served("abort_transaction", Null, Null, true),
    not_served("copy", Null, Structured, true, false),
    not_served("move", Null, Structured, true, false),
    not_served("link", Null, Structured, true, false),
    not_served("lock", Null, Structured, true, false),
    not_served("concatenate", Null, Null, true, false),
    not_served("check_permission", Null, Structured, false, false),
    not_served("patch_operation_spec", Null, Null, true, false),
    not_served("get_job_input", Null, Binary, false, true),
    not_served("get_job_fail_context", Null, Binary, false, true),
    not_served("get_job_spec", Null, Structured, false, false),
    not_served("start_query", Null, Structured, true, false),
];

pub fn find(name: &str) -> Option<&'static Descriptor> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// `/api/v4`: every command with its types, as the client parses it.
pub fn listing() -> Value {
    Value::Array(
        COMMANDS
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "input_type": c.input.name(),
                    "output_type": c.output.name(),
                    "is_volatile": c.volatile,
                    "is_heavy": c.heavy,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_is_listed_once_and_state_changes_are_volatile() {
        let mut names: Vec<_> = COMMANDS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a command listed twice");
        for name in [
            "start_operation",
            "abort_operation",
            "set",
            "create",
            "remove",
            "abort_job",
        ] {
            assert!(find(name).unwrap().volatile, "{name}");
        }
        for name in [
            "get_operation",
            "list_operations",
            "get",
            "list",
            "exists",
            "list_jobs",
        ] {
            assert!(!find(name).unwrap().volatile, "{name}");
        }
        let listing = listing();
        assert_eq!(
            listing[0].as_object().unwrap().len(),
            5,
            "the client takes exactly these keys"
        );
    }
}
