"""``./scripts/demo.sh --serve`` stopped with SIGTERM stops what it started: the mock
LLM, the sidecar and Envoy exit with it and free their ports."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from e2e.stack import PYTHON

pytestmark = pytest.mark.e2e


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(child) for child in text)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    return state != "Z"


def test_sigterm_stops_the_whole_demo_stack(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [PYTHON, "-m", "e2e.demo", "--serve", "--workdir", str(tmp_path / "demo")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    try:
        assert demo.stdout is not None
        seen = []
        deadline = time.monotonic() + 240
        for line in demo.stdout:
            seen.append(line)
            if "serving until Ctrl-C" in line or time.monotonic() > deadline:
                break
        assert any("serving until Ctrl-C" in line for line in seen), "".join(seen)
        started = children(demo.pid)
        assert len(started) >= 3  # mock LLM, sidecar, Envoy
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=90) == 0
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in started) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [pid for pid in started if alive(pid)] == []
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        if demo.stdout is not None:
            demo.stdout.close()
