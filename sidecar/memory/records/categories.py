"""Category rows: deterministic ids, the "general" inbox, named topics, blank rows,
and the comparison ``evolve`` uses to write only what changed.

A *named topic* is a category whose name came with the memory (the extraction
LLM's ``topic``, an import's ``topic``): its row has ``source="topic"`` and an id
derived from the owner and the normalised name, so every writer files a topic's
memories under the same row. ``evolve`` may split a big topic into subcategories
but never merges two topics or renames one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from sidecar.memory.records.records import (
    MemoryRecord,
    NodeType,
    Visibility,
    as_vector,
    content_hash,
)
from sidecar.memory.records.vectors import Vector

GENERAL_NAME = "general"
TOPIC_SOURCE = "topic"
#: Categories of the built-in taxonomy (:mod:`sidecar.memory.write.tree.taxonomy`): named
#: like topics and kept like them by ``evolve``, but not retrieval evidence (as
#: evidence they cost LoCoMo recall, as clusters do; docs/design/named-topics.md).
TAXONOMY_SOURCE = "taxonomy"
#: Longest topic name kept (characters, after normalising).
MAX_TOPIC_CHARS = 80


def category_id(owner: str, parent_id: str, name: str) -> str:
    """The id of the category ``name`` under ``parent_id`` ("" = top level)."""
    digest = hashlib.sha256(f"{owner}\x00{parent_id}\x00{name}".encode())
    return "c" + digest.hexdigest()[:31]


def general_id(owner: str) -> str:
    """The owner's "general" inbox (a seed no keyword name can produce)."""
    return category_id(owner, "", "\x00" + GENERAL_NAME)


def general_node(owner: str, vector: Vector, now: int) -> MemoryRecord:
    """A fresh "general" category row (``evolve`` refreshes its summary later)."""
    return _fresh_node(owner, general_id(owner), GENERAL_NAME, vector, now, "hierarchy")


def _fresh_node(
    owner: str, cid: str, name: str, vector: Vector, now: int, source: str
) -> MemoryRecord:
    text = summary_text(name, (), ())
    return MemoryRecord(
        id=cid,
        user_id=owner,
        content=text,
        embedding=as_vector(vector),
        node_type=NodeType.CATEGORY,
        visibility=Visibility.USER,
        abstract=name,
        overview=text,
        source=source,
        created_at=now,
        updated_at=now,
        content_hash=content_hash(text),
    )


def topic_name(raw: str) -> str:
    """The display form of a topic name: single spaces, at most ``MAX_TOPIC_CHARS``
    ("" when nothing is left)."""
    return " ".join(raw.split())[:MAX_TOPIC_CHARS].strip()


def topic_id(owner: str, name: str) -> str:
    """The id of ``owner``'s topic ``name`` (case and spacing do not matter; a seed no
    keyword-named category can produce)."""
    return category_id(owner, "", "\x01" + topic_name(name).casefold())


def taxonomy_id(owner: str, name: str) -> str:
    """The id of ``owner``'s taxonomy category ``name`` (apart from a topic of the same
    name: a seed neither topics nor keyword names produce)."""
    return category_id(owner, "", "\x02" + topic_name(name).casefold())


def is_topic(record: MemoryRecord | None) -> bool:
    """A named topic (the extraction LLM's, an import's): retrieval evidence."""
    return record is not None and record.source == TOPIC_SOURCE


def is_named(record: MemoryRecord | None) -> bool:
    """A category whose name came with its memories (a topic or the taxonomy's):
    ``evolve`` never merges two of them or renames one."""
    return record is not None and record.source in (TOPIC_SOURCE, TAXONOMY_SOURCE)


def topic_node(owner: str, name: str, vector: Vector, now: int) -> MemoryRecord:
    """A fresh topic category row (``evolve`` refreshes its summary and centroid)."""
    return _fresh_node(owner, topic_id(owner, name), name, vector, now, TOPIC_SOURCE)


def taxonomy_node(owner: str, name: str, vector: Vector, now: int) -> MemoryRecord:
    """A fresh taxonomy category row."""
    return _fresh_node(owner, taxonomy_id(owner, name), name, vector, now, TAXONOMY_SOURCE)


def leaves_under(root: str, children: Mapping[str, list[str]]) -> list[str]:
    """The leaf categories below ``root``, sorted (none when ``root`` is itself a
    leaf); ``children`` maps a category id to its subcategories' ids. Cycles in
    stored rows are tolerated (each category is visited once)."""
    leaves: list[str] = []
    stack = list(children.get(root, ()))
    seen = {root}
    while stack:
        cid = stack.pop()
        if cid in seen:
            continue
        seen.add(cid)
        below = children.get(cid, [])
        if below:
            stack.extend(below)
        else:
            leaves.append(cid)
    return sorted(leaves)


def blank_category(owner: str, cid: str, now: int) -> MemoryRecord:
    return MemoryRecord(
        id=cid,
        user_id=owner,
        content="",
        node_type=NodeType.CATEGORY,
        visibility=Visibility.USER,
        source="hierarchy",
        created_at=now,
    )


def differs(old: MemoryRecord, new: MemoryRecord) -> bool:
    fields = ("content", "abstract", "overview", "parent_id", "status", "superseded_by")
    if any(getattr(old, f) != getattr(new, f) for f in fields):
        return True
    if old.embedding is None or new.embedding is None:
        return old.embedding != new.embedding
    return not np.allclose(old.embedding, new.embedding, atol=1e-5)


def summary_text(name: str, keywords: Sequence[str], examples: Sequence[str]) -> str:
    """A category's summary (its content and L1 overview)."""
    text = f"Category: {name}."
    if keywords:
        text += f" Covers: {', '.join(keywords)}."
    if examples:
        text += " Examples: " + "; ".join(" ".join(e.split()).rstrip(" .") for e in examples) + "."
    return text
