"""Tests for the Milvus filter builder (sidecar.memory.store.filters).

Besides unit tests of validation and quoting, a property test runs the built
filters against a real milvus-lite store: rows owned by crafted ids that try to
break out of the string literal must never widen what a scope can read.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.config import StoreConfig
from sidecar.errors import InvalidIdentifier
from sidecar.memory.records.records import (
    MemoryRecord,
    NodeType,
    Scope,
    Status,
    Visibility,
    as_vector,
)
from sidecar.memory.store.filters import (
    FILTER_FIELDS,
    MAX_IDENTIFIER_BYTES,
    build_filter,
    quote,
    scope_expression,
    validate_identifier,
)
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics

# -- validate_identifier -------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "alice@example.com",
        "3f2b8c1e-6d4a-4f7e-9a0b-1c2d3e4f5a6b",
        "auth0|123",
        "Jörg Müller",
        "李小龙",
        "Zoë-Ångström",
        "user with inner spaces",
        'x" || user_id != "y',
        "a" * MAX_IDENTIFIER_BYTES,
        "é" * (MAX_IDENTIFIER_BYTES // 2),  # 2 bytes each: exactly the limit
    ],
)
def test_validate_identifier_accepts_ordinary_ids(value: str) -> None:
    assert validate_identifier(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        " alice",
        "alice ",
        "\talice",
        "ali\nce",
        "ali\x00ce",
        "ali\rce",
        "ali\u202ece",  # right-to-left override (Cf)
        "ali\u200bce",  # zero-width space (Cf)
        "ali\u2028ce",  # line separator (Zl)
        "ali\u2029ce",  # paragraph separator (Zp)
        "ali\ue000ce",  # private use (Co)
        "ali\ud800ce",  # lone surrogate (Cs)
        "ali\U000e0001",  # language tag (Cf)
        "ali\x7fce",  # DEL (Cc)
        "a" * (MAX_IDENTIFIER_BYTES + 1),
        "é" * (MAX_IDENTIFIER_BYTES // 2 + 1),  # 258 bytes, 129 characters
    ],
)
def test_validate_identifier_rejects_unsafe_ids(value: str) -> None:
    with pytest.raises(InvalidIdentifier):
        validate_identifier(value)


@pytest.mark.parametrize("value", [None, 123, b"alice", ["alice"], 1.5])
def test_validate_identifier_rejects_non_strings(value: object) -> None:
    with pytest.raises(InvalidIdentifier, match="must be a string"):
        validate_identifier(value, "user id")


def test_validate_identifier_names_the_kind_in_the_message() -> None:
    with pytest.raises(InvalidIdentifier, match=r"^group id "):
        validate_identifier("", "group id")


# -- quote ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("alice", '"alice"'),
        ('a"b', '"a\\"b"'),
        ("a\\b", '"a\\\\b"'),
        ('\\"', '"\\\\\\""'),
        ("", '""'),
        ("it's", '"it\'s"'),
    ],
)
def test_quote_escapes_backslash_and_double_quote(value: str, expected: str) -> None:
    assert quote(value) == expected


@given(st.text())
def test_quote_never_leaves_an_unescaped_double_quote(value: str) -> None:
    quoted = quote(value)
    assert quoted.startswith('"')
    assert quoted.endswith('"')
    inner = quoted[1:-1]
    # Undo the escaping left to right: every quote inside must have been escaped.
    out, i = [], 0
    while i < len(inner):
        if inner[i] == "\\":
            assert i + 1 < len(inner)
            assert inner[i + 1] in '\\"'
            out.append(inner[i + 1])
            i += 2
        else:
            assert inner[i] != '"'
            out.append(inner[i])
            i += 1
    assert "".join(out) == value


# -- build_filter --------------------------------------------------------------------


def test_build_filter_defaults_to_active_memories() -> None:
    assert build_filter(owner="alice") == (
        'user_id == "alice" and node_type == "memory" and status == "active"'
    )


def test_build_filter_can_drop_node_type_and_status() -> None:
    assert build_filter(owner="alice", node_type=None, status=None) == (
        'user_id == "alice" and status != "deleted"'
    )
    assert build_filter(owner="alice", node_type=None, status=None, deleted=True) == (
        'user_id == "alice"'
    )


def test_build_filter_bounds_updated_at_both_ways() -> None:
    where = build_filter(status=Status.DELETED, node_type=None, updated_since=5, updated_before=10)
    assert where == 'status == "deleted" and updated_at >= 5 and updated_at < 10'
    with pytest.raises(InvalidIdentifier, match="updated_before"):
        build_filter(owner="u", updated_before="1 or true")  # type: ignore[arg-type]


def test_build_filter_ids_are_sorted_deduplicated_and_quoted() -> None:
    where = build_filter(ids=["m2", "m1", "m2", 'x"y'], node_type=None, status=None, deleted=True)
    assert where == 'id in ["m1", "m2", "x\\"y"]'


def test_build_filter_puts_the_id_list_first() -> None:
    """milvus-lite 2.5.1 returned no rows for ``user_id == ... and id in [...]`` for
    two owners in three of a 100k-memory store (every row with the id list first);
    the store that shows it is 500 MB, so this pins the order instead."""
    where = build_filter(scope=Scope("u", ("g",)), owner="u", ids=["m1"], status=None)
    assert where.startswith('id in ["m1"] and (user_id == "u" or ')
    assert build_filter(owner="u", ids=["m1"]) == (
        'id in ["m1"] and user_id == "u" and node_type == "memory" and status == "active"'
    )


def test_build_filter_empty_ids_match_nothing() -> None:
    assert build_filter(ids=[], node_type=None, status=None, deleted=True) == "false"


def test_build_filter_equals_is_sorted_and_anded() -> None:
    where = build_filter(
        owner="u",
        equals={"session_id": "s1", "category_id": "c1"},
        node_type=None,
        status=None,
        deleted=True,
    )
    assert where == 'user_id == "u" and category_id == "c1" and session_id == "s1"'


@pytest.mark.parametrize(
    "name", ["content", "embedding", "user_id == 'x' or 1", "importance", "", "USER_ID"]
)
def test_build_filter_refuses_unknown_field_names(name: str) -> None:
    with pytest.raises(InvalidIdentifier, match="may not be used in a filter"):
        build_filter(owner="u", equals={name: "x"})


def test_filter_fields_do_not_include_free_text_or_vectors() -> None:
    assert "content" not in FILTER_FIELDS
    assert "embedding" not in FILTER_FIELDS
    assert {"user_id", "group_id", "visibility", "status", "node_type"} <= FILTER_FIELDS


def test_build_filter_refuses_an_empty_filter() -> None:
    with pytest.raises(InvalidIdentifier, match="empty filter"):
        build_filter(node_type=None, status=None)  # the implicit "not deleted" selects nothing
    with pytest.raises(InvalidIdentifier, match="empty filter"):
        build_filter(node_type=None, status=None, deleted=True)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"owner": ""},
        {"owner": "a\nb"},
        {"owner": " a"},
        {"scope": Scope("a\x00")},
        {"scope": Scope("alice", ("ok", "bad\u202e"))},
        {"ids": ["ok", ""]},
        {"equals": {"session_id": "s\r"}},
    ],
)
def test_build_filter_validates_every_value(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidIdentifier):
        build_filter(**kwargs)  # type: ignore[arg-type]


def test_scope_expression_without_groups() -> None:
    assert scope_expression(Scope("alice")) == '(user_id == "alice" or visibility == "public")'


def test_scope_expression_with_groups() -> None:
    assert scope_expression(Scope("alice", ("team-b", "team-a"))) == (
        '(user_id == "alice" or visibility == "public" or '
        '(group_id in ["team-a", "team-b"] and visibility in ["group", "public"]))'
    )


def test_scope_filter_is_anded_with_the_other_conditions() -> None:
    where = build_filter(scope=Scope('x" or "1"=="1'))
    assert where == (
        '(user_id == "x\\" or \\"1\\"==\\"1" or visibility == "public") '
        'and node_type == "memory" and status == "active"'
    )


# -- against a real milvus-lite store ------------------------------------------------

DIM = 8

CRAFTED_OWNERS: tuple[str, ...] = (
    "alice",
    "bob",
    'x" || user_id != "y',
    'x\\" or 1==1 or "',
    "a\\\\",
    "a\\",
    "a",
    '"',
    "' or '1'=='1",
    "]",
    'u1" or visibility == "public',
    'alice" or user_id like "%',
    "alice%",
    "%",
    '\\"',
    "\\u0061lice",  # a literal backslash-u sequence, not "alice"
    "bob') or true or ('",
)
CRAFTED_GROUPS: tuple[str, ...] = (
    "team",
    'team" or group_id != "',
    "team\\",
    "'team'",
    'g"] or visibility in ["user',
)


@dataclass(frozen=True)
class Row:
    id: str
    user_id: str
    group_id: str
    visibility: Visibility
    node_type: NodeType = NodeType.MEMORY
    status: Status = Status.ACTIVE


def visible(row: Row, scope: Scope) -> bool:
    """The documented visibility rule, written independently of the code under test."""
    if row.node_type != NodeType.MEMORY or row.status != Status.ACTIVE:
        return False
    if row.user_id == scope.user_id:
        return True
    if row.visibility == Visibility.PUBLIC:
        return True
    return row.group_id in scope.group_ids and row.visibility in (
        Visibility.GROUP,
        Visibility.PUBLIC,
    )


class World:
    """A real store plus a model of every row written to it."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.rows: list[Row] = []
        self.rng = random.Random(1234)
        self._ids = itertools.count(1)
        self.memberships: dict[str, tuple[str, ...]] = {}

    def vector(self) -> list[float]:
        while True:
            vec = [self.rng.uniform(-1.0, 1.0) for _ in range(DIM)]
            if sum(x * x for x in vec) > 0.01:
                return vec

    async def add(self, rows: Iterable[Row]) -> None:
        records = []
        for row in rows:
            self.rows.append(row)
            records.append(
                MemoryRecord(
                    id=row.id,
                    user_id=row.user_id,
                    content=f"memory {row.id}",
                    embedding=as_vector(self.vector()),
                    group_id=row.group_id,
                    visibility=row.visibility,
                    node_type=row.node_type,
                    status=row.status,
                    created_at=int(row.id[1:]),
                )
            )
        await self.store.upsert(records)

    def new_id(self) -> str:
        return f"r{next(self._ids):06d}"

    def expected(self, scope: Scope) -> set[str]:
        return {row.id for row in self.rows if visible(row, scope)}

    def owned(self, owner: str) -> set[str]:
        return {
            row.id
            for row in self.rows
            if row.user_id == owner
            and row.node_type == NodeType.MEMORY
            and row.status == Status.ACTIVE
        }

    async def check_owner(self, owner: str) -> None:
        got = await self.store.query(build_filter(owner=owner), limit=16_384)
        assert {r.id for r in got} == self.owned(owner), f"owner query for {owner!r}"
        assert all(r.user_id == owner for r in got)

    async def check_scope(self, scope: Scope) -> None:
        expected = self.expected(scope)
        assert len(expected) <= 50, "test setup: too many visible rows for limit=50"
        hits = await self.store.search(
            self.vector(), where=build_filter(scope=scope), limit=50, strong=True
        )
        assert {h.record.id for h in hits} == expected, f"scope search for {scope!r}"
        queried = await self.store.query(build_filter(scope=scope), limit=16_384)
        assert {r.id for r in queried} == expected, f"scope query for {scope!r}"


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    path: Path = tmp_path_factory.mktemp("filters") / "x.db"
    store = await MemoryStore.open(StoreConfig(uri=str(path)), dim=DIM, metrics=Metrics())
    world = World(store)
    rows: list[Row] = []
    for index, owner in enumerate(CRAFTED_OWNERS):
        group = CRAFTED_GROUPS[index % len(CRAFTED_GROUPS)]
        world.memberships[owner] = (group,)
        rows.append(Row(world.new_id(), owner, "", Visibility.USER))
        rows.append(Row(world.new_id(), owner, group, Visibility.USER))
        rows.append(Row(world.new_id(), owner, group, Visibility.GROUP))
        # Rows the default filters must exclude whoever asks.
        rows.append(Row(world.new_id(), owner, "", Visibility.USER, status=Status.SUPERSEDED))
        rows.append(
            Row(world.new_id(), owner, group, Visibility.GROUP, node_type=NodeType.CATEGORY)
        )
    # A few public rows (everyone sees them, so they are kept few for limit=50).
    for owner, group in [("alice", ""), ('"', "team"), ("]", 'team" or group_id != "')]:
        rows.append(Row(world.new_id(), owner, group, Visibility.PUBLIC))
    rows.append(
        Row(world.new_id(), "bob", "", Visibility.PUBLIC, status=Status.SUPERSEDED),
    )
    await world.add(rows)
    await store.flush()
    try:
        yield world
    finally:
        await store.close()


async def test_crafted_owner_queries_return_only_their_own_rows(world: World) -> None:
    for owner in CRAFTED_OWNERS:
        await world.check_owner(owner)


async def test_crafted_scopes_read_exactly_what_the_rule_allows(world: World) -> None:
    for owner in CRAFTED_OWNERS:
        await world.check_scope(Scope(owner))
        await world.check_scope(Scope(owner, world.memberships[owner]))
    await world.check_scope(Scope("nobody"))
    await world.check_scope(Scope("nobody", CRAFTED_GROUPS))


async def test_group_member_sees_group_and_public_but_not_user_visibility(world: World) -> None:
    await world.add(
        [
            Row("r900001", "owner-v", "grp-v", Visibility.USER),
            Row("r900002", "owner-v", "grp-v", Visibility.GROUP),
            Row("r900003", "owner-v", "grp-v", Visibility.PUBLIC),
        ]
    )
    member = Scope("member-v", ("grp-v",))
    hits = await world.store.search(
        world.vector(), where=build_filter(scope=member), limit=50, strong=True
    )
    ids = {h.record.id for h in hits}
    assert {"r900002", "r900003"} <= ids
    assert "r900001" not in ids

    outsider = Scope("outsider-v", ("other-grp",))
    hits = await world.store.search(
        world.vector(), where=build_filter(scope=outsider), limit=50, strong=True
    )
    ids = {h.record.id for h in hits}
    assert "r900003" in ids
    assert not {"r900001", "r900002"} & ids

    owner = await world.store.query(build_filter(scope=Scope("owner-v")))
    assert {"r900001", "r900002", "r900003"} <= {r.id for r in owner}
    await world.check_scope(member)
    await world.check_scope(outsider)


def _is_identifier(value: str) -> bool:
    try:
        validate_identifier(value)
    except InvalidIdentifier:
        return False
    return True


identifiers = st.text(min_size=1, max_size=40).filter(_is_identifier)
breakout_identifiers = (
    st.lists(
        st.sampled_from([*"\"\\' []|&=!%()aub_", " or ", " and ", "==", "!=", "user_id"]),
        min_size=1,
        max_size=12,
    )
    .map("".join)
    .filter(_is_identifier)
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    owner=st.one_of(identifiers, breakout_identifiers),
    group=st.one_of(identifiers, breakout_identifiers),
)
async def test_generated_identifiers_never_widen_visibility(
    world: World, owner: str, group: str
) -> None:
    await world.add(
        [
            Row(world.new_id(), owner, "", Visibility.USER),
            Row(world.new_id(), owner, group, Visibility.USER),
            Row(world.new_id(), owner, group, Visibility.GROUP),
        ]
    )
    await world.check_owner(owner)
    await world.check_scope(Scope(owner))
    await world.check_scope(Scope(owner, (group,)))
    await world.check_scope(Scope("alice", (group,)))
    # A crafted neighbour must still see only its own rows.
    await world.check_owner(CRAFTED_OWNERS[len(owner) % len(CRAFTED_OWNERS)])
