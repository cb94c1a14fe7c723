"""A real Milvus standalone server for the server-mode tests and benchmarks.

The ``milvus`` package (a dev dependency) ships the Milvus 2.3.5 standalone binary
with embedded etcd and local storage; its launcher, ``milvus-server``, unpacks it
into the data directory and runs it as its child. :func:`start_server` starts one on
a free proxy port (the launcher finds free ports for the other components) in a
directory of the caller's, in a process group of its own, and waits until it
answers; :meth:`MilvusServer.stop` ends the group. Start-up takes 10–60 s on two
cores: the tests share one server per session, each in collections of its own.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.stack import free_port

#: Seconds a server may take to answer after its launch.
START_TIMEOUT_S = 240.0


class ServerUnavailable(RuntimeError):
    """The wheel is missing, or its server did not start here."""


@dataclass
class MilvusServer:
    data: Path
    port: int
    process: subprocess.Popen[bytes]
    #: What the server reports (``GetVersion``).
    version: str = ""

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, *, kill: bool = False) -> None:
        """End the launcher and the server, its child in the same process group
        (SIGTERM, SIGKILL after 20 s; ``kill``: SIGKILL at once, as a crash). The group
        is signalled whether or not the launcher still runs: the server may outlive it."""
        group = self.process.pid
        self._signal(group, signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + 20
        while self._alive(group) and time.monotonic() < deadline:
            time.sleep(0.2)
        self._signal(group, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self._alive(group) and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1)

    @staticmethod
    def _signal(group: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)

    def _alive(self, group: int) -> bool:
        """Whether any process of the group is left (the launcher reaped first)."""
        self.process.poll()
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        return True

    def log_tail(self, chars: int = 2000) -> str:
        path = self.data / "launcher.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def start_server(
    data: Path, *, port: int | None = None, timeout_s: float = START_TIMEOUT_S
) -> MilvusServer:
    """A Milvus server on ``data`` (and ``port``, or a free one), answering."""
    if importlib.util.find_spec("milvus") is None:
        raise ServerUnavailable("the 'milvus' package is not installed (pip install -e '.[dev]')")
    data.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    launcher = "import sys, milvus; sys.argv[0] = 'milvus-server'; sys.exit(milvus.main())"
    log = (data / "launcher.log").open("ab")
    process = subprocess.Popen(
        [sys.executable, "-c", launcher, "--data", str(data), "--proxy-port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    server = MilvusServer(data, port, process)
    try:
        server.version = _wait_answering(server, timeout_s)
    except BaseException:
        server.stop(kill=True)
        raise
    return server


def _wait_answering(server: MilvusServer, timeout_s: float) -> str:
    from pymilvus import MilvusClient

    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if not server.running:
            raise ServerUnavailable(
                f"milvus-server exited ({server.process.returncode}): {server.log_tail()}"
            )
        try:
            client = MilvusClient(uri=server.uri, timeout=5)
            try:
                version = str(client.get_server_version(timeout=5))
                client.list_collections(timeout=5)
                return version
            finally:
                client.close()
        except Exception as exc:  # not up yet: refused, unavailable, not ready
            last = f"{type(exc).__name__}: {exc}"[:300]
            time.sleep(1.0)
    raise ServerUnavailable(f"milvus-server did not answer within {timeout_s:.0f} s ({last})")
