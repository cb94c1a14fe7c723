#!/usr/bin/env bash
# Make a local Python base image for hosts that cannot pull one (no registry
# reachable): Debian bookworm, minimal (debootstrap --variant=minbase), with
# Debian's Python 3.11 and venv, imported into podman as
# localhost/memory-sidecar-base:bookworm. Elsewhere the Containerfile's default
# base (the public python:3.11-slim-bookworm image) is used and this is not needed.
#
# Usage (as root; needs debootstrap and podman, and Debian's mirror):
#   scripts/container/base.sh [TAG]
# Idempotent: an image already tagged TAG is kept (delete it to rebuild).
set -euo pipefail
TAG=${1:-localhost/memory-sidecar-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PODMAN=${PODMAN:-podman}

if "$PODMAN" image exists "$TAG" 2>/dev/null; then
    echo "==> $TAG exists"
    exit 0
fi
root=$(mktemp -d /var/tmp/sidecar-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "==> debootstrap bookworm into $root"
debootstrap --variant=minbase \
    --include=python3,python3-venv,ca-certificates,libgomp1 \
    bookworm "$root" "$MIRROR" >/dev/null
# Nothing of apt's caches or docs in the image.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
echo "==> importing as $TAG"
tar -C "$root" -c . | "$PODMAN" import \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$TAG" >/dev/null
"$PODMAN" image ls "$TAG"
