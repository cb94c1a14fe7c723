"""Where memories live (``store``) and the in-process cache of each scope's
memories that retrieval scores (``cache``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator

from sidecar.config.base import _Model


class StoreConfig(_Model):
    """Where memories live: a milvus-lite file path or a Milvus server URI."""

    #: A milvus-lite file path (created on demand) or a Milvus server URI such as
    #: ``http://milvus:19530``.
    uri: str = "./data/memory.db"
    #: Milvus server credentials: ``user:password`` or an API key.
    token: SecretStr | None = None
    #: Milvus database ('' = the server's default).
    db_name: str = ""
    #: Collection name; its description records the schema version. Access counts
    #: go to a second collection named after it, with ``__access`` added.
    collection: str = Field(default="memories", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,246}$")
    #: Seconds a single store call may take (bounds pymilvus' internal retries too).
    timeout_s: float = Field(default=10.0, gt=0)
    #: Seconds loading the collection into memory may take at start (and before a
    #: migration reads it): a large collection takes far longer than one call.
    load_timeout_s: float = Field(default=300.0, gt=0)
    #: Threads for blocking pymilvus calls.
    workers: int = Field(default=4, ge=1, le=64)
    #: Longest stored memory text, in characters (longer text is truncated).
    max_content_chars: int = Field(default=2000, ge=16, le=8000)
    #: Milvus server only (2.4 or newer: older servers misplace upserted rows): make
    #: ``user_id`` the collection's partition key, so a user's rows are hashed into
    #: one of Milvus' partitions and a filter on the user prunes the others. Fixed
    #: at collection creation (a different value for an existing collection is a
    #: schema mismatch: ``sidecar store migrate``). milvus-lite has no partitions:
    #: ``true`` with a file URI is an error.
    partition_key: bool = False
    #: Vector index of ``embedding``. ``FLAT`` (exact) is the recommendation: every
    #: query carries a selective per-user filter, under which approximate indexes
    #: lose most recall. ``HNSW`` (Milvus server only) trades that recall for speed
    #: on very large scopes.
    index: Literal["FLAT", "HNSW"] = "FLAT"
    #: HNSW build parameters (``M``, ``efConstruction``) and search ``ef``.
    hnsw_m: int = Field(default=16, ge=2, le=2048)
    #: HNSW ``efConstruction`` (build-time candidate list).
    hnsw_ef_construction: int = Field(default=200, ge=1)
    #: HNSW search ``ef`` (at least the candidates a query asks for).
    hnsw_ef: int = Field(default=64, ge=1)
    #: Set by the supervisor, not read from the user's file (``SUPERVISOR_SETTINGS``):
    #: the directory of the lock files through which reads and upserts exclude each
    #: other on milvus-lite, whose upserts a concurrent read can see half done
    #: (:mod:`sidecar.memory.store.gate`). '' = ``<file>.gates`` beside a milvus-lite
    #: file, none for a server URI; the supervisor of ``server.workers`` sets the
    #: file's for the processes it hands the embedded server's socket to.
    gate_dir: str = ""
    #: The milvus-lite file behind a ``unix:`` URI: the supervisor of
    #: ``server.workers`` sets it for the processes it hands the embedded server's
    #: socket to, so a forget can rewrite it (:mod:`sidecar.memory.store.scrub`).
    lite_file: str = ""

    @property
    def is_local_file(self) -> bool:
        """True for a milvus-lite file, False for an http(s)/tcp server URI or the
        ``unix:`` socket of a running embedded server (what ``server.workers`` uses)."""
        return "://" not in self.uri and not self.uri.startswith("unix:")

    @property
    def lite_path(self) -> Path | None:
        """The milvus-lite file this store keeps its rows in; None for a server."""
        if self.lite_file:
            return Path(self.lite_file).expanduser()
        return Path(self.uri).expanduser() if self.is_local_file else None

    @property
    def gate_path(self) -> Path | None:
        """The store gate's directory; None where the store needs none (a server)."""
        if self.gate_dir:
            return Path(self.gate_dir).expanduser()
        if self.is_local_file:
            path = Path(self.uri).expanduser().resolve()
            return path.with_name(path.name + ".gates")
        return None

    @model_validator(mode="after")
    def _check_server_features(self) -> StoreConfig:
        if self.is_local_file and self.partition_key:
            raise ValueError("partition_key needs a Milvus server URI (milvus-lite has none)")
        if self.is_local_file and self.index != "FLAT":
            raise ValueError(f"index {self.index} needs a Milvus server URI (milvus-lite: FLAT)")
        return self


class CacheConfig(_Model):
    """The in-process cache of each scope's visible memories (the retrieval corpus).

    Retrieval scores a scope's corpus in memory, so a user's latency depends on what
    that user can see, not on the store's size. This process's writes invalidate at
    once; writes by other replicas become visible within ``ttl_s``.
    """

    #: After this many seconds a cached unit is refreshed in the background with
    #: the rows changed since (a cheap delta query).
    ttl_s: float = Field(default=30.0, gt=0)
    #: A full reload (which also notices rows deleted by other replicas) at most
    #: this often per unit.
    full_reload_s: float = Field(default=600.0, gt=0)
    #: Set by the supervisor, not read from the user's file (``SUPERVISOR_SETTINGS``):
    #: the Unix socket on which this worker's cache takes what the host's other
    #: processes write (the cache relay, :mod:`sidecar.runtime.relay`), so that a
    #: user's next request sees a write at once whichever worker serves it
    #: (``server.workers`` > 1, ``write_queue.own_process``).
    relay_socket: str = ""
    #: Set by the supervisor, not read from the user's file (``SUPERVISOR_SETTINGS``):
    #: the other workers' relay sockets, told of this process's writes.
    relay_peers: list[str] = Field(default_factory=list)
    #: Most memory rows held across all cached units (least recently used evicted).
    max_rows: int = Field(default=200_000, ge=1_000)
    #: Most merged per-scope corpora kept.
    max_scopes: int = Field(default=1_024, ge=1)
    #: A scope's snapshot changed by a write or a load is made, with what the default
    #: profile's ranking reads of every memory whatever the question, this long after
    #: the scope's last change, off the request path (a turn's writes make one); 0:
    #: made by the next request that reads it (:mod:`sidecar.memory.corpus.warming`).
    warm_after_ms: int = Field(default=500, ge=0, le=60_000)
    #: ... for scopes of at least this many memories: a smaller one's first question
    #: costs under a millisecond more than the next, less than readying it for a
    #: request that may not come.
    warm_min_rows: int = Field(default=128, ge=0)
