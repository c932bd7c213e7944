//! Log setup every binary shares: `tracing` lines to stderr, filtered by `RUST_LOG`
//! (falling back to the binary's own default level). Colours only on a terminal, so log
//! files and `docker logs` read (and grep) as plain text.

/// Installs the global subscriber; `default_filter` applies when `RUST_LOG` is unset.
pub fn init(default_filter: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}
