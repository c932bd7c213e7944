//! The web UI acts (issue 40 point 4): in a real headless Chromium, driven over the
//! DevTools protocol, an operation's owner suspends it and changes its weight with the
//! page's buttons, each after a confirmation; another user sees no button, and the
//! same call from their browser is refused with 403. State never changes by a GET.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};
use ytsched_tests::*;

/// One headless browser and its page, spoken to over the DevTools protocol.
struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    page: WebSocket<MaybeTlsStream<TcpStream>>,
    next: u64,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// The DevTools targets (`/json/list`), asked over HTTP/1.1: Chromium answers HTTP/1.0
/// with nothing.
fn devtools_targets(port: &str) -> String {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /json/list HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    raw.split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default()
}

impl Browser {
    fn start(binary: &PathBuf) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(binary)
            .args(HEADLESS_CHROMIUM)
            .arg("--remote-debugging-port=0")
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group: the helpers it forks go with it.
            .process_group(0)
            .spawn()
            .expect("run chromium");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("chromium said where DevTools listen")
                .unwrap();
            if let Some(rest) = line.split("ws://127.0.0.1:").nth(1) {
                break rest.split('/').next().unwrap().to_string();
            }
        };
        // Whatever else it says is drained, so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        eprintln!("devtools on port {port}");
        let targets: Vec<Value> = serde_json::from_str(&devtools_targets(&port)).unwrap();
        let url = targets
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .expect("a page target")
            .to_string();
        let (page, _) = tungstenite::connect(url).expect("DevTools websocket");
        // A browser that stops answering fails the test instead of hanging it.
        if let MaybeTlsStream::Plain(s) = page.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        }
        Browser {
            child,
            _profile: profile,
            page,
            next: 0,
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        eprintln!("devtools: {method} {params}");
        self.next += 1;
        let id = self.next;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.page.send(Message::text(msg)).unwrap();
        loop {
            let Message::Text(text) = self.page.read().unwrap() else {
                continue;
            };
            let v: Value = serde_json::from_str(text.as_str()).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }

    fn wait_for(&mut self, expression: &str) {
        wait_until(Duration::from_secs(20), || {
            (self.eval(expression) == json!(true)).then_some(())
        })
        .unwrap_or_else(|_| panic!("never true: {expression}"));
    }

    fn open(&mut self, url: &str) {
        // A fresh document each time: a change of the fragment alone would not reload it.
        self.call("Page.navigate", json!({"url": "about:blank"}));
        self.wait_for("location.href === 'about:blank'");
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for("document.body && document.body.dataset.ready === '1' && !!document.querySelector('[data-operation-id]')");
    }

    fn click(&mut self, selector: &str) {
        self.wait_for(&format!("!!document.querySelector('{selector}')"));
        self.eval(&format!("document.querySelector('{selector}').click()"));
    }
}

#[test]
fn the_owner_acts_from_the_page_and_no_one_else_can() {
    let Some(binary) = chromium() else {
        eprintln!("skipped: no chromium (scripts/install-deps.sh installs it)");
        return;
    };
    let lab = Lab::start_with(&["--http", "127.0.0.1:0"], vec![NodeOpts::two_cpus()]).unwrap();
    let addr = lab.http_addr().unwrap();
    let op = lab
        .submit_spec("tasks: {t: {command: 'sleep 300', job_count: 1}}")
        .unwrap();
    let page = format!("http://{addr}/operations/{op}");
    let mut browser = Browser::start(&binary);

    // The owner (the lab's admin): suspend, confirmed.
    browser.open(&format!("{page}#token={}", lab.web_token()));
    browser.click("button[data-action=suspend]");
    browser.wait_for("!!document.querySelector('#confirm')");
    assert_eq!(
        lab.operation(&op).unwrap()["suspended"],
        false,
        "nothing before the confirmation"
    );
    browser.click("button[data-confirm=yes]");
    wait_until(Duration::from_secs(10), || {
        (lab.operation(&op).ok()?["suspended"] == true).then_some(())
    })
    .unwrap();
    // A weight change, confirmed.
    browser.click("button[data-action=resume]");
    browser.click("button[data-confirm=yes]");
    browser.wait_for("!!document.querySelector('input[data-draft=weight]')");
    browser.eval("(() => { const i = document.querySelector('input[data-draft=weight]'); i.value = '3'; i.dispatchEvent(new Event('input', {bubbles: true})); })()");
    browser.click("button[data-action=update]");
    browser.click("button[data-confirm=yes]");
    wait_until(Duration::from_secs(10), || {
        (lab.operation(&op).ok()?["weight"] == 3.0).then_some(())
    })
    .unwrap();
    assert_eq!(lab.operation(&op).unwrap()["suspended"], false);

    // Another user: no buttons, and the call itself is refused.
    lab.add_user("mallory", false).unwrap();
    let token = lab.new_web_token("mallory").unwrap();
    let auth = format!("OAuth {token}");
    wait_until(Duration::from_secs(15), || {
        (http_call(
            &addr,
            "GET",
            "/auth/whoami",
            &[("Authorization", &auth)],
            b"",
        )
        .ok()?
        .0 == 200)
            .then_some(())
    })
    .unwrap();
    browser.open(&format!("{page}#token={token}"));
    assert_eq!(
        browser.eval("document.querySelector('[data-action]') === null"),
        true
    );
    let status = browser.eval(&format!(
        "fetch('/api/v4/suspend_operation', {{method: 'POST', headers: {{Authorization: 'Bearer {token}', 'Content-Type': 'application/json'}}, body: JSON.stringify({{operation_id: '{op}'}})}}).then(r => r.status)"
    ));
    assert_eq!(status, 403);
    let by_get = browser.eval(&format!(
        "fetch('/api/v4/abort_operation?operation_id={op}', {{headers: {{Authorization: 'Bearer {}'}}}}).then(r => r.status)",
        lab.web_token()
    ));
    assert_eq!(by_get, 400, "a GET never changes state, even the owner's");
    assert_eq!(lab.operation(&op).unwrap()["state"], "running");
}
