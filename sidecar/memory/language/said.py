"""A turn the extractor kept no fact from still leaves a memory of what happened,
unless there was nothing to keep.

* **Said**: the user's own statements, quoted as said — 'User said: "I got my own
  set of sculpting tools today."'. A statement is a sentence in the first person
  that is no question, no request, no order for the assistant, no mood of the
  moment, does not speak to the assistant ("you") and is no reaction to its answer
  ("I'll definitely check those out."). Quoting never changes the meaning, which
  rewording can.
* **Asked**: a request the assistant answered at length — 'User asked: "Brainstorm
  ideas for work from home jobs for seniors"', with the head of the answer in the
  memory's excerpt, so "what was the 7th job in the list you gave me?" finds it.

Greetings, thanks and short chit-chat leave nothing. Both kinds are episodic, of low
importance, and their source says which (``said`` / ``asked``).
"""

from __future__ import annotations

import re

from sidecar.memory.language.addressee import is_reaction
from sidecar.memory.language.directives import instructs_assistant
from sidecar.memory.language.excerpts import tidy
from sidecar.memory.language.heuristics import mood_of_the_moment
from sidecar.memory.language.text import tokens
from sidecar.memory.records.records import MAX_EXCERPT_CHARS, MemoryType
from sidecar.memory.records.turns import Fact

#: Characters of the user's statements quoted in a "said" memory.
MAX_SAID_CHARS = 300
#: Characters of the user's request quoted in an "asked" memory.
MAX_ASKED_CHARS = 200
#: Characters of the user's request kept in an "asked" memory's excerpt.
MAX_REQUEST_EXCERPT = 600
#: A statement worth quoting has at least this many characters and content words
#: ("They're my team." says nothing on its own).
MIN_STATEMENT_CHARS = 20
MIN_STATEMENT_WORDS = 3
SAID_IMPORTANCE = 0.3
ASKED_IMPORTANCE = 0.2
#: Confidence of a quote: the words are the user's, what they mean is not judged.
QUOTE_CONFIDENCE = 0.6

#: The ``source`` of the two kinds.
SAID = "said"
ASKED = "asked"
#: Quotes are records of what was said, not claims about an attribute: the write
#: path's judge never supersedes or absorbs one, and one is only ever the same as
#: the same quote. Consolidation may fold a quoted statement into the fact it
#: restates (never the reverse, never a request asked).
QUOTED = frozenset({SAID, ASKED})

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_FIRST_PERSON = re.compile(
    r"\b(?:i|i'm|i’m|i've|i’ve|i'd|i’d|i'll|i’ll|my|me|mine|we|our|us)\b", re.I
)
_YOU = re.compile(r"\b(?:you|your|yours|yourself|u|ur)\b", re.I)
_REQUEST = re.compile(
    r"^\W*(?:can|could|would|will|please|tell|help|what|why|how|when|where|who|which|"
    r"do|does|did|is|are|should|let's|lets|show|give|write|explain|find|suggest|"
    r"recommend|any|list|create|make|brainstorm|generate|outline|provide|describe|"
    r"summari[sz]e|compare|draft|plan|translate|rewrite|pretend|imagine|name|"
    r"i\s+need|i'd\s+like|i\s+want)\b",
    re.I,
)
#: A rule for the assistant ("Don't use emojis"), not a request it answers.
_RULE = re.compile(r"^\W*(?:please\s+)?(?:don't|dont|do\s+not|never|always|stop)\b", re.I)
#: The memory block itself, when an answer quotes it back (never kept as said).
_BLOCK = re.compile(r"(?:<|‹)memory(?:>|›).*?(?:(?:<|‹)/memory(?:>|›)|\Z)", re.S | re.I)
_QUOTES = str.maketrans({'"': "'", "“": "'", "”": "'"})


def _statements(user_text: str) -> list[str]:
    kept = []
    for raw in _SENTENCE.split(user_text):
        sentence = " ".join(raw.split())
        if (
            len(sentence) >= MIN_STATEMENT_CHARS
            and not sentence.endswith("?")
            and _FIRST_PERSON.search(sentence)
            and not _YOU.search(sentence)
            and not _REQUEST.match(sentence)
            and len(tokens(sentence)) >= MIN_STATEMENT_WORDS
            and not instructs_assistant(sentence)
            and not mood_of_the_moment(sentence)
            and not is_reaction(sentence)
        ):
            kept.append(sentence.translate(_QUOTES))
    return kept


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + "…"


def said_fact(user_text: str) -> Fact | None:
    """The user's own statements of a turn, quoted (None: it makes none)."""
    statements = _statements(user_text)
    if not statements:
        return None
    quoted = _cut(" ".join(statements), MAX_SAID_CHARS)
    return Fact(
        f'User said: "{quoted}"',
        MemoryType.EPISODIC,
        SAID_IMPORTANCE,
        QUOTE_CONFIDENCE,
        SAID,
    )


def answer_text(reply: str) -> str:
    """The assistant's answer without any memory block it quoted back."""
    return _BLOCK.sub(" ", reply).strip()


def asked_fact(user_text: str, reply: str, *, min_reply_chars: int) -> Fact | None:
    """A request answered at length, quoted (None: no answer worth keeping, or no
    request: a statement, a greeting, thanks, a rule or an order for the assistant)."""
    request = " ".join(user_text.split())
    if (
        len(answer_text(reply)) < min_reply_chars
        or len(tokens(request)) < 3
        or not ("?" in request or _REQUEST.match(request))
        or _RULE.match(request)
        or instructs_assistant(request)
    ):
        return None
    quoted = _cut(request.translate(_QUOTES), MAX_ASKED_CHARS)
    return Fact(
        f'User asked: "{quoted}"',
        MemoryType.EPISODIC,
        ASKED_IMPORTANCE,
        QUOTE_CONFIDENCE,
        ASKED,
    )


def asked_excerpt(user_text: str, reply: str) -> str:
    """What an "asked" memory keeps of its turn: the request, then the answer's head."""
    request = _cut(tidy(user_text), MAX_REQUEST_EXCERPT)
    room = MAX_EXCERPT_CHARS - len(request) - len("\nassistant: ")
    return f"{request}\nassistant: {_cut(tidy(answer_text(reply)), max(0, room))}"
