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
    best = _nearest(sentences, set(tokens(fact)))
    if len(sentences[best]) >= cap:
        return sentences[best][:cap]
    return _around(sentences, best, cap, after_first=False)


def _nearest(sentences: list[str], wanted: set[str]) -> int:
    """The index of the sentence sharing most of ``wanted`` (the first on a tie)."""
    scores = [len(wanted.intersection(tokens(s))) for s in sentences]
    return max(range(len(sentences)), key=lambda i: (scores[i], -i))


def _around(sentences: list[str], best: int, cap: int, *, after_first: bool) -> str:
    """Sentence ``best`` with its neighbours, grown one sentence at a time on either
    side (the one after first, or the one before) while the whole fits ``cap``."""
    start = end = best
    length = len(sentences[best])
    grew = True
    while grew:
        grew = False
        for step in (end + 1, start - 1) if after_first else (start - 1, end + 1):
            if 0 <= step < len(sentences) and length + 1 + len(sentences[step]) <= cap:
                length += 1 + len(sentences[step])
                start, end = min(start, step), max(end, step)
                grew = True
    return " ".join(sentences[start : end + 1])


_LIST = re.compile(r"(?:^|\n|\s)(?:\d{1,2}[.)]|[-*•])\s+\S")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'’-]+")


def window(excerpt: str, query: str, cap: int) -> str:
    """The ``cap`` characters of ``excerpt`` that matter most for ``query``: the
    sentence sharing most of its words, with its neighbours while they fit (the
    start of the excerpt when nothing is shared)."""
    if len(excerpt) <= cap:
        return excerpt
    sentences = _sentences(excerpt)
    if not sentences:
        return excerpt[:cap]
    best = _nearest(sentences, set(tokens(query)))
    if len(sentences[best]) >= cap:
        return sentences[best][: cap - 1] + "…"
    return _around(sentences, best, cap, after_first=True)  # what follows: a list goes on


def adds_detail(fact: str, fragment: str) -> bool:
    """Whether ``fragment`` (what was said) carries what ``fact`` alone loses: a
    number, a list, or a name the fact does not have."""
    if _LIST.search(fragment):
        return True
    numbers = set(re.findall(r"\d[\d.,:/-]*", fragment)) - set(re.findall(r"\d[\d.,:/-]*", fact))
    if numbers:
        return True
    return bool(_names(fragment) - _names(fact) - {"i", "i'm", "i've", "i'd", "i'll"})


def _names(text: str) -> set[str]:
    """The capitalised words of ``text`` not opening a sentence, casefolded."""
    return {n.casefold() for n in _NAME.findall(text)}


def said_for(excerpt: str, fact: str, query: str, cap: int) -> str:
    """What of ``excerpt`` to show under ``fact`` for ``query``: the sentence the fact
    was made from (the one sharing most of its words), with a sentence beside it
    that has a name of the question's the fact lacks ("Japan" for "how long was I
    in Japan?" under "User spent two weeks travelling solo."), within ``cap``."""
    sentences = _sentences(excerpt)
    if not sentences:
        return ""
    # Only a name of the question's (the fact's own words say nothing new).
    asked = _names(query) - _names(fact)
    own = _nearest(sentences, set(tokens(fact)))
    chosen = {own} | {
        i for i in (own - 1, own + 1) if 0 <= i < len(sentences) and asked & _names(sentences[i])
    }
    text = " ".join(sentences[i] for i in sorted(chosen))
    if len(text) <= cap:
        return text
    return sentences[own] if len(sentences[own]) <= cap else sentences[own][: cap - 1] + "…"
