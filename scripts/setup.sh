#!/usr/bin/env bash
# Create .venv if missing and install the project into it (idempotent).
# torch goes first, its CPU build: as a dependency of sentence-transformers pip would
# pick PyPI's CUDA build (gigabytes of CUDA packages).
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

# The CPU build is asked for by name (2.13.0+cpu): PyPI's plain torch wheel for Linux
# is the CUDA build (gigabytes). Where no configured index has it (a user's machine),
# PyTorch's CPU index is added; where one does (a local wheel, a mirror), nothing is.
TORCH="torch==2.13.0+cpu"
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
    echo "==> installing $TORCH"
    if "$VENV/bin/python" -m pip install --quiet --dry-run --no-deps "$TORCH" >/dev/null 2>&1; then
        "$VENV/bin/python" -m pip install --quiet -c constraints.txt "$TORCH"
    else
        "$VENV/bin/python" -m pip install --quiet -c constraints.txt "$TORCH" \
            --extra-index-url "$TORCH_CPU_INDEX"
    fi
fi

stamp="$VENV/.memory-sidecar-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    echo "==> installing the project and its dev dependencies (constraints.txt)"
    "$VENV/bin/python" -m pip install --quiet -c constraints.txt -e ".[dev]"
    touch "$stamp"
fi
