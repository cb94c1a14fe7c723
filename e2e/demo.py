"""The demo: start mock LLM, sidecar and Envoy; talk through Envoy; show what was
injected; stop everything.

    python -m e2e.demo [--workdir data/demo] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from e2e.scenario import run_scenario
from e2e.stack import running_stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path("data/demo"))
    parser.add_argument("--keep", action="store_true", help="keep the previous demo store")
    args = parser.parse_args(argv)
    if args.workdir.exists() and not args.keep:
        shutil.rmtree(args.workdir)
    print("starting mock LLM, sidecar and Envoy (loading the embedding model takes a few s)")
    with running_stack(args.workdir) as stack:
        print(f"Envoy listens on {stack.base_url} (full memory), /readonly/v1, /nomemory/v1")
        report = run_scenario(stack)
        print("\nstopping")
    failed = report.failed
    print(f"\n{len(report.checks) - len(failed)}/{len(report.checks)} demo checks passed")
    for check in failed:
        print(f"FAILED: {check.name} {check.detail}", file=sys.stderr)
    print(f"logs and the store: {args.workdir}/")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
