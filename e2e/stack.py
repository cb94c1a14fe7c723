"""Start and stop the real processes: mock LLM, sidecar, Envoy.

Used by the end-to-end tests, ``e2e/run_e2e.py``, the demo and the benchmarks.
Every process listens on loopback ports chosen at start; each is stopped with
SIGTERM (SIGKILL after a grace period) and its output kept in the work directory.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import openai
import yaml

from sidecar.config import config_from_mapping
from sidecar.envoy_config import render_yaml

PYTHON = sys.executable
BIN_DIR = Path(sys.executable).parent
REPO_ROOT = Path(__file__).resolve().parents[1]


#: Ports come from below Linux's ephemeral range (32768-60999 by default): the
#: kernel hands ports there to outgoing connections, and one took a worker's port
#: between this check and the worker's bind (a flaky start-up, seen once for a run of
#: worker ports and once for a single sidecar's).
_RUN_PORTS = (10_000, 32_000)


def free_port() -> int:
    """A free loopback port, outside the ephemeral range."""
    return free_port_run(1)


def free_port_run(count: int, attempts: int = 50) -> int:
    """The first of ``count`` consecutive free loopback ports (sidecar workers)."""
    pick = random.SystemRandom()
    for _ in range(attempts):
        base = pick.randrange(_RUN_PORTS[0], _RUN_PORTS[1] - count)
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # HTTPException too: polling a loopback port nobody listens on yet can connect
        # the socket to itself (same ephemeral port) and read its own request back.
        with contextlib.suppress(OSError, http.client.HTTPException):
            if check():
                return
        time.sleep(0.05)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s")


@dataclass
class ManagedProcess:
    name: str
    args: list[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> Self:
        env = {**os.environ, **(self.env or {})}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT
        )
        log.close()
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.process.returncode}; log:\n{self.tail()}"
            )

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait, then SIGKILL; returns the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@dataclass
class Ports:
    mock: int = field(default_factory=free_port)
    sidecar: int = field(default_factory=free_port)
    sidecar_admin: int = field(default_factory=free_port)
    envoy: int = field(default_factory=free_port)
    envoy_admin: int = field(default_factory=free_port)


def parse_settings(settings: list[str]) -> dict[str, Any]:
    """``--set`` arguments, ``dotted.path=value`` (values parsed as YAML), as nested
    config overrides: ``llm.transport=httpx`` is ``{"llm": {"transport": "httpx"}}``."""
    result: dict[str, Any] = {}
    for setting in settings:
        path, sep, raw = setting.partition("=")
        keys = path.split(".")
        if not sep or len(keys) < 2 or not all(keys):
            raise ValueError(f"a setting is section.key=value, got {setting!r}")
        merge_settings(result, _nested(keys, yaml.safe_load(raw)))
    return result


def _nested(keys: list[str], value: Any) -> dict[str, Any]:
    for key in reversed(keys[1:]):
        value = {key: value}
    return {keys[0]: value}


def merge_settings(target: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` merged into ``target`` (in place, mappings merged key by key)."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge_settings(target[key], value)
        else:
            target[key] = dict(value) if isinstance(value, Mapping) else value
    return target


def demo_config(workdir: Path, ports: Ports, **overrides: Any) -> dict[str, Any]:
    """A sidecar config with the three demo routes (full, read-only, disabled)."""
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": ports.sidecar},
        "admin": {"host": "127.0.0.1", "port": ports.sidecar_admin},
        "store": {"uri": str(workdir / "memory.db")},
        "write_queue": {"journal_path": str(workdir / "journal.sqlite3")},
        "llm": {"base_url": f"http://127.0.0.1:{ports.mock}/v1", "model": "mock-llm"},
        "logging": {"level": "INFO"},
        "profiles": {
            "readonly": {
                "paths": ["/readonly/v1/chat/completions"],
                "responses_paths": ["/readonly/v1/responses"],
                "extraction": {"enabled": False},
            },
        },
        "envoy": {
            "listen_host": "127.0.0.1",
            "listen_port": ports.envoy,
            "admin_port": ports.envoy_admin,
            "sidecar_port": ports.sidecar,
            # The tests' and the demo's clients stand in for an authenticating edge:
            # they set x-user-id themselves. A deployment keeps the default (strip
            # it) and sets it from a verified token (envoy.jwt) or a trusted proxy.
            "strip_identity_headers": False,
            "routes": [
                {"prefix": "/readonly/v1/", "rewrite": "/v1/", "profile": "readonly"},
                {"prefix": "/nomemory/v1/", "rewrite": "/v1/", "profile": None},
                {"prefix": "/", "profile": "default"},
            ],
        },
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


class Stack:
    """Mock LLM + sidecar + Envoy on loopback, as one unit."""

    def __init__(
        self,
        workdir: Path,
        *,
        config_overrides: Mapping[str, Any] | None = None,
        mock_args: tuple[str, ...] = (),
        with_sidecar: bool = True,
        ports: Ports | None = None,
    ) -> None:
        self.workdir = workdir
        overrides = dict(config_overrides or {})
        #: Sidecar processes (``server.workers``): worker i on ports + i.
        self.workers = int(overrides.get("server", {}).get("workers", 1))
        #: ``write_queue.own_process``: a writer process beside each worker.
        self.writers = bool(overrides.get("write_queue", {}).get("own_process", False))
        if ports is None and (self.workers > 1 or self.writers):
            ports = Ports(
                sidecar=free_port_run(self.workers),
                # After the workers' admin ports: the shared encoder's metrics, where
                # there is one, then the writers'.
                sidecar_admin=free_port_run(self.workers * (2 if self.writers else 1) + 1),
            )
        self.ports = ports or Ports()
        self.config = demo_config(workdir, self.ports, **overrides)
        self.config_path = workdir / "sidecar.yaml"
        self.envoy_path = workdir / "envoy.yaml"
        self._mock_args = mock_args
        self._with_sidecar = with_sidecar
        self.mock = ManagedProcess(
            "mock-llm",
            [PYTHON, "-m", "e2e.mock_llm", "--port", str(self.ports.mock), *mock_args],
            workdir / "mock.log",
        )
        self.sidecar = ManagedProcess(
            "sidecar",
            [PYTHON, "-m", "sidecar", "serve", "--config", str(self.config_path)],
            workdir / "sidecar.log",
            env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        )
        self.envoy = ManagedProcess(
            "envoy",
            [
                str(BIN_DIR / "envoy"),
                "-c",
                str(self.envoy_path),
                "--disable-hot-restart",
                "--log-level",
                "warning",
            ],
            workdir / "envoy.log",
        )

    # -- addresses ------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of the full-memory route through Envoy."""
        return f"http://127.0.0.1:{self.ports.envoy}/v1"

    def route_url(self, prefix: str) -> str:
        return f"http://127.0.0.1:{self.ports.envoy}{prefix}"

    @property
    def mock_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.mock}"

    @property
    def sidecar_admin_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.sidecar_admin}"

    @property
    def writer_metrics_urls(self) -> list[str]:
        """Every writer process's metrics URL (``write_queue.own_process``)."""
        if not self.writers:
            return []
        base = self.ports.sidecar_admin + self.workers + 1
        return [f"http://127.0.0.1:{base + i}" for i in range(self.workers)]

    def writer_metric(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """A metric summed over the writer processes."""
        return sum(self._metric(url, name, labels) for url in self.writer_metrics_urls)

    @property
    def sidecar_admin_urls(self) -> list[str]:
        """Every worker's admin URL (one unless ``server.workers`` > 1)."""
        base = self.ports.sidecar_admin
        return [f"http://127.0.0.1:{base + i}" for i in range(self.workers)]

    # -- lifecycle ------------------------------------------------------------------

    def write_configs(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        validated = config_from_mapping(self.config, env={})
        self.envoy_path.write_text(render_yaml(validated, self.mock_url))

    def start(self, timeout: float = 90.0) -> Self:
        self.write_configs()
        self.mock.start()
        if self._with_sidecar:
            self.sidecar.start()
        self.envoy.start()
        self.wait_mock(timeout)
        if self._with_sidecar:
            self.wait_sidecar(timeout)
        self.wait_envoy(timeout)
        return self

    def wait_mock(self, timeout: float) -> None:
        def ready() -> bool:
            self.mock.check_alive()
            return http_get(f"{self.mock_url}/health")[0] == 200

        wait_until(ready, timeout, "mock LLM")

    def wait_sidecar(self, timeout: float) -> None:
        def ready() -> bool:
            self.sidecar.check_alive()
            return all(http_get(f"{url}/ready")[0] == 200 for url in self.sidecar_admin_urls)

        wait_until(ready, timeout, "sidecar")

    def wait_envoy(self, timeout: float) -> None:
        admin = f"http://127.0.0.1:{self.ports.envoy_admin}"

        def ready() -> bool:
            self.envoy.check_alive()
            if http_get(f"{admin}/ready")[0] != 200:
                return False
            if not self._with_sidecar or not self.sidecar.running:
                return True
            # Envoy reaches the sidecar (its health check passed).
            status, body = http_get(f"{admin}/clusters?format=json")
            if status != 200:
                return False
            clusters = json.loads(body).get("cluster_statuses", [])
            for cluster in clusters:
                if cluster.get("name") == "memory_sidecar":
                    hosts = cluster.get("host_statuses", [])
                    return bool(hosts) and all(
                        not h.get("health_status", {}).get("failed_active_health_check")
                        for h in hosts
                    )
            return False

        wait_until(ready, timeout, "envoy")

    def chat(self, user: str, text: str, timeout: float = 30) -> tuple[int, str]:
        """One user message as ``user`` through Envoy's full-memory route, without
        the SDK: the status and the answer's text (the echo mock's shows what the
        model was sent)."""
        body = {"model": "m", "messages": [{"role": "user", "content": text}]}
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json", "x-user-id": user},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.loads(response.read())
            return response.status, str(answer["choices"][0]["message"]["content"])

    def sidecar_health(self) -> list[str]:
        """Envoy's health flags of each sidecar endpoint (worker or replica), in port
        order."""
        _, body = http_get(f"http://127.0.0.1:{self.ports.envoy_admin}/clusters")
        flags = {}
        for line in body.decode().splitlines():
            parts = line.split("::")
            if len(parts) == 4 and parts[0] == "memory_sidecar" and parts[2] == "health_flags":
                flags[int(parts[1].rsplit(":", 1)[1])] = parts[3]
        return [flags[port] for port in sorted(flags)]

    def restart_sidecar(self, timeout: float = 90.0) -> None:
        self.sidecar.stop()
        self.sidecar.start()
        self.wait_sidecar(timeout)

    def stop(self) -> dict[str, int | None]:
        codes = {"envoy": self.envoy.stop()}
        codes["sidecar"] = self.sidecar.stop(timeout=60)
        codes["mock"] = self.mock.stop()
        return codes

    def mock_requests(self) -> list[dict[str, Any]]:
        status, body = http_get(f"{self.mock_url}/_mock/requests")
        if status != 200:
            raise RuntimeError(f"mock request log: HTTP {status}")
        return list(json.loads(body))

    def client(self, user: str, prefix: str = "/v1", timeout: float = 30) -> openai.OpenAI:
        """An OpenAI SDK client for ``user`` (the gateway's ``x-user-id``) on the
        route at ``prefix``, without retries."""
        return openai.OpenAI(
            base_url=self.route_url(prefix),
            api_key="unused",
            default_headers={"x-user-id": user},
            max_retries=0,
            timeout=timeout,
        )

    def turns_written(self) -> float:
        """Turns the sidecar has written (``turns_total{outcome="written"}``)."""
        return self.sidecar_metric("memory_sidecar_turns_total", {"outcome": "written"})

    def wait_turns_written(self, target: float, timeout: float = 30) -> bool:
        """Whether :meth:`turns_written` reaches ``target`` within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.turns_written() >= target:
                return True
            time.sleep(0.1)
        return False

    def sidecar_metric(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """The current value of one sidecar metric sample (0 when absent), summed
        over the workers."""
        return sum(self.sidecar_metric_per_worker(name, labels))

    def metric_total(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """Every sample of one metric with ``labels`` (among others) summed over the
        workers and writer processes: e.g. store errors of every operation."""
        urls = [*self.sidecar_admin_urls, *self.writer_metrics_urls]
        return sum(self._metric_sum(url, name, labels) for url in urls)

    def sidecar_metric_per_worker(
        self, name: str, labels: Mapping[str, str] | None = None
    ) -> list[float]:
        """One metric sample's current value in each worker (0 when absent)."""
        return [self._metric(url, name, labels) for url in self.sidecar_admin_urls]

    @staticmethod
    def _metric(admin_url: str, name: str, labels: Mapping[str, str] | None) -> float:
        """The first sample of ``name`` with ``labels`` (among others); 0 when none."""
        return next(iter(_samples(admin_url, name, labels)), 0.0)

    @staticmethod
    def _metric_sum(admin_url: str, name: str, labels: Mapping[str, str] | None) -> float:
        """Every sample of ``name`` with ``labels`` (among others), summed."""
        return sum(_samples(admin_url, name, labels))

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _samples(admin_url: str, name: str, labels: Mapping[str, str] | None) -> list[float]:
    """The values of the samples of ``name`` at ``admin_url``/metrics that carry
    ``labels`` (among others), in exposition order."""
    _, body = http_get(f"{admin_url}/metrics")
    wanted = {f'{k}="{v}"' for k, v in (labels or {}).items()}
    values = []
    for line in body.decode().splitlines():
        head, _, value = line.rpartition(" ")
        sample, _, label_text = head.partition("{")
        present = set(label_text.rstrip("}").split(",")) if label_text else set()
        if sample == name and wanted <= present:
            values.append(float(value))
    return values


@contextlib.contextmanager
def running_stack(workdir: Path, **kwargs: Any) -> Iterator[Stack]:
    stack = Stack(workdir, **kwargs)
    try:
        stack.start()
        yield stack
    except BaseException:
        for proc in (stack.sidecar, stack.envoy, stack.mock):
            if proc.process is not None and proc.process.poll() is not None:
                sys.stderr.write(f"--- {proc.name} log ---\n{proc.tail()}\n")
        raise
    finally:
        stack.stop()
