#!/usr/bin/env bash
# Create .venv-mem0 for scripts/compare_mem0.py (idempotent): mem0ai 2.2.1 beside,
# not inside, the project's .venv. mem0ai pins protobuf < 7 and this project needs 7,
# so they cannot share an environment. .venv-mem0 sees .venv's packages (torch,
# sentence-transformers, pymilvus, milvus-lite, the packaged all-MiniLM-L6-v2) through
# a .pth file placed after its own site-packages, so what mem0ai needs in another
# version (protobuf) is installed in .venv-mem0 and wins there; .venv is not touched.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
MEM0_VENV=${MEM0_VENV:-.venv-mem0}
MEM0=${MEM0:-mem0ai==2.2.1}

./scripts/setup.sh
if [ ! -x "$MEM0_VENV/bin/python" ]; then
    echo "==> creating $MEM0_VENV"
    base=$("$VENV/bin/python" -c 'import sys; print(sys._base_executable)')
    "$base" -m venv "$MEM0_VENV"
    "$MEM0_VENV/bin/python" -m pip install --quiet --upgrade pip
fi
own=$("$MEM0_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shared=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$shared" > "$own/memory-sidecar-venv.pth"
if ! "$MEM0_VENV/bin/python" -c "import mem0" >/dev/null 2>&1; then
    echo "==> installing $MEM0 into $MEM0_VENV"
    # pip reports .venv's packages as conflicting with protobuf 6: expected, they are
    # not imported from here.
    "$MEM0_VENV/bin/python" -m pip install --quiet "$MEM0"
fi
