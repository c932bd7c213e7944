#!/usr/bin/env bash
# The whole test suite: installs what it needs, checks formatting and lints, builds the
# binaries the end-to-end tests start, and runs every test (unit, property, end-to-end).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh
export YTSCHED_NATS_SERVER="$PWD/.tools/bin/nats-server"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --bins --locked
cargo test --workspace --locked

# The Debian packages: contents, systemd units, dpkg -i in a fresh Debian container (the
# container part skips, saying so, without a Docker engine).
bash packaging/test-packages.sh

# The docker-compose lab, end to end (skips, saying so, without a Docker engine).
YTSCHED_LAB_PROFILE=debug bash compose/lab-test.sh
