"""Creating the store's two collections, or checking that existing ones have this
version's schema (:mod:`sidecar.memory.store.schema`), when the store opens.

On a server without the BM25 function (Milvus before 2.5,
:mod:`sidecar.memory.store.capabilities`) the memory collection is made without its
sparse field; a collection without it opens on any engine, without Milvus' full-text
search (the product's BM25 runs in process either way).

A collection of another version, or with other settings fixed at creation
(``store.partition_key``, the vector dimension), is a :class:`SchemaMismatch` that
says what differs; a version-1 collection is opened as it is, its links written as
an ARRAY (``sidecar store migrate`` copies it into a current one).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.config import StoreConfig
from sidecar.errors import SchemaMismatch
from sidecar.memory.store.schema import (
    ACCESS_FIELDS,
    ACCESS_SCHEMA_TAG,
    ACCESS_SLOT,
    FULL_TEXT_FIELD,
    OPENED_VERSIONS,
    PARTITION_KEY_FIELD,
    SCHEMA_TAG,
    SCHEMA_VERSION,
    FieldSpec,
    collection_fields,
    schema_tag,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OpenedCollections:
    """What opening found: both collections' descriptions (the columnar upserts take
    their field order from them) and the memory collection's schema version."""

    info: dict[str, Any]
    access_info: dict[str, Any]
    version: int
    #: The memory collection has the BM25 function's field (Milvus' full-text search).
    full_text: bool


@dataclass(frozen=True, slots=True)
class _Target:
    client: Any
    config: StoreConfig
    memory: str
    access: str
    dim: int
    partition_key: bool
    full_text: bool = True


def ensure_collections(
    client: Any,
    config: StoreConfig,
    *,
    memory: str,
    access: str,
    dim: int,
    partition_key: bool,
    full_text: bool = True,
) -> OpenedCollections:
    """Create the memory and access-count collections, or check and load existing
    ones (blocking: run on the store's executor). ``full_text``: the engine has the
    BM25 function."""
    target = _Target(client, config, memory, access, dim, partition_key, full_text)
    timeout = config.timeout_s
    existed = client.has_collection(memory, timeout=timeout)
    if not existed:
        _create_memory_collection(target)
    info = client.describe_collection(memory, timeout=timeout)
    version = SCHEMA_VERSION
    has_full_text = any(f.get("name") == FULL_TEXT_FIELD for f in info.get("fields", []))
    if existed:
        version = _check_memory_schema(target, info)
        client.load_collection(memory, timeout=config.load_timeout_s)
    existed = client.has_collection(access, timeout=timeout)
    if not existed:
        _create_access_collection(target)
    access_info = client.describe_collection(access, timeout=timeout)
    if existed:
        _check_access_schema(target, access_info)
        client.load_collection(access, timeout=config.load_timeout_s)
    return OpenedCollections(info, access_info, version, has_full_text)


def create_memory_collection(
    client: Any,
    config: StoreConfig,
    *,
    memory: str,
    dim: int,
    partition_key: bool,
    full_text: bool = True,
) -> None:
    """Create the memory collection ``memory`` with this version's schema, its BM25
    function where ``full_text`` and the configured vector index (blocking)."""
    _create_memory_collection(_Target(client, config, memory, "", dim, partition_key, full_text))


def create_access_collection(
    client: Any, config: StoreConfig, *, access: str, partition_key: bool
) -> None:
    """Create the access-count collection ``access`` (blocking)."""
    _create_access_collection(_Target(client, config, "", access, 0, partition_key))


def _schema(target: _Target, fields: Sequence[FieldSpec], tag: str, dim: int) -> Any:
    from pymilvus import DataType

    schema = target.client.create_schema(auto_id=False, enable_dynamic_field=False, description=tag)
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
        if spec.analyzer and target.full_text:
            kwargs["enable_analyzer"] = True
        if spec.name == PARTITION_KEY_FIELD and target.partition_key:
            kwargs["is_partition_key"] = True
        schema.add_field(spec.name, getattr(DataType, spec.type_name), **kwargs)
    return schema


def _create_memory_collection(target: _Target) -> None:
    from pymilvus import Function, FunctionType

    config = target.config
    fields = collection_fields(full_text=target.full_text)
    schema = _schema(target, fields, SCHEMA_TAG, target.dim)
    if target.full_text:
        schema.add_function(
            Function(
                name="content_bm25",
                function_type=FunctionType.BM25,
                input_field_names=["content"],
                output_field_names=[FULL_TEXT_FIELD],
            )
        )
    index = target.client.prepare_index_params()
    # FLAT (default): exact search. Approximate indexes lose most of their recall
    # under the selective per-user filter every query carries.
    if config.index == "HNSW":
        params = {"M": config.hnsw_m, "efConstruction": config.hnsw_ef_construction}
        index.add_index("embedding", index_type="HNSW", metric_type="COSINE", params=params)
    else:
        index.add_index("embedding", index_type="FLAT", metric_type="COSINE")
    if target.full_text:
        index.add_index(FULL_TEXT_FIELD, index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    target.client.create_collection(
        target.memory, schema=schema, index_params=index, timeout=config.timeout_s
    )
    log.info(
        "created collection %s (%s, dim=%d, index=%s, partition_key=%s, full_text=%s)",
        target.memory,
        SCHEMA_TAG,
        target.dim,
        config.index,
        target.partition_key,
        target.full_text,
    )


def _create_access_collection(target: _Target) -> None:
    schema = _schema(target, ACCESS_FIELDS, ACCESS_SCHEMA_TAG, len(ACCESS_SLOT))
    index = target.client.prepare_index_params()
    index.add_index("slot", index_type="FLAT", metric_type="L2")  # never searched
    target.client.create_collection(
        target.access, schema=schema, index_params=index, timeout=target.config.timeout_s
    )
    log.info("created collection %s (%s)", target.access, ACCESS_SCHEMA_TAG)


def _check_access_schema(target: _Target, info: dict[str, Any]) -> None:
    found = {
        f["name"]: getattr(f.get("type"), "name", str(f.get("type")))
        for f in info.get("fields", [])
    }
    expected = {f.name: f.type_name for f in ACCESS_FIELDS}
    description = str(info.get("description", ""))
    if description != ACCESS_SCHEMA_TAG or found != expected:
        raise SchemaMismatch(
            f"collection {target.access!r} at {target.config.uri} is not this version's "
            f"access-count collection ({ACCESS_SCHEMA_TAG}: "
            f"{', '.join(f'{k} {v}' for k, v in expected.items())}); found "
            f"{description!r} with {', '.join(f'{k} {v}' for k, v in found.items())}. "
            "Use another store.collection."
        )


def _check_memory_schema(target: _Target, info: dict[str, Any]) -> int:
    """The schema version of the collection ``info`` describes; raise
    :class:`SchemaMismatch` unless it is one this version opens, with its fields."""
    problems: list[str] = []
    description = str(info.get("description", ""))
    versions = {schema_tag(v): v for v in OPENED_VERSIONS}
    version = versions.get(description, SCHEMA_VERSION)
    if description not in versions:
        problems.append(f"schema tag is {description!r}, expected {SCHEMA_TAG!r}")
    found = {f["name"]: f for f in info.get("fields", [])}
    # Without the BM25 function's field: made on a server before 2.5 (or for one).
    full_text = FULL_TEXT_FIELD in found
    for spec in collection_fields(version, full_text=full_text):
        field = found.pop(spec.name, None)
        if field is None:
            problems.append(f"field {spec.name!r} is missing")
            continue
        problems.extend(_field_problems(target, spec, field))
    problems.extend(f"unexpected field {name!r}" for name in sorted(found))
    if problems:
        raise SchemaMismatch(
            f"collection {target.memory!r} at {target.config.uri} does not match this "
            f"version's schema: {'; '.join(problems)}. Use another collection name, "
            "or copy the rows into a new collection (sidecar store migrate "
            "--to-collection NEW) and point store.collection at it."
        )
    if version < SCHEMA_VERSION:
        log.warning(
            "collection %s is %s: %s; copy it into a new collection with "
            "'sidecar store migrate --to-collection NEW'",
            target.memory,
            description,
            "its links load slowly from milvus-lite and it keeps no provenance or excerpts"
            if version == 1
            else "it keeps no provenance or excerpts (what was said)",
        )
    return version


def _field_problems(target: _Target, spec: FieldSpec, field: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    type_name = getattr(field.get("type"), "name", str(field.get("type")))
    if type_name != spec.type_name:
        problems.append(f"field {spec.name!r} is {type_name}, expected {spec.type_name}")
    params = field.get("params", {})
    if spec.dim and int(params.get("dim", -1)) != target.dim:
        problems.append(
            f"field 'embedding' has dim {params.get('dim')}, the model gives {target.dim}"
        )
    if spec.max_length is not None and spec.element is None:
        got = params.get("max_length")
        if got is not None and int(got) != spec.max_length:
            problems.append(f"field {spec.name!r} has max_length {got}")
    if spec.name == PARTITION_KEY_FIELD:
        keyed = bool(field.get("is_partition_key", False))
        if keyed != target.partition_key:
            problems.append(
                f"field {spec.name!r} is {'' if keyed else 'not '}the partition key, "
                f"store.partition_key is {str(target.partition_key).lower()}"
            )
    return problems
