//! The scheduler's HTTP face on a real lab (SPEC 6.4): the web page, JSON and metrics.

use std::io::{Read, Write};
use std::time::Duration;
use ytsched_tests::*;

/// A plain HTTP/1.1 GET: (status code, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let body = raw
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    (status, body)
}

#[test]
fn web_page_json_and_metrics() {
    let lab = Lab::start_with(
        &["--http", "127.0.0.1:0"],
        vec![NodeOpts::args(&["--cpu", "2", "--memory", "2G"])],
    )
    .unwrap();
    let addr = lab
        .http_addr()
        .expect("the scheduler logs its HTTP address");
    let op = lab
        .submit_spec("tasks: {t: {command: 'echo oops >&2', job_count: 2}}")
        .unwrap();
    lab.wait_finished(&op, Duration::from_secs(30)).unwrap();

    // Every page is the same shell; its script and style are served from the binary.
    for path in [
        "/",
        "/pools",
        "/nodes",
        "/operations",
        &format!("/operations/{op}"),
    ] {
        let (status, page) = get(&addr, path);
        assert_eq!(status, 200, "{path}");
        assert!(
            page.contains("/assets/app.js") && page.contains("Pool trees"),
            "{page}"
        );
    }
    let (status, js) = get(&addr, "/assets/app.js");
    assert_eq!(status, 200);
    assert!(js.contains("/api/orchid"), "the UI polls the JSON API");
    let (status, _) = get(&addr, "/assets/app.css");
    assert_eq!(status, 200);
    let (status, why) = get(&addr, &format!("/api/operations/{op}/explain"));
    assert_eq!(status, 200, "{why}");
    let why: serde_json::Value = serde_json::from_str(&why).unwrap();
    assert!(
        why["text"].as_str().unwrap().contains("is completed"),
        "{why}"
    );
    let (status, history) = get(&addr, &format!("/api/operations/{op}/history"));
    assert_eq!(status, 200);
    assert!(history.starts_with('['), "{history}");
    let (status, nodes) = get(&addr, "/api/nodes");
    assert_eq!(status, 200);
    let nodes: serde_json::Value = serde_json::from_str(&nodes).unwrap();
    assert_eq!(nodes[0]["id"], "node0");
    let (_, info) = get(&addr, &format!("/api/operations/{op}"));
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["state"], "completed");
    let (_, jobs) = get(&addr, &format!("/api/operations/{op}/jobs"));
    let jobs: serde_json::Value = serde_json::from_str(&jobs).unwrap();
    // The finished attempt is no longer held by the core: the page reads it from the
    // store.
    assert_eq!(jobs["jobs"][0]["state"], "completed", "{jobs}");
    let job = jobs["jobs"][0]["id"].as_str().unwrap().to_string();
    let (status, none) = get(&addr, &format!("/api/operations/{op}/jobs?state=failed"));
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&none).unwrap()["jobs"],
        serde_json::json!([])
    );
    let (status, _) = get(&addr, &format!("/api/operations/{op}/jobs?cursor=x"));
    assert_eq!(status, 400);
    // The HTTP side authenticates no one: it never serves job output.
    let (status, _) = get(&addr, &format!("/operations/{op}/jobs/{job}/stderr"));
    assert_eq!(status, 404);
    let (_, js) = get(&addr, "/assets/app.js");
    assert!(
        !js.contains("/stderr") && !js.contains("/stdout"),
        "no job output links"
    );
    let (status, metrics) = get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("ytsched_operations{state=\"completed\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ytsched_nodes{state=\"online\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ytsched_pool_ratio{tree=\"default\""),
        "{metrics}"
    );
    let (status, _) = get(&addr, "/api/operations/no-such-op");
    assert_eq!(status, 404);
}
