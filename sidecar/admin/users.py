"""Who has memories: the user ids that own memory rows, by id, a page at a time, with
their counts (active, any status) and their last change.

The store has no ``DISTINCT`` or ``GROUP BY``, so a page is one pass over the owner,
status and update time of every memory row — no text, no vectors — read a store page
at a time (:meth:`~sidecar.memory.store.milvus.MemoryStore.sweep`). The tally keeps
only users that could be on the page: ids after ``after``, matching the search and the
token's scope, and never more than twice the page's size (the smallest ids win; once
it trims, larger ids are skipped). So what a listing holds is bounded by its page
size, whatever the number of users or rows; its cost is that pass.

The search is a case-insensitive substring of the id, matched here over the ids read
(no filter expression is built from it). Ids sort by code point, as UTF-8 bytes do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.admin.models import UsersQuery
from sidecar.memory.records.records import NodeType, Status
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore

#: What the pass reads of each memory row.
FIELDS = ("user_id", "status", "updated_at")


@dataclass(frozen=True, slots=True)
class UserSummary:
    user: str
    #: Active memories.
    active: int
    #: Memories of any status but deleted.
    memories: int
    #: The latest ``updated_at`` of those memories (ms since the epoch).
    updated_at: int


@dataclass(frozen=True, slots=True)
class UserPage:
    items: list[UserSummary]
    q: str
    after: str | None
    limit: int
    #: The next page's ``after`` (None: this page is the last).
    next_after: str | None


class UserTally:
    """Memory rows in, a page of users out (see the module docstring)."""

    def __init__(self, *, after: str, limit: int, wanted: Callable[[str], bool]) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        self._after = after
        self._limit = limit
        self._wanted = wanted
        #: user -> [active, memories, updated_at]
        self._users: dict[str, list[int]] = {}
        #: Ids above it cannot be on the page (None: no trim yet).
        self._ceiling: str | None = None
        self.rows = 0

    @property
    def held(self) -> int:
        """How many users are kept now (at most twice the limit)."""
        return len(self._users)

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Count one page of the store's rows (``FIELDS`` of memory rows)."""
        for row in rows:
            self.rows += 1
            user = str(row["user_id"])
            if user <= self._after or (self._ceiling is not None and user > self._ceiling):
                continue
            counts = self._users.get(user)
            if counts is None:
                if not self._wanted(user):
                    continue
                counts = self._users[user] = [0, 0, 0]
            counts[0] += int(row["status"] == Status.ACTIVE)
            counts[1] += 1
            counts[2] = max(counts[2], int(row["updated_at"]))
            if len(self._users) > 2 * self._limit:
                self._trim()

    def _trim(self) -> None:
        kept = sorted(self._users)[: self._limit]
        self._users = {user: self._users[user] for user in kept}
        self._ceiling = kept[-1]

    def page(self, q: str = "") -> UserPage:
        more = self._ceiling is not None or len(self._users) > self._limit
        if len(self._users) > self._limit:
            self._trim()
        items = [UserSummary(user, *self._users[user]) for user in sorted(self._users)]
        following = items[-1].user if more and items else None
        return UserPage(items, q, self._after or None, self._limit, following)


async def list_users(
    store: MemoryStore, query: UsersQuery, allows: Callable[[str], bool]
) -> UserPage:
    """One page of the users that own memories and that ``allows`` lets through."""
    needle = query.q.casefold()

    def wanted(user: str) -> bool:
        return needle in user.casefold() and allows(user)

    tally = UserTally(after=query.after or "", limit=query.limit, wanted=wanted)
    await store.sweep(build_filter(node_type=NodeType.MEMORY, status=None), FIELDS, tally.add)
    return tally.page(query.q)


def users_json(page: UserPage) -> dict[str, Any]:
    """The API's and the CLI's form of a page (the OpenAPI schema ``UserList``)."""
    return {
        "q": page.q,
        "after": page.after,
        "limit": page.limit,
        "next_after": page.next_after,
        "items": [
            {"user": u.user, "active": u.active, "memories": u.memories, "updated_at": u.updated_at}
            for u in page.items
        ],
    }
