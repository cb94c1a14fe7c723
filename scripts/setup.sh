#!/usr/bin/env bash
# Create .venv if missing and install the project into it (idempotent).
# torch==2.13.0 goes first: it is a local CPU wheel here; any other version would
# pull gigabytes of CUDA packages as a dependency of sentence-transformers.
# Everything is installed under constraints.txt (scripts/lock.sh): a fresh venv
# gets the versions the suite last passed with, not whatever is newest that day.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY=${PYTHON_BOOTSTRAP:-python3}

if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi

if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
    echo "==> installing torch==2.13.0 (CPU)"
    "$VENV/bin/python" -m pip install --quiet -c constraints.txt "torch==2.13.0"
fi

stamp="$VENV/.memory-sidecar-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    echo "==> installing the project and its dev dependencies (constraints.txt)"
    "$VENV/bin/python" -m pip install --quiet -c constraints.txt -e ".[dev]"
    touch "$stamp"
fi
