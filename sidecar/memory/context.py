"""Context assembly: turning retrieved memories into the block injected into the
system prompt.

The block format (documented in the README)::

    <memory>
    Things the user told you in earlier conversations, most relevant first. Use
    them when they help; the user's current message takes precedence over them.
    - User lives in Berlin. (2026-11-20)
    - ...
    </memory>

Memories are deduplicated by normalised text, kept in ranked order, and added
until the character budget is spent; the order is deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sidecar.memory.records import Hit, normalize_text

HEADER = (
    "Things the user told you in earlier conversations, most relevant first. Use them "
    "when they help; the user's current message takes precedence over them."
)


@dataclass(frozen=True, slots=True)
class MemoryContext:
    """What will be injected: the block and the memories in it."""

    text: str
    hits: tuple[Hit, ...]

    @property
    def count(self) -> int:
        return len(self.hits)


_TAG = re.compile(r"<\s*/?\s*memory\b[^>]*>", re.IGNORECASE)


def _line(hit: Hit) -> str:
    # A memory (possibly shared by someone else) must not close the block early.
    content = _TAG.sub("[memory]", " ".join(hit.record.content.split()))
    if hit.record.created_at > 0:
        day = datetime.fromtimestamp(hit.record.created_at / 1000, tz=UTC).date().isoformat()
        return f"- {content} ({day})"
    return f"- {content}"


def assemble_context(hits: Sequence[Hit], *, max_chars: int) -> MemoryContext:
    """The memory block for ``hits`` (already ranked), within ``max_chars``."""
    seen: set[str] = set()
    lines: list[str] = []
    kept: list[Hit] = []
    budget = max_chars - len(HEADER) - len("<memory>\n\n</memory>")
    for hit in hits:
        key = normalize_text(hit.record.content)
        if not key or key in seen:
            continue
        line = _line(hit)
        if len(line) + 1 > budget:
            continue
        seen.add(key)
        budget -= len(line) + 1
        lines.append(line)
        kept.append(hit)
    if not kept:
        return MemoryContext("", ())
    text = "<memory>\n" + HEADER + "\n" + "\n".join(lines) + "\n</memory>"
    return MemoryContext(text, tuple(kept))
