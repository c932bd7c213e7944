#!/usr/bin/env bash
# Makes the Docker image ytsched-debian:bookworm, a minimal Debian (debootstrap minbase
# with adduser) built from scratch, since no image registry is at hand; kept once made.
# The package test installs into it, and the compose lab's image is built on it.
set -euo pipefail
image=ytsched-debian:bookworm
if docker image inspect "$image" >/dev/null 2>&1; then
    exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    echo "debian-image: installing Debian's debootstrap" >&2
    apt-get install -y -q debootstrap >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q debootstrap >/dev/null; }
fi
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
echo "debian-image: making $image with debootstrap" >&2
debootstrap --variant=minbase --include=adduser bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
tar -C "$rootfs" -c . | docker import - "$image" >/dev/null
echo "debian-image: $image made" >&2
