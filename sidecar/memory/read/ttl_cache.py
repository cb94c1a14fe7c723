"""A bounded least-recently-used cache whose entries expire, keyed by digests.

Callers key it with :func:`digest_key`, so a cache never holds the text (a user's
query, a conversation) it was keyed by. One per owner object, used from one event
loop; nothing here is shared between instances.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


def digest_key(*parts: str) -> str:
    """A SHA-256 over ``parts``, each prefixed with its length, so no two sequences
    of parts share a key (``("ab", "c")`` and ``("a", "bc")`` differ, and so do
    parts that contain NUL). Lone surrogates are hashed as they are."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


class TtlCache(Generic[V]):
    """At most ``max_entries`` values (the least recently used go first), each for
    ``ttl_s`` seconds after it was put. Both are given per :meth:`put`, so one cache
    can serve settings that differ per profile. An entry may name its ``owner`` (a
    digest too), whose entries :meth:`drop_owner` removes at once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[str, tuple[float, str, V]] = OrderedDict()
        self._clock = clock

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, _owner, value = entry
        if expires <= self._clock():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: str, value: V, *, ttl_s: float, max_entries: int, owner: str = "") -> None:
        if ttl_s <= 0 or max_entries < 1:
            return
        self._entries[key] = (self._clock() + ttl_s, owner, value)
        self._entries.move_to_end(key)
        while len(self._entries) > max_entries:
            self._entries.popitem(last=False)

    def drop_owner(self, owner: str) -> int:
        """Remove every entry of ``owner`` (one pass over the cache); how many."""
        keys = [key for key, (_, have, _) in self._entries.items() if have == owner]
        for key in keys:
            del self._entries[key]
        return len(keys)

    def clear(self) -> None:
        self._entries.clear()
