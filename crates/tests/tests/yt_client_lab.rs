//! YTsaurus's own client, unmodified (`ytsaurus-client` from PyPI, pinned and installed
//! by `scripts/install-deps.sh`), drives a real lab through the scheduler's YTsaurus HTTP
//! API: the `yt` command line and a `yt.wrapper` script (issue 40).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;
use ytsched_tests::*;

/// The virtualenv that holds `ytsaurus-client`.
fn yt_venv() -> PathBuf {
    let venv = std::env::var("YTSCHED_YT_CLIENT_VENV").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.tools/yt"),
        PathBuf::from,
    );
    assert!(
        venv.join("bin/yt").exists(),
        "ytsaurus-client is missing at {}: run ./scripts/install-deps.sh",
        venv.display()
    );
    venv
}

/// A user of the lab as YTsaurus's client sees it: the proxy and a web token.
struct YtUser {
    proxy: String,
    token: String,
    home: tempfile::TempDir,
}

impl YtUser {
    fn new(addr: &str, token: String) -> YtUser {
        YtUser {
            proxy: format!("http://{addr}"),
            token,
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// A command of the client's virtualenv, with only this user's settings.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(yt_venv().join("bin").join(program));
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("YT_PROXY", &self.proxy)
            .env("YT_TOKEN", &self.token);
        c
    }

    fn yt(&self, args: &[&str]) -> Output {
        self.command("yt").args(args).output().expect("run yt")
    }

    /// `yt ARGS`, which must succeed: its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.yt(args);
        assert!(
            out.status.success(),
            "yt {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["--format", "json"]);
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("yt {args:?}: {e}: {text}"))
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The operation id in the client's "Operation started: <url>" line.
fn started_id(log: &str) -> String {
    let url = log
        .split("id=")
        .nth(1)
        .expect("the client printed the operation's URL");
    url.split('&').next().unwrap().to_string()
}

fn lab() -> Lab {
    Lab::start_with(
        &["--http", "127.0.0.1:0"],
        vec![NodeOpts::two_cpus(), NodeOpts::two_cpus()],
    )
    .unwrap()
}

/// A token for a new user, once the scheduler has read it.
fn user_token(lab: &Lab, addr: &str, name: &str) -> String {
    lab.add_user(name, false).unwrap();
    let token = lab.new_web_token(name).unwrap();
    let auth = format!("OAuth {token}");
    wait_until(Duration::from_secs(15), || {
        let (status, _, _) = http_call(
            addr,
            "GET",
            "/auth/whoami",
            &[("Authorization", &auth)],
            b"",
        )
        .ok()?;
        (status == 200).then_some(())
    })
    .unwrap();
    token
}

#[test]
fn yt_cli_runs_watches_and_manages_vanilla_operations_and_pools() {
    let lab = lab();
    let addr = lab.http_addr().unwrap();
    let admin = YtUser::new(&addr, lab.web_token());
    assert_eq!(admin.ok(&["whoami"]), "admin");

    // Pools, as an admin shapes them with YTsaurus's client.
    admin.ok(&[
        "create",
        "scheduler_pool",
        "--attributes",
        "{name=research;pool_tree=default}",
    ]);
    admin.ok(&["set", "//sys/pool_trees/default/research/@weight", "3"]);
    let weight: f64 = admin
        .ok(&["get", "//sys/pool_trees/default/research/@weight"])
        .parse()
        .unwrap();
    assert_eq!(weight, 3.0);
    let pools = admin.json(&["list", "//sys/pool_trees/default"]);
    assert!(
        pools
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("research")),
        "{pools}"
    );

    // A synchronous vanilla operation: the client's own progress lines, then exit 0.
    let out = admin.yt(&[
        "vanilla",
        "--tasks",
        r#"{t={command="echo hi >&2; sleep 1";job_count=2}}"#,
        "--spec",
        "{pool=research}",
    ]);
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("running=") && log.contains("completed"),
        "{log}"
    );
    let id = started_id(&log);
    let op = lab.operation(&id).unwrap();
    assert_eq!(
        (op["state"].as_str(), op["pool"].as_str()),
        (Some("completed"), Some("research")),
        "{op}"
    );
    let orchid = admin.json(&[
        "get",
        "//sys/scheduler/orchid/scheduler/pool_trees/default/pools",
    ]);
    assert!(orchid.get("research").is_some(), "{orchid}");

    // A failing one: non-zero, with the failed job's stderr fetched by the client.
    let out = admin.yt(&[
        "vanilla",
        "--tasks",
        r#"{t={command="echo boom-in-stderr >&2; exit 3";job_count=1}}"#,
        "--spec",
        "{max_failed_job_count=1}",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("boom-in-stderr"), "{}", stderr(&out));
    let failed = started_id(&stderr(&out));
    let jobs = admin.json(&["list-jobs", &failed, "--job-state", "failed"]);
    let job = jobs["jobs"][0]["id"].as_str().unwrap().to_string();
    assert!(admin
        .ok(&["get-job-stderr", &job, &failed])
        .contains("boom-in-stderr"));

    manage_a_running_operation(&lab, &addr, &admin);
    files_through_the_client(&lab, &addr, &admin);

    // A command ytsched does not serve is refused by name.
    let out = admin.yt(&[
        "execute",
        "read_table",
        r#"{path="//tmp/t";output_format=json}"#,
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("does not support the command 'read_table'"),
        "{}",
        stderr(&out)
    );
    let out = admin.yt(&["get", "//home/alice"]);
    assert!(
        stderr(&out).contains("does not support the path '//home/alice'"),
        "{}",
        stderr(&out)
    );
    print_commands(&lab);
}

/// `yt write-file` into the user's own file paths, and a task's `file_paths` naming
/// them (with `file_name` and `executable`); another user's `//tmp/run.py` is not theirs.
fn files_through_the_client(lab: &Lab, addr: &str, admin: &YtUser) {
    let script = lab.dir.path().join("yt-run.sh");
    std::fs::write(&script, "echo shipped-by-yt-$YT_JOB_INDEX >&2\n").unwrap();
    let out = admin
        .command("yt")
        .args(["write-file", "//tmp/run.sh"])
        .stdin(std::fs::File::open(&script).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(admin.ok(&["exists", "//tmp/run.sh"]), "true");
    let tasks = r#"{t={command="./go.sh";job_count=1;file_paths=[<file_name="go.sh";executable=%true>"//tmp/run.sh"]}}"#;
    let out = admin.yt(&["vanilla", "--tasks", tasks]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = started_id(&stderr(&out));
    let jobs = admin.json(&["list-jobs", &id]);
    let job = jobs["jobs"][0]["id"].as_str().unwrap().to_string();
    assert!(admin
        .ok(&["get-job-stderr", &job, &id])
        .contains("shipped-by-yt-0"));
    let eve = YtUser::new(addr, user_token(lab, addr, "eve"));
    assert_eq!(eve.ok(&["exists", "//tmp/run.sh"]), "false");
    let out = eve.yt(&["vanilla", "--tasks", tasks]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("node //tmp/run.sh has no file"),
        "{}",
        stderr(&out)
    );
    admin.ok(&["remove", "//tmp/run.sh"]);
    assert_eq!(admin.ok(&["exists", "//tmp/run.sh"]), "false");
}

/// How each command the client sent was answered (`/metrics`), for the record.
fn print_commands(lab: &Lab) {
    let (_, metrics) = lab.http_admin_get("/metrics").unwrap();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("ytsched_yt_commands_total"))
    {
        println!("{line}");
    }
}

/// `list-operations`, `get-operation`, suspend and resume, a weight change, `list-jobs`,
/// and an abort refused to another user and done by the owner.
fn manage_a_running_operation(lab: &Lab, addr: &str, admin: &YtUser) {
    let id = admin.ok(&[
        "vanilla",
        "--tasks",
        r#"{t={command="sleep 300";job_count=2}}"#,
        "--async",
    ]);
    let listed = admin.json(&["list-operations"]);
    assert!(
        listed["operations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == id.as_str()),
        "{listed}"
    );
    wait_until(Duration::from_secs(20), || {
        let op = admin.json(&["get-operation", &id]);
        (op["brief_progress"]["jobs"]["running"] == 2).then_some(())
    })
    .unwrap();
    admin.ok(&["suspend-op", &id]);
    assert_eq!(
        admin.json(&["get-operation", &id, "--attribute", "suspended"])["suspended"],
        true
    );
    admin.ok(&["resume-op", &id]);
    assert_eq!(lab.operation(&id).unwrap()["suspended"], false);
    admin.ok(&["update-op-parameters", &id, "{weight=2}"]);
    assert_eq!(lab.operation(&id).unwrap()["weight"], 2.0);
    let jobs = admin.json(&["list-jobs", &id, "--job-state", "running"]);
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 2, "{jobs}");
    let job = jobs["jobs"][0]["id"].as_str().unwrap().to_string();
    let got = admin.json(&["get-job", &job, &id]);
    assert_eq!(
        (got["state"].as_str(), got["operation_id"].as_str()),
        (Some("running"), Some(id.as_str())),
        "{got}"
    );
    // `abort-job` names only the job: its operation is read from the id.
    admin.ok(&["abort-job", &job]);
    wait_until(Duration::from_secs(20), || {
        let attempts = lab.jobs(&id).ok()?;
        attempts
            .iter()
            .any(|j| j["id"] == job.as_str() && j["abort_reason"] == "user_request")
            .then_some(())
    })
    .unwrap();

    let mallory = YtUser::new(addr, user_token(lab, addr, "mallory"));
    let out = mallory.yt(&["abort-op", &id]);
    assert!(!out.status.success());
    let why = stderr(&out);
    assert!(
        why.contains("901") && why.contains("mallory") && why.contains("abort"),
        "{why}"
    );
    assert_eq!(lab.operation(&id).unwrap()["state"], "running");
    admin.ok(&["abort-op", &id]);
    assert_eq!(lab.operation(&id).unwrap()["state"], "aborted");
    let other = admin.ok(&[
        "vanilla",
        "--tasks",
        r#"{t={command="sleep 300";job_count=1}}"#,
        "--async",
    ]);
    admin.ok(&["complete-op", &other]);
    assert_eq!(lab.operation(&other).unwrap()["state"], "completed");
}

#[test]
fn yt_wrapper_script_and_the_wire_conventions() {
    let lab = lab();
    let addr = lab.http_addr().unwrap();
    let admin = YtUser::new(&addr, lab.web_token());
    admin.ok(&[
        "create",
        "scheduler_pool",
        "--attributes",
        "{name=research;pool_tree=default}",
    ]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("yt/wrapper_script.py");
    let out = admin.command("python").arg(&script).output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}\n{}", stderr(&out));
    for step in [
        "run_operation sync",
        "Operation.wait",
        "get_job_stderr",
        "raises with stderr",
        "list_operations",
        "local file through the file cache",
    ] {
        assert!(printed.contains(step), "{step}: {printed}");
    }

    // A retried start with the same mutation id answers the same operation.
    let auth = format!("OAuth {}", lab.web_token());
    let start = |retry: bool| {
        let body = format!(
            r#"{{"operation_type":"vanilla","mutation_id":"1a2b3c4d-5e6f7a8b-9c0d1e2f-3a4b5c6d","retry":{retry},"spec":{{"tasks":{{"t":{{"command":"true","job_count":1}}}}}}}}"#
        );
        let headers = [
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("X-YT-Header-Format", "json"),
        ];
        let (status, _, body) = http_call(
            &addr,
            "POST",
            "/api/v4/start_operation",
            &headers,
            body.as_bytes(),
        )
        .unwrap();
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["operation_id"].clone()
    };
    assert_eq!(start(false), start(true));
    // Any other mutation: the retry gets the first answer; a new one the honest error.
    let create = |mutation: &str, retry: bool| {
        let body = format!(
            r#"{{"type":"scheduler_pool","attributes":{{"name":"retried","pool_tree":"default"}},"mutation_id":"{mutation}","retry":{retry}}}"#
        );
        let headers = [
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        http_call(&addr, "POST", "/api/v4/create", &headers, body.as_bytes()).unwrap()
    };
    assert_eq!(create("aaaa-bbbb-cccc-0001", false).0, 200);
    let (status, _, body) = create("aaaa-bbbb-cccc-0001", true);
    assert_eq!(status, 200, "{body}");
    let (status, head, _) = create("aaaa-bbbb-cccc-0002", false);
    assert_eq!(status, 400, "{head}");
    assert!(
        head.to_lowercase().contains("x-yt-response-code: 501"),
        "{head}"
    );

    // State never changes by GET; YSON out; errors in the headers, with YTsaurus's codes.
    let h = [("Authorization", auth.as_str())];
    let (status, head, _) = http_call(
        &addr,
        "GET",
        "/api/v4/abort_operation?operation_id=x",
        &h,
        b"",
    )
    .unwrap();
    assert_eq!(status, 400, "{head}");
    assert!(
        head.to_lowercase()
            .lines()
            .any(|l| l.trim() == "x-yt-response-code: 1"),
        "{head}"
    );
    let (status, _, body) = http_call(
        &addr,
        "GET",
        "/api/v4/get_current_user?output_format=yson",
        &h,
        b"",
    )
    .unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("admin"), "{body}");
    let yson_params = [
        ("Authorization", auth.as_str()),
        ("X-YT-Header-Format", "<format=text>yson"),
        (
            "X-YT-Parameters",
            "{operation_id=\"00000000-0000-0000-0000-000000000000\"}",
        ),
    ];
    let (status, head, body) =
        http_call(&addr, "GET", "/api/v4/get_operation", &yson_params, b"").unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(
        head.to_lowercase().contains("x-yt-response-code: 1915"),
        "{head}"
    );
    let (status, head, _) = http_call(&addr, "GET", "/api/v4/get_current_user", &[], b"").unwrap();
    assert_eq!(status, 401);
    assert!(
        head.to_lowercase().contains("x-yt-response-code: 900"),
        "{head}"
    );
    let (status, _, listing) = http_call(&addr, "GET", "/api/v4", &[], b"").unwrap();
    assert_eq!(status, 200);
    assert!(listing.contains("\"start_operation\""), "{listing}");
    print_commands(&lab);
}
