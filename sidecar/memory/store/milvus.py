"""The memory store: the only module that talks to pymilvus.

One collection holds memories and (from the hierarchy on) category nodes. The same
code runs against a milvus-lite file (default) and a Milvus server/cluster URI; it
uses only features both engines support (FLAT cosine index, BM25 full-text
function, scalar filters). Blocking pymilvus calls run on the store's own executor.

The collection's description records the schema version; opening a collection with
another version or other fields is a :class:`SchemaMismatch` that says what differs.

Access counts (how often the request path injected a memory, and when last) live in
a second, slim collection, ``<collection>__access``, merged into every read of memory
rows (the higher count and the later time win; docs/design/access-counts.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from sidecar.config import StoreConfig
from sidecar.errors import StoreError
from sidecar.memory.records.batches import UPSERT_CHUNK
from sidecar.memory.records.records import (
    AccessStat,
    Hit,
    MemoryRecord,
    NodeType,
    Status,
    as_vector,
    merge_access,
)
from sidecar.memory.store.capabilities import announce, detect, full_text_error, lite_capabilities
from sidecar.memory.store.coalesce import Coalescer
from sidecar.memory.store.collections import ensure_collections
from sidecar.memory.store.connection import connect
from sidecar.memory.store.filters import Filter, ids_filter
from sidecar.memory.store.gate import StoreGate
from sidecar.memory.store.schema import (
    ACCESS_FIELDS,
    ACCESS_ID_BATCH,
    ACCESS_READ,
    ACCESS_SLOT,
    ACCESS_SUFFIX,
    FIELDS,
    QUERY_WINDOW,
    SCHEMA_VERSION,
    FieldSpec,
    collection_fields,
    hits,
    read_fields,
    record_to_row,
    records,
    row_to_record,
)
from sidecar.memory.store.scrub import vacuum
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")


class MemoryStore:
    """Async facade over one pymilvus ``MilvusClient`` and one collection."""

    def __init__(self, client: Any, config: StoreConfig, dim: int, metrics: Metrics) -> None:
        self._client = client
        self._config = config
        self._dim = dim
        self._metrics = metrics
        self._collection = config.collection
        self._access = config.collection + ACCESS_SUFFIX
        # milvus-lite has no partitions (StoreConfig rejects partition_key there).
        self._partition_key = config.partition_key and not config.is_local_file
        self._executor = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="milvus")
        self._closed = False
        #: Concurrent upserts joined into one call (:mod:`.coalesce`).
        self._upserts: Coalescer[MemoryRecord] = Coalescer(
            self._upsert, key=lambda r: r.id, max_items=UPSERT_CHUNK
        )
        #: The collections' descriptions, once open (for the columnar upserts).
        self._info: dict[str, Any] | None = None
        self._access_info: dict[str, Any] | None = None
        #: The memory collection's schema version (an older one is written as it is).
        self.schema_version, self._read_fields = SCHEMA_VERSION, read_fields()
        #: What the engine offers (:mod:`.capabilities`), asked when the store opens.
        self.capabilities = lite_capabilities()
        #: The memory collection has Milvus' BM25 function (``search_text`` works).
        self.full_text = True
        gate = config.gate_path
        self._gate = (
            None
            if gate is None
            else StoreGate(gate, timeout_s=config.timeout_s, waited=self._gate_waited)
        )

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    async def open(cls, config: StoreConfig, dim: int, metrics: Metrics) -> MemoryStore:
        """Connect, then create the collection or check the existing one's schema."""
        loop = asyncio.get_running_loop()
        client = await loop.run_in_executor(None, connect, config)
        store = cls(client, config, dim, metrics)
        try:
            await store._run("ensure_collection", store._ensure_collections)
        except BaseException:
            await store.close()
            raise
        return store

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        self._closed = True
        try:
            await loop.run_in_executor(self._executor, self._client.close)
        except Exception as exc:  # closing is best effort; pymilvus raises many types
            log.warning("store close failed: %s", type(exc).__name__)
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def uri(self) -> str:
        return self._config.uri

    # -- the one executor boundary ----------------------------------------------------

    @contextmanager
    def _translated(self, operation: str) -> Iterator[None]:
        import grpc
        from pymilvus.exceptions import MilvusException

        try:
            yield
        except MilvusException as exc:
            self._metrics.store_errors.labels(operation=operation).inc()
            raise StoreError(f"{operation} failed: {exc.message}") from exc
        except grpc.RpcError as exc:  # pymilvus lets some (deadline exceeded) through
            self._metrics.store_errors.labels(operation=operation).inc()
            code = exc.code() if isinstance(exc, grpc.Call) else None
            raise StoreError(f"{operation} failed: gRPC {code}") from exc
        except (ConnectionError, OSError, ValueError, TypeError) as exc:
            self._metrics.store_errors.labels(operation=operation).inc()
            raise StoreError(f"{operation} failed: {type(exc).__name__}: {exc}") from exc

    async def _run(
        self,
        operation: str,
        fn: Callable[[], T],
        *,
        gate: Literal["read", "upsert"] | None = None,
        owners: Iterable[str] | None = None,
    ) -> T:
        """``fn`` in the store's threads. ``gate``: what it does to rows other calls
        may read at the same time, ``owners``: whose rows (None: anyone's) — see
        :mod:`sidecar.memory.store.gate`."""
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        if gate is not None and self._gate is not None:
            fn = self._gated(self._gate, fn, owners, exclusive=gate == "upsert")
        with self._translated(operation):
            if self._closed:
                raise StoreError(f"{operation} failed: the store is closed")
            try:
                return await loop.run_in_executor(self._executor, fn)
            finally:
                self._metrics.store_seconds.labels(operation=operation).observe(
                    time.perf_counter() - started
                )

    @staticmethod
    def _gated(
        gate: StoreGate, fn: Callable[[], T], owners: Iterable[str] | None, *, exclusive: bool
    ) -> Callable[[], T]:
        def call() -> T:
            with gate.held(owners, exclusive=exclusive):
                return fn()

        return call

    def _gate_waited(self, mode: str, seconds: float) -> None:
        self._metrics.store_gate_wait_seconds.labels(mode=mode).observe(seconds)

    # -- schema ----------------------------------------------------------------------

    def _ensure_collections(self) -> None:
        self.capabilities = detect(self._client, self._config)
        opened = ensure_collections(
            self._client,
            self._config,
            memory=self._collection,
            access=self._access,
            dim=self._dim,
            partition_key=self._partition_key,
            full_text=self.capabilities.full_text,
        )
        self._info, self._access_info = opened.info, opened.access_info
        self.schema_version, self._read_fields = opened.version, read_fields(opened.version)
        self.full_text = opened.full_text
        announce(self.capabilities, self.full_text, self._metrics)

    # -- migrations ------------------------------------------------------------------

    @classmethod
    async def read_collection(
        cls, config: StoreConfig, collection: str, metrics: Metrics, *, batch_size: int = 1000
    ) -> tuple[str, list[MemoryRecord]]:
        """Every row of ``collection`` at ``config.uri``, whatever its schema version
        (for ``sidecar store migrate``): the fields this version knows are read
        (vectors included), missing ones get their defaults, others are dropped.
        Returns the collection's schema tag and the rows."""
        loop = asyncio.get_running_loop()
        client = await loop.run_in_executor(None, connect, config)
        reader = cls(client, config.model_copy(update={"collection": collection}), 0, metrics)
        try:
            return await reader._run(
                "read_collection", lambda: reader._read_all(batch_size), gate="read"
            )
        finally:
            await reader.close()

    def _read_all(self, batch_size: int) -> tuple[str, list[MemoryRecord]]:
        timeout = self._config.timeout_s
        if not self._client.has_collection(self._collection, timeout=timeout):
            raise StoreError(f"no collection {self._collection!r} at {self._config.uri}")
        info = self._client.describe_collection(self._collection, timeout=timeout)
        present = {f["name"] for f in info.get("fields", [])}
        wanted = [f.name for f in FIELDS if f.name in present and not f.function_output]
        if "id" not in present:
            raise StoreError(f"collection {self._collection!r} has no 'id' field")
        self._client.load_collection(self._collection, timeout=self._config.load_timeout_s)
        rows = [row_to_record(row) for page in self._pages("", wanted, batch_size) for row in page]
        if self._client.has_collection(self._access, timeout=timeout):  # its counts count
            self._client.load_collection(self._access, timeout=self._config.load_timeout_s)
            rows = self._with_access(rows)
        rows.sort(key=lambda r: (r.created_at, r.id))
        return str(info.get("description", "")), rows

    # -- writes ----------------------------------------------------------------------

    async def upsert(self, records: Sequence[MemoryRecord]) -> None:
        """Insert or replace rows by id (re-embedded rows replace their vectors)."""
        await self._upserts.submit(records)

    async def _upsert(self, records: list[MemoryRecord]) -> None:
        """One upsert call (of one caller's rows or several callers')."""

        def call() -> None:
            rows = [record_to_row(r, version=self.schema_version) for r in records]
            fields = self._written_fields()
            columns = {f.name: [row[f.name] for row in rows] for f in fields}
            self._upsert_columns(self._collection, fields, columns, self._info)
            self._delete_access(r.id for r in records if r.status == Status.DELETED)

        await self._run("upsert", call, gate="upsert", owners={r.user_id for r in records})

    async def delete(self, where: Filter) -> None:
        """Remove the rows matching ``where`` for good, and their access rows."""

        def call() -> None:
            self._delete_access(row["id"] for row in self._query_all(where, ["id"]))
            self._client.delete(self._collection, filter=where, timeout=self._config.timeout_s)

        await self._run("delete", call)

    async def flush(self) -> None:
        await self._run(
            "flush", lambda: self._client.flush(self._collection, timeout=self._config.timeout_s)
        )

    async def scrub(self) -> bool:
        """No freed page of a milvus-lite file keeps deleted rows' bytes (a forget's
        last step; :func:`.scrub.vacuum`). A server drops them at compaction: False."""
        path, timeout = self._config.lite_path, self._config.timeout_s
        if path is None:
            return False

        def call() -> bool:
            self._client.flush(self._collection, timeout=timeout)
            return vacuum(path, timeout)

        return await self._run("scrub", call, gate="upsert")

    # -- access counts ---------------------------------------------------------------

    async def read_access(self, ids: Sequence[str]) -> dict[str, AccessStat]:
        """The access rows of those of ``ids`` that have one (read-your-writes)."""
        return await self._run(
            "read_access", lambda: self._access_rows(ids, strong=True), gate="read"
        )

    async def write_access(self, stats: Sequence[AccessStat]) -> None:
        """Insert or replace the access rows of ``stats`` (by memory id)."""
        if not stats:
            return
        columns: dict[str, list[Any]] = {
            "id": [s.id for s in stats],
            "user_id": [s.user_id for s in stats],
            "access_count": [int(s.count) for s in stats],
            "accessed_at": [int(s.at) for s in stats],
            "slot": [list(ACCESS_SLOT)] * len(stats),
        }
        await self._run(
            "write_access",
            lambda: self._upsert_columns(self._access, ACCESS_FIELDS, columns, self._access_info),
            gate="upsert",
            owners={s.user_id for s in stats},
        )

    def _written_fields(self) -> list[FieldSpec]:
        """The memory collection's fields a write gives (not the BM25 function's)."""
        return [f for f in collection_fields(self.schema_version) if not f.function_output]

    def _upsert_columns(
        self,
        collection: str,
        fields: Sequence[FieldSpec],
        columns: dict[str, list[Any]],
        info: dict[str, Any] | None,
    ) -> None:
        """Insert or replace rows given column by column (every field of ``fields``):
        the connection's columnar upsert packs whole columns where
        ``MilvusClient.upsert`` packs cell by cell with the GIL held, and checks VARCHAR
        lengths as a server does (docs/design/store-schema.md). The connection comes
        from pymilvus's ``_get_connection`` (pinned in constraints.txt); a client
        without it takes the row upsert."""
        from pymilvus import DataType
        from pymilvus.client.call_context import CallContext

        connection = getattr(self._client, "_get_connection", None)
        if connection is None or info is None:
            count = len(next(iter(columns.values()), []))
            rows = [{name: values[i] for name, values in columns.items()} for i in range(count)]
            self._client.upsert(collection, data=rows, timeout=self._config.timeout_s)
            return
        entities = [
            {"name": f.name, "type": DataType[f.type_name], "values": columns[f.name]}
            for f in fields
        ]
        connection().upsert(
            collection,
            entities,
            timeout=self._config.timeout_s,
            context=CallContext(db_name=self._config.db_name),
            schema=info,
        )

    def _access_rows(self, ids: Iterable[str], *, strong: bool = False) -> dict[str, AccessStat]:
        wanted = sorted(set(ids))
        extra = _consistency(strong)
        found: dict[str, AccessStat] = {}
        for start in range(0, len(wanted), ACCESS_ID_BATCH):
            chunk = wanted[start : start + ACCESS_ID_BATCH]
            rows = self._client.query(
                self._access,
                filter=ids_filter(chunk),
                output_fields=ACCESS_READ,
                limit=len(chunk),
                timeout=self._config.timeout_s,
                **extra,
            )
            for row in rows:
                stat = AccessStat(
                    str(row["id"]),
                    str(row["user_id"]),
                    int(row["access_count"]),
                    int(row["accessed_at"]),
                )
                found[stat.id] = stat
        return found

    def _with_access(
        self, records: list[MemoryRecord], *, strong: bool = False
    ) -> list[MemoryRecord]:
        """``records`` with their access rows merged in (in the store's thread), read
        with the same consistency as the rows themselves."""
        ids = [
            r.id for r in records if r.node_type == NodeType.MEMORY and r.status != Status.DELETED
        ]
        stats = self._access_rows(ids, strong=strong) if ids else {}
        if not stats:
            return records
        return [merge_access(r, stats.get(r.id)) for r in records]

    def _delete_access(self, ids: Iterable[str]) -> None:
        gone = sorted(set(ids))
        for start in range(0, len(gone), ACCESS_ID_BATCH):
            self._client.delete(
                self._access,
                filter=ids_filter(gone[start : start + ACCESS_ID_BATCH]),
                timeout=self._config.timeout_s,
            )

    # -- reads -----------------------------------------------------------------------

    async def search(
        self,
        vector: Sequence[float] | npt.NDArray[np.float32],
        *,
        where: Filter,
        limit: int,
        strong: bool = False,
    ) -> list[Hit]:
        """Cosine nearest neighbours among rows matching ``where`` (best first).

        ``strong`` asks for read-your-writes consistency (the write path's dedup);
        the request path reads with bounded staleness.
        """
        data = [as_vector(vector).tolist()]

        def call() -> list[Hit]:
            result = self._client.search(
                self._collection,
                data=data,
                anns_field="embedding",
                limit=limit,
                filter=where,
                output_fields=list(self._read_fields),
                search_params=self._vector_search_params(limit),
                consistency_level="Strong" if strong else "Bounded",
                timeout=self._config.timeout_s,
            )
            return self._hits_with_access(hits(result))

        return await self._run("search", call, gate="read", owners=_owner(where))

    def _hits_with_access(self, hits: list[Hit]) -> list[Hit]:
        records = self._with_access([h.record for h in hits])
        return [
            h if r is h.record else replace(h, record=r) for h, r in zip(hits, records, strict=True)
        ]

    def _vector_search_params(self, limit: int) -> dict[str, Any]:
        if self._config.index == "HNSW":
            return {"metric_type": "COSINE", "params": {"ef": max(self._config.hnsw_ef, limit)}}
        return {"metric_type": "COSINE"}

    async def search_text(self, text: str, *, where: Filter, limit: int) -> list[Hit]:
        """BM25 full-text search over ``content`` among rows matching ``where`` (a
        :class:`StoreError` where the collection has no BM25 function)."""
        if not self.full_text:
            raise full_text_error(self.capabilities)

        def call() -> list[Hit]:
            result = self._client.search(
                self._collection,
                data=[text],
                anns_field="sparse",
                limit=limit,
                filter=where,
                output_fields=list(self._read_fields),
                search_params={"metric_type": "BM25"},
                timeout=self._config.timeout_s,
            )
            return self._hits_with_access(hits(result))

        return await self._run("search_text", call, gate="read", owners=_owner(where))

    async def query(
        self,
        where: Filter,
        *,
        limit: int = 1000,
        offset: int = 0,
        with_vectors: bool = False,
        strong: bool = False,
    ) -> list[MemoryRecord]:
        fields = [*self._read_fields, "embedding"] if with_vectors else list(self._read_fields)

        def call() -> list[MemoryRecord]:
            rows = self._client.query(
                self._collection,
                filter=where,
                output_fields=fields,
                limit=limit,
                offset=offset,
                timeout=self._config.timeout_s,
                **_consistency(strong),
            )
            return self._with_access(records(dict(row) for row in rows), strong=strong)

        return await self._run("query", call, gate="read", owners=_owner(where))

    async def scan(
        self,
        where: Filter,
        *,
        with_vectors: bool = False,
        batch_size: int = 1000,
        strong: bool = False,
    ) -> list[MemoryRecord]:
        """Every row matching ``where``: one query when it fits Milvus' 16,384-row
        window, a paged query iterator beyond it."""
        fields = [*self._read_fields, "embedding"] if with_vectors else list(self._read_fields)

        def call() -> list[MemoryRecord]:
            rows = self._query_all(where, fields, batch_size, strong=strong)
            return self._with_access(records(rows), strong=strong)

        return await self._run("scan", call, gate="read", owners=_owner(where))

    def _query_all(
        self, where: Filter, fields: list[str], batch_size: int = 1000, *, strong: bool = False
    ) -> list[dict[str, Any]]:
        rows = self._client.query(
            self._collection,
            filter=where,
            output_fields=fields,
            limit=QUERY_WINDOW,
            timeout=self._config.timeout_s,
            **_consistency(strong),
        )
        if len(rows) < QUERY_WINDOW:
            return [dict(row) for row in rows]
        pages = self._pages(where, fields, batch_size, strong=strong)
        return [row for page in pages for row in page]

    def _pages(
        self, where: str, fields: list[str], batch_size: int, *, strong: bool = False
    ) -> Iterator[list[dict[str, Any]]]:
        """The rows matching ``where`` (a :class:`Filter`; "": every row), a page at a
        time (Milvus' query iterator: no window, one page held)."""
        iterator = self._client.query_iterator(
            self._collection,
            batch_size=batch_size,
            filter=where,
            output_fields=fields,
            timeout=self._config.timeout_s,
            **_consistency(strong),
        )
        try:
            while page := iterator.next():
                yield [dict(row) for row in page]
        finally:
            iterator.close()

    async def sweep(
        self, where: Filter, fields: Sequence[str], consume: Callable[[list[dict[str, Any]]], None]
    ) -> None:
        """``fields`` of every row matching ``where``, to ``consume`` a page (4,096 rows) at
        a time in the store's thread: a pass that never holds every row (the users list)."""

        def call() -> None:
            for page in self._pages(where, list(fields), QUERY_WINDOW // 4):
                consume(page)

        await self._run("sweep", call, gate="read", owners=_owner(where))

    async def owners(self, where: Filter, *, limit: int = 1000) -> dict[str, str]:
        """The rows matching ``where``: id -> owner (no other field is read)."""

        def call() -> dict[str, str]:
            rows = self._client.query(
                self._collection,
                filter=where,
                output_fields=["id", "user_id"],
                limit=limit,
                timeout=self._config.timeout_s,
            )
            return {str(row["id"]): str(row["user_id"]) for row in rows}

        return await self._run("owners", call, gate="read", owners=_owner(where))

    async def count(self, where: Filter) -> int:
        def call() -> Any:
            return self._client.query(
                self._collection,
                filter=where,
                output_fields=["count(*)"],
                timeout=self._config.timeout_s,
            )

        rows = await self._run("count", call, gate="read", owners=_owner(where))
        return int(rows[0]["count(*)"]) if rows else 0


def _owner(where: Filter) -> list[str] | None:
    """The one owner whose rows ``where`` can match (for the store gate), if any."""
    return None if where.owner is None else [where.owner]


def _consistency(strong: bool) -> dict[str, Any]:
    """A read's consistency: ``Strong`` sees every write acknowledged before it (the
    write path's reads of rows other writers may just have written); otherwise the
    collection's default (``Bounded`` on a server: a few seconds stale at most)."""
    return {"consistency_level": "Strong"} if strong else {}
