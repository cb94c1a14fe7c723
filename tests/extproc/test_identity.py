"""Tests for identity extraction from trusted headers (sidecar.extproc.identity)."""

from __future__ import annotations

import pytest

from sidecar._proto.envoy.config.core.v3 import base_pb2
from sidecar.config import IdentityConfig
from sidecar.errors import InvalidIdentifier
from sidecar.extproc.identity import (
    Identity,
    blank_user_header,
    header_dict,
    identity_from_body,
    identity_from_headers,
    parse_groups,
)
from sidecar.memory.records.records import Scope

CONFIG = IdentityConfig()


def header_map(*pairs: tuple[str, str | bytes]) -> base_pb2.HeaderMap:
    """A HeaderMap as Envoy sends it: ``raw_value`` bytes (``str`` values go to ``value``)."""
    headers = []
    for key, value in pairs:
        if isinstance(value, bytes):
            headers.append(base_pb2.HeaderValue(key=key, raw_value=value))
        else:
            headers.append(base_pb2.HeaderValue(key=key, value=value))
    return base_pb2.HeaderMap(headers=headers)


def identity(*pairs: tuple[str, str | bytes], config: IdentityConfig = CONFIG) -> Identity | None:
    return identity_from_headers(header_dict(header_map(*pairs)), config)


# -- header_dict ---------------------------------------------------------------------------


def test_header_dict_decodes_raw_value_bytes_as_utf8() -> None:
    headers = header_dict(header_map((":path", b"/v1/chat"), ("x-user-id", "Jörg".encode())))
    assert headers == {":path": "/v1/chat", "x-user-id": "Jörg"}


def test_header_dict_falls_back_to_the_value_field() -> None:
    assert header_dict(header_map(("x-user-id", "alice"))) == {"x-user-id": "alice"}


def test_header_dict_prefers_raw_value_over_value() -> None:
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key="x-user-id", value="from-value", raw_value=b"raw")]
    )
    assert header_dict(hm) == {"x-user-id": "raw"}


def test_header_dict_lowercases_names() -> None:
    assert header_dict(header_map(("X-User-ID", b"alice"))) == {"x-user-id": "alice"}


def test_header_dict_joins_repeated_headers_with_commas() -> None:
    headers = header_dict(
        header_map(
            ("x-user-groups", b"team-a"),
            ("X-User-Groups", "team-b"),
            ("x-user-groups", b"team-c, team-d"),
        )
    )
    assert headers == {"x-user-groups": "team-a,team-b,team-c, team-d"}


def test_header_dict_of_an_empty_map() -> None:
    assert header_dict(base_pb2.HeaderMap()) == {}


def test_header_dict_keeps_empty_values() -> None:
    assert header_dict(header_map(("x-empty", b""))) == {"x-empty": ""}


# -- identity_from_headers -------------------------------------------------------------------


def test_identity_from_trusted_headers() -> None:
    found = identity(
        ("x-user-id", b"alice@example.com"),
        ("x-user-groups", b"team-b, team-a"),
        ("x-session-id", b"sess-1"),
    )
    assert found == Identity("alice@example.com", ("team-a", "team-b"), "sess-1")
    assert found.scope == Scope("alice@example.com", ("team-a", "team-b"))


def test_identity_from_the_value_field() -> None:
    found = identity(("x-user-id", "auth0|123"), ("x-user-groups", "g1"))
    assert found == Identity("auth0|123", ("g1",))


def test_identity_header_names_are_case_insensitive() -> None:
    found = identity(("X-User-Id", b"alice"), ("X-USER-GROUPS", b"g"))
    assert found == Identity("alice", ("g",))


def test_identity_uses_the_configured_header_names() -> None:
    config = IdentityConfig(
        user_header="X-Auth-Sub", groups_header="x-auth-groups", session_header="x-conv"
    )
    found = identity(
        ("x-user-id", b"ignored"),
        ("x-auth-sub", b"bob"),
        ("x-auth-groups", b"g2,g1"),
        ("x-conv", b"c-9"),
        config=config,
    )
    assert found == Identity("bob", ("g1", "g2"), "c-9")


def test_unicode_user_ids_are_accepted() -> None:
    found = identity(("x-user-id", "李小龙".encode()))
    assert found is not None
    assert found.user_id == "李小龙"


def test_user_id_is_stripped() -> None:
    assert identity(("x-user-id", b"  alice  ")) == Identity("alice")


@pytest.mark.parametrize(
    "pairs",
    [
        (),
        (("x-user-groups", b"team"),),
        (("x-user-id", b""),),
        (("x-user-id", b"   "),),
        (("x-user-id", ""),),
        (("x-other", b"alice"),),
    ],
)
def test_missing_or_blank_user_header_gives_none(pairs: tuple[tuple[str, bytes], ...]) -> None:
    assert identity(*pairs) is None


def test_no_groups_and_no_session() -> None:
    found = identity(("x-user-id", b"alice"))
    assert found == Identity("alice", (), "")
    assert found.scope == Scope("alice")


def test_blank_session_is_empty() -> None:
    found = identity(("x-user-id", b"alice"), ("x-session-id", b"  "))
    assert found is not None
    assert found.session_id == ""


@pytest.mark.parametrize(
    "user",
    [
        b"ali\x00ce",
        b"ali\x01ce",
        "ali\u202ece".encode(),
        "ali\u200bce".encode(),
        "ali\u2028ce".encode(),
        b"a" * 257,
    ],
)
def test_crafted_user_ids_are_rejected(user: bytes) -> None:
    with pytest.raises(InvalidIdentifier, match="user id"):
        identity(("x-user-id", user))


@pytest.mark.parametrize(
    "groups",
    [
        b"team,ali\x00ce",
        "team,g\u202e".encode(),
        "team," + "g" * 257,
    ],
)
def test_crafted_group_ids_are_rejected(groups: bytes | str) -> None:
    value = groups if isinstance(groups, bytes) else groups.encode()
    with pytest.raises(InvalidIdentifier, match="group id"):
        identity(("x-user-id", b"alice"), ("x-user-groups", value))


@pytest.mark.parametrize("session", [b"s\x00", "s\u202e1".encode(), b"s" * 300])
def test_crafted_session_ids_are_rejected(session: bytes) -> None:
    with pytest.raises(InvalidIdentifier, match="session id"):
        identity(("x-user-id", b"alice"), ("x-session-id", session))


@pytest.mark.parametrize(
    "pairs",
    [
        (("x-user-id", b"alice"), ("x-user-id", b"mallory")),
        (("x-user-id", b"alice,mallory"),),  # what a hop that folds the two lines sends
        (("x-user-id", b"alice"), ("x-session-id", b"s1"), ("x-session-id", b"s2")),
        (("x-user-id", b"alice"), ("x-session-id", b"s1,s2")),
    ],
)
def test_repeated_or_comma_joined_user_and_session_headers_are_rejected(
    pairs: tuple[tuple[str, bytes], ...],
) -> None:
    # HTTP lets any intermediary fold repeated field lines into one comma-joined
    # value (RFC 9110 section 5.3): "alice,mallory" may be two users. Never guess.
    with pytest.raises(InvalidIdentifier, match="repeated or holds a comma"):
        identity(*pairs)


def test_quote_characters_are_valid_ids_and_kept_verbatim() -> None:
    # Quotes are escaped by the filter builder, not refused here.
    found = identity(("x-user-id", b'x" || user_id != "y'))
    assert found is not None
    assert found.user_id == 'x" || user_id != "y'


def test_non_utf8_user_ids_are_rejected_not_merged() -> None:
    with pytest.raises(InvalidIdentifier):
        identity(("x-user-id", b"j\xf6rg"))


def test_non_utf8_in_other_headers_does_not_break_header_dict() -> None:
    headers = header_dict(header_map(("x-user-id", b"alice"), ("cookie", b"a=\xff")))
    assert headers["x-user-id"] == "alice"
    assert identity_from_headers(headers, CONFIG) == Identity("alice")


# -- groups ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", ()),
        ("   ", ()),
        (",,,", ()),
        ("a", ("a",)),
        ("b,a", ("a", "b")),
        (" b , a ,", ("a", "b")),
        ("a,a, a ,b,a", ("a", "b")),
        ("team one, team two", ("team one", "team two")),
        ("Grüppe,grüppe", ("Grüppe", "grüppe")),
    ],
)
def test_parse_groups_strips_dedupes_and_sorts(value: str, expected: tuple[str, ...]) -> None:
    assert parse_groups(value, max_groups=32) == (expected, 0)


def test_parse_groups_keeps_the_first_distinct_groups_and_counts_the_rest() -> None:
    assert parse_groups("a,b,a,b,a", max_groups=2) == (("a", "b"), 0)
    assert parse_groups("c,a,b", max_groups=2) == (("a", "c"), 1)


def test_parse_groups_with_zero_allowed() -> None:
    assert parse_groups("", max_groups=0) == ((), 0)
    assert parse_groups("a", max_groups=0) == ((), 1)


def test_too_many_groups_in_the_header_are_truncated_not_rejected() -> None:
    config = IdentityConfig(max_groups=3)
    groups = ",".join(f"g{i}" for i in range(4)).encode()
    found = identity(("x-user-id", b"alice"), ("x-user-groups", groups), config=config)
    assert found is not None
    assert found.group_ids == ("g0", "g1", "g2")
    assert found.groups_dropped == 1


def test_an_empty_user_header_is_no_identity() -> None:
    headers = header_dict(header_map(("x-user-id", b"  ")))
    assert identity_from_headers(headers, CONFIG) is None
    assert blank_user_header(headers, CONFIG)
    assert not blank_user_header({}, CONFIG)


def test_repeated_group_headers_are_merged() -> None:
    found = identity(("x-user-id", b"alice"), ("x-user-groups", b"b"), ("x-user-groups", b"a, b"))
    assert found is not None
    assert found.group_ids == ("a", "b")


# -- identity_from_body ------------------------------------------------------------------------


def test_identity_from_body_never_takes_groups() -> None:
    headers = {"x-user-groups": "admins", "x-session-id": "s1"}
    assert identity_from_body(" carol ", headers, CONFIG) == Identity("carol", (), "s1")


@pytest.mark.parametrize("user", ["", "   ", "ca\x00rol", "c\u202e", "x" * 300])
def test_identity_from_body_validates_the_user(user: str) -> None:
    with pytest.raises(InvalidIdentifier):
        identity_from_body(user, {}, CONFIG)


def test_identity_from_body_validates_the_session() -> None:
    with pytest.raises(InvalidIdentifier, match="session id"):
        identity_from_body("carol", {"x-session-id": "s\u202e1"}, CONFIG)
