"""The collections' schema and how a :class:`MemoryRecord` becomes a row and back.

One collection holds memories and category nodes; its description records the
schema version (:data:`SCHEMA_TAG`). Access counts live in a second, slim
collection, ``<collection>__access`` (:data:`ACCESS_FIELDS`). Changing a field list
here is a schema version bump; ``sidecar store migrate`` copies old collections.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.errors import StoreError
from sidecar.memory.records.embeddings import Embedding
from sidecar.memory.records.records import (
    Hit,
    MemoryRecord,
    MemoryType,
    NodeType,
    Origin,
    Status,
    Visibility,
    as_vector,
)

SCHEMA_VERSION = 3


def schema_tag(version: int) -> str:
    """The description a collection of schema ``version`` carries."""
    return f"memory-sidecar schema v{version}"


SCHEMA_TAG = schema_tag(SCHEMA_VERSION)
#: Version 3 adds ``excerpt`` (what was said, the memory's L2) and ``provenance`` (the
#: turns it was made from). A version-2 collection is still opened and written as it
#: is, without them; ``sidecar store migrate`` copies it into a version-3 one.
#: Version 1 kept ``related_ids`` as an ARRAY of VARCHAR; version 2 keeps the same ids
#: as one VARCHAR holding a JSON array. milvus-lite returns ARRAY fields slowly from a
#: query, more so the bigger the collection: on a large store they are most of the
#: time of loading one user's rows (docs/design/store-schema.md). A version-1 collection
#: is still opened and written as it is (:attr:`MemoryStore.schema_version`);
#: ``sidecar store migrate`` copies it into a version-2 one.
LEGACY_SCHEMA_TAG = schema_tag(1)
#: The versions this one opens (and writes as they are).
OPENED_VERSIONS = (1, 2, SCHEMA_VERSION)

ID_BYTES = 64
IDENT_BYTES = 256
CONTENT_BYTES = 16_384
ABSTRACT_BYTES = 1_024
OVERVIEW_BYTES = 4_096
EXCERPT_BYTES = 4_096
#: The JSON array of a memory's origins (:data:`MAX_ORIGINS` at most).
PROVENANCE_BYTES = 4_096
MAX_RELATED = 32
#: The JSON array of up to MAX_RELATED ids (each at most ID_BYTES, escaped).
RELATED_BYTES = 8_192
#: Milvus returns at most this many rows per query (offset + limit).
QUERY_WINDOW = 16_384
#: The field a Milvus server partitions by with ``store.partition_key``.
PARTITION_KEY_FIELD = "user_id"


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
    FieldSpec("excerpt", "VARCHAR", max_length=EXCERPT_BYTES),
    FieldSpec("provenance", "VARCHAR", max_length=PROVENANCE_BYTES),
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


#: The BM25 function's output: absent from collections made on servers before 2.5.
FULL_TEXT_FIELD = "sparse"


#: The schema version that added a field (the others are in every version).
ADDED_IN = {"excerpt": 3, "provenance": 3}


def collection_fields(version: int = SCHEMA_VERSION, *, full_text: bool = True) -> list[FieldSpec]:
    """The memory collection's fields as schema ``version`` has them (version 1 keeps
    links as an ARRAY); ``full_text``: with the BM25 function's sparse field (Milvus
    2.5 and milvus-lite)."""
    return [
        LEGACY_RELATED_FIELD if version == 1 and f.name == "related_ids" else f
        for f in FIELDS
        if (full_text or f.name != FULL_TEXT_FIELD) and ADDED_IN.get(f.name, 1) <= version
    ]


def read_fields(version: int = SCHEMA_VERSION) -> tuple[str, ...]:
    """The scalar fields a read of a ``version`` collection returns (vectors are
    fetched only when asked for)."""
    return tuple(
        f.name
        for f in collection_fields(version)
        if f.type_name not in {"FLOAT_VECTOR", "SPARSE_FLOAT_VECTOR"}
    )


#: Scalar fields returned by reads of this version's collection.
SCALAR_FIELDS: tuple[str, ...] = read_fields()


def encode_origins(origins: Sequence[Origin]) -> str:
    """``provenance`` as a row keeps it: one JSON array, cut (oldest kept, then the
    latest) to fit :data:`PROVENANCE_BYTES`."""
    kept = list(origins)
    while kept:
        text = json.dumps([o.as_json() for o in kept], ensure_ascii=False, separators=(",", ":"))
        if len(text.encode("utf-8")) <= PROVENANCE_BYTES:
            return text
        kept = kept[:1] + kept[2:] if len(kept) > 1 else []
    return ""


def decode_origins(value: Any) -> tuple[Origin, ...]:
    """A row's origins; anything unreadable reads as none rather than failing the read."""
    if not value:
        return ()
    try:
        items = json.loads(value) if isinstance(value, str) else value
        return tuple(Origin.from_json(item) for item in items if isinstance(item, dict))
    except (ValueError, TypeError):
        return ()


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
ACCESS_READ = ["id", "user_id", "access_count", "accessed_at"]
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


def record_to_row(record: MemoryRecord, *, version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The row of ``record`` for a ``version`` collection (version 1 keeps
    ``related_ids`` as an ARRAY; fields a version lacks are left out by the writer)."""
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
        "related_ids": (related if version == 1 else encode_related(related)),
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
        "excerpt": fit_utf8(record.excerpt, EXCERPT_BYTES),
        "provenance": encode_origins(record.origins),
        "embedding": record.embedding.tolist(),
    }


def _vector(values: Any) -> Embedding | None:
    """A row's vector as a record holds it (pymilvus returns a FLOAT_VECTOR as a list
    of Python floats, packed in one call)."""
    if values is None:
        return None
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
        excerpt=str(row.get("excerpt") or ""),
        origins=decode_origins(row.get("provenance")),
    )


def _status(value: object) -> Status:
    """A row's status; one this version does not know (written by a newer one) reads
    as deleted: never served, never judged against, never written back."""
    try:
        return Status(str(value or Status.ACTIVE))
    except ValueError:
        return Status.DELETED


def records(rows: Iterable[dict[str, Any]]) -> list[MemoryRecord]:
    """Rows as records, oldest first (ties by id). Run on the store's threads, beside
    the call: a thousand rows take milliseconds that the event loop does not wait."""
    records = [row_to_record(row) for row in rows]
    records.sort(key=lambda r: (r.created_at, r.id))
    return records


def hits(result: Any) -> list[Hit]:
    hits: list[Hit] = []
    for item in result[0] if result else []:
        entity = dict(item.get("entity") or {})
        entity.setdefault("id", item.get("id"))
        hits.append(Hit(row_to_record(entity), float(item.get("distance", 0.0))))
    # Deterministic: equal scores fall back to id order.
    hits.sort(key=lambda h: (-h.score, h.record.id))
    return hits
