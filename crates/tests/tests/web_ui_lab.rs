//! The web UI in a real browser (issue 17): headless Chromium loads each page of a live
//! 2-node lab, and the test reads the DOM after the page's scripts ran: the lab's pools,
//! operations and nodes are there, and no script error was reported. A screenshot of
//! each page is kept under `target/web-ui/` (and the pool tree's is the README's,
//! refreshed with `YTSCHED_UPDATE_SCREENSHOT=1`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use ytsched_tests::*;

fn headless(browser: &Path, extra: &[&str], url: &str) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    Command::new(browser)
        .args(HEADLESS_CHROMIUM)
        .args([
            "--hide-scrollbars",
            "--window-size=1400,900",
            // Timers and fetches run on virtual time: the page has refreshed more than
            // once before the DOM is read.
            "--virtual-time-budget=4000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium")
}

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/web-ui");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The DOM of `path` after its scripts ran, checked for a clean, rendered page; a
/// screenshot is kept as `name.png`. `base` ends with the sign-in fragment's position:
/// each run is a fresh browser profile, signed in by the `#token=` link `ytsched up`
/// prints.
fn render(browser: &Path, (base, token): (&str, &str), path: &str, name: &str) -> String {
    let url = format!("{base}{path}#token={token}");
    let out = headless(browser, &["--dump-dom"], &url);
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dom.contains("data-ready=\"1\""),
        "{url} never rendered:\n{dom}"
    );
    assert!(
        dom.contains("<div id=\"errors\"></div>"),
        "{url} reported script errors:\n{dom}"
    );
    let shot = artifacts().join(format!("{name}.png"));
    let out = headless(
        browser,
        &[&format!("--screenshot={}", shot.display())],
        &url,
    );
    assert!(
        out.status.success() && shot.exists(),
        "{url}: no screenshot"
    );
    dom
}

#[test]
fn every_page_renders_the_lab_in_a_real_browser() {
    let Some(browser) = chromium() else {
        eprintln!("skipped: no chromium (scripts/install-deps.sh installs it)");
        return;
    };
    let nodes = vec![NodeOpts::two_cpus(), NodeOpts::two_cpus()];
    let lab = Lab::start_with(&["--http", "127.0.0.1:0"], nodes).unwrap();
    let addr = lab.http_addr().unwrap();
    let base = format!("http://{addr}");
    let token = lab.web_token();
    let base = (base.as_str(), token.as_str());
    lab.ok(&[
        "create",
        "scheduler_pool",
        "--name",
        "research",
        "--attributes",
        "{strong_guarantee_resources={cpu=2}}",
    ]);
    lab.ok(&[
        "create",
        "scheduler_pool",
        "--name",
        "ml",
        "--parent-name",
        "research",
    ]);
    // A failing operation first, while the nodes are free: its page lists the failure.
    let bad = lab
        .submit_spec(
            "pool: etl\nmax_failed_job_count: 1\ntasks: {bad: {command: 'exit 2', cpu_limit: 0.1}}",
        )
        .unwrap();
    lab.wait_finished(&bad, Duration::from_secs(30)).unwrap();
    let ml = lab
        .submit_spec(
            "pool: ml\ntitle: training\ntasks: {train: {command: 'sleep 30', job_count: 3}}",
        )
        .unwrap();
    let other = lab
        .submit_spec("pool: etl\ntasks: {load: {command: 'sleep 30', job_count: 4}}")
        .unwrap();
    wait_until(Duration::from_secs(15), || {
        let r = lab.operation(&ml).ok()?["jobs"]["running"].as_i64()?
            + lab.operation(&other).ok()?["jobs"]["running"].as_i64()?;
        (r == 4).then_some(())
    })
    .unwrap();

    let pools = render(&browser, base, "/pools", "pool-tree");
    for pool in ["research", "ml", "etl"] {
        assert!(
            pools.contains(&format!("data-pool=\"{pool}\"")),
            "pool {pool} missing:\n{pools}"
        );
    }
    for op in [&ml, &other] {
        assert!(
            pools.contains(&format!("data-operation=\"{op}\"")),
            "operation {op} missing"
        );
    }
    assert!(pools.contains("class=\"bar fair\""), "fair share bars");

    let page = render(&browser, base, &format!("/operations/{ml}"), "operation");
    assert!(
        page.contains(&format!("data-operation-id=\"{ml}\"")),
        "{page}"
    );
    assert!(
        page.contains("training") && page.contains("sleep 30"),
        "spec summary"
    );
    assert!(
        page.contains("in pool tree 'default', pool 'ml'"),
        "explain:\n{page}"
    );
    assert_eq!(page.matches("data-job=").count(), 3, "{page}");
    assert!(page.contains("submitted; running"), "events:\n{page}");

    let failed = render(
        &browser,
        base,
        &format!("/operations/{bad}"),
        "failed-operation",
    );
    assert!(
        failed.contains(&format!("job {bad}-")) && failed.contains(" failed: "),
        "{failed}"
    );

    // Changed while it runs (SPEC 5.14): the page says it is suspended, why, and what
    // was changed.
    lab.ok(&["update-op-parameters", &other, "{weight=2}"]);
    lab.ok(&["suspend-operation", &other]);
    let suspended = render(
        &browser,
        base,
        &format!("/operations/{other}"),
        "suspended-operation",
    );
    for words in [
        "running (suspended)",
        "suspended: it is given no new jobs",
        "parameters updated: weight=2",
    ] {
        assert!(suspended.contains(words), "{words}:\n{suspended}");
    }

    // A gang too big for the free room waits whole; its page says so and why.
    let gang = lab
        .submit_spec("pool: etl\nis_gang: true\ntasks: {g: {command: 'sleep 30', job_count: 8}}")
        .unwrap();
    wait_until(Duration::from_secs(15), || {
        lab.ok(&["explain", &gang])
            .contains("a gang of 8 job(s) waits")
            .then_some(())
    })
    .unwrap();
    let waiting = render(
        &browser,
        base,
        &format!("/operations/{gang}"),
        "gang-operation",
    );
    for words in [
        "running (gang_does_not_fit)",
        "yes: all its jobs run together",
        "a gang of 8 job(s) waits to start whole",
    ] {
        assert!(waiting.contains(words), "{words}:\n{waiting}");
    }

    let nodes = render(&browser, base, "/nodes", "nodes");
    for n in ["node0", "node1"] {
        assert!(
            nodes.contains(&format!("data-node=\"{n}\"")),
            "{n} missing:\n{nodes}"
        );
    }
    // The usage page sums the event log: the jobs that ran so far, per user.
    let usage = render(&browser, base, "/usage?by=user&since=1h", "usage");
    assert!(
        usage.contains("id=\"usage\"") && usage.contains("fair-share attainment"),
        "{usage}"
    );
    assert!(usage.contains("data-group=\""), "a row per user:\n{usage}");
    let ops = render(&browser, base, "/operations", "operations");
    assert!(ops.contains(&ml) && ops.contains(&other));
    assert!(ops.contains("running (suspended)"), "{ops}");
    // Without a token the page asks for one and shows no data.
    let out = headless(&browser, &["--dump-dom"], &format!("{}/operations", base.0));
    let signed_out = String::from_utf8_lossy(&out.stdout);
    assert!(
        signed_out.contains("id=\"sign-in\"") && !signed_out.contains(&ml),
        "{signed_out}"
    );

    if std::env::var_os("YTSCHED_UPDATE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::copy(
            artifacts().join("pool-tree.png"),
            docs.join("pool-tree.png"),
        )
        .unwrap();
    }
    for op in [&ml, &other] {
        lab.ok(&["abort-operation", op]);
    }
}
