//! The daemons' settings files (`--config-file`, TOML) with the real binaries: an agent
//! configured only by its file joins a live lab as the file says; flags override the
//! file; `--print-config` says where each setting came from; a bad file is refused
//! before anything starts, naming the file and the key.

use std::process::Command;
use std::time::Duration;
use ytsched_tests::*;

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn an_agent_configured_by_its_settings_file_joins_as_the_file_says() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "node.toml",
        "cpu = 3\nuser_slots = 5\ntag = [\"from_file\", \"ssd\"]\nkill-grace = \"2s\"\n",
    );
    let lab = Lab::start(vec![NodeOpts::args(&["--config-file", &file])]).unwrap();
    let node = wait_until(Duration::from_secs(20), || {
        let nodes: Vec<serde_json::Value> = lab.json(&["list-nodes"]).ok()?;
        nodes.into_iter().find(|n| n["state"] == "online")
    })
    .expect("the agent registers");
    assert_eq!(node["resource_limits"]["cpu"].as_f64(), Some(3.0), "{node}");
    assert_eq!(
        node["resource_limits"]["user_slots"].as_f64(),
        Some(5.0),
        "{node}"
    );
    let tags: Vec<&str> = node["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    assert_eq!(tags, ["from_file", "ssd"], "{node}");
}

#[test]
fn print_config_shows_the_settings_in_effect_and_a_bad_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "scheduler.toml",
        "heartbeat_period = \"400ms\"\nkv_replicas = 3\nhttp = \"127.0.0.1:8080\"\n",
    );
    let out = Command::new(binary("ytsched-scheduler"))
        .args([
            "--config-file",
            &file,
            "--print-config",
            "--kv-replicas",
            "1",
        ])
        .env_remove("YTSCHED_NATS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    for line in [
        "heartbeat_period = \"400ms\"  # file",
        "kv_replicas = \"1\"  # flag",
        "http = \"127.0.0.1:8080\"  # file",
        "nats = \"nats://127.0.0.1:4222\"  # default",
        "insecure = false  # default",
    ] {
        assert!(printed.contains(line), "{line} in:\n{printed}");
    }
    for (bin, text, says) in [
        (
            "ytsched-scheduler",
            "hearbeat_period = \"1s\"\n",
            "unknown setting 'hearbeat_period'",
        ),
        (
            "ytsched-node",
            "tag = \"gpu\"\nkill_grace = [1]\n",
            "'kill_grace': takes one value",
        ),
        (
            "ytsched-node",
            "insecure = \"yes\"\n",
            "'insecure': expected true or false",
        ),
        ("ytsched-scheduler", "kv_replicas = 9\n", "kv-replicas"),
    ] {
        let file = write(dir.path(), "bad.toml", text);
        let out = Command::new(binary(bin))
            .args(["--config-file", &file])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bin} {text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{bin} {text}: {err}");
    }
}
