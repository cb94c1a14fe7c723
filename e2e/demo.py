"""The demo: start mock LLM, sidecar and Envoy; talk through Envoy; show what was
injected; print the memory console's address and a sign-in token made for this run;
stop everything (``--serve``: keep it all running for the console until Ctrl-C or
SIGTERM).

    python -m e2e.demo [--workdir data/demo] [--keep] [--serve]
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import shutil
import signal
import sys
import threading
from pathlib import Path

from e2e.scenario import run_scenario
from e2e.stack import running_stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path("data/demo"))
    parser.add_argument("--keep", action="store_true", help="keep the previous demo store")
    parser.add_argument(
        "--serve", action="store_true", help="keep running after the scenario (Ctrl-C stops)"
    )
    args = parser.parse_args(argv)
    # SIGTERM (kill, a service manager) stops the stack as Ctrl-C does: Python's
    # default would end this process at once and leave mock, sidecar and Envoy running.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    if args.workdir.exists() and not args.keep:
        shutil.rmtree(args.workdir)
    token = secrets.token_urlsafe(24)
    overrides = {
        "admin": {"token": token},
        # The console's "why was this injected?" (off by default: private data).
        "defaults": {"injection": {"explain_last": 20}},
    }
    print("starting mock LLM, sidecar and Envoy (loading the embedding model takes a few s)")
    with running_stack(args.workdir, config_overrides=overrides) as stack:
        print(f"Envoy listens on {stack.base_url} (full memory), /readonly/v1, /nomemory/v1")
        report = run_scenario(stack)
        print(f"\nmemory console: {stack.sidecar_admin_url}/console/  (sign-in token: {token})")
        if args.serve:
            print("serving until Ctrl-C (or SIGTERM)", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
        else:
            print("(./scripts/demo.sh --serve keeps the stack running to browse it)")
        print("\nstopping")
    failed = report.failed
    print(f"\n{len(report.checks) - len(failed)}/{len(report.checks)} demo checks passed")
    for check in failed:
        print(f"FAILED: {check.name} {check.detail}", file=sys.stderr)
    print(f"logs and the store: {args.workdir}/")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
