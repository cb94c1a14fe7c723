"""What was said, kept beside what it means: the words of a turn a memory was made
from (its excerpt, the memory's L2).

A short message is kept whole; from a long one, the sentences that carry the fact —
the one sharing most of the fact's words, and its neighbours while they fit. The
excerpt is a second retrieval key for the fact (a question worded like the original
conversation finds it) and the detail the block adds where the fact alone would lose
a number or a list.
"""

from __future__ import annotations

import re

from sidecar.memory.language.text import tokens
from sidecar.memory.records.records import MAX_EXCERPT_CHARS

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\n+")
_SPACES = re.compile(r"[ \t\r\f\v]+")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def tidy(text: str) -> str:
    """``text`` with runs of spaces and blank lines collapsed."""
    lines = (_SPACES.sub(" ", line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def excerpt_of(said: str, fact: str, *, cap: int = MAX_EXCERPT_CHARS) -> str:
    """The part of ``said`` (a user's message) that carries ``fact``: all of it when
    it fits ``cap`` characters, else the sentence sharing most of the fact's words
    with its neighbours, the ones before first, while they fit."""
    said = tidy(said)
    if len(said) <= cap:
        return said
    sentences = _sentences(said)
    if not sentences:
        return said[:cap]
    wanted = set(tokens(fact))
    scores = [len(wanted.intersection(tokens(s))) for s in sentences]
    best = max(range(len(sentences)), key=lambda i: (scores[i], -i))
    start = end = best
    length = len(sentences[best])
    if length >= cap:
        return sentences[best][:cap]
    grew = True
    while grew:
        grew = False
        for step in (start - 1, end + 1):
            if 0 <= step < len(sentences) and length + 1 + len(sentences[step]) <= cap:
                length += 1 + len(sentences[step])
                start, end = min(start, step), max(end, step)
                grew = True
    return " ".join(sentences[start : end + 1])
