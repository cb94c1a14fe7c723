"""Evaluation datasets: one JSON document of memories and labelled queries.

::

    {"name": "...", "description": "...",
     "memories": [{"id", "user_id", "content", "session_id", "created_at",
                   "group_id", "visibility", "related_ids", "cluster"}],
     "queries":  [{"id", "user_id", "query", "relevant_ids", "category",
                   "group_ids", "context"}]}

Required: ``memories[].id``, ``.user_id``, ``.content``; ``queries[].id``, ``.user_id``,
``.query``, ``.relevant_ids``. Everything else may be absent or null. ``created_at``
is ISO-8601 (a time without a zone is UTC). Every problem is an
:class:`~sidecar.errors.InvalidInput` naming the entry (``memories[12] (id 'x')``).

A query may only retrieve what its scope may read (:func:`visible`): the same rule as
:func:`sidecar.memory.store.filters.scope_expression`, restated here so the evaluation can
check the store's answers independently.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sidecar.errors import InvalidInput
from sidecar.memory.records.records import Scope, Visibility
from sidecar.memory.store.filters import validate_identifier
from sidecar.memory.store.schema import ID_BYTES, MAX_RELATED


@dataclass(frozen=True, slots=True)
class ContextTurn:
    """An earlier chat turn (kept for query rewriting; the request path uses only the
    latest user message, and so does the evaluation)."""

    role: str
    content: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class EvalMemory:
    id: str
    user_id: str
    content: str = field(repr=False)
    session_id: str = ""
    created_at: int = 0  # epoch milliseconds; 0 when the dataset gives none
    group_id: str = ""
    visibility: Visibility = Visibility.USER
    related_ids: tuple[str, ...] = ()
    cluster: str | None = None


@dataclass(frozen=True, slots=True)
class EvalQuery:
    id: str
    user_id: str
    query: str = field(repr=False)
    relevant_ids: tuple[str, ...] = ()
    category: str | None = None
    group_ids: tuple[str, ...] = ()
    context: tuple[ContextTurn, ...] = field(default=(), repr=False)
    #: The reference answer, when the dataset gives one (scored by eval-conversations).
    answer: str = field(default="", repr=False)
    #: When the question is asked (epoch ms; 0: not given).
    asked_at: int = 0

    @property
    def scope(self) -> Scope:
        return Scope(self.user_id, self.group_ids)


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    description: str
    memories: tuple[EvalMemory, ...]
    queries: tuple[EvalQuery, ...]
    #: Where it was read from (for messages and the report).
    source: str = ""

    @property
    def users(self) -> tuple[str, ...]:
        return tuple(sorted({m.user_id for m in self.memories}))

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(sorted({m.group_id for m in self.memories if m.group_id}))

    def categories(self) -> dict[str, int]:
        """Queries per category (uncategorised queries are not counted)."""
        counts = Counter(q.category for q in self.queries if q.category is not None)
        return dict(sorted(counts.items()))

    def limited(self, count: int | None) -> Dataset:
        """The same memories with only the first ``count`` queries."""
        if count is None or count >= len(self.queries):
            return self
        return Dataset(
            self.name, self.description, self.memories, self.queries[:count], self.source
        )


def visible(owner: str, group_id: str, visibility: Visibility | str, scope: Scope) -> bool:
    """Whether ``scope`` may read a memory of ``owner`` (FORMAT.md / filters.py rule)."""
    if owner == scope.user_id or visibility == Visibility.PUBLIC:
        return True
    return bool(group_id) and group_id in scope.group_ids and visibility == Visibility.GROUP


# -- parsing ---------------------------------------------------------------------------


class _Entry:
    """Error messages for one entry: ``source: memories[3] (id 'x'): field: problem``."""

    def __init__(self, source: str, where: str, data: object) -> None:
        self.source = source
        self.where = where
        self.data: Mapping[str, Any] = {}
        if not isinstance(data, Mapping):
            raise self.error(f"must be an object, not {type(data).__name__}")
        self.data = data
        raw_id = data.get("id")
        if isinstance(raw_id, str):
            self.where = f"{where} (id {raw_id!r})"

    def error(self, message: str) -> InvalidInput:
        return InvalidInput(f"{self.source}: {self.where}: {message}")

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def require(self, key: str) -> Any:
        if self.data.get(key) is None:
            raise self.error(f"{key!r} is required")
        return self.data[key]

    def identifier(self, key: str, *, required: bool = False, max_bytes: int = 0) -> str:
        value = self.require(key) if required else self.get(key)
        if value is None or (value == "" and not required):
            return ""
        return self._check_id(key, value, max_bytes)

    def identifiers(self, key: str, *, required: bool = False, max_bytes: int = 0) -> list[str]:
        value = self.require(key) if required else self.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(f"{key!r} must be a list of ids")
        return [self._check_id(f"{key}[{i}]", item, max_bytes) for i, item in enumerate(value)]

    def text(self, key: str, *, required: bool = False) -> str:
        value = self.require(key) if required else self.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.error(f"{key!r} must be a string")
        if required and not value.strip():
            raise self.error(f"{key!r} must not be empty")
        return value

    def _check_id(self, key: str, value: object, max_bytes: int) -> str:
        try:
            checked = validate_identifier(value, key)
        except InvalidInput as exc:
            raise self.error(str(exc)) from None
        if max_bytes and len(checked.encode("utf-8")) > max_bytes:
            raise self.error(f"{key} is longer than {max_bytes} bytes (the store's id limit)")
        return checked


def _epoch_ms(entry: _Entry, key: str) -> int:
    value = entry.get(key)
    if value is None:
        return 0
    if not isinstance(value, str):
        raise entry.error(f"{key!r} must be an ISO-8601 string")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise entry.error(f"{key!r} is not an ISO-8601 time: {value!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _memory(source: str, index: int, data: object) -> EvalMemory:
    entry = _Entry(source, f"memories[{index}]", data)
    memory_id = entry.identifier("id", required=True, max_bytes=ID_BYTES)
    raw_visibility = entry.get("visibility")
    if raw_visibility is None:
        visibility = Visibility.USER
    else:
        try:
            visibility = Visibility(raw_visibility)
        except ValueError:
            known = ", ".join(v.value for v in Visibility)
            raise entry.error(f"'visibility' must be one of {known}") from None
    group_id = entry.identifier("group_id")
    if visibility == Visibility.GROUP and not group_id:
        raise entry.error("visibility 'group' needs a 'group_id'")
    related = entry.identifiers("related_ids", max_bytes=ID_BYTES)
    if len(set(related)) > MAX_RELATED:
        raise entry.error(f"'related_ids' has more than {MAX_RELATED} ids")
    cluster = entry.get("cluster")
    if cluster is not None and not isinstance(cluster, str):
        raise entry.error("'cluster' must be a string")
    return EvalMemory(
        id=memory_id,
        user_id=entry.identifier("user_id", required=True),
        content=entry.text("content", required=True),
        session_id=entry.identifier("session_id"),
        created_at=_epoch_ms(entry, "created_at"),
        group_id=group_id,
        visibility=visibility,
        related_ids=tuple(dict.fromkeys(related)),
        cluster=cluster,
    )


def _context(entry: _Entry) -> tuple[ContextTurn, ...]:
    raw = entry.get("context")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise entry.error("'context' must be a list of {role, content} objects")
    turns = []
    for i, turn in enumerate(raw):
        if (
            not isinstance(turn, Mapping)
            or not isinstance(turn.get("role"), str)
            or not isinstance(turn.get("content"), str)
        ):
            raise entry.error(f"context[{i}] must be an object with string 'role' and 'content'")
        turns.append(ContextTurn(turn["role"], turn["content"]))
    return tuple(turns)


def _query(source: str, index: int, data: object) -> EvalQuery:
    entry = _Entry(source, f"queries[{index}]", data)
    query_id = entry.identifier("id", required=True)
    relevant = entry.identifiers("relevant_ids", required=True, max_bytes=ID_BYTES)
    if not relevant:
        raise entry.error("'relevant_ids' must name at least one memory")
    category = entry.get("category")
    if category is not None and (not isinstance(category, str) or not category.strip()):
        raise entry.error("'category' must be a non-empty string")
    return EvalQuery(
        id=query_id,
        user_id=entry.identifier("user_id", required=True),
        query=entry.text("query", required=True),
        relevant_ids=tuple(dict.fromkeys(relevant)),
        category=category,
        group_ids=tuple(sorted(set(entry.identifiers("group_ids")))),
        context=_context(entry),
        answer=_answer(entry),
        asked_at=_epoch_ms(entry, "question_date"),
    )


def _answer(entry: _Entry) -> str:
    """The reference answer as text (a number or a list of strings is accepted)."""
    value = entry.get("answer")
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, str | int | float):
        return str(value)
    raise entry.error("'answer' must be a string")


def parse_dataset(data: object, *, source: str = "dataset") -> Dataset:
    """Validate a parsed dataset document (see the module docstring)."""
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{source}: the top level must be an object")
    for key in ("memories", "queries"):
        if not isinstance(data.get(key), list):
            raise InvalidInput(f"{source}: {key!r} must be a list")
    name = data.get("name")
    description = data.get("description")
    if name is not None and not isinstance(name, str):
        raise InvalidInput(f"{source}: 'name' must be a string")
    if description is not None and not isinstance(description, str):
        raise InvalidInput(f"{source}: 'description' must be a string")

    memories = [_memory(source, i, m) for i, m in enumerate(data["memories"])]
    by_id: dict[str, EvalMemory] = {}
    for i, memory in enumerate(memories):
        if memory.id in by_id:
            raise InvalidInput(f"{source}: memories[{i}]: duplicate id {memory.id!r}")
        by_id[memory.id] = memory

    queries = [_query(source, i, q) for i, q in enumerate(data["queries"])]
    seen: set[str] = set()
    for i, query in enumerate(queries):
        where = f"{source}: queries[{i}] (id {query.id!r})"
        if query.id in seen:
            raise InvalidInput(f"{where}: duplicate id")
        seen.add(query.id)
        for memory_id in query.relevant_ids:
            target = by_id.get(memory_id)
            if target is None:
                raise InvalidInput(f"{where}: relevant id {memory_id!r} is not a memory")
            if not visible(target.user_id, target.group_id, target.visibility, query.scope):
                raise InvalidInput(
                    f"{where}: relevant memory {memory_id!r} is not visible to the query's "
                    "user and groups"
                )
    if not memories:
        raise InvalidInput(f"{source}: 'memories' is empty")
    if not queries:
        raise InvalidInput(f"{source}: 'queries' is empty")
    return Dataset(
        name=name or Path(source).stem,
        description=description or "",
        memories=tuple(memories),
        queries=tuple(queries),
        source=source,
    )


def load_dataset(path: str | Path) -> Dataset:
    """Read and validate a dataset file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read dataset {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not UTF-8 text ({exc.reason})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path}: invalid JSON: {exc}") from exc
    return parse_dataset(data, source=str(path))
