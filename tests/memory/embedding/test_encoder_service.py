"""The shared encoder (``embedding.shared``): one model served on a Unix socket to
several processes' :class:`RemoteEmbedder` s, in-process here (the supervisor's
process wiring is covered through the real Envoy in ``tests/e2e``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sidecar.config import EmbeddingConfig, config_from_mapping
from sidecar.errors import ConfigError, EmbeddingError
from sidecar.memory.embedding.batching import BatchingEmbedder
from sidecar.memory.embedding.factory import build_embedder
from sidecar.memory.embedding.protocol import Vectors
from sidecar.memory.embedding.remote import (
    HEADER,
    HELLO,
    EncoderMetrics,
    EncoderServer,
    RemoteEmbedder,
    serve_metrics,
)

DIM = 8


def vector_of(text: str) -> Vectors:
    digest = np.frombuffer(hashlib.sha256(text.encode()).digest()[:DIM], dtype=np.uint8)
    row = digest.astype(np.float32) + 1.0
    return (row / np.linalg.norm(row)).astype(np.float32)


class SlowModel:
    """A deterministic model that takes 30 ms per call and records batch sizes; a
    text ``"fail"`` fails its batch."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def encode(self, texts: list[str]) -> Vectors:
        time.sleep(0.03)
        with self.lock:
            self.batches.append(len(texts))
        if "fail" in texts:
            raise EmbeddingError("the model failed")
        return np.stack([vector_of(t) for t in texts])


@pytest.fixture
def socket_path() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="enc-") as directory:  # short: AF_UNIX paths
        yield str(Path(directory) / "encoder.sock")


@pytest.fixture
def model() -> SlowModel:
    return SlowModel()


@pytest.fixture
async def server(socket_path: str, model: SlowModel) -> AsyncIterator[EncoderServer]:
    embedder = BatchingEmbedder(model.encode, dim=DIM, max_batch=32)
    served = EncoderServer(embedder)
    await served.start(socket_path)
    yield served
    await served.close()
    await embedder.close()


async def connect(path: str) -> RemoteEmbedder:
    return await asyncio.get_running_loop().run_in_executor(None, RemoteEmbedder.connect, path)


async def test_remote_vectors_are_the_local_models(
    socket_path: str, embedder: BatchingEmbedder
) -> None:
    served = EncoderServer(embedder)
    await served.start(socket_path)
    remote = await connect(socket_path)
    try:
        assert remote.dim == embedder.dim == 384
        texts = ["Which city do I live in?", "The user lives in Berlin.", ""]
        got = await remote.embed(texts, urgent=True)
        assert got.dtype == np.float32
        assert got.flags.writeable
        assert np.array_equal(got, await embedder.embed(texts))
        assert (await remote.embed([])).shape == (0, 384)
    finally:
        await remote.close()
        await served.close()


async def test_calls_of_several_processes_are_batched_together(
    server: EncoderServer, socket_path: str, model: SlowModel
) -> None:
    workers = [await connect(socket_path) for _ in range(3)]
    texts = [f"query {i}" for i in range(24)]
    try:
        results = await asyncio.gather(
            *(workers[i % 3].embed([text], urgent=True) for i, text in enumerate(texts))
        )
    finally:
        for worker in workers:
            await worker.close()
    for text, rows in zip(texts, results, strict=True):
        assert np.array_equal(rows, vector_of(text)[None, :])  # each caller its own row
    assert max(model.batches) > 1  # queued behind a busy model: one batch across workers
    assert sum(model.batches) == len(texts)


async def test_a_model_failure_fails_its_calls_only(
    server: EncoderServer, socket_path: str
) -> None:
    remote = await connect(socket_path)
    try:
        with pytest.raises(EmbeddingError, match="the model failed"):
            await remote.embed(["fail"], urgent=True)
        assert np.array_equal(await remote.embed(["fine"]), vector_of("fine")[None, :])
    finally:
        await remote.close()


async def test_an_unexpected_failure_is_answered_not_left_hanging(socket_path: str) -> None:
    class Broken:
        dim = DIM

        async def embed(self, texts: list[str], *, urgent: bool = False) -> Vectors:
            raise RuntimeError("a bug")

        async def close(self) -> None:
            return None

    served = EncoderServer(Broken())
    await served.start(socket_path)
    remote = await connect(socket_path)
    try:
        with pytest.raises(EmbeddingError, match="embedding failed: RuntimeError"):
            async with asyncio.timeout(5):
                await remote.embed(["x"])
    finally:
        await remote.close()
        await served.close()


def raw_request(path: str, payload: bytes) -> tuple[int, int, bytes]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.recv(HELLO.size)
        sock.sendall(HEADER.pack(7, 1, len(payload)) + payload)
        head = sock.recv(HEADER.size)
        request_id, flag, size = HEADER.unpack(head)
        body = b""
        while len(body) < size:
            body += sock.recv(size - len(body))
        return request_id, flag, body


@pytest.mark.parametrize("payload", [b"not json", b'{"a": 1}', b"[1, 2]", b"\xff\xfe"])
async def test_a_malformed_request_gets_an_error_reply(
    server: EncoderServer, socket_path: str, payload: bytes
) -> None:
    loop = asyncio.get_running_loop()
    request_id, flag, body = await loop.run_in_executor(None, raw_request, socket_path, payload)
    assert (request_id, flag, body) == (7, 1, b"malformed request")
    ok = await loop.run_in_executor(None, raw_request, socket_path, json.dumps(["x"]).encode())
    assert ok[1] == 0
    assert len(ok[2]) == DIM * 4


async def test_a_lost_encoder_fails_waiting_calls_and_a_restarted_one_is_used(
    socket_path: str, model: SlowModel
) -> None:
    embedder = BatchingEmbedder(model.encode, dim=DIM)
    first = EncoderServer(embedder)
    await first.start(socket_path)
    remote = await connect(socket_path)
    try:
        waiting = asyncio.create_task(remote.embed(["in flight"], urgent=True))
        await asyncio.sleep(0.01)
        await first.close()  # the encoder process died mid-call
        with pytest.raises(EmbeddingError, match="lost"):
            await waiting
        with pytest.raises(EmbeddingError, match="unreachable"):
            await remote.embed(["while it is down"])
        second = EncoderServer(embedder)  # the supervisor started it again
        await second.start(socket_path)
        try:
            got = await remote.embed(["after the restart"])
            assert np.array_equal(got, vector_of("after the restart")[None, :])
        finally:
            await second.close()
    finally:
        await remote.close()
        await embedder.close()


async def test_a_caller_that_gives_up_leaves_the_connection_usable(
    server: EncoderServer, socket_path: str
) -> None:
    remote = await connect(socket_path)
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.005):
                await remote.embed(["slow"], urgent=True)
        assert np.array_equal(await remote.embed(["next"]), vector_of("next")[None, :])
    finally:
        await remote.close()


def test_connect_fails_clearly_without_an_encoder(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="does not answer"):
        RemoteEmbedder.connect(str(tmp_path / "missing.sock"), timeout_s=0.3)


async def test_connect_refuses_a_socket_that_is_not_an_encoder(socket_path: str) -> None:
    async def greet(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1")
        await writer.drain()
        writer.close()

    other = await asyncio.start_unix_server(greet, path=socket_path)
    try:
        with pytest.raises(EmbeddingError, match="does not speak the encoder protocol"):
            await connect(socket_path)
    finally:
        other.close()
        await other.wait_closed()


async def test_build_embedder_uses_the_service_socket(
    server: EncoderServer, socket_path: str
) -> None:
    loop = asyncio.get_running_loop()
    config = EmbeddingConfig(service_socket=socket_path)
    built = await loop.run_in_executor(None, build_embedder, config)
    try:
        assert isinstance(built, RemoteEmbedder)
        assert built.dim == DIM
    finally:
        await built.close()


@pytest.mark.parametrize(
    ("shared", "device", "workers", "expected"),
    [
        ("auto", "cuda", 8, True),
        ("auto", "cuda:1", 2, True),
        ("auto", "cpu", 8, False),
        ("auto", "cuda", 1, False),
        ("on", "cpu", 2, True),
        ("off", "cuda", 8, False),
    ],
)
def test_which_deployments_share_one_encoder(
    shared: str, device: str, workers: int, expected: bool
) -> None:
    backend = "torch" if device != "cpu" else "onnx-int8"
    config = EmbeddingConfig.model_validate(
        {"shared": shared, "device": device, "backend": backend}
    )
    assert config.shared_by(workers) is expected


async def test_the_metrics_count_calls_and_connections(socket_path: str, model: SlowModel) -> None:
    embedder = BatchingEmbedder(model.encode, dim=DIM)
    served = EncoderServer(embedder)
    await served.start(socket_path)
    metrics = EncoderMetrics(embedder, served)
    remote = await connect(socket_path)
    try:
        await asyncio.gather(*(remote.embed([f"t{i}"], urgent=True) for i in range(5)))
        values = {m.name: m.samples[0].value for m in metrics.collect()}
        assert values["memory_sidecar_encoder_texts"] == 5
        assert 1 <= values["memory_sidecar_encoder_batches"] <= 5
        assert values["memory_sidecar_encoder_connections"] == 1
        assert values["memory_sidecar_encoder_queued_calls"] == 0
        assert values["memory_sidecar_encoder_rejected"] == 0
    finally:
        await remote.close()
        await served.close()
        await embedder.close()


def test_a_metrics_port_in_use_is_logged_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        embedder = BatchingEmbedder(SlowModel().encode, dim=DIM)
        serve_metrics(port, "127.0.0.1", EncoderMetrics(embedder, EncoderServer(embedder)))
    assert "shared encoder metrics not served" in caplog.text


@pytest.mark.parametrize(
    ("overrides", "port"),
    [
        ({"server": {"workers": 4}, "embedding": {"shared": "on"}}, 9464 + 4),
        ({"server": {"workers": 4}}, None),  # CPU: a model per worker
        ({"server": {"workers": 1}, "embedding": {"shared": "on"}}, None),
        ({"server": {"workers": 2}, "embedding": {"shared": "on"}, "admin": {"port": 0}}, None),
    ],
)
def test_where_the_encoder_serves_its_metrics(overrides: dict[str, Any], port: int | None) -> None:
    assert config_from_mapping(overrides, env={}).encoder_metrics_port == port


def test_the_encoder_metrics_port_must_exist() -> None:
    overrides = {
        "server": {"workers": 2},
        "embedding": {"shared": "on"},
        "admin": {"port": 65534},
    }
    with pytest.raises(ConfigError, match="shared encoder"):
        config_from_mapping(overrides, env={})
