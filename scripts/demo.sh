#!/usr/bin/env bash
# Set up (if needed), then run the demo: mock LLM + sidecar + Envoy, a scripted
# conversation through Envoy with the OpenAI SDK, and what was injected.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "${VENV:-.venv}/bin/python" -m e2e.demo "$@"
