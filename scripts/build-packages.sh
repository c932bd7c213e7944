#!/usr/bin/env bash
# Builds the Debian packages ytsched, ytsched-scheduler and ytsched-node into
# target/debian/ with cargo-deb (installed into ~/.cargo/bin if missing):
#   scripts/build-packages.sh [--profile release|debug]
# What each package holds, and how to deploy them: docs/deploy.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

profile=release
while [[ $# -gt 0 ]]; do
    case "$1" in
        --profile) profile="${2:-}"; shift 2 ;;
        *) echo "build-packages: unknown argument '$1' (use --profile release|debug)" >&2; exit 2 ;;
    esac
done
case "$profile" in release|debug) ;; *) echo "build-packages: --profile must be release or debug" >&2; exit 2 ;; esac

cargo_deb_version="3.8.0"
if ! cargo deb --version 2>/dev/null | grep -q "$cargo_deb_version"; then
    echo "build-packages: installing cargo-deb $cargo_deb_version (crates.io)" >&2
    cargo install --locked --quiet cargo-deb --version "$cargo_deb_version"
fi

flags=(--locked --bins -p ytsched-cli -p ytsched-scheduler -p ytsched-node)
[[ "$profile" == release ]] && flags+=(--release)
cargo build "${flags[@]}"
cargo_profile=$([[ "$profile" == release ]] && echo release || echo dev)
rm -rf target/debian
for package in ytsched-cli ytsched-scheduler ytsched-node; do
    # cargo-deb warns that a dev profile is meant for tests, not releases: it is.
    cargo deb --no-build --no-strip --profile "$cargo_profile" -p "$package" --output target/debian/ 2>&1 >/dev/null \
        | { grep -v -e '^warning: dev profile is not supported' -e 'To enable debug symbols set' || true; } >&2
done
ls target/debian/*.deb
