"""End-to-end check through the real Envoy: exits non-zero if any check fails.

python -m e2e.run_e2e [--workdir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from e2e.scenario import run_scenario
from e2e.stack import running_stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, help="where logs and the store go")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="memory-e2e-"))
    with running_stack(workdir) as stack:
        report = run_scenario(stack)
    print()
    for check in report.checks:
        print(f"[{'PASS' if check.ok else 'FAIL'}] {check.name} {check.detail}".rstrip())
    if report.failed:
        print(f"\n{len(report.failed)} check(s) failed; logs in {workdir}", file=sys.stderr)
        return 1
    print(f"\nall {len(report.checks)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
