"""Write-path datasets: turns that state facts, and what the store should end up with.

::

    {"name": str, "description": str,
     "paraphrase_groups": [{"fact_id", "user_id", "topic", "canonical", "turns": [str]}],
     "distinct_near_misses": [{"user_id", "a", "b"}],
     "contradictions": [{"user_id", "before", "after", "query",
                         "expect_current", "expect_superseded"}],
     "multi_user": [{"pair_id", "user_id", "turn"}]}

Every turn (``turns[]``, ``a``, ``b``, ``before``, ``after``, ``turn``) is one user
message. ``expect_current`` and ``expect_superseded`` are a keyword or a list of
keywords, all of which a memory must contain (case-insensitively) to match. User
ids are disjoint across the four sections. The format is documented in
docs/write-eval.md; every problem is an :class:`~sidecar.errors.InvalidInput` naming
the entry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from sidecar.errors import InvalidInput
from sidecar.memory.store.filters import validate_identifier

Text = Annotated[str, Field(min_length=1, max_length=4000)]


def _keywords(value: object) -> object:
    return [value] if isinstance(value, str) else value


Keywords = Annotated[list[Text], BeforeValidator(_keywords), Field(min_length=1)]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParaphraseGroup(_Entry):
    """Turns that all state one fact of one user."""

    fact_id: Text
    user_id: Text
    topic: str = ""
    canonical: Text
    turns: list[Text] = Field(min_length=1)


class NearMiss(_Entry):
    """Two different facts of one user that look alike; both stay true."""

    user_id: Text
    a: Text
    b: Text


class Contradiction(_Entry):
    """A fact, then the fact that replaces it; ``query`` is answered by the new one."""

    user_id: Text
    before: Text
    after: Text
    query: Text
    expect_current: Keywords
    expect_superseded: Keywords


class UserTurn(_Entry):
    """One user of a pair whose users say similar things."""

    pair_id: Text
    user_id: Text
    turn: Text


class WriteDataset(_Entry):
    name: str = ""
    description: str = ""
    paraphrase_groups: list[ParaphraseGroup] = []
    distinct_near_misses: list[NearMiss] = []
    contradictions: list[Contradiction] = []
    multi_user: list[UserTurn] = []

    def turns(self) -> list[tuple[str, str]]:
        """Every (user id, message) in the order they are sent: each section's turns in
        dataset order (a user's turns keep their order; a contradiction's ``before``
        comes before its ``after``)."""
        out: list[tuple[str, str]] = []
        for group in self.paraphrase_groups:
            out.extend((group.user_id, turn) for turn in group.turns)
        for pair in self.distinct_near_misses:
            out.extend([(pair.user_id, pair.a), (pair.user_id, pair.b)])
        out.extend((c.user_id, c.before) for c in self.contradictions)
        out.extend((c.user_id, c.after) for c in self.contradictions)
        out.extend((u.user_id, u.turn) for u in self.multi_user)
        return out

    def users(self) -> dict[str, str]:
        """Every user id and the section it belongs to."""
        sections = {
            "paraphrase_groups": [g.user_id for g in self.paraphrase_groups],
            "distinct_near_misses": [p.user_id for p in self.distinct_near_misses],
            "contradictions": [c.user_id for c in self.contradictions],
            "multi_user": [u.user_id for u in self.multi_user],
        }
        return {user: section for section, users in sections.items() for user in users}


def _check_users(data: WriteDataset) -> None:
    seen: dict[str, str] = {}
    sections = (
        ("paraphrase_groups", [g.user_id for g in data.paraphrase_groups]),
        ("distinct_near_misses", [p.user_id for p in data.distinct_near_misses]),
        ("contradictions", [c.user_id for c in data.contradictions]),
        ("multi_user", [u.user_id for u in data.multi_user]),
    )
    for section, users in sections:
        for index, user in enumerate(users):
            try:
                validate_identifier(user, "user id")
            except InvalidInput as exc:
                raise InvalidInput(f"{section}[{index}].user_id: {exc}") from None
            other = seen.setdefault(user, section)
            if other != section:
                raise InvalidInput(
                    f"{section}[{index}].user_id: {user!r} is also used in {other} "
                    "(user ids are disjoint across sections)"
                )
    pairs: dict[str, set[str]] = {}
    for entry in data.multi_user:
        pairs.setdefault(entry.pair_id, set()).add(entry.user_id)
    lonely = sorted(pair for pair, users in pairs.items() if len(users) < 2)
    if lonely:
        raise InvalidInput(f"multi_user: pairs with fewer than two users: {lonely}")


def parse_write_dataset(document: Any) -> WriteDataset:
    """Validate a decoded dataset document."""
    try:
        data = WriteDataset.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidInput(f"{where}: {first['msg']}") from None
    _check_users(data)
    return data


def load_write_dataset(path: str | Path) -> WriteDataset:
    """Read and validate the dataset at ``path``."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"cannot read the write-eval dataset {path}: {exc}") from None
    return parse_write_dataset(document)
