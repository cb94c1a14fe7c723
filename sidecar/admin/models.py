"""What the memory admin API and CLI accept and return.

The request models validate everything an operator sends (unknown fields are
errors, ids go through :func:`~sidecar.memory.store.filters.validate_identifier`);
:func:`memory_json` is the one JSON form of a stored row — the API's responses,
the CLI's output and every line of an export (:class:`MemoryLine` reads it back).
The OpenAPI document is built from these models.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sidecar.config import StrategyName
from sidecar.errors import InvalidIdentifier, InvalidInput
from sidecar.memory.records.categories import topic_name
from sidecar.memory.records.records import (
    MAX_EXCERPT_CHARS,
    MAX_ORIGINS,
    MemoryRecord,
    MemoryType,
    NodeType,
    Origin,
    Status,
    Visibility,
)
from sidecar.memory.store.filters import validate_identifier
from sidecar.memory.store.schema import ID_BYTES, IDENT_BYTES, MAX_RELATED

MAX_PAGE = 1000
MAX_QUERY_CHARS = 2000

ModelT = TypeVar("ModelT", bound=BaseModel)


class ValidationFailed(InvalidInput):
    """Rejected input, with every problem as ``(path, message)``."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{path}: {message}" for path, message in errors))


def validation_errors(exc: ValidationError, prefix: str = "") -> list[tuple[str, str]]:
    """pydantic's errors as ``(dotted path, message)``, the path under ``prefix``."""
    found = []
    for err in exc.errors():
        parts = [prefix] if prefix else []
        parts.extend(str(part) for part in err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        found.append((".".join(parts) or "<root>", message))
    return found


def parse(model: type[ModelT], data: Any, prefix: str) -> ModelT:
    """``data`` validated as ``model``; :class:`ValidationFailed` with paths under
    ``prefix`` otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValidationFailed(validation_errors(exc, prefix)) from None


def _identifier(value: str, kind: str) -> str:
    try:
        return validate_identifier(value, kind)
    except InvalidIdentifier as exc:
        raise ValueError(str(exc)) from None


def _optional_identifier(value: str | None, kind: str) -> str | None:
    return value if value is None or value == "" else _identifier(value, kind)


def row_id(value: str, kind: str = "id") -> str:
    """A memory or category id: a safe identifier of at most 64 bytes."""
    _identifier(value, kind)
    if len(value.encode("utf-8")) > ID_BYTES:
        raise ValueError(f"{kind} is longer than {ID_BYTES} bytes")
    return value


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class MemoryInput(_Request):
    """A new memory (``POST .../memories``)."""

    content: str = Field(min_length=1, max_length=8000, description="The memory text.")
    memory_type: MemoryType = MemoryType.SEMANTIC
    importance: float = Field(default=0.5, ge=0, le=1)
    confidence: float = Field(default=1.0, ge=0, le=1)
    session_id: str = Field(default="", description="Groups memories of one conversation.")
    visibility: Visibility = Field(
        default=Visibility.USER,
        description="user: its owner only; group: also the members of group_id; public: all.",
    )
    group_id: str = ""
    topic: str = Field(
        default="",
        max_length=200,
        description="File the memory under the owner's named topic of this name (created "
        "on demand); empty: the category tree places it by similarity.",
    )

    @field_validator("content")
    @classmethod
    def _content(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content is blank")
        return value.strip()

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str) -> str:
        return topic_name(value)

    @field_validator("session_id", "group_id")
    @classmethod
    def _ids(cls, value: str) -> str:
        return _optional_identifier(value, "id") or ""

    @model_validator(mode="after")
    def _group(self) -> MemoryInput:
        if self.visibility == Visibility.GROUP and not self.group_id:
            raise ValueError("visibility 'group' needs a group_id")
        return self


class MemoryPatch(_Request):
    """Changes to a memory (``PATCH .../memories/{id}``); omitted fields stay.
    A new ``content`` is embedded again and re-linked."""

    content: str | None = Field(default=None, min_length=1, max_length=8000)
    memory_type: MemoryType | None = None
    importance: float | None = Field(default=None, ge=0, le=1)
    confidence: float | None = Field(default=None, ge=0, le=1)
    session_id: str | None = None
    visibility: Visibility | None = None
    group_id: str | None = None

    @field_validator("content")
    @classmethod
    def _content(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("content is blank")
        return None if value is None else value.strip()

    @field_validator("session_id", "group_id")
    @classmethod
    def _ids(cls, value: str | None) -> str | None:
        return _optional_identifier(value, "id")

    @model_validator(mode="after")
    def _something(self) -> MemoryPatch:
        if not self.changes():
            raise ValueError("nothing to update: give at least one field (null means unchanged)")
        return self

    def changes(self) -> dict[str, Any]:
        """The fields to change (given, and not null)."""
        return {
            name: getattr(self, name)
            for name in sorted(self.model_fields_set)
            if getattr(self, name) is not None
        }


StatusFilter = Literal["active", "superseded", "archived", "merged", "all"]
#: The status filters the API, the CLI and the console offer (``all``: any status).
STATUS_FILTERS: tuple[str, ...] = get_args(StatusFilter)


class ListQuery(_Request):
    """Paging and filters of ``GET .../memories``."""

    limit: int = Field(default=50, ge=1, le=MAX_PAGE)
    offset: int = Field(default=0, ge=0)
    #: ``all``: any status.
    status: StatusFilter = "active"
    memory_type: MemoryType | None = None
    visibility: Visibility | None = None
    session_id: str | None = None
    category_id: str | None = None
    #: By creation time: ``desc`` newest first.
    order: Literal["asc", "desc"] = "desc"

    @field_validator("session_id", "category_id")
    @classmethod
    def _ids(cls, value: str | None) -> str | None:
        return _optional_identifier(value, "id")

    @field_validator("status")
    @classmethod
    def _status(cls, value: str) -> str:
        if value != "all" and value not in {s.value for s in Status}:
            raise ValueError(f"unknown status {value!r}")
        return value


class SearchQuery(_Request):
    """``GET .../search``: what retrieval finds among the user's own memories."""

    q: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    top_k: int = Field(default=10, ge=1, le=100)
    #: Default: the default profile's strategy.
    strategy: StrategyName | None = None


class UsersQuery(_Request):
    """``GET /v1/admin/users``: the user ids that own memories, by id, a page at a time."""

    q: str = Field(
        default="",
        max_length=256,
        description="Only ids that contain this (any case); empty: every user.",
    )
    after: str | None = Field(
        default=None, description="The page after this id (the last page's next_after)."
    )
    limit: int = Field(default=50, ge=1, le=MAX_PAGE)

    @field_validator("q")
    @classmethod
    def _q(cls, value: str) -> str:
        return value.strip() and _identifier(value.strip(), "search")

    @field_validator("after")
    @classmethod
    def _after(cls, value: str | None) -> str | None:
        return _optional_identifier(value, "user id") or None


class ExportQuery(_Request):
    #: Include each row's embedding (import then needs no model call).
    embeddings: bool = False


class ImportQuery(_Request):
    #: Embed every row again, ignoring vectors in the file.
    reembed: bool = False


class OriginLine(BaseModel):
    """A turn a memory was made from (its provenance)."""

    model_config = ConfigDict(extra="forbid")

    turn: str = Field(max_length=IDENT_BYTES, description="The turn's request id.")
    session: str = Field(default="", max_length=IDENT_BYTES)
    message: int = Field(
        default=-1, ge=-1, description="The user's message's index in the request (-1: unknown)."
    )
    refs: tuple[str, ...] = Field(
        default=(),
        max_length=8,
        description="The client's or dataset's ids of the turn's messages.",
    )
    at: int = Field(default=0, ge=0, description="When it was said (epoch milliseconds).")

    def origin(self) -> Origin:
        return Origin(self.turn, self.session, self.message, self.refs, self.at)


class MemoryLine(_Request):
    """One line of an export / import file (the JSON form of a stored row).

    ``id`` and ``user_id`` may be omitted (a memory's id is then derived from its
    owner and text); a ``user_id`` must be the importing user's. Rows without an
    ``embedding`` (or from another model or dimension) are embedded on import."""

    id: str | None = None
    user_id: str | None = None
    content: str = Field(max_length=16_000)
    node_type: NodeType = NodeType.MEMORY
    memory_type: MemoryType = MemoryType.SEMANTIC
    status: Status = Status.ACTIVE
    visibility: Visibility = Visibility.USER
    group_id: str = ""
    category_id: str = ""
    parent_id: str = ""
    abstract: str = Field(default="", max_length=1000)
    overview: str = Field(default="", max_length=4000)
    related_ids: tuple[str, ...] = Field(default=(), max_length=MAX_RELATED)
    source: str = Field(default="import", max_length=32)
    session_id: str = ""
    importance: float = Field(default=0.5, ge=0, le=1)
    confidence: float = Field(default=1.0, ge=0, le=1)
    access_count: int = Field(default=0, ge=0)
    created_at: int | None = Field(default=None, ge=0)
    updated_at: int | None = Field(default=None, ge=0)
    accessed_at: int = Field(default=0, ge=0)
    superseded_by: str = ""
    content_hash: str = Field(default="", max_length=ID_BYTES)
    #: What was said: the words of the turns the memory was made from.
    excerpt: str = Field(default="", max_length=MAX_EXCERPT_CHARS)
    #: The turns it was made from.
    provenance: tuple[OriginLine, ...] = Field(default=(), max_length=MAX_ORIGINS)
    embedding: tuple[float, ...] | None = None
    #: The model the embedding came from; another than the configured one means
    #: the row is embedded again.
    embedding_model: str | None = None

    @field_validator("id")
    @classmethod
    def _id(cls, value: str | None) -> str | None:
        return None if value is None else row_id(value)

    @field_validator("category_id", "parent_id", "superseded_by")
    @classmethod
    def _row_ids(cls, value: str) -> str:
        return value and row_id(value)

    @field_validator("status")
    @classmethod
    def _not_deleted(cls, value: Status) -> Status:
        if value == Status.DELETED:  # a tombstone, never exported: nothing to import
            raise ValueError("a deleted memory cannot be imported")
        return value

    @field_validator("group_id", "session_id")
    @classmethod
    def _ids(cls, value: str) -> str:
        return _optional_identifier(value, "id") or ""

    @field_validator("related_ids")
    @classmethod
    def _related(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(row_id(item, "related id") for item in value)

    @model_validator(mode="after")
    def _consistent(self) -> MemoryLine:
        if self.node_type == NodeType.MEMORY and not self.content.strip():
            raise ValueError("a memory's content is blank")
        if self.node_type == NodeType.CATEGORY and self.id is None:
            raise ValueError("a category row needs its id")
        if self.visibility == Visibility.GROUP and not self.group_id:
            raise ValueError("visibility 'group' needs a group_id")
        return self


def memory_json(
    record: MemoryRecord, *, embedding: bool = False, model: str | None = None
) -> dict[str, Any]:
    """A stored row as JSON (the embedding only when asked for)."""
    out: dict[str, Any] = {
        "id": record.id,
        "user_id": record.user_id,
        "content": record.content,
        "node_type": str(record.node_type),
        "memory_type": str(record.memory_type),
        "status": str(record.status),
        "visibility": str(record.visibility),
        "group_id": record.group_id,
        "category_id": record.category_id,
        "parent_id": record.parent_id,
        "abstract": record.abstract,
        "overview": record.overview,
        "related_ids": list(record.related_ids),
        "source": record.source,
        "session_id": record.session_id,
        "importance": round(float(record.importance), 6),
        "confidence": round(float(record.confidence), 6),
        "access_count": record.access_count,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "accessed_at": record.accessed_at,
        "superseded_by": record.superseded_by,
        "content_hash": record.content_hash,
        "excerpt": record.excerpt,
        "provenance": [origin.as_json() for origin in record.origins],
    }
    if embedding and record.embedding is not None:
        out["embedding"] = record.embedding.tolist()
        if model is not None:
            out["embedding_model"] = model
    return out


class Memory(BaseModel):
    """A stored memory as the API returns it (the schema of :func:`memory_json`)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    user_id: str
    content: str
    node_type: NodeType
    memory_type: MemoryType
    status: Status
    visibility: Visibility
    group_id: str
    category_id: str
    parent_id: str
    abstract: str
    overview: str
    related_ids: list[str]
    source: str
    session_id: str
    importance: float
    confidence: float
    access_count: int
    created_at: int = Field(description="Epoch milliseconds.")
    updated_at: int
    accessed_at: int
    superseded_by: str = Field(description="The memory that replaced this one ('' if none).")
    content_hash: str
    excerpt: str = Field(
        default="", description="What was said: the words of the turns it was made from."
    )
    provenance: list[OriginLine] = Field(
        default_factory=list, description="The turns it was made from, oldest first."
    )


class UserEntry(BaseModel):
    """A user that owns memories, as ``GET /v1/admin/users`` lists them."""

    model_config = ConfigDict(extra="forbid")

    user: str
    active: int = Field(description="Active memories.")
    memories: int = Field(description="Memories of any status (deleted ones aside).")
    updated_at: int = Field(description="The last change to one of them (epoch ms).")


class UserList(BaseModel):
    """A page of users, by id."""

    model_config = ConfigDict(extra="forbid")

    q: str
    after: str | None
    limit: int
    next_after: str | None = Field(
        description="The next page's after (null: this page is the last)."
    )
    items: list[UserEntry]
