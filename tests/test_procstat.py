"""``e2e/procstat.py``: CPU time of process trees, as the benches account it."""

from __future__ import annotations

import subprocess
import sys
import time

from e2e.procstat import CpuMeter, process_tree, wait_quiet

#: A parent that starts a child burning CPU for ~0.4 s, then waits for it.
BURN = (
    "import subprocess, sys;"
    "subprocess.run([sys.executable, '-c',"
    " 'import time\\nend = time.process_time() + 0.4\\nwhile time.process_time() < end: pass'])"
)


def test_a_group_counts_the_cpu_of_its_whole_process_tree() -> None:
    parent = subprocess.Popen([sys.executable, "-c", BURN])
    try:
        deadline = time.monotonic() + 10
        while len(process_tree(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(process_tree(parent.pid)) == 2, "the child did not start"
        meter = CpuMeter({"burner": [parent.pid]})
        meter.start()
        time.sleep(0.25)  # the child burns; the parent and this process wait
        spent = meter.stop()
    finally:
        parent.wait(10)
    assert spent["burner"] >= 0.1
    assert spent["client"] < 0.1


def test_waiting_for_quiet_ends_when_the_tree_is_idle() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    burner = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 30\nwhile time.time() < end: pass"]
    )
    try:
        assert wait_quiet([sleeper.pid], window_s=0.2, timeout_s=5.0)
        assert not wait_quiet([burner.pid], window_s=0.2, timeout_s=0.5)
    finally:
        for process in (sleeper, burner):
            process.kill()
            process.wait()
