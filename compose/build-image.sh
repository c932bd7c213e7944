#!/usr/bin/env bash
# Builds the lab image `ytsched-lab:latest` without any registry:
#   compose/build-image.sh [--profile release|debug]
# It is ytsched-debian:bookworm (a minimal Debian made with debootstrap,
# packaging/debian-image.sh) with our Debian packages installed by dpkg, as on a real
# machine (docs/deploy.md), plus the static nats-server that scripts/install-deps.sh
# installs. The services start from settings files (compose/config/), not flags.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

profile=release
while [[ $# -gt 0 ]]; do
    case "$1" in
        --profile) profile="$2"; shift 2 ;;
        *) echo "build-image: unknown argument '$1' (use --profile release|debug)" >&2; exit 2 ;;
    esac
done
case "$profile" in release|debug) ;; *) echo "build-image: --profile must be release or debug" >&2; exit 2 ;; esac

./scripts/install-deps.sh
packaging/debian-image.sh
echo "build-image: building the $profile packages"
scripts/build-packages.sh --profile "$profile" >/dev/null

rm -rf compose/.build
mkdir -p compose/.build/pkgs
cp target/debian/*.deb compose/.build/pkgs/
cp -L "$(readlink -f .tools/bin/nats-server)" compose/.build/nats-server

if ! docker build -t ytsched-lab:latest -f compose/Dockerfile compose/.build >compose/.build/docker-build.log 2>&1; then
    cat compose/.build/docker-build.log >&2
    echo "build-image: docker build failed" >&2
    exit 1
fi
echo "build-image: ytsched-lab:latest ($(docker image inspect ytsched-lab:latest --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}'), $profile packages)"
