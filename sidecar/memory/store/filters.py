"""The one place that builds Milvus filter expressions.

Every value that reaches an expression is validated (:func:`validate_identifier`)
and then quoted (:func:`quote`); field names come from a fixed allow-list. The
system this project descends from formatted filters with unescaped strings, so a
crafted user id read other tenants' memories — the tests here try to break out.

Visibility rule (identical on every store): a scope ``(user, groups)`` may read

* every memory whose ``user_id`` is the user's, whatever its visibility;
* memories of one of its groups whose visibility is ``group`` or ``public``;
* every memory whose visibility is ``public``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping

from sidecar.errors import InvalidIdentifier
from sidecar.memory.records.records import NodeType, Scope, Status, Visibility

MAX_IDENTIFIER_BYTES = 256


class Filter(str):
    """A filter expression that came out of :func:`build_filter` (the store takes no
    other). ``owner``: the one user whose rows it can match, when it is restricted to
    one (``build_filter(owner=...)``), else None: a read of it then needs only that
    user's share of the store gate (:mod:`sidecar.memory.store.gate`)."""

    owner: str | None

    def __new__(cls, expression: str, owner: str | None = None) -> Filter:
        made = super().__new__(cls, expression)
        made.owner = owner
        return made


#: Fields a filter may name, and nothing else.
FILTER_FIELDS = frozenset(
    {
        "id",
        "user_id",
        "group_id",
        "visibility",
        "node_type",
        "memory_type",
        "status",
        "category_id",
        "parent_id",
        "session_id",
        "source",
        "content_hash",
        "superseded_by",
    }
)


def validate_identifier(value: object, kind: str = "identifier") -> str:
    """Return ``value`` if it is a safe id: a non-empty string of at most 256 UTF-8
    bytes with no control, format or surrogate characters and no surrounding space.
    """
    if not isinstance(value, str):
        raise InvalidIdentifier(f"{kind} must be a string")
    if not value or value != value.strip():
        raise InvalidIdentifier(f"{kind} must be non-empty without surrounding whitespace")
    if value.isascii() and value.isprintable():  # the common case, e.g. every memory id
        if len(value) > MAX_IDENTIFIER_BYTES:
            raise InvalidIdentifier(f"{kind} is longer than {MAX_IDENTIFIER_BYTES} bytes")
        return value
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidIdentifier(f"{kind} is not valid UTF-8") from None
    if len(encoded) > MAX_IDENTIFIER_BYTES:
        raise InvalidIdentifier(f"{kind} is longer than {MAX_IDENTIFIER_BYTES} bytes")
    for char in value:
        if unicodedata.category(char) in {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}:
            raise InvalidIdentifier(f"{kind} contains a control or unassigned character")
    return value


def quote(value: str) -> str:
    """A Milvus string literal for ``value`` (backslash and double quote escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _field(name: str) -> str:
    if name not in FILTER_FIELDS:
        raise InvalidIdentifier(f"field {name!r} may not be used in a filter")
    return name


def _eq(name: str, value: str) -> str:
    return f"{_field(name)} == {quote(validate_identifier(value, name))}"


def _in(name: str, values: Iterable[str]) -> str:
    items = sorted({validate_identifier(v, name) for v in values})
    if not items:
        return "false"
    return f"{_field(name)} in [{', '.join(quote(v) for v in items)}]"


def _epoch_ms(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidIdentifier(f"{name} must be an integer (epoch ms)")
    return int(value)


def scope_expression(scope: Scope) -> str:
    """What ``scope`` may read, per the visibility rule in the module docstring."""
    parts = [_eq("user_id", scope.user_id), _eq("visibility", Visibility.PUBLIC)]
    if scope.group_ids:
        shared = _in("visibility", [Visibility.GROUP, Visibility.PUBLIC])
        parts.append(f"({_in('group_id', scope.group_ids)} and {shared})")
    return "(" + " or ".join(parts) + ")"


def ids_filter(ids: Iterable[str]) -> Filter:
    """Rows whose id is one of ``ids``, whatever else they are (the access
    collection's rows, which have no other field to filter by but their owner)."""
    return Filter(_in("id", ids))


def build_filter(
    *,
    scope: Scope | None = None,
    owner: str | None = None,
    ids: Iterable[str] | None = None,
    node_type: NodeType | None = NodeType.MEMORY,
    status: Status | None = Status.ACTIVE,
    equals: Mapping[str, str] | None = None,
    visibilities: Iterable[Visibility] | None = None,
    updated_since: int | None = None,
    updated_before: int | None = None,
    deleted: bool = False,
) -> Filter:
    """AND of the given conditions; every value validated and quoted.

    ``scope`` applies the read rule; ``owner`` restricts to rows the user owns
    (for writes and deletes). Pass ``node_type=None`` to drop that condition and
    ``status=None`` for every status but ``deleted`` (the hollow rows deletes leave
    behind); ``deleted=True`` takes those too (the caches' refreshes, the purge).
    """
    clauses: list[str] = []
    # The id list goes first: milvus-lite 2.5.1 answers ``<term> and id in [...]``
    # wrongly on some stores — no rows for many owners, where ``id in [...] and
    # <term>`` finds every one (``id == ...`` is fine anywhere; see
    # docs/design/store-schema.md). Conjunction order means nothing to a correct engine.
    if ids is not None:
        clauses.append(_in("id", ids))
    if scope is not None:
        clauses.append(scope_expression(scope))
    if owner is not None:
        clauses.append(_eq("user_id", owner))
    if node_type is not None:
        clauses.append(_eq("node_type", node_type))
    if status is not None:
        clauses.append(_eq("status", status))
    for name, value in sorted((equals or {}).items()):
        clauses.append(_eq(name, value))
    if visibilities is not None:
        clauses.append(_in("visibility", [str(v) for v in visibilities]))
    if updated_since is not None:
        clauses.append(f"updated_at >= {_epoch_ms(updated_since, 'updated_since')}")
    if updated_before is not None:
        clauses.append(f"updated_at < {_epoch_ms(updated_before, 'updated_before')}")
    if not clauses:
        raise InvalidIdentifier("refusing to build an empty filter")
    if status is None and not deleted:  # never what selects: added after that check
        clauses.append(f"{_field('status')} != {quote(Status.DELETED)}")
    return Filter(" and ".join(clauses), owner)
