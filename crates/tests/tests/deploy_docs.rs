//! The deployment guide and the packaged files, checked against the real binaries so
//! that the documented path is one that works: every settings file in
//! `docs/deploy.md`, `packaging/config/` and `compose/config/` is read by the daemon it
//! is for, and every
//! metric the Grafana dashboard plots is one a live scheduler serves.

use std::process::Command;
use ytsched_tests::*;

fn repo_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The ```toml blocks of a Markdown text.
fn toml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```toml") => current = Some(String::new()),
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
    lab.ok(&[
        "create",
        "scheduler_pool",
        "--name",
        "research",
        "--pool-tree",
        "default",
    ]);
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
