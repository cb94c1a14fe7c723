"""The write evaluation's judgements on stored text: keywords, distinguishing
content, polarity and fragments.

These are the *evaluation's* rules, kept apart from the product's (the write path
has its own notion of a duplicate): they read the dataset's labels, which the
product never sees, and only simple, inspectable properties of the stored text.

* :func:`matches`: every keyword occurs, case-insensitively, as a word or phrase.
* :func:`distinguishing`: what tells fact ``a`` from fact ``b`` — the content words
  of ``a`` that ``b`` lacks, compared by stem, except that a past form and a present
  form of one verb differ ("visited" / "visiting"); :func:`covers` says whether a
  stored memory still carries most of them.
* :func:`negative`: whether a sentence is negated ("no", "not", "never", "n't",
  "no longer", "without", "quit", ...). A memory's polarity is compared with the
  most similar sentence the user said.
* :func:`fragment`: a memory that leans on context it does not carry ("That's
  User's focus time.", "User never takes meetings then.") or carries no fact
  (a greeting, thanks, a one-off mood of today).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from sidecar.memory.language.lexicon import (
    IRREGULAR_PAST,
    NEGATORS,
    NOTHING_WORDS,
    STOPPED,
    WORD,
    negation,
)
from sidecar.memory.language.text import STOPWORDS, normalize, stem

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+|\s+[-–—]\s+|;\s+")

#: Words that carry no fact about a user in a memory's text.
_FILLER = STOPWORDS | {"user", "users", "s", "t", "also", "really", "just", "very"}

_NEGATION = negation(
    *NEGATORS,
    *NOTHING_WORDS,
    *STOPPED,
    "zero", "dont", "doesnt", "didnt", "cant", "wont", "isnt", "wasnt", "havent", "hasnt",
    "aint", "avoids?", "avoiding", "free",
)  # fmt: skip
_LEADING_REFERENCE = re.compile(
    r"^(?:that|this|it|those|these|there|they)(?:['’]s|\s+(?:is|was|are|were|will|has|"
    r"'s|means|makes))\b",
    re.IGNORECASE,
)
_CLAUSE = re.compile(r"[,;:]\s*|\s+(?:and|but|so|because|though)\s+", re.IGNORECASE)
_TRAILING_REFERENCE = re.compile(r"\b(?:then|there|that|it|them|this)[.!]?$", re.IGNORECASE)
_NON_FACT = re.compile(
    r"^(?:user\s+(?:says\s+)?)?(?:hi|hello|hey|thanks|thank\s+you|ok|okay|lol|haha|cool|"
    r"great|nice|sure|yes|yep|nope|bye|good\s+(?:morning|night|evening))\b[\s!.,]*$",
    re.IGNORECASE,
)
_ONE_OFF = re.compile(
    r"\b(?:today|tonight|this\s+morning|this\s+afternoon|this\s+evening|right\s+now|"
    r"at\s+the\s+moment|just\s+now)\b",
    re.IGNORECASE,
)
_MOOD = re.compile(
    r"\b(?:tired|exhausted|sleepy|hungry|bored|cranky|grumpy|stressed|sick|sad|"
    r"happy|annoyed|knackered|wiped|hungover|alarm)\b",
    re.IGNORECASE,
)


def words(text: str) -> list[str]:
    """Lower-cased words, apostrophes kept inside a word."""
    return [w.replace("’", "'") for w in WORD.findall(normalize(text))]


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def matches(text: str, keywords: Iterable[str]) -> bool:
    """Every keyword occurs in ``text``, case-insensitively ("swim" matches
    "swimming", "863" a number ending in it)."""
    haystack = normalize(text)
    return all(normalize(k) in haystack for k in keywords)


def _feature(word: str) -> str | None:
    base = word.split("'")[0]
    if base in _FILLER or not base:
        return None
    past = base in IRREGULAR_PAST or (base.endswith("ed") and len(base) > 4)
    return stem(base) + ("@past" if past else "")


def features(text: str) -> set[str]:
    """The content words of ``text``: stems, a past form marked as such."""
    found = (_feature(w) for w in words(text))
    return {f for f in found if f is not None}


def distinguishing(a: str, b: str) -> tuple[set[str], set[str]]:
    """What ``a`` says that ``b`` does not, and the reverse."""
    fa, fb = features(a), features(b)
    return fa - fb, fb - fa


def covers(memory: str, wanted: set[str], *, share: float = 0.6) -> bool:
    """Whether ``memory`` carries at least ``share`` of ``wanted`` (an empty set is
    covered by nothing: a side that differs in no content word cannot be told apart)."""
    if not wanted:
        return False
    have = features(memory)
    return len(wanted & have) >= max(1, round(share * len(wanted)))


def negative(text: str) -> bool:
    return bool(_NEGATION.search(text))


def fragment(text: str) -> bool:
    """A memory that needs context it lacks, or that states no durable fact."""
    body = text.strip()
    if _NON_FACT.match(body) or not features(body):
        return True
    if _LEADING_REFERENCE.match(body):
        return True
    trailing = _TRAILING_REFERENCE.search(body.rstrip())
    if trailing is not None:
        # Resolved only by an earlier clause of the memory itself ("… penicillin as a
        # kid, so User is allergic to it"); "User never takes meetings then" is not.
        clauses = _CLAUSE.split(body[: trailing.start()])
        if not any(len(features(clause)) >= 2 for clause in clauses[:-1]):
            return True
    return bool(_ONE_OFF.search(body) and _MOOD.search(body))


def nearest(index: int, similarity: Sequence[Sequence[float]]) -> tuple[int, float]:
    """The column most similar to row ``index`` and its similarity."""
    row = similarity[index]
    best = max(range(len(row)), key=lambda j: (row[j], -j))
    return best, float(row[best])
