"""The cache relay, in-process over an in-memory store (the relay is under test, not
Milvus): what a writer's cache is told reaches its worker's cache at once (not at
its next refresh), rows a refresh reads are not sent, wake-ups reach the writer that
asked for them, two workers tell each other their writes without echoing them back,
malformed frames are refused and counted, two peers' writes of one row arriving in
the other order leave the newer one served, and a restarted worker is found again."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sidecar.config import CacheConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.records.records import (
    MemoryRecord,
    MemoryType,
    NodeType,
    Origin,
    Scope,
    Status,
    Visibility,
    now_ms,
)
from sidecar.metrics import Metrics
from sidecar.runtime.relay import (
    APPLY,
    FRAME,
    HELLO,
    STAMP,
    RelayClient,
    RelayPeers,
    RelayServer,
    decode_records,
    encode_records,
)
from tests.memory.corpus.test_corpus import DIM, rec
from tests.support.fakes import FakeStore


@pytest.fixture
def socket_path() -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="relay-")  # short: Unix socket paths are
    yield str(Path(directory) / "relay.sock")  # limited to ~100 bytes
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def store() -> FakeStore:
    made = FakeStore(DIM)
    await made.upsert([rec("old", "alice")])
    return made


class Pair:
    """A worker's cache behind a relay server, a writer's cache mirrored by a client."""

    def __init__(self, store: FakeStore, path: str) -> None:
        self.path = path
        self.worker_metrics, self.writer_metrics = Metrics(), Metrics()
        #: Users each cache told its user observer of (a forget's query caches).
        self.told: dict[str, list[str]] = {"writer": [], "worker": []}
        self.worker_cache = CorpusCache(
            store,
            CacheConfig(),
            self.worker_metrics,
            on_user_invalidated=self.told["worker"].append,
        )
        self.wakes = 0
        self.client = RelayClient(path, self.writer_metrics, on_wake=self._woken)
        self.writer_cache = CorpusCache(
            store,
            CacheConfig(),
            self.writer_metrics,
            mirror=RelayPeers([self.client]),
            on_user_invalidated=self.told["writer"].append,
        )
        self.server = RelayServer(self.worker_cache, self.worker_metrics)

    def _woken(self) -> None:
        self.wakes += 1

    def frames(self, metrics: Metrics, kind: str, outcome: str) -> float:
        return metrics.value(
            "memory_sidecar_cache_relay_frames_total", {"kind": kind, "outcome": outcome}
        )


@pytest.fixture
async def pair(store: FakeStore, socket_path: str) -> AsyncIterator[Pair]:
    made = Pair(store, socket_path)
    await made.server.start(socket_path)
    made.client.start()
    assert await made.client.wait_connected(5.0)
    yield made
    await made.client.close()
    await made.server.close()
    for cache in (made.worker_cache, made.writer_cache):
        await cache.close()


async def eventually(check: object, timeout_s: float = 5.0) -> None:
    assert callable(check)
    for _ in range(int(timeout_s / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached in time")


def test_records_cross_as_they_are() -> None:
    records = [
        MemoryRecord(
            id="a",
            user_id="alice",
            content="Ünïcode \u2028 text",
            embedding=(0.125, -0.2001953125, 2.0**-25, 1.0),  # float32 values, as stored
            group_id="team",
            visibility=Visibility.GROUP,
            node_type=NodeType.CATEGORY,
            memory_type=MemoryType.EPISODIC,
            status=Status.SUPERSEDED,
            related_ids=("b", "c"),
            importance=0.7,
            created_at=1,
            updated_at=2,
            superseded_by="z",
            excerpt="I said so <b>",
            origins=(Origin("req-1", session="s", message=2, refs=("u1", "a1"), at=3),),
        ),
        MemoryRecord(id="hollow", user_id="bob", content="", embedding=None),
    ]
    assert decode_records(encode_records(records)) == records
    for bad in (
        b"{}",
        b"[1]",
        b'[{"content": "no id"}]',
        b"\xff",
        b'[{"id": "a", "embedding": "not base64!"}]',
        b'[{"id": "a", "embedding": "AAA="}]',  # not whole float32s
        b"[" * 5_000 + b"]" * 5_000,  # nested past the parser's recursion limit
    ):
        with pytest.raises(ValueError, match=r"."):  # JSON's, UTF-8's or ours
            decode_records(bad)


async def test_what_the_writer_stores_is_served_by_the_worker_at_once(
    pair: Pair, store: FakeStore
) -> None:
    scope = Scope("alice")
    assert set((await pair.worker_cache.corpus(scope)).index_of) == {"old"}
    await pair.writer_cache.corpus(scope)

    fresh = rec("fresh", "alice")
    await store.upsert([fresh])
    pair.writer_cache.apply([fresh])  # what the writer does after storing
    await eventually(lambda: pair.frames(pair.worker_metrics, "apply", "received") == 1)
    # No refresh ran (ttl_s is 30 s): the row came over the relay.
    served = pair.worker_cache.corpus_nowait(scope)
    assert served is not None
    assert set(served.index_of) == {"old", "fresh"}
    assert served.records[served.index_of["fresh"]] == fresh

    gone = fresh.with_changes(status=Status.SUPERSEDED)
    pair.writer_cache.apply([gone])
    await eventually(lambda: pair.frames(pair.worker_metrics, "apply", "received") == 2)
    served = pair.worker_cache.corpus_nowait(scope)
    assert served is not None
    assert "fresh" not in served.index_of


async def test_invalidations_cross_and_refreshed_rows_do_not(pair: Pair, store: FakeStore) -> None:
    scope = Scope("alice")
    await pair.worker_cache.corpus(scope)
    await pair.writer_cache.corpus(scope)
    # Rows the caches were not told of: the worker's unit (ttl_s 30 s) keeps
    # serving without them until the writer's invalidation reaches it.
    await store.upsert([rec("quiet-1", "alice")])
    assert "quiet-1" not in (await pair.worker_cache.corpus(scope)).index_of
    pair.writer_cache.invalidate(rec("old", "alice"))
    await eventually(lambda: pair.frames(pair.worker_metrics, "invalidate", "received") == 1)
    assert "quiet-1" in (await pair.worker_cache.corpus(scope)).index_of  # reloaded

    await store.upsert([rec("quiet-2", "alice")])
    pair.writer_cache.invalidate_user("alice")
    await eventually(lambda: pair.frames(pair.worker_metrics, "invalidate_user", "received") == 1)
    assert "quiet-2" in (await pair.worker_cache.corpus(scope)).index_of
    # Both processes drop what else they keep of the user (a forget's query caches).
    assert pair.told == {"writer": ["alice"], "worker": ["alice"]}

    # Rows the writer's cache reads from the store were not its writes: not sent.
    await pair.writer_cache.corpus(scope)
    await store.upsert([rec("by-someone-else", "alice", updated_at=now_ms())])
    assert await pair.writer_cache.refresh() == 1
    writer_corpus = pair.writer_cache.corpus_nowait(scope)
    assert writer_corpus is not None
    assert "by-someone-else" in writer_corpus.index_of
    assert pair.frames(pair.writer_metrics, "apply", "sent") == 0


async def test_a_wake_reaches_the_writer(pair: Pair) -> None:
    assert pair.worker_metrics.value("memory_sidecar_cache_relay_connections") == 1
    woken = pair.wakes  # one on connecting: turns may have waited meanwhile
    assert woken == 1
    pair.server.wake()
    pair.server.wake()
    await eventually(lambda: pair.wakes == woken + 2)
    assert pair.frames(pair.worker_metrics, "wake", "sent") == 2
    assert pair.frames(pair.writer_metrics, "wake", "received") == 2


async def test_malformed_frames_are_refused_and_counted(pair: Pair, socket_path: str) -> None:
    scope = Scope("alice")
    await pair.worker_cache.corpus(scope)

    def send(frames: bytes) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(socket_path)
            sock.sendall(frames)

    hello = FRAME.pack(HELLO, 1) + b"0"
    bad_rows = STAMP.pack(1) + json.dumps([{"no": "id"}]).encode()
    await asyncio.to_thread(send, hello + FRAME.pack(APPLY, len(bad_rows)) + bad_rows)
    await eventually(lambda: pair.frames(pair.worker_metrics, "apply", "malformed") == 1)
    await asyncio.to_thread(send, hello + FRAME.pack(APPLY, 2) + b"[]")  # no stamp
    await eventually(lambda: pair.frames(pair.worker_metrics, "apply", "malformed") == 2)
    await asyncio.to_thread(send, hello + FRAME.pack(b"?", 0))
    await eventually(lambda: pair.frames(pair.worker_metrics, "unknown", "malformed") == 1)
    await asyncio.to_thread(send, hello + FRAME.pack(APPLY, 2**31))  # too large: closed
    await eventually(lambda: pair.frames(pair.worker_metrics, "unknown", "malformed") == 2)
    await asyncio.to_thread(send, FRAME.pack(APPLY, 2) + b"[]")  # no hello: closed
    await eventually(lambda: pair.frames(pair.worker_metrics, "unknown", "malformed") == 3)
    served = pair.worker_cache.corpus_nowait(scope)
    assert served is not None
    assert set(served.index_of) == {"old"}
    # The writer's own connection is unaffected.
    pair.writer_cache.apply([rec("after", "alice")])
    await eventually(lambda: pair.frames(pair.worker_metrics, "apply", "received") == 1)


async def test_the_newer_of_two_peers_writes_stays_served_whatever_their_order(
    pair: Pair, store: FakeStore, socket_path: str
) -> None:
    """Worker A writes a row, worker B writes it again (holding the owner's host lock
    in turn, so B's frame carries the later stamp); their frames reach a third
    worker over two connections, B's first. A's is not applied over it; nor is a
    peer's write older than this worker's own."""
    scope = Scope("alice")
    await pair.worker_cache.corpus(scope)
    base = rec("row", "alice", updated_at=1_000)
    by_a = base.with_changes(content="version from A")
    by_b = base.with_changes(content="version from B", related_ids=("old",))  # a back-link
    first = pair.worker_cache.stamps.now()

    def peer(records: list[MemoryRecord], stamp: int) -> None:
        body = STAMP.pack(stamp) + encode_records(records)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(socket_path)
            sock.sendall(FRAME.pack(HELLO, 1) + b"0" + FRAME.pack(APPLY, len(body)) + body)

    def served() -> MemoryRecord:
        corpus = pair.worker_cache.corpus_nowait(scope)
        assert corpus is not None
        return corpus.records[corpus.index_of["row"]]

    await asyncio.to_thread(peer, [by_b], first + 2)
    await eventually(lambda: pair.frames(pair.worker_metrics, "apply", "received") == 1)
    await asyncio.to_thread(peer, [by_a, rec("other", "alice")], first + 1)
    await eventually(lambda: pair.frames(pair.worker_metrics, "apply", "received") == 2)
    assert served() == by_b
    assert "other" in pair.worker_cache.corpus_nowait(scope).index_of  # type: ignore[union-attr]
    stale = pair.worker_metrics.value("memory_sidecar_cache_relay_stale_rows_total")
    assert stale == 1

    # This worker's own write, then a peer's frame stamped before it.
    mine = base.with_changes(content="version from this worker")
    pair.worker_cache.apply([mine])
    await asyncio.to_thread(peer, [by_a], first + 3)
    await eventually(lambda: pair.frames(pair.worker_metrics, "apply", "received") == 3)
    assert served() == mine
    assert pair.worker_metrics.value("memory_sidecar_cache_relay_stale_rows_total") == 2


async def test_two_workers_tell_each_other_their_writes_without_echo(
    store: FakeStore, socket_path: str
) -> None:
    """Each worker serves its cache and tells the other's of its writes; a row one
    of them stores is served by the other at once, and not sent back."""
    paths = [socket_path, socket_path.replace("relay.sock", "relay-b.sock")]
    metrics = [Metrics(), Metrics()]
    peers = [RelayPeers([RelayClient(paths[1 - i], metrics[i])]) for i in range(2)]
    caches = [CorpusCache(store, CacheConfig(), metrics[i], mirror=peers[i]) for i in range(2)]
    servers = [RelayServer(c, m) for c, m in zip(caches, metrics, strict=True)]
    for i in range(2):
        await servers[i].start(paths[i])
        peers[i].start()
    try:
        for i in range(2):
            assert await peers[i].clients[0].wait_connected(5.0)
        scope = Scope("alice")
        for cache in caches:
            await cache.corpus(scope)

        def frames(i: int, outcome: str) -> float:
            return metrics[i].value(
                "memory_sidecar_cache_relay_frames_total", {"kind": "apply", "outcome": outcome}
            )

        caches[0].apply([rec("from-a", "alice")])
        caches[1].apply([rec("from-b", "alice")])
        await eventually(lambda: frames(0, "received") == 1 and frames(1, "received") == 1)
        for cache in caches:
            served = cache.corpus_nowait(scope)
            assert served is not None
            assert {"from-a", "from-b"} <= set(served.index_of)
        await asyncio.sleep(0.1)
        assert (frames(0, "sent"), frames(1, "sent")) == (1, 1)  # nothing echoed
        # A wake-up goes only to a client that asked for one: none here.
        servers[0].wake()
        assert (
            metrics[0].value(
                "memory_sidecar_cache_relay_frames_total", {"kind": "wake", "outcome": "dropped"}
            )
            == 1
        )
    finally:
        for i in range(2):
            await peers[i].close()
            await servers[i].close()
            await caches[i].close()


async def test_a_restarted_worker_is_found_again(
    pair: Pair, store: FakeStore, socket_path: str
) -> None:
    await pair.server.close()
    await eventually(lambda: not pair.client.connected)
    assert pair.worker_metrics.value("memory_sidecar_cache_relay_connections") == 0
    pair.writer_cache.apply([rec("lost", "alice")])  # nobody to tell: counted
    assert pair.frames(pair.writer_metrics, "apply", "dropped") == 1

    restarted = RelayServer(pair.worker_cache, pair.worker_metrics)
    await restarted.start(socket_path)
    try:
        assert await pair.client.wait_connected(5.0)
        await pair.worker_cache.corpus(Scope("alice"))
        pair.writer_cache.apply([rec("found", "alice")])
        await eventually(lambda: pair.frames(pair.worker_metrics, "apply", "received") == 1)
        served = pair.worker_cache.corpus_nowait(Scope("alice"))
        assert served is not None
        assert "found" in served.index_of
    finally:
        await restarted.close()
