"""Milvus server mode without a server: the collection a server would get (partition
key on ``user_id``, the HNSW index and its search ``ef``) is checked on the calls the
store makes, with pymilvus' own schema and index builders. And the journal side of
``forget``: a user's unwritten turns are dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sidecar.config import StoreConfig
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.collections import create_access_collection, create_memory_collection
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.store.schema import ACCESS_FIELDS, FIELDS
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.memory.write.turns.journal_file import DiscardedTurns
from sidecar.metrics import Metrics


class RecordingClient:
    """Stands in for ``MilvusClient`` against a server: records what would be created."""

    def __init__(self) -> None:
        from pymilvus import MilvusClient

        self.create_schema = MilvusClient.create_schema
        self.prepare_index_params = MilvusClient.prepare_index_params
        self.created: dict[str, Any] = {}

    def create_collection(self, name: str, **kwargs: Any) -> None:
        self.created = {"name": name, **kwargs}


def created(store_config: StoreConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    client = RecordingClient()
    create_memory_collection(
        client,
        store_config,
        memory=store_config.collection,
        dim=384,
        partition_key=store_config.partition_key and not store_config.is_local_file,
    )
    schema = client.created["schema"]
    fields = {field.name: field for field in schema.fields}
    indexes = {index.field_name: index for index in client.created["index_params"]}
    return fields, indexes


SERVER = "http://milvus.example:19530"


def test_server_collection_with_partition_key_and_hnsw() -> None:
    config = StoreConfig(uri=SERVER, partition_key=True, index="HNSW", hnsw_m=32, hnsw_ef=80)
    fields, indexes = created(config)
    assert list(fields) == [f.name for f in FIELDS]
    assert fields["user_id"].is_partition_key
    assert not any(f.is_partition_key for name, f in fields.items() if name != "user_id")
    assert indexes["embedding"].to_dict() == {
        "field_name": "embedding",
        "index_type": "HNSW",
        "index_name": "",
        "metric_type": "COSINE",
        "M": 32,
        "efConstruction": 200,
    }
    assert indexes["sparse"].index_type == "SPARSE_INVERTED_INDEX"
    store = MemoryStore(RecordingClient(), config, 384, Metrics())
    assert store._vector_search_params(10) == {"metric_type": "COSINE", "params": {"ef": 80}}
    assert store._vector_search_params(200) == {"metric_type": "COSINE", "params": {"ef": 200}}


def test_default_server_collection_is_flat_without_partition_key() -> None:
    fields, indexes = created(StoreConfig(uri=SERVER))
    assert not any(f.is_partition_key for f in fields.values())
    assert indexes["embedding"].index_type == "FLAT"
    store = MemoryStore(RecordingClient(), StoreConfig(uri=SERVER), 384, Metrics())
    assert store._vector_search_params(10) == {"metric_type": "COSINE"}


@pytest.mark.parametrize("keyed", [True, False])
def test_server_access_collection_is_keyed_like_the_memories(keyed: bool) -> None:
    client = RecordingClient()
    config = StoreConfig(uri=SERVER, partition_key=keyed, collection="mem")
    create_access_collection(client, config, access="mem__access", partition_key=keyed)
    assert client.created["name"] == "mem__access"
    fields = {field.name: field for field in client.created["schema"].fields}
    assert list(fields) == [f.name for f in ACCESS_FIELDS]
    assert fields["id"].is_primary
    assert bool(fields["user_id"].is_partition_key) is keyed
    assert fields["slot"].params["dim"] == 2
    assert [i.field_name for i in client.created["index_params"]] == ["slot"]


def turn(user: str, n: int) -> Turn:
    return Turn(user_id=user, user_text=f"text {n}", assistant_text="ok", created_at=n)


async def test_journal_discard_user_keeps_others_and_the_turn_in_progress(
    tmp_path: Path,
) -> None:
    journal = TurnJournal(str(tmp_path / "journal.sqlite3"), max_pending=100)
    await journal.open()
    try:
        for n in range(3):
            await journal.append(turn("gone", n))
        await journal.append(turn("kept", 9))
        (claimed,) = await journal.claim(1)  # "gone"'s oldest turn is being written
        assert claimed.turn.user_id == "gone"
        assert await journal.discard_user("gone") == DiscardedTurns(2, 0, 1)
        assert journal.open_count == 2
        assert await journal.complete(claimed.id)
        # its finished row: written, so only its text was left to clear
        assert await journal.discard_user("gone") == DiscardedTurns(0, 1, 0)
        (other,) = await journal.claim(5)
        assert other.turn.user_id == "kept"  # nothing of "gone" is claimable
        counts = await journal.counts()
        assert (counts.pending, counts.in_progress) == (0, 1)
    finally:
        await journal.close()


@pytest.mark.parametrize("index", ["FLAT", "HNSW"])
def test_index_setting_is_documented_with_the_recall_caveat(index: str) -> None:
    from sidecar.config.reference import render_reference

    line = next(row for row in render_reference().splitlines() if row.startswith("| `store.index`"))
    assert index in line
    assert "recall" in line
