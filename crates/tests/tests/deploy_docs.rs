//! The deployment guide and the packaged files, checked against the real binaries so
//! that the documented path is one that works: every settings file in
//! `docs/deploy.md`, `packaging/config/` and `compose/config/` is read by the daemon it
//! is for, every command of the guide is one the compose lab runs (or the guide says
//! why the lab cannot), and every
//! metric the Grafana dashboard plots is one a live scheduler serves.

use std::process::Command;
use ytsched_tests::*;

fn repo_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The ```toml blocks of a Markdown text.
fn toml_blocks(markdown: &str) -> Vec<String> {
    code_blocks(markdown, "toml")
}

/// The blocks of one language of a Markdown text.
fn code_blocks(markdown: &str, language: &str) -> Vec<String> {
    let fence = format!("```{language}");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l == fence => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap_or_default()),
            (Some(text), _) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// `bin --config-file FILE --print-config` with `text` as the file: what it prints.
fn print_config(bin: &str, text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("settings.toml");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(binary(bin))
        .arg("--config-file")
        .arg(&file)
        .arg("--print-config")
        .env_remove("YTSCHED_NATS")
        .env_remove("YTSCHED_CREDS")
        .env_remove("YTSCHED_TLS_CA")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{bin} refuses:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_settings_file_shown_or_packaged_is_read_by_its_daemon() {
    let guide = repo_file("docs/deploy.md");
    let blocks = toml_blocks(&guide);
    assert_eq!(blocks.len(), 2, "the guide's scheduler.toml and node.toml");
    let scheduler = print_config("ytsched-scheduler", &blocks[0]);
    assert!(
        scheduler.contains("kv_replicas = \"3\"  # file"),
        "{scheduler}"
    );
    let node = print_config("ytsched-node", &blocks[1]);
    assert!(node.contains("cgroup_root = \"@self\"  # file"), "{node}");
    assert!(node.contains("tag = [\"ssd\"]  # file"), "{node}");
    let packaged = print_config(
        "ytsched-scheduler",
        &repo_file("packaging/config/scheduler.toml"),
    );
    assert!(
        packaged.contains("creds = \"/etc/ytsched/auth/scheduler.creds\"  # file"),
        "{packaged}"
    );
    let packaged = print_config("ytsched-node", &repo_file("packaging/config/node.toml"));
    assert!(
        packaged.contains("work_dir = \"/var/lib/ytsched/jobs\"  # file"),
        "{packaged}"
    );
    // The README's example too.
    for block in toml_blocks(&repo_file("README.md")) {
        print_config("ytsched-node", &block);
    }
    // And the compose lab's, which its services start from.
    let lab = print_config(
        "ytsched-scheduler",
        &repo_file("compose/config/scheduler.toml"),
    );
    assert!(lab.contains("kv_replicas = \"3\"  # file"), "{lab}");
    for n in 1..=3 {
        let node = print_config(
            "ytsched-node",
            &repo_file(&format!("compose/config/node{n}.toml")),
        );
        assert!(
            node.contains(&format!("creds = \"/auth/node{n}.creds\"  # file")),
            "{node}"
        );
    }
}

#[test]
fn the_dashboard_plots_only_metrics_a_scheduler_serves() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&repo_file("docs/grafana-dashboard.json")).unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() >= 6, "{exprs:?}");
    let lab = Lab::start_with(&["--http", "127.0.0.1:0"], vec![NodeOpts::default()]).unwrap();
    lab.wait_for_nodes(1).unwrap();
    lab.create_pool("default", "research");
    let (status, metrics) = lab.http_admin_get("/metrics").unwrap();
    assert_eq!(status, 200);
    for expr in &exprs {
        let names = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("ytsched_"));
        for name in names {
            assert!(
                metrics.contains(&format!("# TYPE {name} ")),
                "{name} (in {expr}) is not served:\n{metrics}"
            );
        }
        if let Some(kind) = expr
            .split("kind=\"")
            .nth(1)
            .and_then(|k| k.split('"').next())
        {
            assert!(
                metrics.contains(&format!("kind=\"{kind}\"")),
                "{kind}: {metrics}"
            );
        }
    }
}

/// Guide commands the compose lab does not run as written, each with what the lab runs
/// instead (a text its files must hold) or, where it runs nothing, why.
const LAB_RUNS_INSTEAD: &[(&str, &str, &str)] = &[
    (
        "apt",
        "dpkg -i",
        "the lab's image installs the same packages with dpkg -i",
    ),
    (
        "systemctl",
        "\"--config-file\", \"/etc/ytsched/",
        "the lab has no systemd: each service runs its unit's command line",
    ),
    (
        "ytsched-scheduler",
        "[\"ytsched-scheduler\", \"--config-file\"",
        "started as its unit starts it",
    ),
    (
        "ytsched-node",
        "[\"ytsched-node\", \"--config-file\"",
        "started as its unit starts it",
    ),
    (
        "scripts/build-packages.sh",
        "scripts/build-packages.sh",
        "the image is built from the packages",
    ),
    ("nats-server", "nats-server", "the lab's three NATS servers"),
    (
        "export",
        "",
        "sets the environment of the commands that follow",
    ),
    (
        "kill",
        "kill -s HUP nats1 nats2 nats3",
        "NATS reloads its identities",
    ),
    (
        "nats",
        "",
        "backups are not part of the lab: the durability tests revive the state instead",
    ),
];

/// What a `ytsched` command line runs: its subcommand words (`auth init`, `list-nodes`).
fn subcommand(words: &[&str]) -> String {
    words
        .iter()
        .skip(1)
        .take_while(|w| {
            !w.is_empty()
                && !w.starts_with('-')
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-' || c == '_')
        })
        .take(2)
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn every_command_of_the_guide_is_one_the_lab_runs_or_says_why_not() {
    let lab: String = [
        "compose/compose.yaml",
        "compose/lab-test.sh",
        "compose/Dockerfile",
        "compose/build-image.sh",
    ]
    .iter()
    .map(|f| repo_file(f))
    .collect::<Vec<_>>()
    .join("\n");
    let mut checked = 0;
    for block in code_blocks(&repo_file("docs/deploy.md"), "sh") {
        for line in block.lines() {
            let line = line.split(" #").next().unwrap_or_default().trim();
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(program) = words.first() else {
                continue;
            };
            checked += 1;
            if *program == "ytsched" {
                let sub = subcommand(&words);
                // lab-test.sh runs the CLI as `yt` (the admin) or `"$cli"`.
                let ran = [
                    format!("ytsched {sub}"),
                    format!("yt {sub}"),
                    format!("yt --format json {sub}"),
                    format!("\"$cli\" {sub}"),
                ];
                assert!(
                    ran.iter().any(|r| lab.contains(r.as_str())),
                    "the guide's `{line}` (ytsched {sub}) is not run by the compose lab"
                );
                continue;
            }
            let Some((_, instead, why)) = LAB_RUNS_INSTEAD.iter().find(|(p, _, _)| p == program)
            else {
                panic!("the guide's `{line}`: the lab neither runs `{program}` nor says why not");
            };
            assert!(
                lab.contains(instead),
                "`{line}`: the lab should hold `{instead}` ({why})"
            );
        }
    }
    assert!(checked >= 15, "{checked} commands in the guide");
}
