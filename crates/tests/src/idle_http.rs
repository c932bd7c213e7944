//! Idle HTTP clients and one web UI reader, for `ytsched-load --idle-http N`: the
//! scheduler's heartbeat figures measured while N connections sit idle or half-sent on its
//! HTTP face (replaced as its header timeout closes them), and how the UI is answered
//! meanwhile.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the UI reader saw.
#[derive(Debug, Default, Clone)]
pub struct UiFigures {
    pub reads: u64,
    pub failures: u64,
    pub p50_ms: f64,
    pub max_ms: f64,
    /// Idle connections open when the run ended.
    pub idle_held: usize,
}

/// Holds `n` idle connections to `addr` and, with `token`, reads what the UI's pages
/// read (`/api/operations`, then `/api/orchid`, in turn) every half second, until
/// `stop`; returns what the reader saw.
pub fn run(addr: String, token: String, n: usize, stop: Arc<AtomicBool>) -> UiFigures {
    let holder = {
        let (addr, stop) = (addr.clone(), stop.clone());
        std::thread::spawn(move || hold(&addr, n, &stop))
    };
    let mut times = vec![];
    let mut failures = 0;
    let pages = ["/api/operations?limit=100", "/api/orchid"];
    let mut turn = 0;
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        turn += 1;
        match crate::http_request(&addr, pages[turn % pages.len()], Some(&token)) {
            Ok((200, _)) => times.push(t.elapsed().as_secs_f64() * 1000.0),
            _ => failures += 1,
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    times.sort_by(f64::total_cmp);
    UiFigures {
        reads: times.len() as u64,
        failures,
        p50_ms: times.get(times.len() / 2).copied().unwrap_or(0.0),
        max_ms: times.last().copied().unwrap_or(0.0),
        idle_held: holder.join().unwrap_or(0),
    }
}

/// Keeps `n` connections open, half of them with half a request header sent; reopens
/// those the server closes. Returns how many were open at the end.
fn hold(addr: &str, n: usize, stop: &AtomicBool) -> usize {
    let mut open: Vec<TcpStream> = Vec::with_capacity(n);
    while !stop.load(Ordering::Relaxed) {
        // Still open is "nothing to read yet"; EOF, an answer or an error means the
        // server let it go.
        open.retain_mut(|s| {
            let mut buf = [0u8; 256];
            matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        });
        while open.len() < n {
            let Ok(mut s) = TcpStream::connect(addr) else {
                break;
            };
            if open.len().is_multiple_of(2) {
                let _ = s.write_all(b"GET /api/orchid HTTP/1.1\r\nHost: idle\r\n");
            }
            let _ = s.set_nonblocking(true);
            open.push(s);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    open.len()
}
