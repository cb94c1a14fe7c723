"""Content hygiene for everything the write path stores.

Text reaches the write path from request bodies (``json.loads`` accepts ``"\\ud800"``,
so a lone surrogate is a valid Python string that no UTF-8 encoder takes), from
LLM answers and from imports. Before a fact is hashed, embedded or stored, and
before a turn is journaled or sent to extraction, it is made safe:

* valid UTF-8: surrogate pairs are joined, lone surrogates become U+FFFD;
* control characters are removed, except newline and tab (which
  :func:`clean_text` then collapses anyway unless ``keep_newlines``);
* invisible format characters are removed — bidirectional overrides (U+202E
  "trojan source"), zero-width spaces, the BOM, soft hyphens and Unicode *tag*
  characters (U+E0000..U+E007F, used to smuggle hidden instructions into prompts)
  — except the zero-width (non-)joiners that emoji and some scripts need;
* whitespace collapsed (runs of spaces become one; with ``keep_newlines`` single
  newlines survive, for the extractor's sentence split);
* length capped, on a character boundary, without a dangling joiner.

A fact left without a letter or digit is *invalid*: the writer drops and counts it
(``memory_sidecar_facts_total{decision="dropped_invalid"}``).
"""

from __future__ import annotations

import re
from dataclasses import replace

from sidecar.memory.language.text import valid_unicode
from sidecar.memory.records.turns import Turn

#: Control characters that separate words: they become a space (``\r`` a newline).
_CONTROL_SPACE = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
#: Every other control (Cc) character but newline and tab, and every format (Cf)
#: character but ZWNJ/ZWJ (Unicode 14; a test checks it against ``unicodedata``).
_INVISIBLE = re.compile(
    "[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f"
    "\u0890\u0891\u08e2\u180e\u200b\u200e\u200f\u202a-\u202e\u2060-\u206f\ufeff"
    "\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e007f]"
)
_SPACES = re.compile(r"[^\S\n]+")
_NEWLINES = re.compile(r" ?\n[\s]*")


def clean_text(text: str, max_chars: int, *, keep_newlines: bool = False) -> str:
    """``text`` made safe to hash, embed, store and show (see the module docstring),
    at most ``max_chars`` characters. Idempotent."""
    # Cap generously first: a megabyte of text is never scanned as a whole.
    text = valid_unicode(text[: max_chars * 2 + 64])
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _INVISIBLE.sub("", _CONTROL_SPACE.sub(" ", text))
    if keep_newlines:
        text = _NEWLINES.sub("\n", _SPACES.sub(" ", text)).strip()
    else:
        text = " ".join(text.split())
    if len(text) > max_chars:
        text = _cut(text, max_chars, sentences=keep_newlines)
    return text


def _cut(text: str, max_chars: int, *, sentences: bool) -> str:
    """``text`` (longer than ``max_chars``) cut to at most ``max_chars``: at the last
    sentence end (``sentences``) or word boundary in the last quarter, so no half
    sentence becomes a fact; mid-word only when there is none."""
    head = text[:max_chars]
    floor = max_chars - max_chars // 4
    if sentences:
        end = max(head.rfind(". "), head.rfind("! "), head.rfind("? "), head.rfind("\n"))
        if end >= floor:
            return head[: end + 1].rstrip()
    if not text[max_chars].isspace():
        space = max(head.rfind(" "), head.rfind("\n"))
        if space >= floor:
            head = head[:space]
    return head.rstrip().rstrip("\u200c\u200d").rstrip()


def is_meaningful(text: str) -> bool:
    """True when ``text`` has at least one letter or digit."""
    return any(char.isalnum() for char in text)


def clean_turn(turn: Turn, max_chars: int) -> Turn:
    """``turn`` with both texts cleaned (newlines kept) and capped at ``max_chars``
    each, and its identifiers valid UTF-8. The same turn when nothing changes."""
    user = clean_text(turn.user_text, max_chars, keep_newlines=True)
    assistant = clean_text(turn.assistant_text, max_chars, keep_newlines=True)
    session = valid_unicode(turn.session_id)
    request = valid_unicode(turn.request_id)
    if (user, assistant, session, request) == (
        turn.user_text,
        turn.assistant_text,
        turn.session_id,
        turn.request_id,
    ):
        return turn
    return replace(
        turn, user_text=user, assistant_text=assistant, session_id=session, request_id=request
    )
