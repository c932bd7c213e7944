//! A daemon's settings file (`--config-file /etc/ytsched/scheduler.toml`): every flag
//! of `ytsched-scheduler` and `ytsched-node` may be set there, under its long name
//! (`heartbeat_period = "1s"`, `tag = ["gpu", "ssd"]`, `insecure = false`). A flag or
//! its environment variable overrides the file; a key that names no flag is refused,
//! named, before anything starts. `--print-config` prints the settings in effect, each
//! with where it came from.
//!
//! The file is turned into the flags it stands for and parsed by the same clap
//! definition as the command line, so a value means the same, and is checked the same,
//! wherever it is written.

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Args, Command};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The most a settings file may hold: a few hundred settings.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The flags every daemon takes for its settings file.
#[derive(Args, Clone, Debug, Default)]
pub struct SettingsArgs {
    /// Settings file (TOML): any flag, by its long name with `_` or `-` (e.g.
    /// `heartbeat_period = "1s"`); flags and environment variables override it.
    #[arg(long, env = "YTSCHED_CONFIG_FILE", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// Print the settings in effect (file, flags, environment and defaults) as TOML,
    /// each with where it came from, and exit.
    #[arg(long)]
    pub print_config: bool,
}

/// Ids of flags that are about the settings themselves (or clap's own).
const NOT_SETTINGS: [&str; 4] = ["config_file", "print_config", "help", "version"];

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error(transparent)]
    Flags(#[from] clap::Error),
}

/// The command line parsed with the settings file's values under it.
pub struct Parsed<T> {
    pub args: T,
    /// `--print-config`: what to print instead of running.
    pub printed: Option<String>,
}

/// Parses the process's command line with its settings file; exits as clap does on a
/// bad flag (2, or 0 for `--help`), and with 2 naming the file and key on a bad file.
pub fn parse_or_exit<T: clap::Parser>() -> Parsed<T> {
    match parse_from::<T>(std::env::args_os().collect()) {
        Ok(p) => p,
        Err(SettingsError::Flags(e)) => e.exit(),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}

/// `argv` (program name first) parsed with the settings of its `--config-file`.
pub fn parse_from<T: clap::Parser>(argv: Vec<OsString>) -> Result<Parsed<T>, SettingsError> {
    let command = T::command();
    // A first look, only for the file and for which flags the command line sets: a
    // required flag may be in the file, so nothing is refused yet.
    let given = command
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(&argv)?;
    let from_file = match given.get_one::<PathBuf>("config_file") {
        Some(path) => file_flags(&command, path, &given)?,
        None => FromFile::default(),
    };
    let mut all: Vec<OsString> = argv.iter().take(1).cloned().collect();
    all.extend(from_file.flags.iter().map(OsString::from));
    all.extend(argv.iter().skip(1).cloned());
    let matches = command.clone().try_get_matches_from(all)?;
    let printed = matches
        .get_flag("print_config")
        .then(|| print(&command, &matches, &given, &from_file.settings));
    let args = T::from_arg_matches(&matches)?;
    Ok(Parsed { args, printed })
}

/// What a settings file contributes once the command line and environment have had
/// their say.
#[derive(Default)]
struct FromFile {
    /// The flags it stands for.
    flags: Vec<String>,
    /// The long names it set, a switch set to false included (it stands for no flag).
    settings: Vec<String>,
}

/// The flags the file stands for, leaving out those the command line or the
/// environment sets.
fn file_flags(
    command: &Command,
    path: &Path,
    given: &ArgMatches,
) -> Result<FromFile, SettingsError> {
    let fail = |message: String| SettingsError::File {
        path: path.to_path_buf(),
        message,
    };
    let text = read_bounded(path).map_err(fail)?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| fail(e.message().to_string() + &located(&text, &e)))?;
    let mut flags = Vec::new();
    let mut settings = Vec::new();
    for (key, value) in &table {
        let wanted = key.replace('_', "-");
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(wanted.as_str()))
            .filter(|a| !NOT_SETTINGS.contains(&a.get_id().as_str()))
            .ok_or_else(|| {
                fail(format!(
                    "unknown setting '{key}' (settings are the long flags of --help)"
                ))
            })?;
        let long = arg.get_long().unwrap_or_default();
        if matches!(
            given.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        settings.push(long.to_string());
        let scalar = |v: &toml::Value| -> Result<String, SettingsError> {
            match v {
                toml::Value::String(s) => Ok(s.clone()),
                toml::Value::Integer(i) => Ok(i.to_string()),
                toml::Value::Float(f) => Ok(f.to_string()),
                other => Err(fail(format!(
                    "'{key}': expected a string or a number, got {}",
                    other.type_str()
                ))),
            }
        };
        match (arg.get_action(), value) {
            (ArgAction::SetTrue, toml::Value::Boolean(b)) => {
                if *b {
                    flags.push(format!("--{long}"));
                }
            }
            (ArgAction::SetTrue, other) => {
                return Err(fail(format!(
                    "'{key}': expected true or false, got {}",
                    other.type_str()
                )))
            }
            (ArgAction::Append, toml::Value::Array(items)) => {
                for item in items {
                    flags.push(format!("--{long}={}", scalar(item)?));
                }
            }
            (_, toml::Value::Array(_)) => {
                return Err(fail(format!("'{key}': takes one value, not a list")))
            }
            (_, v) => flags.push(format!("--{long}={}", scalar(v)?)),
        }
    }
    Ok(FromFile { flags, settings })
}

fn read_bounded(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read: {e}"))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    Ok(text)
}

/// " (line L)" for a TOML error that has a place.
fn located(text: &str, e: &toml::de::Error) -> String {
    e.span()
        .map(|s| format!(" (line {})", text[..s.start].lines().count().max(1)))
        .unwrap_or_default()
}

/// The settings in effect as TOML, each line saying where its value came from.
fn print(
    command: &Command,
    matches: &ArgMatches,
    given: &ArgMatches,
    from_file: &[String],
) -> String {
    let mut out = String::new();
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        let Some(long) = arg.get_long() else {
            continue;
        };
        if NOT_SETTINGS.contains(&id) {
            continue;
        }
        let key = long.replace('-', "_");
        let source = match given.value_source(id) {
            Some(ValueSource::CommandLine) => "flag",
            Some(ValueSource::EnvVariable) => "environment",
            _ if from_file.iter().any(|s| s == long) => "file",
            _ => "default",
        };
        let value = if matches!(arg.get_action(), ArgAction::SetTrue) {
            toml::Value::Boolean(matches.get_flag(id))
        } else {
            let Some(raw) = matches.get_raw(id) else {
                out.push_str(&format!("# {key}: not set\n"));
                continue;
            };
            let texts: Vec<toml::Value> = raw
                .map(|v| toml::Value::String(redact_url_passwords(&v.to_string_lossy())))
                .collect();
            match arg.get_action() {
                ArgAction::Append => toml::Value::Array(texts),
                _ => texts
                    .into_iter()
                    .next()
                    .unwrap_or(toml::Value::String(String::new())),
            }
        };
        out.push_str(&format!("{key} = {value}  # {source}\n"));
    }
    out
}

/// `value` with the password of every URL in it (`scheme://user:password@host`, as in
/// a NATS URL list; a lone `token@host` whole) shown as `<redacted>`: `--print-config` output gets pasted into
/// tickets and chats.
fn redact_url_passwords(value: &str) -> String {
    value
        .split(',')
        .map(|part| {
            let Some(scheme_end) = part.find("://") else {
                return part.to_string();
            };
            let rest = &part[scheme_end + 3..];
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let Some(at) = rest[..authority_end].rfind('@') else {
                return part.to_string();
            };
            match rest[..at].find(':') {
                Some(colon) => format!(
                    "{}{}:<redacted>{}",
                    &part[..scheme_end + 3],
                    &rest[..colon],
                    &rest[at..]
                ),
                // A NATS URL's lone userinfo is a token.
                None => format!("{}<redacted>{}", &part[..scheme_end + 3], &rest[at..]),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Daemon {
        #[arg(long, default_value = "1s")]
        heartbeat_period: String,
        #[arg(long, default_value_t = 1)]
        kv_replicas: u8,
        #[arg(long)]
        tag: Vec<String>,
        #[arg(long)]
        insecure: bool,
        #[arg(long)]
        http: Option<std::net::SocketAddr>,
        /// A flag whose long name is not its field's.
        #[arg(long = "tls-ca")]
        ca: Option<String>,
        #[command(flatten)]
        settings: SettingsArgs,
    }

    fn with_file(toml: &str, flags: &[&str]) -> Result<Parsed<Daemon>, SettingsError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.toml");
        std::fs::write(&path, toml).unwrap();
        let mut argv: Vec<OsString> = vec!["daemon".into(), "--config-file".into(), path.into()];
        argv.extend(flags.iter().map(OsString::from));
        parse_from(argv)
    }

    #[test]
    fn the_file_sets_flags_and_the_command_line_overrides_it() {
        let p = with_file(
            "heartbeat_period = \"400ms\"\nkv-replicas = 3\ntag = [\"gpu\", \"ssd\"]\ninsecure = true\ntls_ca = \"/etc/ca.pem\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(p.args.heartbeat_period, "400ms");
        assert_eq!(p.args.kv_replicas, 3);
        assert_eq!(p.args.tag, ["gpu", "ssd"]);
        assert!(p.args.insecure);
        assert_eq!(p.args.ca.as_deref(), Some("/etc/ca.pem"));
        assert!(p.printed.is_none());
        let p = with_file(
            "heartbeat_period = \"400ms\"\ntag = [\"gpu\"]\ninsecure = false\n",
            &["--heartbeat-period", "2s", "--tag", "cpu"],
        )
        .unwrap();
        assert_eq!(p.args.heartbeat_period, "2s");
        assert_eq!(p.args.tag, ["cpu"], "the flag's list replaces the file's");
        assert!(!p.args.insecure);
    }

    #[test]
    fn print_config_hides_a_urls_password() {
        let p = with_file(
            "heartbeat_period = \"nats://alice:s3cret@h1:4222,nats://h2:4222,tls://bob:pw@h3/x\"\n",
            &["--print-config"],
        )
        .unwrap();
        let printed = p.printed.unwrap();
        assert!(
            !printed.contains("s3cret") && !printed.contains(":pw@"),
            "{printed}"
        );
        assert!(
            printed.contains(
                "nats://alice:<redacted>@h1:4222,nats://h2:4222,tls://bob:<redacted>@h3/x"
            ),
            "{printed}"
        );
        assert_eq!(
            redact_url_passwords("nats://t0ken@h:1"),
            "nats://<redacted>@h:1"
        );
        assert_eq!(redact_url_passwords("/etc/ytsched"), "/etc/ytsched");
    }

    #[test]
    fn print_config_says_each_value_and_where_it_came_from() {
        let p = with_file(
            "kv_replicas = 3\ntag = [\"gpu\"]\ninsecure = false\n",
            &["--print-config", "--heartbeat-period", "2s"],
        )
        .unwrap();
        let printed = p.printed.unwrap();
        assert!(
            printed.contains("heartbeat_period = \"2s\"  # flag"),
            "{printed}"
        );
        assert!(printed.contains("kv_replicas = \"3\"  # file"), "{printed}");
        assert!(printed.contains("tag = [\"gpu\"]  # file"), "{printed}");
        assert!(printed.contains("insecure = false  # file"), "{printed}");
        assert!(printed.contains("# http: not set"), "{printed}");
        assert!(printed.contains("# tls_ca: not set"), "{printed}");
        // What it prints reads back as a settings file that means the same.
        let again: String = printed
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split("  #").next().unwrap().to_string() + "\n")
            .collect();
        let q = with_file(&again, &[]).unwrap();
        assert_eq!(q.args.kv_replicas, 3);
        assert_eq!(q.args.heartbeat_period, "2s");
    }

    #[test]
    fn a_bad_file_is_refused_naming_the_file_and_the_key() {
        for (toml, says) in [
            (
                "heartbeat_perod = \"1s\"",
                "unknown setting 'heartbeat_perod'",
            ),
            ("config_file = \"x\"", "unknown setting 'config_file'"),
            (
                "insecure = \"yes\"",
                "'insecure': expected true or false, got string",
            ),
            ("kv_replicas = [1, 2]", "'kv_replicas': takes one value"),
            (
                "tag = [{a = 1}]",
                "'tag': expected a string or a number, got table",
            ),
            ("heartbeat_period = 1s", "line 1"),
        ] {
            let e = with_file(toml, &[]).err().expect("refused").to_string();
            assert!(e.contains("daemon.toml") && e.contains(says), "{toml}: {e}");
        }
        // A value the flag itself refuses is refused as the flag would be.
        let e = with_file("kv_replicas = 300", &[])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("kv-replicas") && e.contains("300"), "{e}");
        let e = parse_from::<Daemon>(vec![
            "daemon".into(),
            "--config-file".into(),
            "/nonexistent/daemon.toml".into(),
        ])
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("/nonexistent/daemon.toml: cannot read"), "{e}");
        let big = format!("# {}\n", "x".repeat(MAX_FILE_BYTES as usize));
        let e = with_file(&big, &[]).err().unwrap().to_string();
        assert!(e.contains("larger than"), "{e}");
    }
}
