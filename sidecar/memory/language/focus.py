"""The query a long message asks: where the question is, within ``max_query_chars``.

A user who pastes a document and asks about it puts the question after the
document ("<contract> ... Does this clash with what I told you about my notice
period?") or, less often, before it ("Can you check this against my schedule?
<pasted table>"). Searching the message's first characters would search the
document. The query is, in order of preference:

1. the whole message, when it fits;
2. its last paragraph, then its first, when that asks a question (the usual
   "document, then question", and "question, then document");
3. its last paragraph, then its first, when that is a short line (an instruction
   such as "summarise this for my landlord meeting");
4. the last question sentence in the message's tail;
5. the head and the tail, half the budget each, cut at word boundaries.

Only the message's two ends are read (a few times the budget), never the
whole document: a 1 MiB paste costs what a short one does.
"""

from __future__ import annotations

import re

from sidecar.memory.language.text import valid_unicode

#: A paragraph this short is an instruction or a question, not document text.
SHORT_LINE_CHARS = 300
#: How far into each end of a long message a question or paragraph is looked for,
#: in multiples of the budget.
_WINDOW = 4
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def query_text(text: str, max_chars: int) -> str:
    """What is embedded for ``text``: its focus (:func:`focus_query`), lone
    surrogates replaced so that no encoder refuses it."""
    return valid_unicode(focus_query(text, max_chars))


def focus_query(text: str, max_chars: int) -> str:
    """The part of ``text`` retrieval should search for, at most ``max_chars``."""
    text = text.strip()
    if len(text) <= max_chars:
        return text
    window = max_chars * _WINDOW
    tail = _last_paragraph(text[-window:], max_chars)
    head = _first_paragraph(text[:window], max_chars)
    for paragraph in (tail, head):
        if "?" in paragraph:
            return paragraph
    for paragraph in (tail, head):
        if paragraph and len(paragraph) <= SHORT_LINE_CHARS:
            return paragraph
    question = _last_question(text[-window:], max_chars)
    if question:
        return question
    return _head_and_tail(text, max_chars)


def _last_paragraph(window: str, max_chars: int) -> str:
    parts = [p.strip() for p in _PARAGRAPH_BREAK.split(window)]
    parts = [p for p in parts if p]
    # The window may start mid-paragraph: a lone part is the tail of the document.
    last = parts[-1] if len(parts) > 1 else ""
    return last if len(last) <= max_chars else ""


def _first_paragraph(window: str, max_chars: int) -> str:
    parts = [p.strip() for p in _PARAGRAPH_BREAK.split(window, maxsplit=1)]
    first = parts[0] if len(parts) > 1 else ""
    return first if len(first) <= max_chars else ""


def _last_question(window: str, max_chars: int) -> str:
    """The last sentence of ``window`` that ends in a question mark ("" when it is
    longer than ``max_chars``)."""
    end = window.rfind("?")
    if end < 0:
        return ""
    sentences = [s for s in _SENTENCE_END.split(window[: end + 1]) if s.strip()]
    if not sentences:
        return ""
    question = sentences[-1].strip()
    if len(question) > max_chars:
        return ""
    return question


def _head_and_tail(text: str, max_chars: int) -> str:
    half = max(1, (max_chars - 1) // 2)
    head = text[:half]
    cut = head.rfind(" ")
    head = head[:cut] if cut > half // 2 else head
    tail = text[-half:]
    cut = tail.find(" ")
    tail = tail[cut + 1 :] if 0 <= cut < half // 2 else tail
    return f"{head.rstrip()}\n{tail.lstrip()}"[:max_chars]
