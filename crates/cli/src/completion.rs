//! `ytsched completion bash|zsh|fish|...`: shell completion scripts generated from the
//! same clap definition the binary parses with, so they never fall behind a new flag.

use clap::CommandFactory;
use clap_complete::Shell;

pub fn print<C: CommandFactory>(shell: Shell, out: &mut dyn std::io::Write) {
    let mut command = C::command();
    clap_complete::generate(shell, &mut command, "ytsched", out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cli;

    #[test]
    fn every_shell_gets_a_script_naming_the_commands() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut out = Vec::new();
            print::<Cli>(shell, &mut out);
            let text = String::from_utf8(out).unwrap();
            for word in ["run-vanilla", "list-operations", "drain", "pool-trees"] {
                assert!(text.contains(word), "{shell}: {word} missing");
            }
        }
    }

    /// Every command and flag says what it is for in `--help`.
    #[test]
    fn every_command_and_flag_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                let here = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(here.clone());
                }
                walk(sub, &here, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "ytsched", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
