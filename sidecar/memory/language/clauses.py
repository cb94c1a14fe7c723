"""A statement the user makes before a question in the same sentence: "I live in
Austin and the summers are brutal, any tips for keeping cool?", "I sold the Accord
and bought a Tesla, so where can I charge it?". The sentence ends in a question mark,
but its head is something said about the user; read alone, the head is kept like any
other statement, and the question is left out as every question is.
"""

from __future__ import annotations

import re

#: A clause boundary, then a question to the end of the sentence.
_QUESTION_TAIL = re.compile(
    r"^(?P<head>.{12,}?)\s*(?:[,;:]|\s[-–—])\s*"
    r"(?:(?:so|and|but|then|or)\s+)?"
    r"(?:any|anything|can|could|would|will|do|does|did|is|are|was|should|shall|what|"
    r"whats|what's|where|when|which|who|how|why|got|thoughts|ideas|suggestions|"
    r"recommendations|tips|advice)\b[^?]*\?+\s*$",
    re.IGNORECASE,
)


def statement_before_question(sentence: str) -> str | None:
    """The statement before a question that ends ``sentence``, or None where the
    sentence is no such pair (a plain question, a plain statement)."""
    if not sentence.rstrip().endswith("?"):
        return None
    match = _QUESTION_TAIL.match(sentence.strip())
    if match is None:
        return None
    head = match.group("head").rstrip(" ,;:-–—")
    return head + "." if head[-1:] not in ".!" else head
