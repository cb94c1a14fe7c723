"""The turn context's trip through Envoy dynamic metadata (request stream -> observer)."""

from __future__ import annotations

from google.protobuf import struct_pb2

from sidecar._proto.envoy.config.core.v3 import base_pb2
from sidecar.config import InjectionConfig
from sidecar.extproc.turn_context import (
    METADATA_NAMESPACE,
    TurnContext,
    context_from_metadata,
    context_metadata,
    response_header_names,
)


def forwarded(metadata: struct_pb2.Struct) -> base_pb2.Metadata:
    """What Envoy sends the observer: the namespace's struct under filter_metadata."""
    found = base_pb2.Metadata()
    for namespace, value in metadata.fields.items():
        found.filter_metadata[namespace].CopyFrom(value.struct_value)
    return found


def test_round_trip() -> None:
    context = TurnContext(
        user_id="alice",
        user_text="I moved to Lisbon.\nNew job too.",
        group_ids=("team-a", "team-b"),
        session_id="s-1",
        request_id="req-9",
    )
    metadata = context_metadata(context, {"injected": 3}, max_text_chars=6000)
    assert metadata.fields[METADATA_NAMESPACE].struct_value.fields["injected"].number_value == 3
    assert context_from_metadata(forwarded(metadata)) == context


def test_text_is_valid_utf8_and_capped() -> None:
    context = TurnContext(user_id="alice", user_text="caf\udce9 " + "word " * 100)
    metadata = context_metadata(context, {}, max_text_chars=120)
    metadata.SerializeToString()  # a lone surrogate would not serialize
    back = context_from_metadata(forwarded(metadata))
    assert back is not None
    assert "\udce9" not in back.user_text
    assert len(back.user_text) <= 120


def test_reported_values_alone_carry_no_turn() -> None:
    metadata = context_metadata(None, {"injected": 0}, max_text_chars=100)
    assert context_from_metadata(forwarded(metadata)) is None


def test_invalid_ids_are_refused() -> None:
    for context in (
        TurnContext(user_id="alice", user_text="x", session_id="a,b\x00"),
        TurnContext(user_id="alice", user_text="x", group_ids=tuple(f"g{i}" for i in range(65))),
        TurnContext(user_id="", user_text="x"),
    ):
        metadata = context_metadata(context, {}, max_text_chars=100)
        assert context_from_metadata(forwarded(metadata)) is None, context


def test_header_names_follow_the_injection_config() -> None:
    assert response_header_names(InjectionConfig()) == {"injected": "x-memory-injected"}
    assert response_header_names(InjectionConfig(response_header="")) == {}
    assert response_header_names(InjectionConfig(debug_headers=True)) == {
        "injected": "x-memory-injected",
        "rewrite": "x-memory-rewrite",
        "deep": "x-memory-deep-search",
    }
