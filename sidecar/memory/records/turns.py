"""A completed conversation turn and the facts extracted from it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from sidecar.memory.records.records import MemoryType, Origin


@dataclass(frozen=True, slots=True)
class Turn:
    """What the response path hands to the write pipeline."""

    user_id: str
    user_text: str = field(repr=False)
    assistant_text: str = field(repr=False)
    created_at: int  # epoch milliseconds: when the response completed
    group_ids: tuple[str, ...] = ()
    request_id: str = ""
    profile: str = "default"
    session_id: str = ""
    #: The index of the user's message in the request's ``messages`` (-1: unknown).
    message_index: int = -1
    #: The client's or dataset's ids of the turn's messages, when it gave any.
    refs: tuple[str, ...] = ()

    @property
    def turn_id(self) -> str:
        """The id a memory's provenance names this turn by: its request id, else one
        made from what it is (the same turn always gets the same id)."""
        if self.request_id:
            return self.request_id
        digest = hashlib.sha256(
            f"{self.user_id}\x00{self.created_at}\x00{self.user_text}".encode()
        ).hexdigest()
        return "turn-" + digest[:20]

    def origin(self) -> Origin:
        """This turn as a memory's provenance."""
        return Origin(
            self.turn_id,
            session=self.session_id,
            message=self.message_index,
            refs=self.refs,
            at=self.created_at,
        )


@dataclass(frozen=True, slots=True)
class Fact:
    """One self-contained statement about the user."""

    text: str = field(repr=False)
    memory_type: MemoryType = MemoryType.SEMANTIC
    importance: float = 0.5
    confidence: float = 1.0
    source: str = "llm"
    #: The topic the extractor filed the fact under ("" = none: the category tree
    #: places it by similarity). See :mod:`sidecar.memory.records.categories`.
    topic: str = ""
    #: The name the fact is about when it is about someone or something in the
    #: user's life rather than the user ("Ana lives in Porto."): the write path
    #: keeps it only when the user's own facts name them ("User's sister is Ana.").
    about: str = ""
    #: The fact as extracted, when the stored text differs from it (relative dates
    #: made absolute): judged against stored facts as said, as before the dates
    #: were resolved, so a date's year is not read as the fact's ("" = ``text``).
    as_said: str = field(default="", repr=False)
