"""A turn's request side, carried from the request stream to the response observer.

With ``envoy.response_path: observe`` the sidecar sees one request on two ext_proc
streams: the memory filter's (request headers and body, answered) and the observer
filter's (response headers and body, sent in observability mode, never answered).
The request stream's last reply sets Envoy dynamic metadata under
:data:`METADATA_NAMESPACE`; Envoy forwards that namespace with every message of the
observer stream, and the route copies ``injected`` (and the debug values) into
response headers. Nothing else can write the namespace: the memory filter accepts
only it from the sidecar, and clients and upstreams cannot set dynamic metadata.

Layout (a ``google.protobuf.Struct`` per namespace)::

    memory_sidecar:
      injected: 3                       # response header (injection.response_header)
      rewrite: "changed;llm"            # x-memory-rewrite (injection.debug_headers)
      deep: "ran;2"                     # x-memory-deep-search (injection.debug_headers)
      turn: {user, groups, session, request_id, text}   # only when the turn is kept
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from google.protobuf import struct_pb2

from sidecar._proto.envoy.config.core.v3 import base_pb2
from sidecar.config import InjectionConfig
from sidecar.errors import InvalidIdentifier
from sidecar.memory.filters import validate_identifier
from sidecar.memory.records import now_ms
from sidecar.memory.sanitize import clean_text, valid_unicode
from sidecar.memory.turns import Turn

#: The dynamic-metadata namespace of the sidecar (Envoy config and both streams).
METADATA_NAMESPACE: Final = "memory_sidecar"
#: Keys of the namespace that the route turns into response headers.
INJECTED_KEY: Final = "injected"
REWRITE_KEY: Final = "rewrite"
DEEP_KEY: Final = "deep"
_TURN_KEY: Final = "turn"
REWRITE_HEADER: Final = "x-memory-rewrite"
DEEP_SEARCH_HEADER: Final = "x-memory-deep-search"
_MAX_GROUPS: Final = 64
_MAX_REQUEST_ID: Final = 128


@dataclass(frozen=True, slots=True)
class TurnContext:
    """Who asked what: the request half of a turn, as the write path stores it."""

    user_id: str
    user_text: str = field(repr=False)
    group_ids: tuple[str, ...] = ()
    session_id: str = ""
    request_id: str = ""

    def turn(self, assistant_text: str, profile: str) -> Turn:
        return Turn(
            user_id=self.user_id,
            group_ids=self.group_ids,
            user_text=self.user_text,
            assistant_text=assistant_text,
            created_at=now_ms(),
            request_id=self.request_id,
            profile=profile,
            session_id=self.session_id,
        )


def response_header_names(injection: InjectionConfig) -> dict[str, str]:
    """The response headers a profile reports, by metadata key."""
    names: dict[str, str] = {}
    if injection.response_header:
        names[INJECTED_KEY] = injection.response_header
    if injection.debug_headers:
        names[REWRITE_KEY] = REWRITE_HEADER
        names[DEEP_KEY] = DEEP_SEARCH_HEADER
    return names


def context_metadata(
    context: TurnContext | None,
    headers: Mapping[str, str | int],
    *,
    max_text_chars: int,
) -> struct_pb2.Struct:
    """The dynamic metadata of one request: ``headers`` (the values the route turns
    into response headers) and, when set, the turn ``context`` — its text cleaned to
    valid UTF-8 and capped at ``max_text_chars`` (no more than extraction reads)."""
    values: dict[str, object] = dict(headers)
    if context is not None:
        values[_TURN_KEY] = {
            "user": context.user_id,
            "groups": list(context.group_ids),
            "session": context.session_id,
            "request_id": valid_unicode(context.request_id),
            "text": clean_text(context.user_text, max_text_chars, keep_newlines=True),
        }
    metadata = struct_pb2.Struct()
    metadata.update({METADATA_NAMESPACE: values})
    return metadata


def context_from_metadata(metadata: base_pb2.Metadata) -> TurnContext | None:
    """The turn context Envoy forwarded with an observer message; None when there is
    none (not a chat turn, a read-only route) or it does not hold a valid one."""
    namespace = metadata.filter_metadata.get(METADATA_NAMESPACE)
    if namespace is None or _TURN_KEY not in namespace.fields:
        return None
    turn = namespace.fields[_TURN_KEY].struct_value.fields

    def text(key: str) -> str:
        return turn[key].string_value if key in turn else ""

    try:
        user_id = validate_identifier(text("user"), "user id")
        groups = tuple(
            validate_identifier(value.string_value, "group id")
            for value in turn["groups"].list_value.values
        )
        session = text("session")
        if session:
            validate_identifier(session, "session id")
    except (InvalidIdentifier, KeyError):
        return None
    user_text = text("text")
    if not user_text.strip() or len(groups) > _MAX_GROUPS:
        return None
    return TurnContext(
        user_id=user_id,
        user_text=user_text,
        group_ids=groups,
        session_id=session,
        request_id=text("request_id")[:_MAX_REQUEST_ID],
    )
