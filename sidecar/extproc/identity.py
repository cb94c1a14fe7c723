"""Who is asking: user and group ids from trusted headers (or, when a profile
allows it, from the body). Every id is validated before it goes anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sidecar._proto.envoy.config.core.v3 import base_pb2
from sidecar.config import IdentityConfig
from sidecar.errors import InvalidIdentifier
from sidecar.memory.records.records import Scope
from sidecar.memory.store.filters import validate_identifier


@dataclass(frozen=True, slots=True)
class Identity:
    user_id: str
    group_ids: tuple[str, ...] = ()
    session_id: str = ""
    #: Group ids past ``identity.max_groups`` that were left out (counted).
    groups_dropped: int = 0

    @property
    def scope(self) -> Scope:
        return Scope(self.user_id, self.group_ids)


def header_dict(header_map: base_pb2.HeaderMap) -> dict[str, str]:
    """The headers of an ext_proc message, by lower-cased name; a repeated header's
    values are joined with ``,``. ``raw_value`` bytes that are not UTF-8 keep their
    bad bytes as lone surrogates (``surrogateescape``), so two different invalid ids
    can never decode to the same string: identifiers with them are rejected by
    :func:`validate_identifier`."""
    headers: dict[str, str] = {}
    for header in header_map.headers:
        raw = header.raw_value
        value = raw.decode("utf-8", errors="surrogateescape") if raw else header.value
        key = header.key.lower()
        headers[key] = f"{headers[key]},{value}" if key in headers else value
    return headers


def request_path(headers: dict[str, str]) -> str:
    """The request's path without its query string (what profiles' paths name)."""
    return headers.get(":path", "").split("?", 1)[0]


def parse_groups(value: str, max_groups: int) -> tuple[tuple[str, ...], int]:
    """The distinct group ids of a groups header, sorted, the first ``max_groups`` of
    them in header order; and how many distinct ids past those were left out (a
    user keeps the groups the gateway listed first, never gains one)."""
    groups: list[str] = []
    for raw in value.split(","):
        group = raw.strip()
        if group and group not in groups:
            groups.append(validate_identifier(group, "group id"))
    return tuple(sorted(groups[:max_groups])), max(0, len(groups) - max_groups)


def identity_from_headers(headers: Mapping[str, str], config: IdentityConfig) -> Identity | None:
    """The identity the gateway vouched for; ``None`` when no user header is set.

    Raises :class:`InvalidIdentifier` for a malformed user, group or session id.
    """
    user = headers.get(config.user_header, "").strip()
    if not user:
        return None  # an empty header is no identity too (see blank_user_header)
    # A single-valued header with a comma is ambiguous: HTTP lets any hop fold
    # repeated field lines into one comma-joined value (RFC 9110 section 5.3), as
    # header_dict does with a repeated header. Reject both forms alike.
    for name in (config.user_header, config.session_header):
        if "," in headers.get(name, ""):
            raise InvalidIdentifier(f"header {name} is repeated or holds a comma")
    groups, dropped = parse_groups(headers.get(config.groups_header, ""), config.max_groups)
    return Identity(
        user_id=validate_identifier(user, "user id"),
        group_ids=groups,
        session_id=_session(headers.get(config.session_header, "")),
        groups_dropped=dropped,
    )


def blank_user_header(headers: Mapping[str, str], config: IdentityConfig) -> bool:
    """The gateway sent the user header empty: no identity, and no fallback to a
    body user either (the gateway spoke, and said nobody)."""
    return config.user_header in headers and not headers[config.user_header].strip()


def identity_from_body(
    user_id: str, headers: Mapping[str, str], config: IdentityConfig
) -> Identity:
    """A body-supplied user (only for profiles with ``allow_body_user``); groups are
    never taken from the body."""
    return Identity(
        user_id=validate_identifier(user_id.strip(), "user id"),
        session_id=_session(headers.get(config.session_header, "")),
    )


def _session(value: str) -> str:
    value = value.strip()
    return validate_identifier(value, "session id") if value else ""
