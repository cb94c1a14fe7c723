"""What the store's engine can do: the version it reports decides, and a server the
sidecar cannot run on is a clear start-up error naming the version it needs."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from sidecar.config import StoreConfig
from sidecar.errors import StoreError
from sidecar.memory.store.capabilities import Capabilities, detect, parse_version

SERVER = StoreConfig(uri="http://milvus.example:19530")


class Answering:
    """Stands in for ``MilvusClient``: answers ``GetVersion`` with ``answer``, or
    raises it."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def get_server_version(self, timeout: float) -> str:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return str(self.answer)


class Unimplemented(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    ("text", "version"),
    [("v2.3.5-lite", (2, 3, 5)), ("2.5.4-gpu", (2, 5, 4)), ("v2.6", (2, 6, 0)), ("dev", None)],
)
def test_versions_are_read_as_servers_write_them(
    text: str, version: tuple[int, int, int] | None
) -> None:
    assert parse_version(text) == version


def test_a_server_before_2_5_has_no_full_text_and_one_before_2_4_no_partition_key() -> None:
    old = detect(Answering("v2.3.5"), SERVER)
    assert (old.engine, old.version, old.full_text, old.partition_key) == (
        "milvus",
        (2, 3, 5),
        False,
        False,
    )
    new = detect(Answering("v2.5.10"), SERVER)
    assert (new.full_text, new.partition_key) == (True, True)
    assert str(new) == "milvus 2.5.10"


def test_a_server_the_sidecar_cannot_run_on_is_refused_by_name() -> None:
    with pytest.raises(StoreError, match=r"is Milvus 2\.2\.16; the sidecar needs Milvus 2\.3\.0"):
        detect(Answering("v2.2.16"), SERVER)
    keyed = SERVER.model_copy(update={"partition_key": True})
    with pytest.raises(StoreError, match=r"partition_key needs Milvus 2\.4\.0 .* milvus 2\.3\.5"):
        detect(Answering("v2.3.5"), keyed)
    with pytest.raises(StoreError, match="reports no version"):
        detect(Answering("unknown"), SERVER)
    with pytest.raises(StoreError, match=r"cannot ask the store at .* its version"):
        detect(Answering(ConnectionError("refused")), SERVER)


def test_milvus_lite_is_known_by_its_package_or_its_unimplemented_version_call() -> None:
    assert detect(None, StoreConfig(uri="./x.db")).engine == "milvus-lite"
    behind_socket = detect(Answering(Unimplemented()), StoreConfig(uri="unix:/tmp/lite.sock"))
    assert behind_socket == Capabilities("milvus-lite", behind_socket.version)
    assert behind_socket.full_text
    assert not behind_socket.partition_key
