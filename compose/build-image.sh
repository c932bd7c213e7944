#!/usr/bin/env bash
# Builds the lab image `ytsched-lab:latest` from scratch, without any registry:
#   compose/build-image.sh [--profile release|debug]
# Gathers into compose/.build/rootfs: the three ytsched binaries (stripped) and the
# shared libraries `ldd` says they need, a static busybox (installed from Debian's
# busybox-static if missing) linked as sh, sleep, cat and friends, and the static
# nats-server that scripts/install-deps.sh installs.
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
if ! dpkg -s busybox-static >/dev/null 2>&1; then
    echo "build-image: installing Debian's busybox-static"
    apt-get install -y -q busybox-static >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q busybox-static >/dev/null; }
fi

flags=(--locked --bins -p ytsched-scheduler -p ytsched-node -p ytsched-cli)
[[ "$profile" == release ]] && flags+=(--release)
echo "build-image: building the $profile binaries"
cargo build "${flags[@]}"

root=compose/.build/rootfs
rm -rf compose/.build
mkdir -p "$root/usr/local/bin" "$root/bin" "$root/etc" "$root/tmp" "$root/data"
chmod 1777 "$root/tmp"
for b in ytsched ytsched-scheduler ytsched-node; do
    cp "target/$profile/$b" "$root/usr/local/bin/"
    strip "$root/usr/local/bin/$b"
    # The libraries each binary links, at the same paths (the loader included).
    ldd "target/$profile/$b" | grep -o '/[^ ]*' | while read -r lib; do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
done
cp -L "$(readlink -f .tools/bin/nats-server)" "$root/usr/local/bin/nats-server"
cp /bin/busybox "$root/bin/busybox"
for tool in sh ash cat sleep echo true false ls ps kill mkdir rm cp mv env head tail wc grep seq date \
    hostname id uname df du find xargs sed awk tr sort uniq tee touch stat printf expr test dd yes; do
    ln -sf busybox "$root/bin/$tool"
done
echo 'root:x:0:0:root:/tmp:/bin/sh' > "$root/etc/passwd"
echo 'root:x:0:' > "$root/etc/group"

if ! docker build -t ytsched-lab:latest -f compose/Dockerfile compose/.build >compose/.build/docker-build.log 2>&1; then
    cat compose/.build/docker-build.log >&2
    echo "build-image: docker build failed" >&2
    exit 1
fi
echo "build-image: ytsched-lab:latest ($(docker image inspect ytsched-lab:latest --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}'), $profile binaries)"
