#!/usr/bin/env bash
# Build the memory-sidecar image from this checkout: one command.
#
#   scripts/container/build.sh [--local-base] [--tag TAG] [-- EXTRA BUILD ARGS...]
#
# --local-base   build FROM localhost/memory-sidecar-base:bookworm, made first by
#                scripts/container/base.sh where missing (hosts that cannot pull the
#                public python:3.11-slim-bookworm image).
# --tag TAG      default memory-sidecar:<version in pyproject.toml>.
# Anything after -- goes to the build (e.g. --build-arg TORCH_VARIANT=cu128).
#
# podman is used when present (with scripts/container/containers.conf unless
# CONTAINERS_CONF is set), else docker. Under podman the host's pip configuration
# (indexes, find-links, certificate) is handed to the build, with the local
# directories it names mounted read-only, so a host with a local package mirror
# builds from it; docker builds use the build's own network (PyPI).
set -euo pipefail
cd "$(dirname "$0")/../.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
tag="memory-sidecar:${version}"
base=""
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --local-base) base=localhost/memory-sidecar-base:bookworm ;;
        --tag) tag=$2; shift ;;
        --) shift; extra=("$@"); break ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

args=(--file Containerfile --tag "$tag")
if command -v podman >/dev/null 2>&1; then
    engine=podman
    export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/scripts/container/containers.conf}
    # HEALTHCHECK is a docker-format instruction; the OCI format drops it.
    args+=(--format docker --isolation chroot)
    if [ -n "$base" ]; then
        scripts/container/base.sh "$base"
    fi
    pipconf=$(mktemp -d)
    trap 'rm -rf "$pipconf"' EXIT
    {
        echo "[global]"
        # `pip config list`: file settings as global.KEY='V', environment ones as
        # :env:.KEY='V' (later lines win).
        for key in index-url extra-index-url find-links cert; do
            value=$(python3 -m pip config list 2>/dev/null \
                | sed -n "s/^[^.]*\.${key}='\(.*\)'\$/\1/p" | tail -1)
            [ -n "$value" ] || continue
            echo "$key = $value"
            for item in $value; do
                dir=${item#file://}
                # A local index (…/simple) links to files beside it: mount its parent.
                case "$item" in file://*/simple|file://*/simple/) dir=$(dirname "$dir") ;; esac
                case "$dir" in
                    /*) [ -e "$dir" ] && args+=(--volume "$dir:$dir:ro") ;;
                esac
            done
        done
    } > "$pipconf/pip.conf"
    args+=(--volume "$pipconf/pip.conf:/etc/pip.conf:ro")
elif command -v docker >/dev/null 2>&1; then
    engine=docker
else
    echo "neither podman nor docker is installed" >&2
    exit 1
fi
[ -n "$base" ] && args+=(--build-arg "BASE=$base")

echo "==> $engine build -t $tag"
"$engine" build "${args[@]}" "${extra[@]}" .
"$engine" image ls "$tag"
