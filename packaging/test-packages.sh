#!/usr/bin/env bash
# Tests the Debian packages (issue 29): builds them, checks what each holds, verifies the
# systemd units with systemd-analyze, then installs them with dpkg -i into a fresh
# Debian container and runs the daemons from their packaged settings. The container's
# image is made from scratch with debootstrap (no registry) and kept as
# ytsched-debian:bookworm. Without a Docker engine that last part skips, saying so.
#   packaging/test-packages.sh          (YTSCHED_PACKAGE_PROFILE=release|debug, default debug)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fail() { echo "test-packages: FAILED: $*" >&2; exit 1; }

scripts/build-packages.sh --profile "${YTSCHED_PACKAGE_PROFILE:-debug}" >/dev/null

# What each package holds: its binary, its unit and its settings as a conffile.
for part in scheduler node; do
    deb=$(ls target/debian/ytsched-${part}_*.deb)
    [[ "$(dpkg-deb -f "$deb" Package)" == "ytsched-$part" ]] || fail "$deb: wrong package name"
    conffiles=$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)
    [[ "$conffiles" == "/etc/ytsched/$part.toml" ]] || fail "$deb: conffiles are '$conffiles'"
    listing=$(dpkg-deb -c "$deb")
    for path in "./usr/bin/ytsched-$part" "./usr/lib/systemd/system/ytsched-$part.service" "./etc/ytsched/$part.toml"; do
        grep -q " $path\$" <<<"$listing" || fail "$deb lacks $path"
    done
done
[[ "$(dpkg-deb -f target/debian/ytsched-scheduler_*.deb Depends)" == *adduser* ]] || fail "ytsched-scheduler must depend on adduser"
dpkg-deb -c target/debian/ytsched_*.deb | grep -q ' ./usr/bin/ytsched$' || fail "ytsched lacks /usr/bin/ytsched"
echo "test-packages: contents ok" >&2

# The units, as systemd reads them, in a root of the packages' files and the host's
# own units; any complaint (even one systemd only warns about) fails.
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
for deb in target/debian/*.deb; do dpkg-deb -x "$deb" "$root"; done
if command -v systemd-analyze >/dev/null 2>&1; then
    cp -an /usr/lib/systemd/system/. "$root/usr/lib/systemd/system/" 2>/dev/null || true
    out=$(systemd-analyze verify --man=no --root="$root" \
        /usr/lib/systemd/system/ytsched-scheduler.service /usr/lib/systemd/system/ytsched-node.service 2>&1) \
        || fail "systemd-analyze verify: $out"
    [[ -z "$out" ]] || fail "systemd-analyze verify: $out"
    echo "test-packages: systemd-analyze verify ok" >&2
    # Their hardening never slips (issue 38: 7.3 and 9.6 before; 1.4 and 6.8 now).
    for unit_limit in ytsched-scheduler:15 ytsched-node:70; do
        unit=${unit_limit%%:*} limit=${unit_limit##*:}
        score=$(systemd-analyze security --offline=yes --threshold="$limit" \
            "$root/usr/lib/systemd/system/$unit.service" 2>&1 | tail -1) \
            || fail "$unit.service is less hardened than before: $score"
        echo "test-packages: $score" >&2
    done
else
    echo "test-packages: SKIPPED systemd-analyze verify (no systemd-analyze here)" >&2
fi
grep -qx 'Delegate=yes' "$root/usr/lib/systemd/system/ytsched-node.service" || fail "ytsched-node.service must delegate its cgroup"
grep -qx 'Restart=on-failure' "$root/usr/lib/systemd/system/ytsched-scheduler.service" || fail "no Restart=on-failure"

if ! docker info >/dev/null 2>&1; then
    echo "test-packages: SKIPPED the install in a fresh Debian container (no Docker engine)" >&2
    exit 0
fi
image=ytsched-debian:bookworm
packaging/debian-image.sh
docker run --rm -v "$PWD/target/debian:/pkgs:ro" "$image" sh -euc '
    dpkg -i /pkgs/*.deb >/dev/null
    id ytsched >/dev/null
    check() { [ "$(stat -c "%U:%G %a" "$1")" = "$2" ] || { echo "$1 is $(stat -c "%U:%G %a" "$1"), not $2" >&2; exit 1; }; }
    check /etc/ytsched "root:ytsched 750"
    check /etc/ytsched/auth "root:ytsched 750"
    check /etc/ytsched/scheduler.toml "root:ytsched 640"
    check /etc/ytsched/node.toml "root:root 640"
    check /var/lib/ytsched/jobs "root:root 711"
    ytsched-scheduler --config-file /etc/ytsched/scheduler.toml --print-config | grep -qx "creds = \"/etc/ytsched/auth/scheduler.creds\"  # file"
    ytsched-node --config-file /etc/ytsched/node.toml --print-config | grep -qx "cgroup_root = \"@self\"  # file"
    ytsched --version >/dev/null
    # The scheduler runs as its user and refuses, naming it, to start without credentials.
    out=$(su -s /bin/sh ytsched -c "ytsched-scheduler --config-file /etc/ytsched/scheduler.toml" 2>&1) && { echo "started without credentials" >&2; exit 1; }
    echo "$out" | grep -q "scheduler.creds" || { echo "unexpected: $out" >&2; exit 1; }
    # Removing keeps the settings; purging takes them.
    dpkg -r ytsched-node ytsched-scheduler ytsched >/dev/null
    [ -f /etc/ytsched/scheduler.toml ] || { echo "remove took the settings" >&2; exit 1; }
    dpkg -P ytsched-node ytsched-scheduler ytsched >/dev/null
    [ ! -e /etc/ytsched/scheduler.toml ] || { echo "purge left the settings" >&2; exit 1; }
' || fail "installing in a fresh Debian container"
echo "test-packages: dpkg -i in a fresh Debian container ok" >&2
echo "test-packages: PASSED"
