"""In-process stand-ins for the embedding model, the LLM and the memory store.

Each meets the product's own protocol (mypy checks that at the bottom of this
module), so a test hands it to the code under test as it is: no casts, no
``type: ignore``. Use them where a test is about the logic around a component,
not the component: the real model for embedding quality, milvus-lite for Milvus'
behaviour, the mock LLM server (``e2e.mock_llm``) for the HTTP client.

* :class:`FakeEmbedder`: words hashed into a few dimensions; deterministic, unit
  vectors, every call recorded.
* :class:`FakeLLM`: canned JSON answers per task; records every call; fails or times
  out on demand.
* :class:`FakeStore`: rows in a dict, written and read through the store schema's own
  row mapping; every read honours the :class:`~sidecar.memory.store.filters.Filter`
  expression (the subset :func:`~sidecar.memory.store.filters.build_filter` writes).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from sidecar.errors import LLMError, LLMTimeout, StoreError
from sidecar.llm import ChatMessage
from sidecar.memory.corpus.bm25 import BM25Index
from sidecar.memory.embedding.protocol import Vectors
from sidecar.memory.language.text import tokens
from sidecar.memory.records.records import (
    AccessStat,
    Hit,
    MemoryRecord,
    NodeType,
    Status,
    merge_access,
)
from sidecar.memory.store.filters import Filter
from sidecar.memory.store.schema import (
    FIELDS,
    QUERY_WINDOW,
    SCALAR_FIELDS,
    record_to_row,
    row_to_record,
)

# -- the embedder ------------------------------------------------------------------------

_WORD = re.compile(r"\w+")


class FakeEmbedder:
    """Each word of a text hashed (signed) into one of ``dim`` components, the sum
    L2-normalised: the same text always gets the same vector, texts that share words
    point the same way, a text without words gets the first unit vector.

    ``calls``: the texts of every :meth:`embed` call, in order (``urgent`` beside);
    ``error``: raised by the next calls while set."""

    def __init__(self, dim: int = 16) -> None:
        self._dim = dim
        self.calls: list[list[str]] = []
        self.urgent: list[bool] = []
        self.error: Exception | None = None
        self.closed = False

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def texts_embedded(self) -> int:
        return sum(len(texts) for texts in self.calls)

    def vector(self, text: str) -> npt.NDArray[np.float32]:
        """The vector :meth:`embed` gives ``text`` (without recording a call)."""
        vector = np.zeros(self._dim, dtype=np.float64)
        for word in _WORD.findall(text.casefold()):
            digest = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
            vector[digest % self._dim] += 1.0 if (digest >> 32) & 1 else -1.0
        norm = float(np.linalg.norm(vector))
        if norm == 0.0:
            vector[0], norm = 1.0, 1.0
        return (vector / norm).astype(np.float32)

    async def embed(self, texts: Sequence[str], *, urgent: bool = False) -> Vectors:
        if self.error is not None:
            raise self.error
        self.calls.append(list(texts))
        self.urgent.append(urgent)
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return np.stack([self.vector(t) for t in texts])

    async def close(self) -> None:
        self.closed = True


# -- the LLM -----------------------------------------------------------------------------

#: A canned answer: the JSON value itself, or a function of the prompt's messages.
Answer = Any


@dataclass(frozen=True)
class LLMCall:
    """One :meth:`FakeLLM.chat_json` call as the code under test made it."""

    task: str
    messages: tuple[ChatMessage, ...]
    max_tokens: int | None
    temperature: float | None
    timeout_s: float | None


class FakeLLM:
    """Answers ``chat_json`` from a script keyed by task (``extract``, ``dedup``,
    ``rewrite``, ``rank``...): ``answers[task]`` is the JSON value returned (a copy),
    or a function of the messages that returns it. A task with an error raises it; a
    task with a stall waits that long first — past the call's ``timeout_s`` (or this
    fake's, like ``llm.timeout_s``) it raises :class:`LLMTimeout` at the budget, as
    :class:`~sidecar.llm.LLMClient` does. A task with no answer is a test's mistake:
    an ``AssertionError``, which no caller mistakes for an LLM failure.

    ``calls``: every call, in order, failed ones included."""

    def __init__(
        self,
        answers: Mapping[str, Answer] | None = None,
        *,
        errors: Mapping[str, LLMError] | None = None,
        stalls: Mapping[str, float] | None = None,
        configured: bool = True,
        timeout_s: float | None = None,
    ) -> None:
        self.answers: dict[str, Answer] = dict(answers or {})
        self.errors: dict[str, LLMError] = dict(errors or {})
        self.stalls: dict[str, float] = dict(stalls or {})
        self.configured = configured
        self.timeout_s = timeout_s
        self.calls: list[LLMCall] = []

    def answer(self, task: str, value: Answer) -> FakeLLM:
        """From now on ``task`` is answered with ``value`` (and no longer fails)."""
        self.answers[task] = value
        self.errors.pop(task, None)
        return self

    def fail(self, task: str, error: LLMError) -> FakeLLM:
        """From now on ``task`` raises ``error``."""
        self.errors[task] = error
        return self

    def stall(self, task: str, seconds: float) -> FakeLLM:
        """From now on ``task`` is answered after ``seconds`` (0: at once)."""
        self.stalls[task] = seconds
        return self

    def tasks(self) -> list[str]:
        return [call.task for call in self.calls]

    def calls_of(self, task: str) -> list[LLMCall]:
        return [call for call in self.calls if call.task == task]

    async def chat_json(
        self,
        task: str,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        self.calls.append(LLMCall(task, tuple(messages), max_tokens, temperature, timeout_s))
        stall = self.stalls.get(task, 0.0)
        budget = timeout_s if timeout_s is not None else self.timeout_s
        if stall > 0:
            if budget is not None and stall > budget:
                await asyncio.sleep(budget)
                raise LLMTimeout(f"{task}: no answer within {budget:.1f}s")
            await asyncio.sleep(stall)
        if task in self.errors:
            raise self.errors[task]
        if task not in self.answers:
            raise AssertionError(f"FakeLLM has no answer for the task {task!r}")
        answer = self.answers[task]
        return answer(messages) if callable(answer) else copy.deepcopy(answer)


# -- the store ---------------------------------------------------------------------------

Row = dict[str, Any]
Predicate = Callable[[Mapping[str, Any]], bool]

_FILTER_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<number>-?\d+)
      | (?P<op>==|!=|>=|<=|>|<)
      | (?P<punct>[()\[\],])
      | (?P<word>[A-Za-z_][A-Za-z_0-9]*)
    )""",
    re.VERBOSE | re.DOTALL,
)
_FILTER_FIELDS = frozenset(SCALAR_FIELDS)
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: bool(a == b),
    "!=": lambda a, b: bool(a != b),
    ">=": lambda a, b: bool(a >= b),
    "<=": lambda a, b: bool(a <= b),
    ">": lambda a, b: bool(a > b),
    "<": lambda a, b: bool(a < b),
}


class _FilterParser:
    """A Milvus boolean expression, as far as ``build_filter`` writes them and
    milvus-lite reads them: ``and`` / ``or``, parentheses, ``field <op> value`` and
    ``field [not] in [values]`` over strings and integers. Anything else is a
    ``ValueError`` — so are ``true``, ``false`` and ``not (...)``, which milvus-lite
    2.5 refuses: a filter the real store would refuse is not silently matched."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.tokens: list[tuple[str, Any]] = []
        position = 0
        text = expression.rstrip()
        while position < len(text):
            match = _FILTER_TOKEN.match(text, position)
            if match is None or match.end() == position:
                raise ValueError(f"unreadable filter at {position}: {expression!r}")
            position = match.end()
            kind = match.lastgroup
            assert kind is not None
            value: Any = match.group(kind)
            if kind == "string":
                value = re.sub(r"\\(.)", r"\1", value[1:-1], flags=re.DOTALL)
            elif kind == "number":
                value = int(value)
            self.tokens.append((kind, value))
        self.at = 0

    def parse(self) -> Predicate:
        predicate = self._or()
        if self.at != len(self.tokens):
            raise ValueError(f"unexpected {self.tokens[self.at][1]!r} in {self.expression!r}")
        return predicate

    def _peek(self) -> tuple[str, Any] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self, kind: str, value: Any = None) -> Any:
        token = self._peek()
        if token is None or token[0] != kind or (value is not None and token[1] != value):
            raise ValueError(f"expected {value or kind} at token {self.at} of {self.expression!r}")
        self.at += 1
        return token[1]

    def _is(self, kind: str, value: Any) -> bool:
        return self._peek() == (kind, value)

    def _or(self) -> Predicate:
        return self._joined("or", self._and, any)

    def _and(self) -> Predicate:
        return self._joined("and", self._unary, all)

    def _joined(
        self,
        word: str,
        operand: Callable[[], Predicate],
        combine: Callable[[Iterable[bool]], bool],
    ) -> Predicate:
        """``operand (word operand)*``, its operands' results combined by ``combine``."""
        parts = [operand()]
        while self._is("word", word):
            self.at += 1
            parts.append(operand())
        return parts[0] if len(parts) == 1 else (lambda row: combine(p(row) for p in parts))

    def _unary(self) -> Predicate:
        if self._is("punct", "("):
            self.at += 1
            inner = self._or()
            self._take("punct", ")")
            return inner
        return self._comparison()

    def _comparison(self) -> Predicate:
        field = self._take("word")
        if field not in _FILTER_FIELDS:  # true, false and not among them
            raise ValueError(f"no field {field!r} to filter on in {self.expression!r}")
        negated = False
        if self._is("word", "not"):
            self.at += 1
            negated = True
        if self._is("word", "in"):
            self.at += 1
            members = frozenset(self._list())
            return lambda row: (row[field] in members) != negated
        if negated:
            raise ValueError(f"'not' without 'in' after {field!r} in {self.expression!r}")
        op = self._take("op")
        value = self._value()
        compare = _COMPARE[op]
        return lambda row: compare(row[field], value)

    def _list(self) -> list[Any]:
        self._take("punct", "[")
        values: list[Any] = []
        while not self._is("punct", "]"):
            if values:
                self._take("punct", ",")
            values.append(self._value())
        self._take("punct", "]")
        return values

    def _value(self) -> Any:
        token = self._peek()
        if token is None or token[0] not in ("string", "number"):
            raise ValueError(f"expected a value at token {self.at} of {self.expression!r}")
        self.at += 1
        return token[1]


def filter_predicate(where: Filter) -> Predicate:
    """``where`` as a test of one row (a dict of the collection's scalar fields)."""
    return _FilterParser(where).parse()


def _float32(value: float) -> float:
    return float(np.float32(value))


_VARCHAR_LIMITS = {f.name: f.max_length for f in FIELDS if f.type_name == "VARCHAR"}


class FakeStore:
    """The memory collection and its access rows in two dicts.

    Rows go in through :func:`~sidecar.memory.store.schema.record_to_row` and come out
    through ``row_to_record``, as with Milvus: text cut to its field's size, float
    fields and vectors stored as float32, a VARCHAR over its field's byte limit or a
    vector of another dimension refused (:class:`StoreError`), reads without vectors
    unless asked for, oldest first, with the access rows merged in. ``search`` ranks
    by cosine; ``search_text`` by the project's own BM25 over its content tokens (not
    Milvus' analyzer: a stand-in, not a replica).

    ``calls``: how often each method ran; ``error``: raised by every call while set.
    """

    def __init__(self, dim: int = 4) -> None:
        self._dim = dim
        self.rows: dict[str, Row] = {}
        self.access: dict[str, AccessStat] = {}
        self.calls: Counter[str] = Counter()
        self.error: Exception | None = None
        self._predicates: dict[str, Predicate] = {}

    @property
    def dim(self) -> int:
        return self._dim

    async def _call(self, name: str) -> None:
        """Count the call and yield to the loop once, as a real store's round trip
        would (so concurrent callers interleave)."""
        self.calls[name] += 1
        await asyncio.sleep(0)
        if self.error is not None:
            raise self.error

    def _matching(self, where: Filter) -> list[Row]:
        predicate = self._predicates.get(where)
        if predicate is None:
            try:
                predicate = self._predicates[where] = filter_predicate(where)
            except ValueError as exc:  # Milvus' "invalid expression", as the store says it
                raise StoreError(f"invalid filter: {exc}") from exc
        return [row for _, row in sorted(self.rows.items()) if predicate(row)]

    def _record(self, row: Row, *, with_vectors: bool) -> MemoryRecord:
        shown = row if with_vectors else {k: v for k, v in row.items() if k != "embedding"}
        record = row_to_record(shown)
        if record.node_type != NodeType.MEMORY or record.status == Status.DELETED:
            return record
        return merge_access(record, self.access.get(record.id))

    def _records(self, rows: Sequence[Row], *, with_vectors: bool) -> list[MemoryRecord]:
        """Oldest first, ties by id: the order of the real store's reads."""
        found = [self._record(row, with_vectors=with_vectors) for row in rows]
        return sorted(found, key=lambda r: (r.created_at, r.id))

    async def upsert(self, records: Sequence[MemoryRecord]) -> None:
        await self._call("upsert")
        rows: list[Row] = []
        for record in records:
            row = record_to_row(record)
            if len(row["embedding"]) != self._dim:
                raise StoreError(f"memory {record.id}: a vector of {len(row['embedding'])} dims")
            for name, limit in _VARCHAR_LIMITS.items():
                if limit is not None and len(str(row[name]).encode("utf-8")) > limit:
                    raise StoreError(f"memory {record.id}: {name} is over {limit} bytes")
            row["embedding"] = [_float32(x) for x in row["embedding"]]
            row["importance"] = _float32(row["importance"])
            row["confidence"] = _float32(row["confidence"])
            rows.append(row)
        for row in rows:
            self.rows[row["id"]] = row
            if row["status"] == Status.DELETED:
                self.access.pop(row["id"], None)

    async def delete(self, where: Filter) -> None:
        await self._call("delete")
        for row in self._matching(where):
            del self.rows[row["id"]]
            self.access.pop(row["id"], None)

    async def search(
        self,
        vector: Sequence[float] | npt.NDArray[np.float32],
        *,
        where: Filter,
        limit: int,
        strong: bool = False,
    ) -> list[Hit]:
        await self._call("search")
        query = np.asarray(vector, dtype=np.float64)
        query = query / (np.linalg.norm(query) or 1.0)
        scored = []
        for row in self._matching(where):
            stored = np.asarray(row["embedding"], dtype=np.float64)
            cosine = float(query @ stored) / (float(np.linalg.norm(stored)) or 1.0)
            scored.append((_float32(cosine), row))
        scored.sort(key=lambda pair: (-pair[0], pair[1]["id"]))
        return [Hit(self._record(row, with_vectors=False), score) for score, row in scored[:limit]]

    async def search_text(self, text: str, *, where: Filter, limit: int) -> list[Hit]:
        await self._call("search_text")
        rows = self._matching(where)
        scores = BM25Index([tokens(row["content"]) for row in rows]).scores(tokens(text))
        scored = [(float(s), row) for s, row in zip(scores, rows, strict=True) if s > 0]
        scored.sort(key=lambda pair: (-pair[0], pair[1]["id"]))
        return [Hit(self._record(row, with_vectors=False), score) for score, row in scored[:limit]]

    async def query(
        self,
        where: Filter,
        *,
        limit: int = 1000,
        offset: int = 0,
        with_vectors: bool = False,
        strong: bool = False,
    ) -> list[MemoryRecord]:
        await self._call("query")
        if offset + limit > QUERY_WINDOW:
            raise StoreError(f"offset + limit over Milvus' window of {QUERY_WINDOW} rows")
        page = self._matching(where)[offset : offset + limit]
        return self._records(page, with_vectors=with_vectors)

    async def scan(
        self,
        where: Filter,
        *,
        with_vectors: bool = False,
        batch_size: int = 1000,
        strong: bool = False,
    ) -> list[MemoryRecord]:
        await self._call("scan")
        return self._records(self._matching(where), with_vectors=with_vectors)

    async def owners(self, where: Filter, *, limit: int = 1000) -> dict[str, str]:
        await self._call("owners")
        return {row["id"]: row["user_id"] for row in self._matching(where)[:limit]}

    async def count(self, where: Filter) -> int:
        await self._call("count")
        return len(self._matching(where))

    async def read_access(self, ids: Sequence[str]) -> dict[str, AccessStat]:
        await self._call("read_access")
        return {i: self.access[i] for i in ids if i in self.access}

    async def write_access(self, stats: Sequence[AccessStat]) -> None:
        await self._call("write_access")
        for stat in stats:
            self.access[stat.id] = stat


if TYPE_CHECKING:  # mypy holds each fake to the protocol the product code asks for
    from sidecar.llm import ChatModel
    from sidecar.memory.embedding.protocol import Embedder
    from sidecar.memory.store.protocol import Store

    _embedder: Embedder = FakeEmbedder()
    _llm: ChatModel = FakeLLM()
    _store: Store = FakeStore()
