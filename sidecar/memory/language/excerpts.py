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
    wanted = set(tokens(query))
    scores = [len(wanted.intersection(tokens(s))) for s in sentences]
    best = max(range(len(sentences)), key=lambda i: (scores[i], -i))
    start = end = best
    length = len(sentences[best])
    if length >= cap:
        return sentences[best][: cap - 1] + "…"
    for step in range(1, len(sentences)):
        grew = False
        for index in (best + step, best - step):  # what follows first: a list goes on
            if 0 <= index < len(sentences) and length + 1 + len(sentences[index]) <= cap:
                length += 1 + len(sentences[index])
                start, end = min(start, index), max(end, index)
                grew = True
        if not grew:
            break
    return " ".join(sentences[start : end + 1])


def adds_detail(fact: str, fragment: str) -> bool:
    """Whether ``fragment`` (what was said) carries what ``fact`` alone loses: a
    number, a list, or a name the fact does not have."""
    if _LIST.search(fragment):
        return True
    numbers = set(re.findall(r"\d[\d.,:/-]*", fragment)) - set(re.findall(r"\d[\d.,:/-]*", fact))
    if numbers:
        return True
    names = {n.casefold() for n in _NAME.findall(fragment)} - {
        n.casefold() for n in _NAME.findall(fact)
    }
    return bool(names - {"i", "i'm", "i've", "i'd", "i'll"})


def said_for(excerpt: str, fact: str, query: str, cap: int) -> str:
    """What of ``excerpt`` to show under ``fact`` for ``query``: the sentence the fact
    was made from (the one sharing most of its words), with a sentence beside it
    that has a name of the question's the fact lacks ("Japan" for "how long was I
    in Japan?" under "User spent two weeks travelling solo."), within ``cap``."""
    sentences = _sentences(excerpt)
    if not sentences:
        return ""
    fact_words = set(tokens(fact))
    # Only a name of the question's (the fact's own words say nothing new).
    asked = {n.casefold() for n in _NAME.findall(query)} - {
        n.casefold() for n in _NAME.findall(fact)
    }
    words = [set(tokens(s)) for s in sentences]
    own = max(range(len(sentences)), key=lambda i: (len(fact_words & words[i]), -i))
    chosen = {own} | {
        i
        for i in (own - 1, own + 1)
        if 0 <= i < len(sentences) and asked & {n.casefold() for n in _NAME.findall(sentences[i])}
    }
    text = " ".join(sentences[i] for i in sorted(chosen))
    if len(text) <= cap:
        return text
    return sentences[own] if len(sentences[own]) <= cap else sentences[own][: cap - 1] + "…"
