"""A completed conversation turn and the facts extracted from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from sidecar.memory.records.records import MemoryType


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
