#!/usr/bin/env bash
# The fault campaign on the compose lab (issue 42, docs/reliability.md): a lab with a
# standby scheduler, a steady workload, faults of every kind drawn from a seed and
# healed, then the whole history checked against the invariants. Run by .ci/run for 3
# minutes with a fixed seed; by hand for longer:
#   compose/chaos.sh --minutes 30             # a random seed, printed
#   compose/chaos.sh --minutes 3 --seed 42    # replays a run
#   YTSCHED_LAB_PROFILE=debug                 # debug binaries in the image (as CI)
# Skips (exit 0, saying so) where no Docker engine is reachable.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! docker info >/dev/null 2>&1; then
    echo "chaos: SKIPPED: no Docker engine is reachable here"
    exit 0
fi
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
    echo "chaos: SKIPPED: Docker has no compose tool (docker compose / docker-compose)"
    exit 0
fi
for tool in nsenter tc; do
    command -v "$tool" >/dev/null 2>&1 || { echo "chaos: needs $tool (util-linux, iproute2)" >&2; exit 1; }
done
cargo build --locked -q -p ytsched-tests --bin ytsched-chaos
exec target/debug/ytsched-chaos --profile "${YTSCHED_LAB_PROFILE:-release}" "$@"
