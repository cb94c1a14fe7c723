#!/usr/bin/env bash
# Set up (if needed), then run the whole check: format, lint, types, tests.
# Extra arguments go to pytest (e.g. ./scripts/test.sh -k codec, or -m slow).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/setup_browser.sh

VENV=${VENV:-.venv}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

echo "==> ruff format --check"
"$VENV/bin/ruff" format --check sidecar tests e2e scripts
echo "==> ruff check"
"$VENV/bin/ruff" check sidecar tests e2e scripts
echo "==> mypy"
"$VENV/bin/mypy" sidecar e2e scripts tests/support
echo "==> pytest"
"$VENV/bin/python" -m pytest "$@"
