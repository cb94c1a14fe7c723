"""Questions that ask for an amount, and memories that state one.

"How long was I in Japan?", "What size is my new TV?", "What is the total I spent on
luxury items?" are answered by a memory that says "two weeks", "55-inch" or "$800";
one about the same thing without a number ("User loved Kyoto") answers nothing.
The request path lifts memories that state an amount for such questions
(:mod:`sidecar.memory.read.retrieval.cues`), as it lifts memories that say when for
a question that asks when.

Dates, years, times of day and ordinals are not amounts: after the write path
resolved "last month" to "in April 2023", nearly every memory holds a number, and
only those that state how many, how much or how long should count.
"""

from __future__ import annotations

import re

from sidecar.memory.language.lexicon import MONTHS

_MONTH = "(?:" + "|".join(MONTHS) + r"|(?:jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\.?)"
_ORDINAL = r"\d{1,2}(?:st|nd|rd|th)?"

_ASKS = re.compile(
    r"\bhow\s+(?:many|much|long(?!\s+ago)|far|old|big|tall|heavy|often|frequently)\b"
    r"|\bwhat(?:'s|\s+is|\s+was|\s+were|\s+are)?\s+(?:the\s+|my\s+)?"
    r"(?:size|number|amount|percentage|price|cost|distance|duration|weight|height|length|total)\b"
    r"|\b(?:total|combined|overall)\s+(?:number|amount|cost|weight|price|time|distance|of)\b"
    r"|\bnumber\s+of\b",
    re.IGNORECASE,
)
#: "How many days ago…", "how many weeks had I been…" and "how long before…" are
#: answered by dates, not by a stated amount (they ask when: ``when.asks_when``).
_ASKS_WHEN_INSTEAD = re.compile(
    r"\bhow\s+many\s+(?:hours|days|weeks|months|years)\b"
    r"|\bhow\s+long\s+(?:ago|before|after|since|had|has|have|passed|between)\b",
    re.IGNORECASE,
)

_NOT_AMOUNTS = re.compile(
    rf"\b{_ORDINAL}\s+(?:of\s+)?{_MONTH}\b(?:,?\s+\d{{4}})?"
    rf"|\b{_MONTH}\s+{_ORDINAL}\b(?:,?\s+\d{{4}})?"
    rf"|\b{_MONTH}\s+\d{{4}}\b"
    r"|\b(?:19|20)\d{2}s?\b"
    r"|\b\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)"
    r"|\b\d{1,2}:\d{2}\b"
    r"|\b\d+(?:st|nd|rd|th)\b"
    r"|\b\d{4}-\d{2}-\d{2}\b"
    r"|(?:^|(?<=\n))\s*\d{1,2}[.)](?=\s)"  # a list's item number
    r"|\b(?:step|item|option|tip|number|no\.|#)\s*\d{1,2}\b",
    re.IGNORECASE,
)
_NUMBER_WORD_SET = frozenset(
    """two three four five six seven eight nine ten eleven twelve thirteen fourteen
    fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty
    seventy eighty ninety hundred hundreds thousand thousands dozen dozens twice
    thrice half""".split()
)
#: Substrings every text with a number word or phrase holds (a cheap first test).
_NUMBER_PARTS = (*_NUMBER_WORD_SET, "couple", "once")
_LETTERS = re.compile(r"[a-z]+")
_PHRASE_AMOUNT = re.compile(r"\ba\s+couple\s+of\b|\bonce\s+a\b")
_DIGIT_AMOUNT = re.compile(
    r"[$€£¥]\s?\d|\b\d[\d,.]*(?:\s*-\s*\d[\d,.]*)?(?:\s*%|\b|[a-z])", re.IGNORECASE
)
_DIGIT = re.compile(r"\d")


def asks_amount(question: str) -> bool:
    """Whether ``question`` asks how many, how much, how long, what size or what
    total (not how long ago: that asks when)."""
    if _ASKS.search(question) is None:
        return False
    # What is left once the when-questions are taken out (all of it, most often).
    return _ASKS.search(_ASKS_WHEN_INSTEAD.sub(" ", question)) is not None


def tells_amount(text: str) -> bool:
    """Whether ``text`` states an amount ("two weeks", "a 50-pound bag", "$120",
    "15%", "three times a week"); dates, years, times of day and ordinals are not
    amounts."""
    lower = text.lower()
    # A substring test first: most memories hold no number word at all.
    if any(part in lower for part in _NUMBER_PARTS) and (
        not _NUMBER_WORD_SET.isdisjoint(_LETTERS.findall(lower))
        or _PHRASE_AMOUNT.search(lower) is not None
    ):
        return True
    # Dates are read only where there is a digit (most memories have none).
    return _DIGIT.search(text) is not None and (
        _DIGIT_AMOUNT.search(_NOT_AMOUNTS.sub(" ", text)) is not None
    )
