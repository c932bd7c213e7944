#!/usr/bin/env bash
# Installs what is missing, builds, and runs a local lab with the demo operation
# (`sleep 60; cat`, SPEC scenario 1); prints the job's output and stops the lab.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh
cargo build --workspace --bins --locked --release
exec ./target/release/ytsched up --nodes 2 --demo "$@"
