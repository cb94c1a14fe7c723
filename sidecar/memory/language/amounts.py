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


def _non_amounts(month: str) -> str:
    return (
        rf"\b{_ORDINAL}\s+(?:of\s+)?{month}\b(?:,?\s+\d{{4}})?"
        rf"|\b{month}\s+{_ORDINAL}\b(?:,?\s+\d{{4}})?"
        rf"|\b{month}\s+\d{{4}}\b"
        r"|\b(?:19|20)\d{2}s?\b"
        r"|\b\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)"
        r"|\b\d{1,2}:\d{2}\b"
        r"|\b\d+(?:st|nd|rd|th)\b"
        r"|\b\d{4}-\d{2}-\d{2}\b"
        r"|(?:^|(?<=\n))\s*\d{1,2}[.)](?=\s)"  # a list's item number
        r"|\b(?:step|item|option|tip|number|no\.|#)\s*\d{1,2}\b"
    )


_NOT_AMOUNTS = re.compile(_non_amounts(_MONTH), re.IGNORECASE)
#: The same for a lower-cased ASCII text, where matching exactly is matching the
#: text ignoring case, at about half the cost.
_NOT_AMOUNTS_ASCII = re.compile(_non_amounts(_MONTH.lower()))
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
_DIGITS = re.compile(r"\d+")
#: The most a non-amount says before its first digit, whitespace aside ("September."
#: or "option" and the whitespace after it): where a non-amount can start.
_LEAD = 10


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
    first = _DIGIT.search(text)
    if first is None:
        return False
    if text.isascii():
        rest = _without_non_amounts(lower, first.start(), _NOT_AMOUNTS_ASCII)
    else:
        rest = _without_non_amounts(text, first.start(), _NOT_AMOUNTS)
    # An amount starts at a digit or at a currency sign up to two characters before it.
    digit = _DIGIT.search(rest)
    return digit is not None and _DIGIT_AMOUNT.search(rest, max(0, digit.start() - 2)) is not None


def _without_non_amounts(text: str, first: int, pattern: re.Pattern[str]) -> str:
    """``pattern.sub(" ", text)``, exactly, without trying every position of a
    long text: every non-amount holds a digit, and starts at most ``_LEAD``
    characters and a run of whitespace before its first one, so only those starts
    are tried, leftmost first (as ``sub`` finds them). ``first``: the first digit."""
    parts: list[str] = []
    pos = last = 0
    for run in _DIGITS.finditer(text, first):
        start = run.start()
        if start < pos:
            continue  # inside a non-amount already replaced
        i = start - 1
        while i >= pos and text[i].isspace():  # str.isspace is what \s matches
            i -= 1
        for at in range(max(pos, i + 1 - _LEAD), start + 1):
            found = pattern.match(text, at)
            if found is not None:
                parts += (text[last:at], " ")
                pos = last = found.end()
                break
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)
