//! Log setup every binary shares: `tracing` lines to stderr, filtered by `RUST_LOG`
//! (falling back to the binary's own default level). Colours only on a terminal, so log
//! files and `docker logs` read (and grep) as plain text.

/// Installs the global subscriber; `default_filter` applies when `RUST_LOG` is unset.
/// The NATS client's own event lines are kept to warnings: it logs one line per event,
/// a slow consumer's among them, which under a flood is one line per dropped message;
/// `transport` logs events itself, counted and rate-limited.
pub fn init(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into())
        .add_directive("async_nats=warn".parse().expect("a valid directive"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
