//! Accepting HTTP connections within bounds. Each connection must send a whole request
//! header within the header timeout, also between requests on a kept-alive connection
//! (hyper starts the clock when a connection goes idle), so idle or trickling clients
//! cannot pile up; and past the connection cap a newcomer is told "busy, retry" and
//! closed at once, so no number of clients can take the scheduler's file descriptors.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// The bounds one listener keeps.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Connections open at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Connections one client address may hold open at once: one address reopening
    /// connections as fast as they close cannot take every slot from the others.
    pub max_per_address: usize,
    /// How long a client may take to send a request's header, and may stay idle.
    pub header_timeout: Duration,
}

/// What a client past the cap reads before the connection closes.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\nContent-Length: 40\r\nConnection: close\r\n\r\ntoo many connections; busy, retry later\n";

/// Connections the kernel may hold for us between two accepts: a burst of clients
/// (a browser opens six at once, a dashboard dozens) must not find the queue full, or
/// each one turned away waits a whole second to try again.
const ACCEPT_BACKLOG: u32 = 4096;

/// Listens on `addr` with a deep accept queue (the default 128 overflows under a burst
/// of connections while the accept loop sets up the previous ones).
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_BACKLOG)
}

/// Serves `router` on `listener` until accepting fails for good.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    bounds: Bounds,
    tls: Option<tokio_rustls::TlsAcceptor>,
    refusals: Arc<crate::gates::refusals::Refusals>,
) -> anyhow::Result<()> {
    tracing::info!(
        addr = %listener.local_addr()?,
        https = tls.is_some(),
        max_connections = bounds.max_connections,
        header_timeout_ms = bounds.header_timeout.as_millis() as u64,
        "HTTP listening"
    );
    let slots = Arc::new(tokio::sync::Semaphore::new(bounds.max_connections.max(1)));
    let addresses = AddressCounts::default();
    loop {
        let (mut stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors or memory for a moment: the clients already in are
                // served, and accepting resumes shortly.
                tracing::debug!(error = %e, "HTTP accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(per_address) = addresses.take(peer.ip(), bounds.max_per_address) else {
            refusals.count(
                crate::gates::refusals::Refusal::HttpAddressConnections,
                || {
                    format!(
                        "HTTP connection from {} refused: it has {} open already",
                        peer.ip(),
                        bounds.max_per_address
                    )
                },
            );
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(BUSY)).await;
            });
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refusals.count(crate::gates::refusals::Refusal::HttpConnections, || {
                format!(
                    "HTTP connection refused: {} open already",
                    bounds.max_connections
                )
            });
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(BUSY)).await;
            });
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (router, tls) = (router.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, router, bounds).await,
                // The handshake is held to the header timeout too: a client that
                // opens a connection and never speaks TLS goes as an idle one does.
                Some(tls) => {
                    match tokio::time::timeout(bounds.header_timeout, tls.accept(stream)).await {
                        Ok(Ok(stream)) => serve_connection(stream, router, bounds).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
            drop(slot);
            drop(per_address);
        });
    }
}

/// Serves one connection (plain or TLS) until it closes.
async fn serve_connection<I>(io: I, router: axum::Router, bounds: Bounds)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let mut router = router.clone();
        async move {
            Ok::<_, Infallible>(
                tower_service::Service::call(&mut router, req)
                    .await
                    .unwrap_or_else(|never| match never {}),
            )
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(bounds.header_timeout)
        .max_buf_size(64 * 1024)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "HTTP connection ended");
    }
}

/// Connections open per client address (bounded by the connection cap itself: an
/// address is forgotten when its last connection closes).
#[derive(Clone, Default)]
struct AddressCounts(Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>);

/// One connection of an address, counted until dropped.
struct AddressSlot {
    counts: AddressCounts,
    ip: std::net::IpAddr,
}

impl AddressCounts {
    fn take(&self, ip: std::net::IpAddr, max: usize) -> Option<AddressSlot> {
        let mut counts = self.0.lock().ok()?;
        let n = counts.entry(ip).or_insert(0);
        if *n >= max.max(1) {
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            counts: self.clone(),
            ip,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        if let Ok(mut counts) = self.counts.0.lock() {
            if let Some(n) = counts.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&self.ip);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_holds_at_most_its_share_and_is_forgotten_when_done() {
        let counts = AddressCounts::default();
        let (a, b): (std::net::IpAddr, std::net::IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let held: Vec<_> = (0..3).map(|_| counts.take(a, 3).unwrap()).collect();
        assert!(
            counts.take(a, 3).is_none(),
            "a fourth from the same address"
        );
        assert!(counts.take(b, 3).is_some(), "another address is let in");
        drop(held);
        assert!(counts.0.lock().unwrap().is_empty());
        assert!(counts.take(a, 3).is_some());
    }
}
