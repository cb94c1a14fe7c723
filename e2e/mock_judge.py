"""The mock LLM's answer to the sidecar's dedup judge prompt (``dedup`` task).

Input (the last user message)::

    NEW: <fact>
    EXISTING:
    - id=<id>: <text>

Rules, deliberately simple and different from the sidecar's own fallback rule:
same words (case and punctuation ignored) -> NOOP; the new fact contains every word
of an existing one and more -> UPDATE with the new wording; the same first three
words ("User's favourite colour ...") with a different rest, or both about where
the user lives (live/move/reside/relocate) -> SUPERSEDE; otherwise ADD.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_WORD = re.compile(r"[\w']+")
_EXISTING = re.compile(r"^- id=(\S+): (.*)$")
_RESIDENCE = frozenset({"lives", "live", "moved", "resides", "relocated", "living"})


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def judge(new: str, existing: list[tuple[str, str]]) -> dict[str, Any]:
    new_words = _words(new)
    for memory_id, text in existing:
        old_words = _words(text)
        if new_words == old_words:
            return {"decision": "NOOP", "target": memory_id, "text": None}
        if set(old_words) < set(new_words):
            return {"decision": "UPDATE", "target": memory_id, "text": new}
    for memory_id, text in existing:
        old_words = _words(text)
        same_slot = len(new_words) > 3 and new_words[:3] == old_words[:3]
        both_residence = bool(_RESIDENCE & set(new_words)) and bool(_RESIDENCE & set(old_words))
        if same_slot or both_residence:
            return {"decision": "SUPERSEDE", "target": memory_id, "text": None}
    return {"decision": "ADD", "target": None, "text": None}


def handle_dedup(body: Mapping[str, Any]) -> str:
    messages = [m for m in body.get("messages", []) if isinstance(m, Mapping)]
    users = [m for m in messages if m.get("role") == "user"]
    text = str(users[-1].get("content", "")) if users else ""
    new = ""
    existing: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line.startswith("NEW: "):
            new = line[5:]
        match = _EXISTING.match(line)
        if match:
            existing.append((match.group(1), match.group(2)))
    return json.dumps(judge(new, existing))
