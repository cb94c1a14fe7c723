"""Why was this injected? The last injections of each user, kept in memory.

Opt-in per route profile (``injection.explain_last``, 0 = off): private data, so it
is never logged and never written to disk. Each entry says what was searched (the
message as searched and its rewrite), which memories went into the block and, for
each, its score, how it was found (``direct``, ``link``, ``associative``, ``deep``)
and the signals that gave the score (cosine, BM25, n-gram, link support, rerank…).
Memory texts are not copied here: the console reads them from the store, so a
deleted memory is gone from its explanations too. Forgetting a user drops their
entries (the corpus cache's user observer, like the query caches).

The log is per process: with ``server.workers`` > 1 each worker keeps the
injections it made itself.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from types import MappingProxyType

from sidecar.memory.records.records import Hit

#: Longest query (and rewrite) kept per entry, in characters: an entry stays about
#: 1 KB whatever the message, so the log's memory is bounded by users × entries.
MAX_KEPT_CHARS = 500


@dataclass(frozen=True, slots=True)
class InjectedMemory:
    """One memory of an injected block and why it was there."""

    id: str
    #: Whose memory it is (another owner's when it was shared with the user).
    owner: str
    visibility: str
    score: float
    via: str
    signals: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, hit: Hit) -> InjectedMemory:
        return cls(
            id=hit.record.id,
            owner=hit.record.user_id,
            visibility=str(hit.record.visibility),
            score=float(hit.score),
            via=hit.via,
            signals=MappingProxyType({k: float(v) for k, v in hit.signals.items()}),
        )


@dataclass(frozen=True, slots=True)
class Injection:
    """One request's injected block, explained."""

    request_id: str
    at_ms: int
    profile: str
    #: The latest user message as it was searched (a long one cut to its question),
    #: at most ``MAX_KEPT_CHARS``.
    query: str
    #: The self-contained query the rewriter made of a follow-up (None: unchanged).
    rewritten: str | None
    memories: tuple[InjectedMemory, ...]
    #: The groups the request read as (whose group memories it could see).
    groups: tuple[str, ...] = ()
    #: The deep search's decision (``x-memory-deep-search`` form), when it ran.
    deep: str | None = None


class InjectionLog:
    """The last injections per user, newest first; at most ``max_users`` users (the
    least recently injected go first). Safe to use from several threads."""

    def __init__(self, max_users: int) -> None:
        self._max_users = max(1, max_users)
        self._users: OrderedDict[str, deque[Injection]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, user_id: str, injection: Injection, keep: int) -> None:
        """Keep ``injection`` among ``user_id``'s last ``keep`` (0: nothing kept)."""
        if keep <= 0:
            return
        with self._lock:
            entries = self._users.get(user_id)
            if entries is None or entries.maxlen != keep:  # newest first: keep the head
                entries = deque(islice(entries or (), keep), maxlen=keep)
                self._users[user_id] = entries
            entries.appendleft(injection)
            self._users.move_to_end(user_id)
            while len(self._users) > self._max_users:
                self._users.popitem(last=False)

    def recent(self, user_id: str) -> list[Injection]:
        """``user_id``'s kept injections, newest first."""
        with self._lock:
            return list(self._users.get(user_id, ()))

    def find(self, user_id: str, request_id: str) -> Injection | None:
        """``user_id``'s newest kept injection of ``request_id`` (None: not kept)."""
        for injection in self.recent(user_id):
            if injection.request_id == request_id:
                return injection
        return None

    def forget_user(self, user_id: str) -> int:
        """Drop ``user_id``'s entries; how many."""
        with self._lock:
            entries = self._users.pop(user_id, None)
        return len(entries) if entries else 0

    def __len__(self) -> int:
        with self._lock:
            return sum(len(entries) for entries in self._users.values())


def explain(
    *,
    request_id: str,
    at_ms: int,
    profile: str,
    query: str,
    rewritten: str | None,
    hits: Sequence[Hit],
    groups: tuple[str, ...] = (),
    deep: str | None = None,
) -> Injection:
    """The :class:`Injection` of a block made of ``hits``."""
    return Injection(
        request_id=request_id,
        at_ms=at_ms,
        profile=profile,
        query=query[:MAX_KEPT_CHARS],
        rewritten=rewritten[:MAX_KEPT_CHARS] if rewritten is not None else None,
        memories=tuple(InjectedMemory.of(hit) for hit in hits),
        groups=groups,
        deep=deep,
    )
