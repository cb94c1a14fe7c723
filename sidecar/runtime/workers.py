"""Several sidecar processes on one host (``server.workers``).

One Python process is bound by its interpreter lock: its event loop, not the host's
cores, limits how many requests it serves (docs/design/workers.md). With
``server.workers: N`` the ``serve`` command becomes a small supervisor that runs N
complete sidecars side by side, each a replica in the sense the rest of the code
already knows (own corpus cache, own write queue; other replicas' writes visible
within ``cache.ttl_s``):

- worker *i* listens on ``server.port + i`` and its admin on ``admin.port + i``;
  the generated Envoy config lists every worker's port in the sidecar cluster
  (least-request balancing, per-endpoint gRPC health checks);
- a milvus-lite file has one owner: the supervisor starts its embedded server and
  hands every worker the server's socket URI, so all of them use the code path of a
  Milvus server (a server URI is passed through unchanged);
- worker 0 keeps ``write_queue.journal_path``; worker *i* > 0 journals to
  ``<stem>.w<i><suffix>`` (and writes deep-search feedback the same way). Unwritten
  turns in the journal of a worker that no longer exists (fewer workers than last
  time) move into a remaining worker's journal before any worker starts, so a
  smaller ``workers`` loses no accepted turn;
- with ``embedding.shared`` (by default on a GPU device) one encoder process runs
  the model for all workers; each worker embeds over its Unix socket
  (:mod:`sidecar.memory.embedding.remote`). It starts before the workers and stops
  after them, and is restarted like a worker (meanwhile embeddings fail, and
  retrieval fails open or closed as each profile says); its ``/metrics`` are on
  ``admin.port + N``;
- what one worker writes reaches the other workers' corpus caches at once over
  the cache relay (:mod:`sidecar.runtime.relay`): worker *i* serves its cache on
  ``relay-<i>.sock`` in a private directory (the encoder's socket sits there too)
  and tells the others' of its writes;
- with ``write_queue.own_process`` each worker gets a writer process beside it
  (:mod:`sidecar.runtime.writer_process`) that claims the turns the worker journals and
  tells every worker's cache what it wrote (its own worker wakes it over the relay
  when a turn is accepted). Writers start after their workers and stop after them
  (draining the journals), before the encoder; writer *i*'s ``/metrics`` are on
  ``admin.port + N + 1 + i``. This runs under the supervisor with one worker too;
- a worker that exits unexpectedly is started again (backoff 1 s doubling to 30 s);
  a worker whose supervisor is gone stops itself; SIGTERM/SIGINT to the supervisor
  stops every worker gracefully (each drains its write queue), then the embedded
  store server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Literal

from sidecar.config import SidecarConfig
from sidecar.errors import SidecarError
from sidecar.memory.write.turns.journal_file import adopt_journal
from sidecar.runtime.lifecycle import watch_supervisor

log = logging.getLogger(__name__)

#: Seconds between a worker's unexpected exit and its restart: doubles per quick
#: failure up to the cap, back to the start after ``_STABLE_S`` up.
_BACKOFF_START_S = 1.0
_BACKOFF_MAX_S = 30.0
_STABLE_S = 60.0
#: How often the supervisor looks at its workers, and a worker at its supervisor.
_POLL_S = 0.2
_WORKER_SUFFIX = re.compile(r"^\.w(\d+)$")


def worker_path(path: str, index: int) -> str:
    """``path`` for worker ``index``: worker 0 keeps it; others get ``.w<i>`` before
    the suffix (``journal.sqlite3`` -> ``journal.w2.sqlite3``)."""
    if index == 0 or not path:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.w{index}{p.suffix}"))


def worker_journals(path: str) -> dict[int, Path]:
    """Every journal file of ``path``'s family on disk, by worker index."""
    base = Path(path).expanduser()
    found: dict[int, Path] = {}
    if base.exists():
        found[0] = base
    if not base.parent.is_dir():
        return found
    for candidate in base.parent.iterdir():
        if not (candidate.name.startswith(base.stem) and candidate.name.endswith(base.suffix)):
            continue
        middle = candidate.name[len(base.stem) : len(candidate.name) - len(base.suffix)]
        match = _WORKER_SUFFIX.match(middle)
        if match and int(match.group(1)) > 0:
            found[int(match.group(1))] = candidate
    return found


def adopt_stray_journals(path: str, workers: int) -> int:
    """Move the unwritten turns of journals whose worker index is ``>= workers`` into
    worker ``index % workers``'s journal and remove the emptied files. The number of
    turns moved. Run before any worker opens its journal."""
    moved = 0
    for index, stray in sorted(worker_journals(path).items()):
        if index < workers:
            continue
        target = Path(worker_path(path, index % workers)).expanduser()
        moved += adopt_journal(target, stray)
        for leftover in (
            stray,
            *(stray.with_name(stray.name + s) for s in ("-wal", "-shm", ".lock", ".append.lock")),
        ):
            leftover.unlink(missing_ok=True)
        log.info("journal of worker %d merged into worker %d's", index, index % workers)
    return moved


def worker_config(
    config: SidecarConfig, index: int, store_uri: str | None, relay_dir: str | None = None
) -> SidecarConfig:
    """The configuration worker ``index`` (and its writer) runs: its ports, its files,
    the shared store; with ``relay_dir``, its cache relay socket and the other
    workers' (``workers`` of them)."""
    server = config.server.model_copy(update={"port": config.server.port + index})
    admin = config.admin
    if admin.port:
        admin = admin.model_copy(update={"port": admin.port + index})
    if index > 0:  # one admin socket per host: worker 0's (any worker can serve a call)
        admin = admin.model_copy(update={"socket": ""})
    store = config.store
    if store_uri is not None:  # the embedded server's socket; the file's gate stays
        gate = store.gate_path
        lite = store.lite_path
        store = store.model_copy(
            update={
                "uri": store_uri,
                "gate_dir": str(gate or ""),
                "lite_file": str(lite.resolve()) if lite is not None else "",
            }
        )
    write_queue = config.write_queue.model_copy(
        update={"journal_path": worker_path(config.write_queue.journal_path, index)}
    )
    cache = config.cache
    if relay_dir is not None:
        sockets = [str(Path(relay_dir) / f"relay-{i}.sock") for i in range(config.server.workers)]
        peers = [path for i, path in enumerate(sockets) if i != index]
        cache = cache.model_copy(update={"relay_socket": sockets[index], "relay_peers": peers})

    def profile_files(profile: Any) -> Any:
        deep = profile.deep_search
        path = worker_path(deep.feedback_path, index)
        return profile.model_copy(
            update={"deep_search": deep.model_copy(update={"feedback_path": path})}
        )

    return config.model_copy(
        update={
            "server": server,
            "admin": admin,
            "store": store,
            "write_queue": write_queue,
            "cache": cache,
            "defaults": profile_files(config.defaults),
            "profiles": {name: profile_files(p) for name, p in config.profiles.items()},
        }
    )


# -- the worker side ------------------------------------------------------------------


def run_worker(config: SidecarConfig, index: int, ready: Connection, supervisor: int) -> None:
    """A worker process's main: one complete sidecar; reports its ports on ``ready``."""
    from sidecar.logs import configure_logging
    from sidecar.runtime.server import serve

    configure_logging(config.logging)

    def announce(grpc_port: int, admin_port: int) -> None:
        ready.send((grpc_port, admin_port))
        ready.close()

    asyncio.run(serve(config, announce=announce, supervisor_pid=supervisor, worker=index))


def run_writer(
    config: SidecarConfig,
    index: int,
    ready: Connection,
    supervisor: int,
    metrics_port: int | None,
) -> None:
    """A writer process's main (``write_queue.own_process``): writes the turns worker
    ``index`` journals; reports on ``ready`` once it claims them."""
    from sidecar.logs import configure_logging
    from sidecar.runtime.writer_process import serve_writer

    configure_logging(config.logging)

    def announce() -> None:
        ready.send((index,))
        ready.close()

    asyncio.run(
        serve_writer(
            config,
            index=index,
            announce=announce,
            supervisor_pid=supervisor,
            metrics_port=metrics_port,
        )
    )


def run_encoder(config: SidecarConfig, path: str, ready: Connection, supervisor: int) -> None:
    """The shared encoder process's main: the model behind a Unix socket at ``path``;
    reports the model's dimension on ``ready``."""
    from sidecar.logs import configure_logging

    configure_logging(config.logging)
    asyncio.run(_serve_encoder(config, path, ready, supervisor))


async def _serve_encoder(
    config: SidecarConfig, path: str, ready: Connection, supervisor: int
) -> None:
    from sidecar.memory.embedding.factory import build_local_embedder
    from sidecar.memory.embedding.remote import EncoderMetrics, EncoderServer, serve_metrics

    loop = asyncio.get_running_loop()
    embedder = await loop.run_in_executor(None, build_local_embedder, config.embedding)
    server = EncoderServer(embedder)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(watch_supervisor(supervisor, stop))
    try:
        await server.start(path)
        metrics_port = config.encoder_metrics_port
        if metrics_port is not None:
            serve_metrics(metrics_port, config.admin.host, EncoderMetrics(embedder, server))
        ready.send((embedder.dim,))
        ready.close()
        log.info(
            "shared encoder serving %d-dimensional embeddings pid=%d", embedder.dim, os.getpid()
        )
        await stop.wait()
    finally:
        watcher.cancel()
        await server.close()
        await embedder.close()


# -- the supervisor -------------------------------------------------------------------


@dataclass(slots=True)
class _Worker:
    """A supervised process: a sidecar worker, its writer, or the shared encoder."""

    index: int
    config: SidecarConfig
    role: Literal["worker", "writer", "encoder"] = "worker"
    process: BaseProcess | None = None
    ready: Connection | None = None
    #: What it reported when ready: (gRPC port, admin port); the encoder: (dim,);
    #: a writer: (index,).
    announced: tuple[int, ...] | None = None
    started_at: float = 0.0
    backoff_s: float = _BACKOFF_START_S
    restart_at: float | None = None

    @property
    def label(self) -> str:
        if self.role == "encoder":
            return "the shared encoder"
        return f"{self.role} {self.index}"


class Supervisor:
    """Runs ``config.server.workers`` sidecar processes (and their writers, with
    ``write_queue.own_process``) until told to stop."""

    def __init__(
        self, config: SidecarConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not config.supervised:
            raise SidecarError(
                "the supervisor runs two or more workers (server.workers) or writers"
                " of their own (write_queue.own_process)"
            )
        self._config = config
        self._clock = clock
        self._context = multiprocessing.get_context("spawn")
        self._stop = threading.Event()
        self._store_path: str | None = None
        self._workers: list[_Worker] = []
        self._writers: list[_Worker] = []
        self._encoder: _Worker | None = None
        self._runtime_dir: str | None = None  # the processes' sockets, private

    # -- lifecycle --------------------------------------------------------------------

    def request_stop(self, *_: object) -> None:
        self._stop.set()

    def run(self) -> int:
        """Start, supervise until SIGTERM/SIGINT, stop. The exit code (0: clean)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.request_stop)
        try:
            self._start()
            if not self._stop.is_set():
                first = self._workers[0].announced or (0, 0)
                print(
                    f"SIDECAR_READY grpc_port={first[0]} admin_port={first[1]}"
                    f" workers={len(self._workers)}",
                    flush=True,
                )
            while not self._stop.wait(_POLL_S):
                self._supervise()
        finally:
            clean = self._shutdown()
        return 0 if clean else 1

    def _start(self) -> None:
        config = self._config
        moved = adopt_stray_journals(config.write_queue.journal_path, config.server.workers)
        if moved:
            log.info("moved %d unwritten turns from journals of removed workers", moved)
        store_uri = self._start_store() if config.store.is_local_file else None
        self._runtime_dir = tempfile.mkdtemp(prefix="sidecar-")
        if config.embedding.shared_by(config.model_processes):
            config = self._start_encoder(config)
        self._workers = [
            _Worker(i, worker_config(config, i, store_uri, self._runtime_dir))
            for i in range(config.server.workers)
        ]
        # Worker 0 first: it creates (or checks) the collection before the others race.
        self._spawn(self._workers[0])
        self._await_ready(self._workers[:1])
        for worker in self._workers[1:]:
            self._spawn(worker)
        self._await_ready(self._workers[1:])
        if config.write_queue.own_process:
            self._writers = [_Worker(w.index, w.config, "writer") for w in self._workers]
            for writer in self._writers:
                self._spawn(writer)
            self._await_ready(self._writers)
            log.info("%d writer processes started", len(self._writers))

    def _start_store(self) -> str:
        """Start the embedded milvus-lite server for the configured file; its URI."""
        from milvus_lite.server_manager import server_manager_instance

        path = Path(self._config.store.uri).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        uri = server_manager_instance.start_and_get_uri(str(path))
        if uri is None:
            raise SidecarError(f"cannot start the embedded store for {path} (in use?)")
        self._store_path = str(path)
        log.info("embedded store server started for %d workers", self._config.server.workers)
        return str(uri)

    @property
    def _encoder_socket(self) -> str:
        return str(Path(self._runtime_dir or ".") / "encoder.sock")

    def _start_encoder(self, config: SidecarConfig) -> SidecarConfig:
        """Start the shared encoder; ``config`` with its socket for the workers."""
        embedding = config.embedding.model_copy(update={"service_socket": self._encoder_socket})
        self._encoder = _Worker(-1, config, "encoder")
        self._spawn(self._encoder)
        self._await_ready([self._encoder])
        log.info("shared encoder started for %d workers", config.server.workers)
        return config.model_copy(update={"embedding": embedding})

    def _spawn(self, worker: _Worker) -> None:
        receive, send = self._context.Pipe(duplex=False)
        if worker.role == "encoder":
            target: Callable[..., None] = run_encoder
            args: tuple[Any, ...] = (worker.config, self._encoder_socket, send, os.getpid())
            name = "sidecar-encoder"
        elif worker.role == "writer":
            target, name = run_writer, f"sidecar-writer-{worker.index}"
            port = self._config.writer_metrics_port(worker.index)
            args = (worker.config, worker.index, send, os.getpid(), port)
        else:
            target, name = run_worker, f"sidecar-worker-{worker.index}"
            args = (worker.config, worker.index, send, os.getpid())
        process = self._context.Process(target=target, args=args, name=name)
        process.start()
        send.close()  # the child holds its end
        worker.process, worker.ready, worker.announced = process, receive, None
        worker.started_at = self._clock()
        worker.restart_at = None

    def _await_ready(self, workers: list[_Worker]) -> None:
        deadline = self._clock() + self._config.store.load_timeout_s + 120.0
        waiting = list(workers)
        while waiting and not self._stop.is_set():
            for worker in list(waiting):
                if self._take_ready(worker):
                    waiting.remove(worker)
                elif worker.process is not None and not worker.process.is_alive():
                    raise SidecarError(
                        f"{worker.label} exited during start-up (code {worker.process.exitcode})"
                    )
            if self._clock() > deadline:
                raise SidecarError(f"{[w.label for w in waiting]} did not start in time")
            time.sleep(0.05)

    @staticmethod
    def _take_ready(worker: _Worker) -> bool:
        if worker.announced is not None:
            return True
        if worker.ready is None:
            return False
        try:
            if not worker.ready.poll():
                return False
            announced = worker.ready.recv()
        except (EOFError, OSError):
            return False
        worker.announced = tuple(int(value) for value in announced)
        worker.ready.close()
        worker.ready = None
        if worker.role == "worker":
            log.info("worker %d ready on port %d", worker.index, worker.announced[0])
        return True

    def _supervised(self) -> list[_Worker]:
        encoder = (self._encoder,) if self._encoder is not None else ()
        return [*self._workers, *self._writers, *encoder]

    def _supervise(self) -> None:
        now = self._clock()
        for worker in self._supervised():
            process = worker.process
            self._take_ready(worker)
            if process is not None and process.is_alive():
                if worker.announced is not None and now - worker.started_at > _STABLE_S:
                    worker.backoff_s = _BACKOFF_START_S
                continue
            if worker.restart_at is None:
                code = process.exitcode if process is not None else None
                worker.restart_at = now + worker.backoff_s
                log.warning(
                    "%s exited (code %s); restarting in %.0fs", worker.label, code, worker.backoff_s
                )
                worker.backoff_s = min(_BACKOFF_MAX_S, worker.backoff_s * 2)
            elif now >= worker.restart_at:
                self._spawn(worker)

    def _shutdown(self) -> bool:
        """SIGTERM every worker, wait for their drains (they embed their last turns);
        then the writers (which drain the journals), the shared encoder and the
        store server."""
        clean = self._stop_processes([w for w in self._workers if w.process is not None])
        clean = self._stop_processes([w for w in self._writers if w.process is not None]) and clean
        if self._encoder is not None and self._encoder.process is not None:
            clean = self._stop_processes([self._encoder]) and clean
        if self._runtime_dir is not None:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)
            self._runtime_dir = None
        if self._store_path is not None:
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(self._store_path)
            self._store_path = None
        return clean

    def _stop_processes(self, workers: list[_Worker]) -> bool:
        for worker in workers:
            if worker.process is not None and worker.process.is_alive() and worker.process.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.process.pid, signal.SIGTERM)
        grace = (
            self._config.server.shutdown_grace_s + self._config.write_queue.drain_timeout_s + 30.0
        )
        deadline = self._clock() + grace
        clean = True
        for worker in workers:
            assert worker.process is not None
            worker.process.join(max(0.0, deadline - self._clock()))
            if worker.process.is_alive():
                log.warning("%s did not stop in %.0fs; killing it", worker.label, grace)
                worker.process.kill()
                worker.process.join(5.0)
                clean = False
            elif worker.process.exitcode not in (0, -signal.SIGTERM):
                clean = False
        return clean
