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


#: Heads that are no statement of their own: a subordinate clause or a phrase that
#: leans on the question ("Since I'm new to this, ...", "In your opinion, ..."), or a
#: preface to asking ("I'd like to ask, ...", "I was wondering, ...").
_NOT_A_STATEMENT = re.compile(
    r"^(?:since|as|because|if|when|whenever|while|although|though|for|in|with|without|"
    r"additionally|also|speaking|regarding|about|besides|plus|one\s+more|and|but|so|or)\b"
    r"|\b(?:ask|asking|wondering|wonder|know|curious|question)\W*$",
    re.IGNORECASE,
)


#: "Since I'm going to Miami in December, ...": what the reason says is said.
_BECAUSE_I = re.compile(r"^(?:since|because|as)\s+(?=(?:I|I'm|I've|we|we're|my)\b)", re.I)
#: A short head that ends on a word pointing elsewhere ("I'm still new to this").
_LEANS = re.compile(r"^(?:\S+\s+){0,4}(?:this|that|it|these|those)\W*$", re.I)


def statement_before_question(sentence: str) -> str | None:
    """The statement before a question that ends ``sentence``, or None where the
    sentence is no such pair (a plain question, a plain statement)."""
    if not sentence.rstrip().endswith("?"):
        return None
    match = _QUESTION_TAIL.match(sentence.strip())
    if match is None:
        return None
    head = _BECAUSE_I.sub("", match.group("head").rstrip(" ,;:-–—"))
    if _NOT_A_STATEMENT.search(head) or _LEANS.search(head):
        return None
    return head[:1].upper() + head[1:] + ("." if head[-1:] not in ".!" else "")
