"""``sidecar memories ...`` and ``sidecar store migrate`` on a temporary milvus-lite
store: the same service layer as the HTTP API, run directly against the configured
store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.cli import main
from sidecar.config import StoreConfig, config_from_mapping
from sidecar.errors import SchemaMismatch
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import AccessStat, NodeType
from sidecar.memory.store.collections import create_memory_collection
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics


@pytest.fixture
def config_file(tmp_path: Path, embedding_cache_dir: Path) -> Path:
    path = tmp_path / "sidecar.yaml"
    document = {
        "store": {"uri": str(tmp_path / "memory.db")},
        "write_queue": {"journal_path": str(tmp_path / "journal.sqlite3")},
        "embedding": {"cache_dir": str(embedding_cache_dir)},
        "hierarchy": {"schedule_s": 0},
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


async def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``sidecar ARGS`` in a worker thread (it runs its own event loop)."""
    code = await asyncio.to_thread(main, list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def memories(
    capsys: pytest.CaptureFixture[str], config: Path, action: str, *args: str
) -> Any:
    code, out, err = await run(
        capsys, "memories", action, "--config", str(config), "--user", "carol", *args
    )
    assert code == 0, err
    return out if action == "export" and "--out" not in args else json.loads(out)


@pytest.mark.usefixtures("restore_logging")
async def test_an_added_change_supersedes_the_old_value(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As a new user would: a fact, then its new value, both through the CLI.
    first = await memories(
        capsys, config_file, "add", "--content", "User moved to Lisbon last month."
    )
    assert first["decision"] == "add"
    second = await memories(capsys, config_file, "add", "--content", "User lives in Porto.")
    assert (second["decision"], second["replaced"]) == ("supersede", first["memory"]["id"])
    active = await memories(capsys, config_file, "list")
    assert [m["content"] for m in active["items"]] == ["User lives in Porto."]
    found = await memories(capsys, config_file, "search", "--query", "Where do I live?")
    assert [h["memory"]["content"] for h in found["items"]] == ["User lives in Porto."]
    again = await memories(capsys, config_file, "add", "--content", "User lives in Porto.")
    assert (again["decision"], again["created"]) == ("noop", False)


@pytest.mark.usefixtures("restore_logging")
async def test_memories_commands(
    config_file: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    added = await memories(
        capsys, config_file, "add", "--content", "Carol grows tomatoes on her balcony.",
        "--memory-type", "procedural", "--importance", "0.9",
    )  # fmt: skip
    assert added["created"] is True
    memory = added["memory"]["id"]
    await memories(capsys, config_file, "add", "--content", "Carol's cat is called Pixel.")
    await memories(
        capsys, config_file, "update", memory, "--content", "Carol grows chillies on her balcony."
    )
    export_file = tmp_path / "carol.jsonl"
    exported = await memories(
        capsys, config_file, "export", "--embeddings", "--out", str(export_file)
    )
    assert exported["memories"] == 2
    assert exported["categories"] >= 1  # a category is a row of its own
    assert exported["rows"] == exported["memories"] + exported["categories"]
    forgot = await memories(capsys, config_file, "forget", "--yes")
    assert forgot["deleted"]["memories"] == {"active": 2}
    assert forgot["journal"] is None  # no journal file yet
    listed = await memories(capsys, config_file, "list")
    assert listed["total"] == 0
    imported = await memories(capsys, config_file, "import", str(export_file))
    assert imported["lines"] == exported["rows"]
    assert imported["embedded"] == 0
    listed = await memories(capsys, config_file, "list", "--memory-type", "procedural")
    assert [m["content"] for m in listed["items"]] == ["Carol grows chillies on her balcony."]
    assert listed["items"][0]["importance"] == 0.9
    found = await memories(capsys, config_file, "search", "--query", "vegetables on the balcony")
    assert found["items"][0]["memory"]["id"] == memory
    deleted = await memories(capsys, config_file, "delete", memory)
    assert deleted == {"deleted": memory}

    # Errors: not found (1), invalid input with the option's path (2, before the store
    # is opened), no --yes (1).
    code, out, err = await run(
        capsys, "memories", "get", "--config", str(config_file), "--user", "carol", memory
    )
    assert (code, out) == (1, "")
    assert "no memory" in err
    code, _, err = await run(
        capsys, "memories", "add", "--config", str(config_file), "--user", "carol",
        "--content", "x", "--importance", "5",
    )  # fmt: skip
    assert code == 2
    assert "option.importance" in err
    code, _, err = await run(
        capsys, "memories", "forget", "--config", str(config_file), "--user", "carol"
    )
    assert code == 1
    assert "--yes" in err


async def make_legacy_collection(uri: str, name: str, dim: int) -> None:
    """A collection of an earlier schema: fewer fields, another tag, other vectors."""
    from pymilvus import DataType, MilvusClient

    def create() -> None:
        client = MilvusClient(uri)
        schema = client.create_schema(
            auto_id=False, enable_dynamic_field=False, description="memory-sidecar schema v0"
        )
        schema.add_field("id", DataType.VARCHAR, max_length=64, is_primary=True)
        schema.add_field("user_id", DataType.VARCHAR, max_length=256)
        schema.add_field("content", DataType.VARCHAR, max_length=16384)
        schema.add_field("status", DataType.VARCHAR, max_length=16)
        schema.add_field("created_at", DataType.INT64)
        schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=dim)
        index = client.prepare_index_params()
        index.add_index("embedding", index_type="FLAT", metric_type="COSINE")
        client.create_collection(name, schema=schema, index_params=index)
        rows = [
            {
                "id": f"old-{i}",
                "user_id": "dave" if i < 2 else "erin",
                "content": text,
                "status": "active",
                "created_at": 1_700_000_000_000 + i,
                "embedding": [1.0] + [0.0] * (dim - 1),
            }
            for i, text in enumerate(
                ["Dave plays the banjo.", "Dave lives in Oslo.", "Erin collects stamps."]
            )
        ]
        client.insert(name, rows)
        client.close()

    await asyncio.to_thread(create)


@pytest.mark.usefixtures("restore_logging")
async def test_store_migrate_copies_an_old_schema_collection(
    config_file: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, embedder: Embedder
) -> None:
    uri = str(tmp_path / "memory.db")
    await make_legacy_collection(uri, "memories_v0", dim=8)
    store_config = StoreConfig(uri=uri, collection="memories_v0")
    with pytest.raises(SchemaMismatch, match="schema tag"):
        await MemoryStore.open(store_config, embedder.dim, Metrics())

    code, out, err = await run(
        capsys, "store", "migrate", "--config", str(config_file),
        "--from-collection", "memories_v0", "--to-collection", "memories_v1",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert report["source_schema"] == "memory-sidecar schema v0"
    assert (report["rows"], report["embedded"], report["target_rows"]) == (3, 3, 3)

    store = await MemoryStore.open(
        store_config.model_copy(update={"collection": "memories_v1"}), embedder.dim, Metrics()
    )
    try:
        rows = await store.scan(build_filter(owner="dave"), with_vectors=True)
        assert [(r.id, r.content, r.created_at) for r in rows] == [
            ("old-0", "Dave plays the banjo.", 1_700_000_000_000),
            ("old-1", "Dave lives in Oslo.", 1_700_000_000_001),
        ]
        assert all(r.node_type == NodeType.MEMORY for r in rows)
        assert all(r.embedding is not None and len(r.embedding) == embedder.dim for r in rows)
        expected = (await embedder.embed(["Dave plays the banjo."]))[0]
        assert rows[0].embedding is not None
        assert abs(sum(a * b for a, b in zip(rows[0].embedding, expected, strict=True)) - 1) < 1e-4
        await store.write_access([AccessStat("old-0", "dave", 7, 1_700_000_000_500)])
    finally:
        await store.close()

    # Migrating a current collection keeps every vector as it is, and the access
    # counts kept beside it become the copied rows' own.
    code, out, err = await run(
        capsys, "store", "migrate", "--config", str(config_file),
        "--from-collection", "memories_v1", "--to-collection", "memories_copy",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["embedded"] == 0
    copy = await MemoryStore.open(
        store_config.model_copy(update={"collection": "memories_copy"}), embedder.dim, Metrics()
    )
    try:
        rows = await copy.scan(build_filter(owner="dave"))
        assert [(r.id, r.access_count, r.accessed_at) for r in rows] == [
            ("old-0", 7, 1_700_000_000_500),
            ("old-1", 0, 0),
        ]
        assert await copy.read_access(["old-0", "old-1"]) == {}
    finally:
        await copy.close()
    code, _, err = await run(
        capsys, "store", "migrate", "--config", str(config_file), "--to-collection", "memories"
    )
    assert code == 1
    assert "must differ" in err


async def test_schema_check_accounts_for_the_partition_key(
    tmp_path: Path, embedder: Embedder
) -> None:
    """A collection whose user_id is a partition key (as a server with
    store.partition_key: true creates it) does not match a config without it."""
    uri = str(tmp_path / "keyed.db")
    keyed_config = StoreConfig.model_construct(
        **{**StoreConfig(uri=uri).model_dump(), "partition_key": True}
    )
    store = await MemoryStore.open(
        StoreConfig(uri=uri, collection="plain"), embedder.dim, Metrics()
    )
    try:
        # milvus-lite accepts the flag (it has no partitions).
        await asyncio.to_thread(
            create_memory_collection,
            store._client,
            keyed_config,
            memory="keyed",
            dim=embedder.dim,
            partition_key=True,
        )
    finally:
        await store.close()
    with pytest.raises(SchemaMismatch, match="partition key"):
        await MemoryStore.open(StoreConfig(uri=uri, collection="keyed"), embedder.dim, Metrics())
    server = config_from_mapping({"store": {"uri": "http://milvus:19530"}}, env={}).store
    assert not server.partition_key  # the default everywhere
