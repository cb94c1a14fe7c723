"""What an admin token may do: the users it manages and what it may share.

A memory with ``visibility: group`` or ``public`` is injected into *other* users'
prompts, under a header that presents it as what they were told. So sharing is a
privilege, not a field any token may set:

- a token for all users (``admin.token``, or a scoped token with ``users: "*"``)
  may write any visibility;
- any other token may write private memories (``visibility: user``), and
  ``visibility: group`` only for a group named in its ``share_groups``; never
  ``public``;
- the same holds for changing an existing memory: a token may not turn a private
  memory into a shared one beyond its rights, nor change (text, type, importance,
  session) a memory already shared beyond them — that too would write into other
  users' prompts. Deleting one, or forgetting its owner, stays allowed: the
  owner's right to remove never depends on who shared.

The refusal is :class:`SharingRefused` (HTTP 403 ``sharing_forbidden``), naming the
rule. The turn writer never changes a shared memory either (it judges new facts
against the owner's private ones only), so chat cannot edit what another tenant sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Literal

from sidecar.errors import SidecarError
from sidecar.memory.records.records import Visibility


class SharingRefused(SidecarError):
    """The token may not share a memory this way."""


@dataclass(frozen=True, slots=True)
class Grant:
    """What an accepted token may do."""

    name: str
    users: Literal["*"] | tuple[str, ...]
    #: Groups the token may share with (all users: any group).
    share_groups: tuple[str, ...] = field(default=())

    @property
    def all_users(self) -> bool:
        return self.users == "*"

    def allows(self, user: str) -> bool:
        return self.users == "*" or any(fnmatchcase(user, pattern) for pattern in self.users)

    def refusal(self, visibility: Visibility | str, group_id: str) -> str | None:
        """Why this token may not hold a memory with ``visibility`` in ``group_id``
        (None: it may)."""
        if self.all_users or visibility == Visibility.USER:
            return None
        if visibility == Visibility.PUBLIC:
            return (
                "only a token for all users (users: '*') may make a memory public: "
                "it is injected into every user's prompt"
            )
        if group_id in self.share_groups:
            return None
        return (
            f"this token may not share memories with group {group_id!r}: a token that is "
            "not for all users shares only with the groups its share_groups names"
        )

    def check(self, visibility: Visibility | str, group_id: str) -> None:
        """:class:`SharingRefused` unless this token may hold such a memory."""
        reason = self.refusal(visibility, group_id)
        if reason is not None:
            raise SharingRefused(reason)


#: Every user, any visibility: the CLI on the store itself, an ``admin.token``.
ALL_USERS = Grant("admin", "*")
