#!/usr/bin/env python
"""One user's huge messages against everyone else's small ones, through the real Envoy.

Eight clients ask small questions (each its own user, with a memory to find) in a
loop; three clients send ``--big-mib`` MiB user messages in a loop. Three phases
of ``--seconds`` each, in one run:

* ``alone`` — the small clients only;
* ``big, no memory`` — the big messages through the route without memory (Envoy
  and the upstream carry them, the sidecar never sees them): what the load costs
  the machine by itself;
* ``big, memory`` — the big messages through the memory route: what the sidecar
  adds on top.

Reported per phase: the small requests' count, p50 and p99, how many lacked their
memory (``x-memory-injected`` missing or 0: an ext_proc timeout, a fail-open) and
non-200 answers; and the big requests' count. The echo mock answers with
everything it received, so a big request also costs a big response.

    .venv/bin/python -m scripts.bench_isolation --json out/bench_isolation.json
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.stack import Stack, running_stack
from scripts.benchlib import percentile, write_report

SMALL_CLIENTS = 8
BIG_CLIENTS = 3


@dataclass
class Phase:
    name: str
    small: list[float] = field(default_factory=list)
    without_memory: int = 0
    errors: int = 0
    big: int = 0

    def row(self) -> dict[str, Any]:
        return {
            "phase": self.name,
            "small_requests": len(self.small),
            "small_p50_ms": round(percentile(self.small, 50) * 1000, 1),
            "small_p99_ms": round(percentile(self.small, 99) * 1000, 1),
            "small_without_memory": self.without_memory,
            "errors": self.errors,
            "big_requests": self.big,
        }


def post(url: str, body: bytes, user: str) -> tuple[int, str | None]:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"content-type": "application/json", "x-user-id": user},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return response.status, response.headers.get("x-memory-injected")
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return 0, None


def big_body(mib: float) -> bytes:
    paste = "lorem ipsum dolor sit amet, consectetur adipiscing elit\n" * int(
        mib * 1024 * 1024 / 56
    )
    question = "Given all this, what should I pack for my trip?"
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": f"{paste}\n{question}"}]}
    ).encode()


def seed(stack: Stack, users: Sequence[str]) -> None:
    before = stack.turns_written()
    for user in users:
        stack.client(user).chat.completions.create(
            model="mock-llm", messages=[{"role": "user", "content": "I live in Lisbon."}]
        )
    if not stack.wait_turns_written(before + len(users), timeout=60):
        raise RuntimeError("the seed turns were not written")


def run_phase(
    stack: Stack, name: str, users: Sequence[str], big_route: str | None, mib: float, seconds: float
) -> Phase:
    phase = Phase(name)
    stop = threading.Event()
    lock = threading.Lock()
    url = stack.route_url("/v1") + "/chat/completions"
    small = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "Where do I live?"}]}
    ).encode()

    def small_loop(user: str) -> None:
        while not stop.is_set():
            started = time.perf_counter()
            status, injected = post(url, small, user)
            elapsed = time.perf_counter() - started
            with lock:
                phase.small.append(elapsed)
                phase.errors += status != 200
                phase.without_memory += status == 200 and (injected or "0") == "0"

    def big_loop(index: int, body: bytes) -> None:
        target = stack.route_url(big_route or "/v1") + "/chat/completions"
        while not stop.is_set():
            status, _ = post(target, body, f"big-sender-{index}")
            with lock:
                phase.big += 1
                phase.errors += status != 200

    threads = [threading.Thread(target=small_loop, args=(user,)) for user in users]
    if big_route is not None:
        body = big_body(mib)
        threads += [threading.Thread(target=big_loop, args=(i, body)) for i in range(BIG_CLIENTS)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return phase


def measure(stack: Stack, mib: float, seconds: float) -> list[Phase]:
    users = [f"small-{i}-{time.monotonic_ns()}" for i in range(SMALL_CLIENTS)]
    seed(stack, users)
    return [
        run_phase(stack, "alone", users, None, mib, seconds),
        run_phase(stack, "big, no memory", users, "/nomemory/v1", mib, seconds),
        run_phase(stack, "big, memory", users, "/v1", mib, seconds),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big-mib", type=float, default=4.0, help="size of each big message")
    parser.add_argument("--seconds", type=float, default=12.0, help="length of each phase")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="bench-isolation-") as tmp,
        running_stack(Path(tmp)) as stack,
    ):
        phases = measure(stack, args.big_mib, args.seconds)
    rows = [phase.row() for phase in phases]
    print(f"{SMALL_CLIENTS} small clients, {BIG_CLIENTS} sending {args.big_mib} MiB messages")
    print(
        f"{'phase':<16} {'small':>6} {'p50 ms':>8} {'p99 ms':>8} {'no memory':>10} "
        f"{'errors':>7} {'big':>5}"
    )
    for row in rows:
        print(
            f"{row['phase']:<16} {row['small_requests']:>6} {row['small_p50_ms']:>8} "
            f"{row['small_p99_ms']:>8} {row['small_without_memory']:>10} {row['errors']:>7} "
            f"{row['big_requests']:>5}"
        )
    write_report(
        args.json,
        {
            "benchmark": "bench_isolation",
            "date": time.strftime("%Y-%m-%d"),
            "host": {"machine": platform.machine(), "python": platform.python_version()},
            "big_mib": args.big_mib,
            "seconds": args.seconds,
            "phases": rows,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
