"""The records the memory layer stores and returns."""

from __future__ import annotations

import hashlib
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from sidecar.memory.records.embeddings import Embedding


class Visibility(StrEnum):
    """Who may read a memory (see :func:`sidecar.memory.store.filters.scope_filter`)."""

    USER = "user"  # its owner only
    GROUP = "group"  # its owner and members of its group
    PUBLIC = "public"  # everyone


class MemoryType(StrEnum):
    SEMANTIC = "semantic"  # a fact about the user or their world
    PROCEDURAL = "procedural"  # how the user does things, preferred methods
    EPISODIC = "episodic"  # something that happened, anchored in time
    CONSTRAINT = "constraint"  # a rule the user set for the assistant


class NodeType(StrEnum):
    MEMORY = "memory"
    CATEGORY = "category"


class Status(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"  # replaced by a newer fact (``superseded_by``)
    ARCHIVED = "archived"  # given up by retention (the per-user cap)
    #: The same fact as another memory (``superseded_by``): dropped by the dedup
    #: judge or folded in by consolidation, kept as that memory's history.
    MERGED = "merged"
    #: Deleted (admin delete, forget, retention ``action: delete``): a hollow row — no
    #: text, links or categories — left so other workers' and replicas' caches drop
    #: the memory at their next delta refresh; purged later (:mod:`tombstones`).
    DELETED = "deleted"


#: ``source`` of a reload marker: a hollow ``deleted`` row per owner whose newer
#: ``updated_at`` tells other caches to reload that owner's rows in full
#: (:func:`sidecar.memory.store.tombstones.mark_for_reload`).
RELOAD_MARKER = "reload"


def as_vector(values: Any) -> Embedding:
    """``values`` (a numpy array, or any sequence of numbers) as the packed float32
    :class:`~sidecar.memory.records.embeddings.Embedding` a record holds (itself when
    it is one)."""
    return values if type(values) is Embedding else Embedding(values)


def now_ms() -> int:
    return int(time.time() * 1000)


def normalize_text(text: str) -> str:
    """The form used for exact-duplicate detection: NFKC, casefolded, single spaces."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(folded.split()).rstrip(".!")


def content_hash(text: str) -> str:
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()


def memory_id(user_id: str, text: str) -> str:
    """A deterministic id: the same fact for the same owner is the same row.

    Re-processing a turn after a crash therefore upserts instead of duplicating.
    """
    digest = hashlib.sha256(f"{user_id}\x00{normalize_text(text)}".encode())
    return "m" + digest.hexdigest()[:31]


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memories a request may read: the user, their groups, and public ones."""

    user_id: str
    group_ids: tuple[str, ...] = ()


#: At most this many origins per memory: the first and the latest are kept.
MAX_ORIGINS = 12


@dataclass(frozen=True, slots=True)
class Origin:
    """A turn a memory was made from (its provenance): a memory stated again, merged
    or updated keeps the union of its turns' origins."""

    #: The turn: its request id (Envoy's ``x-request-id``), or ``journal-<n>``.
    turn: str
    session: str = ""
    #: The index of the user's message in the request's ``messages``; -1 unknown.
    message: int = -1
    #: The client's or dataset's ids of the turn's messages, when it gave any.
    refs: tuple[str, ...] = ()
    #: When it was said (epoch ms).
    at: int = 0

    def as_json(self) -> dict[str, object]:
        data: dict[str, object] = {"turn": self.turn, "at": self.at}
        if self.session:
            data["session"] = self.session
        if self.message >= 0:
            data["message"] = self.message
        if self.refs:
            data["refs"] = list(self.refs)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Origin:
        """The inverse of :meth:`as_json`; ``ValueError`` for anything else."""
        refs = data.get("refs") or ()
        if not isinstance(refs, list | tuple):
            raise ValueError("origin refs is not a list")
        try:
            return cls(
                turn=str(data["turn"]),
                session=str(data.get("session", "")),
                message=int(data.get("message", -1)),
                refs=tuple(str(r) for r in refs),
                at=int(data.get("at", 0)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError("origin lacks its turn") from exc


def merge_origins(*groups: tuple[Origin, ...], cap: int = MAX_ORIGINS) -> tuple[Origin, ...]:
    """The union of ``groups`` (one entry per turn), oldest first; past ``cap`` the
    oldest and the latest are kept (where the fact was first said, and its news)."""
    seen: dict[str, Origin] = {}
    for group in groups:
        for origin in group:
            seen.setdefault(origin.turn, origin)
    ordered = sorted(seen.values(), key=lambda o: (o.at, o.turn))
    if len(ordered) <= cap:
        return tuple(ordered)
    return (ordered[0], *ordered[len(ordered) - cap + 1 :])


#: At most this many characters of what was said are kept with a memory.
MAX_EXCERPT_CHARS = 2_000
#: Between the excerpts of different turns of one memory.
EXCERPT_JOIN = "\n…\n"


def join_excerpts(*excerpts: str, cap: int = MAX_EXCERPT_CHARS) -> str:
    """Distinct excerpts, in order, joined and cut to ``cap`` characters (a later turn's
    words are dropped before an earlier one's are cut)."""
    kept: list[str] = []
    for excerpt in excerpts:
        for part in excerpt.split(EXCERPT_JOIN):
            part = part.strip()
            if part and part not in kept:
                kept.append(part)
    joined = ""
    for part in kept:
        candidate = f"{joined}{EXCERPT_JOIN}{part}" if joined else part
        if len(candidate) > cap:
            return joined or part[:cap]
        joined = candidate
    return joined


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One row of the store. ``content`` is the fact (the unit of dedup, supersession
    and the injected line); ``excerpt`` is what was said: the words of the turn(s) it
    was made from (L2), kept beside it as a second retrieval key and shown where the
    fact alone would lose a detail; ``origins`` are those turns."""

    id: str
    user_id: str
    content: str
    #: Packed float32 (:class:`Embedding`); any sequence of numbers given here is
    #: packed on construction.
    embedding: Embedding | None = field(default=None, repr=False)
    group_id: str = ""
    visibility: Visibility = Visibility.USER
    node_type: NodeType = NodeType.MEMORY
    memory_type: MemoryType = MemoryType.SEMANTIC
    status: Status = Status.ACTIVE
    category_id: str = ""
    parent_id: str = ""
    abstract: str = ""  # L0: one line
    overview: str = ""  # L1: a short paragraph
    related_ids: tuple[str, ...] = ()
    source: str = ""  # llm | heuristic | admin | import | eval
    session_id: str = ""
    importance: float = 0.5
    confidence: float = 1.0
    access_count: int = 0
    created_at: int = 0  # epoch milliseconds
    updated_at: int = 0
    accessed_at: int = 0
    superseded_by: str = ""
    content_hash: str = ""
    excerpt: str = field(default="", repr=False)
    origins: tuple[Origin, ...] = ()

    def __post_init__(self) -> None:
        embedding = self.embedding
        if embedding is not None and type(embedding) is not Embedding:
            object.__setattr__(self, "embedding", Embedding(embedding))

    def __repr__(self) -> str:  # never print memory text
        return f"MemoryRecord(id={self.id!r}, user_id={self.user_id!r}, status={self.status})"

    def with_changes(self, **changes: object) -> MemoryRecord:
        """A copy with ``changes``; an unknown field name is a ``TypeError``, as with
        :func:`dataclasses.replace`, which is slower than this positional construction
        (an access flush copies thousands of cached rows on the event loop)."""
        unknown = changes.keys() - _RECORD_FIELD_SET
        if unknown:
            raise TypeError(f"MemoryRecord has no field {sorted(unknown)[0]!r}")
        values = [
            changes[name] if name in changes else getattr(self, name) for name in _RECORD_FIELDS
        ]
        return MemoryRecord(*values)  # type: ignore[arg-type]

    def said_in(self, origins: tuple[Origin, ...], *excerpts: str) -> MemoryRecord:
        """This memory said again in the turns ``origins``, in the words ``excerpts``:
        the union of origins, those words after its own (itself when nothing
        changes)."""
        merged = merge_origins(self.origins, origins)
        excerpt = join_excerpts(self.excerpt, *excerpts)
        if merged == self.origins and excerpt == self.excerpt:
            return self
        return self.with_changes(origins=merged, excerpt=excerpt)

    def absorbing(self, *others: MemoryRecord) -> MemoryRecord:
        """This memory with the provenance of ``others`` (the same fact said in other
        turns): the union of origins, their excerpts after its own."""
        return self.said_in(
            tuple(o for r in others for o in r.origins), *(r.excerpt for r in others)
        )


#: MemoryRecord's fields in declaration order (its positional parameters).
_RECORD_FIELDS = tuple(f.name for f in fields(MemoryRecord))
_RECORD_FIELD_SET = frozenset(_RECORD_FIELDS)


@dataclass(frozen=True, slots=True)
class AccessStat:
    """How often a memory was injected, and when last: its row in the store's access
    collection (:mod:`sidecar.memory.store.milvus`), which overrides the memory row's own
    ``access_count`` / ``accessed_at`` when higher."""

    id: str
    user_id: str
    count: int
    at: int  # epoch ms of the latest injection


def merge_access(record: MemoryRecord, stat: AccessStat | None) -> MemoryRecord:
    """``record`` with ``stat``'s count and time where those are higher (``record``
    itself when nothing changes)."""
    if stat is None or (stat.count <= record.access_count and stat.at <= record.accessed_at):
        return record
    return record.with_changes(
        access_count=max(record.access_count, stat.count),
        accessed_at=max(record.accessed_at, stat.at),
    )


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved memory and its score (higher is better; cosine for ``dense``).

    ``signals`` holds the per-signal evidence (``cosine``, ``bm25``, ``lexical`` —
    BM25 as a share of the query's best possible score — ``ngram``, ``fused``...);
    ``via`` says how it was found: ``direct``, ``link``, ``associative``.
    """

    record: MemoryRecord
    score: float
    signals: Mapping[str, float] = field(default_factory=dict)
    via: str = "direct"
