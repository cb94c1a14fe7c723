"""The memory store: the only module that talks to pymilvus.

One collection holds memories and (from the hierarchy on) category nodes. The same
code runs against a milvus-lite file (default) and a Milvus server/cluster URI; it
uses only features both engines support (FLAT cosine index, BM25 full-text
function, scalar filters). Blocking pymilvus calls run on the store's own executor.

The collection's description records the schema version; opening a collection with
another version or other fields is a :class:`SchemaMismatch` that says what differs.

Access counts (how often the request path injected a memory, and when last) live in
a second, slim collection, ``<collection>__access``: one row per injected memory —
id, owner, count, time, and the placeholder vector Milvus requires of every
collection. Neither engine can change a field of a row in place (milvus-lite
refuses pymilvus' ``partial_update``), so keeping the counts in the memory rows
meant re-reading each accessed row with its vector and writing it back whole every
flush: ~300 ms per 500 rows, against ~40 for the slim rows. Every read of memory
rows merges their access rows in (the higher count and the later time win, so
counts a memory row carries from before, or from an import, still count), on the
store's thread beside the read; a memory row turned into a tombstone loses its
access row in the same call, and a purge removes any left.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from sidecar.config import StoreConfig
from sidecar.errors import SchemaMismatch, StoreError
from sidecar.memory.model.records import (
    AccessStat,
    Hit,
    MemoryRecord,
    MemoryType,
    NodeType,
    Status,
    Visibility,
    as_vector,
    merge_access,
)
from sidecar.memory.store.filters import Filter, ids_filter
from sidecar.memory.store.gate import StoreGate
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
SCHEMA_TAG = f"memory-sidecar schema v{SCHEMA_VERSION}"
#: Version 1 kept ``related_ids`` as an ARRAY of VARCHAR; version 2 keeps the same ids
#: as one VARCHAR holding a JSON array. milvus-lite returns ARRAY fields slowly from a
#: query, more so the bigger the collection: on a 100,000-row store, 650 ms of a
#: 1,200-row load of one user, against ~25 ms for a VARCHAR. A version-1 collection
#: is still opened and written as it is (:attr:`MemoryStore.links_as_array`);
#: ``sidecar store migrate`` copies it into a version-2 one.
LEGACY_SCHEMA_TAG = "memory-sidecar schema v1"

ID_BYTES = 64
IDENT_BYTES = 256
CONTENT_BYTES = 16_384
ABSTRACT_BYTES = 1_024
OVERVIEW_BYTES = 4_096
MAX_RELATED = 32
#: The JSON array of up to MAX_RELATED ids (each at most ID_BYTES, escaped).
RELATED_BYTES = 8_192
#: Milvus returns at most this many rows per query (offset + limit).
QUERY_WINDOW = 16_384
#: The field a Milvus server partitions by with ``store.partition_key``.
PARTITION_KEY_FIELD = "user_id"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    type_name: str  # pymilvus DataType member name
    max_length: int | None = None
    dim: bool = False  # the embedding dimension applies
    element: str | None = None  # ARRAY element type
    max_capacity: int | None = None
    primary: bool = False
    analyzer: bool = False
    function_output: bool = False


#: The collection's fields, in order. Changing this is a schema version bump.
FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("id", "VARCHAR", max_length=ID_BYTES, primary=True),
    FieldSpec("user_id", "VARCHAR", max_length=IDENT_BYTES),
    FieldSpec("group_id", "VARCHAR", max_length=IDENT_BYTES),
    FieldSpec("visibility", "VARCHAR", max_length=16),
    FieldSpec("node_type", "VARCHAR", max_length=16),
    FieldSpec("memory_type", "VARCHAR", max_length=16),
    FieldSpec("status", "VARCHAR", max_length=16),
    FieldSpec("category_id", "VARCHAR", max_length=ID_BYTES),
    FieldSpec("parent_id", "VARCHAR", max_length=ID_BYTES),
    FieldSpec("content", "VARCHAR", max_length=CONTENT_BYTES, analyzer=True),
    FieldSpec("abstract", "VARCHAR", max_length=ABSTRACT_BYTES),
    FieldSpec("overview", "VARCHAR", max_length=OVERVIEW_BYTES),
    FieldSpec("related_ids", "VARCHAR", max_length=RELATED_BYTES),
    FieldSpec("source", "VARCHAR", max_length=32),
    FieldSpec("session_id", "VARCHAR", max_length=IDENT_BYTES),
    FieldSpec("content_hash", "VARCHAR", max_length=ID_BYTES),
    FieldSpec("superseded_by", "VARCHAR", max_length=ID_BYTES),
    FieldSpec("importance", "FLOAT"),
    FieldSpec("confidence", "FLOAT"),
    FieldSpec("access_count", "INT64"),
    FieldSpec("created_at", "INT64"),
    FieldSpec("updated_at", "INT64"),
    FieldSpec("accessed_at", "INT64"),
    FieldSpec("embedding", "FLOAT_VECTOR", dim=True),
    FieldSpec("sparse", "SPARSE_FLOAT_VECTOR", function_output=True),
)

#: ``related_ids`` in a version-1 collection (:data:`LEGACY_SCHEMA_TAG`).
LEGACY_RELATED_FIELD = FieldSpec(
    "related_ids", "ARRAY", element="VARCHAR", max_length=ID_BYTES, max_capacity=MAX_RELATED
)


def collection_fields(*, legacy: bool) -> list[FieldSpec]:
    """The memory collection's fields; ``legacy``: as a version-1 collection has them."""
    return [LEGACY_RELATED_FIELD if legacy and f.name == "related_ids" else f for f in FIELDS]


#: Scalar fields returned by reads (vectors are fetched only when asked for).
SCALAR_FIELDS: tuple[str, ...] = tuple(
    f.name for f in FIELDS if f.type_name not in {"FLOAT_VECTOR", "SPARSE_FLOAT_VECTOR"}
)

#: The access collection's name is the memory collection's with this suffix.
ACCESS_SUFFIX = "__access"
ACCESS_SCHEMA_TAG = "memory-sidecar access v1"
#: The access collection's fields. ``slot`` is a placeholder (Milvus requires a
#: vector field in every collection), always ``ACCESS_SLOT``.
ACCESS_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("id", "VARCHAR", max_length=ID_BYTES, primary=True),
    FieldSpec("user_id", "VARCHAR", max_length=IDENT_BYTES),
    FieldSpec("access_count", "INT64"),
    FieldSpec("accessed_at", "INT64"),
    FieldSpec("slot", "FLOAT_VECTOR", dim=True),
)
ACCESS_SLOT = (1.0, 0.0)
_ACCESS_READ = ["id", "user_id", "access_count", "accessed_at"]
#: Ids per access-collection query or delete.
ACCESS_ID_BATCH = 1000


def fit_utf8(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes on a character boundary."""
    encoded = text.encode("utf-8", errors="replace")  # lone surrogates become "?"
    return encoded[:max_bytes].decode("utf-8", errors="ignore")


def encode_related(ids: Sequence[str]) -> str:
    """``related_ids`` as a version-2 row keeps them: one JSON array."""
    return json.dumps(list(ids), ensure_ascii=False, separators=(",", ":")) if ids else ""


def decode_related(value: Any) -> tuple[str, ...]:
    """A row's ``related_ids``: a JSON array (version 2), a list (version 1, or a relay
    frame), or empty. Anything else reads as no links rather than failing the read."""
    if not value:
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return ()
        if not isinstance(value, list):
            return ()
    return tuple(str(x) for x in value)


def record_to_row(record: MemoryRecord, *, links_as_array: bool = False) -> dict[str, Any]:
    """``links_as_array``: ``related_ids`` as a version-1 collection keeps them."""
    if record.embedding is None:
        raise StoreError(f"memory {record.id} has no embedding")
    related = list(record.related_ids[:MAX_RELATED])
    return {
        "id": record.id,
        "user_id": record.user_id,
        "group_id": record.group_id,
        "visibility": str(record.visibility),
        "node_type": str(record.node_type),
        "memory_type": str(record.memory_type),
        "status": str(record.status),
        "category_id": record.category_id,
        "parent_id": record.parent_id,
        "content": fit_utf8(record.content, CONTENT_BYTES),
        "abstract": fit_utf8(record.abstract, ABSTRACT_BYTES),
        "overview": fit_utf8(record.overview, OVERVIEW_BYTES),
        "related_ids": (related if links_as_array else encode_related(related)),
        "source": fit_utf8(record.source, 32),
        "session_id": fit_utf8(record.session_id, IDENT_BYTES),
        "content_hash": record.content_hash,
        "superseded_by": record.superseded_by,
        "importance": float(record.importance),
        "confidence": float(record.confidence),
        "access_count": int(record.access_count),
        "created_at": int(record.created_at),
        "updated_at": int(record.updated_at),
        "accessed_at": int(record.accessed_at),
        # A record's vector is a tuple of Python floats (:func:`as_vector`).
        "embedding": list(record.embedding),
    }


def _vector(values: Any) -> tuple[float, ...] | None:
    """A row's vector as a record holds it. pymilvus returns a FLOAT_VECTOR as a list
    of Python floats (from the protobuf's repeated float), taken as is: converting
    each of 384 components was most of the cost of reading a row."""
    if values is None:
        return None
    if type(values) is list and values and type(values[0]) is float:
        return tuple(values)
    return as_vector(values)


def row_to_record(row: dict[str, Any]) -> MemoryRecord:
    return MemoryRecord(
        id=str(row["id"]),
        user_id=str(row.get("user_id", "")),
        content=str(row.get("content", "")),
        embedding=_vector(row.get("embedding")),
        group_id=str(row.get("group_id", "")),
        visibility=Visibility(row.get("visibility") or Visibility.USER),
        node_type=NodeType(row.get("node_type") or NodeType.MEMORY),
        memory_type=MemoryType(row.get("memory_type") or MemoryType.SEMANTIC),
        status=_status(row.get("status")),
        category_id=str(row.get("category_id", "")),
        parent_id=str(row.get("parent_id", "")),
        abstract=str(row.get("abstract", "")),
        overview=str(row.get("overview", "")),
        related_ids=decode_related(row.get("related_ids")),
        source=str(row.get("source", "")),
        session_id=str(row.get("session_id", "")),
        importance=float(row.get("importance", 0.5)),
        confidence=float(row.get("confidence", 1.0)),
        access_count=int(row.get("access_count", 0)),
        created_at=int(row.get("created_at", 0)),
        updated_at=int(row.get("updated_at", 0)),
        accessed_at=int(row.get("accessed_at", 0)),
        superseded_by=str(row.get("superseded_by", "")),
        content_hash=str(row.get("content_hash", "")),
    )


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
        #: The collections' descriptions, once open (for the columnar upserts).
        self._info: dict[str, Any] | None = None
        self._access_info: dict[str, Any] | None = None
        #: The collection is version 1 (:data:`LEGACY_SCHEMA_TAG`): links as an ARRAY.
        self.links_as_array = False
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
        client = await loop.run_in_executor(None, _connect, config)
        store = cls(client, config, dim, metrics)
        try:
            await store._run("ensure_collection", store._ensure_collection)
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

    def _ensure_collection(self) -> None:
        timeout = self._config.timeout_s
        existed = self._client.has_collection(self._collection, timeout=timeout)
        if not existed:
            self._create_collection()
        self._info = self._client.describe_collection(self._collection, timeout=timeout)
        if existed:
            self._check_schema(self._info)
            self._client.load_collection(self._collection, timeout=self._config.load_timeout_s)
        existed = self._client.has_collection(self._access, timeout=timeout)
        if not existed:
            self._create_access_collection()
        self._access_info = self._client.describe_collection(self._access, timeout=timeout)
        if existed:
            self._check_access_schema(self._access_info)
            self._client.load_collection(self._access, timeout=self._config.load_timeout_s)

    def _schema(self, fields: Sequence[FieldSpec], tag: str, dim: int) -> Any:
        from pymilvus import DataType

        schema = self._client.create_schema(
            auto_id=False, enable_dynamic_field=False, description=tag
        )
        for spec in fields:
            kwargs: dict[str, Any] = {}
            if spec.max_length is not None:
                kwargs["max_length"] = spec.max_length
            if spec.dim:
                kwargs["dim"] = dim
            if spec.element is not None:
                kwargs["element_type"] = getattr(DataType, spec.element)
                kwargs["max_capacity"] = spec.max_capacity
            if spec.primary:
                kwargs["is_primary"] = True
            if spec.analyzer:
                kwargs["enable_analyzer"] = True
            if spec.name == PARTITION_KEY_FIELD and self._partition_key:
                kwargs["is_partition_key"] = True
            schema.add_field(spec.name, getattr(DataType, spec.type_name), **kwargs)
        return schema

    def _create_collection(self) -> None:
        from pymilvus import Function, FunctionType

        schema = self._schema(FIELDS, SCHEMA_TAG, self._dim)
        schema.add_function(
            Function(
                name="content_bm25",
                function_type=FunctionType.BM25,
                input_field_names=["content"],
                output_field_names=["sparse"],
            )
        )
        index = self._client.prepare_index_params()
        # FLAT (default): exact search. Approximate indexes lose most recall under the
        # selective per-user filter every query carries (measured: HNSW ef=64, 0.47).
        if self._config.index == "HNSW":
            params = {"M": self._config.hnsw_m, "efConstruction": self._config.hnsw_ef_construction}
            index.add_index("embedding", index_type="HNSW", metric_type="COSINE", params=params)
        else:
            index.add_index("embedding", index_type="FLAT", metric_type="COSINE")
        index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
        self._client.create_collection(
            self._collection,
            schema=schema,
            index_params=index,
            timeout=self._config.timeout_s,
        )
        log.info(
            "created collection %s (%s, dim=%d, index=%s, partition_key=%s)",
            self._collection,
            SCHEMA_TAG,
            self._dim,
            self._config.index,
            self._partition_key,
        )

    def _create_access_collection(self) -> None:
        schema = self._schema(ACCESS_FIELDS, ACCESS_SCHEMA_TAG, len(ACCESS_SLOT))
        index = self._client.prepare_index_params()
        index.add_index("slot", index_type="FLAT", metric_type="L2")  # never searched
        self._client.create_collection(
            self._access, schema=schema, index_params=index, timeout=self._config.timeout_s
        )
        log.info("created collection %s (%s)", self._access, ACCESS_SCHEMA_TAG)

    def _check_access_schema(self, info: dict[str, Any]) -> None:
        found = {
            f["name"]: getattr(f.get("type"), "name", str(f.get("type")))
            for f in info.get("fields", [])
        }
        expected = {f.name: f.type_name for f in ACCESS_FIELDS}
        description = str(info.get("description", ""))
        if description != ACCESS_SCHEMA_TAG or found != expected:
            raise SchemaMismatch(
                f"collection {self._access!r} at {self._config.uri} is not this version's "
                f"access-count collection ({ACCESS_SCHEMA_TAG}: "
                f"{', '.join(f'{k} {v}' for k, v in expected.items())}); found "
                f"{description!r} with {', '.join(f'{k} {v}' for k, v in found.items())}. "
                "Use another store.collection."
            )

    def _check_schema(self, info: dict[str, Any]) -> None:
        problems: list[str] = []
        description = str(info.get("description", ""))
        legacy = description == LEGACY_SCHEMA_TAG
        if description != SCHEMA_TAG and not legacy:
            problems.append(f"schema tag is {description!r}, expected {SCHEMA_TAG!r}")
        found = {f["name"]: f for f in info.get("fields", [])}
        for spec in collection_fields(legacy=legacy):
            field = found.pop(spec.name, None)
            if field is None:
                problems.append(f"field {spec.name!r} is missing")
                continue
            type_name = getattr(field.get("type"), "name", str(field.get("type")))
            if type_name != spec.type_name:
                problems.append(f"field {spec.name!r} is {type_name}, expected {spec.type_name}")
            params = field.get("params", {})
            if spec.dim and int(params.get("dim", -1)) != self._dim:
                problems.append(
                    f"field 'embedding' has dim {params.get('dim')}, the model gives {self._dim}"
                )
            if spec.max_length is not None and spec.element is None:
                got = params.get("max_length")
                if got is not None and int(got) != spec.max_length:
                    problems.append(f"field {spec.name!r} has max_length {got}")
            if spec.name == PARTITION_KEY_FIELD:
                keyed = bool(field.get("is_partition_key", False))
                if keyed != self._partition_key:
                    problems.append(
                        f"field {spec.name!r} is {'' if keyed else 'not '}the partition key, "
                        f"store.partition_key is {str(self._partition_key).lower()}"
                    )
        problems.extend(f"unexpected field {name!r}" for name in sorted(found))
        if legacy and not problems:
            self.links_as_array = True
            log.warning(
                "collection %s is %s: its links load slowly from milvus-lite; copy it into "
                "a new collection with 'sidecar store migrate --to-collection NEW'",
                self._collection,
                LEGACY_SCHEMA_TAG,
            )
        if problems:
            raise SchemaMismatch(
                f"collection {self._collection!r} at {self._config.uri} does not match this "
                f"version's schema: {'; '.join(problems)}. Use another collection name, "
                "or copy the rows into a new collection (sidecar store migrate "
                "--to-collection NEW) and point store.collection at it."
            )

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
        client = await loop.run_in_executor(None, _connect, config)
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
        iterator = self._client.query_iterator(
            self._collection,
            batch_size=batch_size,
            filter="",
            output_fields=wanted,
            timeout=timeout,
        )
        rows: list[MemoryRecord] = []
        try:
            while True:
                page = iterator.next()
                if not page:
                    break
                rows.extend(row_to_record(dict(row)) for row in page)
        finally:
            iterator.close()
        if self._client.has_collection(self._access, timeout=timeout):  # its counts count
            self._client.load_collection(self._access, timeout=self._config.load_timeout_s)
            rows = self._with_access(rows)
        rows.sort(key=lambda r: (r.created_at, r.id))
        return str(info.get("description", "")), rows

    # -- writes ----------------------------------------------------------------------

    async def upsert(self, records: Sequence[MemoryRecord]) -> None:
        """Insert or replace rows by id (re-embedded rows replace their vectors)."""
        if not records:
            return

        def call() -> None:
            rows = [record_to_row(r, links_as_array=self.links_as_array) for r in records]
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
        return [f for f in collection_fields(legacy=self.links_as_array) if not f.function_output]

    def _upsert_columns(
        self,
        collection: str,
        fields: Sequence[FieldSpec],
        columns: dict[str, list[Any]],
        info: dict[str, Any] | None,
    ) -> None:
        """Insert or replace rows given column by column (every field of ``fields``).

        ``MilvusClient.upsert`` takes rows and packs them into the request cell by
        cell in Python, ~20 µs a cell on this project's 2-core host, with the GIL
        held: 40 ms of this process's CPU for 2,000 access rows (beside 33 ms in the
        store's server), 63–71 ms for 500 memory rows (beside ~100 ms). Its
        connection's columnar upsert (what the ORM's ``Collection.upsert`` sends; the
        same request to milvus-lite and a server) packs whole columns: 2 and 15 ms.
        Unlike milvus-lite's server, it checks VARCHAR lengths, as a Milvus server
        does. The connection is reached through pymilvus's ``_get_connection``
        (pinned in constraints.txt; the store tests write and read through both
        paths); a client without it takes the row upsert.
        """
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
        extra: dict[str, Any] = {"consistency_level": "Strong"} if strong else {}
        found: dict[str, AccessStat] = {}
        for start in range(0, len(wanted), ACCESS_ID_BATCH):
            chunk = wanted[start : start + ACCESS_ID_BATCH]
            rows = self._client.query(
                self._access,
                filter=ids_filter(chunk),
                output_fields=_ACCESS_READ,
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

    def _with_access(self, records: list[MemoryRecord]) -> list[MemoryRecord]:
        """``records`` with their access rows merged in (in the store's thread)."""
        ids = [
            r.id for r in records if r.node_type == NodeType.MEMORY and r.status != Status.DELETED
        ]
        stats = self._access_rows(ids) if ids else {}
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
        data = [list(as_vector(vector))]

        def call() -> list[Hit]:
            result = self._client.search(
                self._collection,
                data=data,
                anns_field="embedding",
                limit=limit,
                filter=where,
                output_fields=list(SCALAR_FIELDS),
                search_params=self._vector_search_params(limit),
                consistency_level="Strong" if strong else "Bounded",
                timeout=self._config.timeout_s,
            )
            return self._hits_with_access(_hits(result))

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
        """BM25 full-text search over ``content`` among rows matching ``where``."""

        def call() -> list[Hit]:
            result = self._client.search(
                self._collection,
                data=[text],
                anns_field="sparse",
                limit=limit,
                filter=where,
                output_fields=list(SCALAR_FIELDS),
                search_params={"metric_type": "BM25"},
                timeout=self._config.timeout_s,
            )
            return self._hits_with_access(_hits(result))

        return await self._run("search_text", call, gate="read", owners=_owner(where))

    async def query(
        self,
        where: Filter,
        *,
        limit: int = 1000,
        offset: int = 0,
        with_vectors: bool = False,
    ) -> list[MemoryRecord]:
        fields = [*SCALAR_FIELDS, "embedding"] if with_vectors else list(SCALAR_FIELDS)

        def call() -> list[MemoryRecord]:
            rows = self._client.query(
                self._collection,
                filter=where,
                output_fields=fields,
                limit=limit,
                offset=offset,
                timeout=self._config.timeout_s,
            )
            return self._with_access(_records(dict(row) for row in rows))

        return await self._run("query", call, gate="read", owners=_owner(where))

    async def scan(
        self, where: Filter, *, with_vectors: bool = False, batch_size: int = 1000
    ) -> list[MemoryRecord]:
        """Every row matching ``where``: one query when it fits Milvus' 16,384-row
        window, a paged query iterator beyond it."""
        fields = [*SCALAR_FIELDS, "embedding"] if with_vectors else list(SCALAR_FIELDS)

        def call() -> list[MemoryRecord]:
            return self._with_access(_records(self._query_all(where, fields, batch_size)))

        return await self._run("scan", call, gate="read", owners=_owner(where))

    def _query_all(
        self, where: Filter, fields: list[str], batch_size: int = 1000
    ) -> list[dict[str, Any]]:
        rows = self._client.query(
            self._collection,
            filter=where,
            output_fields=fields,
            limit=QUERY_WINDOW,
            timeout=self._config.timeout_s,
        )
        if len(rows) < QUERY_WINDOW:
            return [dict(row) for row in rows]
        iterator = self._client.query_iterator(
            self._collection,
            batch_size=batch_size,
            filter=where,
            output_fields=fields,
            timeout=self._config.timeout_s,
        )
        paged: list[dict[str, Any]] = []
        try:
            while True:
                page = iterator.next()
                if not page:
                    return paged
                paged.extend(dict(row) for row in page)
        finally:
            iterator.close()

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


def _status(value: object) -> Status:
    """A row's status; one this version does not know (written by a newer one) reads
    as deleted: never served, never judged against, never written back."""
    try:
        return Status(str(value or Status.ACTIVE))
    except ValueError:
        return Status.DELETED


def _records(rows: Iterable[dict[str, Any]]) -> list[MemoryRecord]:
    """Rows as records, oldest first (ties by id). Run on the store's threads, beside
    the call: a thousand rows take milliseconds that the event loop does not wait."""
    records = [row_to_record(row) for row in rows]
    records.sort(key=lambda r: (r.created_at, r.id))
    return records


def _hits(result: Any) -> list[Hit]:
    hits: list[Hit] = []
    for item in result[0] if result else []:
        entity = dict(item.get("entity") or {})
        entity.setdefault("id", item.get("id"))
        hits.append(Hit(row_to_record(entity), float(item.get("distance", 0.0))))
    # Deterministic: equal scores fall back to id order.
    hits.sort(key=lambda h: (-h.score, h.record.id))
    return hits


#: First pause before connecting again (doubling to 1 s).
_CONNECT_RETRY_S = 0.1


def _connect(config: StoreConfig) -> Any:
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    kwargs: dict[str, Any] = {"uri": config.uri, "timeout": config.timeout_s}
    if config.is_local_file:
        Path(config.uri).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
    if config.token is not None:
        kwargs["token"] = config.token.get_secret_value()
    if config.db_name:
        kwargs["db_name"] = config.db_name
    # An embedded milvus-lite server is given 0.5 s to start before its socket is
    # used, and a missing socket fails at once whatever the timeout: on a busy host
    # that failed start-ups. Connection failures are retried until ``timeout_s``.
    deadline = time.monotonic() + config.timeout_s
    pause = _CONNECT_RETRY_S
    while True:
        try:
            return MilvusClient(**kwargs)
        except MilvusException as exc:
            retry = "connect" in str(exc.message).lower()
            if not retry or time.monotonic() + pause > deadline:
                raise StoreError(
                    f"cannot connect to the store at {config.uri}: {exc.message}"
                ) from exc
            log.info("store not reachable yet; retrying in %.1f s", pause)
            time.sleep(pause)
            pause = min(1.0, pause * 2)
        except (OSError, RuntimeError, ValueError) as exc:
            raise StoreError(f"cannot open the store at {config.uri}: {exc}") from exc
