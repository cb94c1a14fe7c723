#!/usr/bin/env bash
# Build the image and run the container test (tests/container): the e2e scenario
# through the real Envoy with the sidecar in the container, a restart on the same
# volume, SIGTERM. Needs podman (as root here: scripts/container/containers.conf);
# without it the test is skipped and says why. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/setup.sh
if ! command -v podman >/dev/null 2>&1; then
    echo "SKIPPED: the container test needs podman (apt-get install podman buildah runc debootstrap)"
    exit 0
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"${VENV:-.venv}/bin/python" -m pytest -m container tests/container -rs "$@"
