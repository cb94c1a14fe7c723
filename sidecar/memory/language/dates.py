"""Calendar dates and clock times written one way: "nov 14", "14/11", "the fourteenth
of November" and "November 14th" all become "November 14"; "10am", "10 o'clock" and
"10:00" become "10:00" ("7pm" "19:00"), so two facts that give one date or time in
other words are one fact and two that give others are two.

A day and month in digits are read only when the order is certain (one of them is
over 12: "14/11" is the 14th of November; "3/4" is left as written).
"""

from __future__ import annotations

import re

from sidecar.memory.language.lexicon import MONTHS

_MONTH = (
    r"(?P<month>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|"
    r"aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_ORDINALS = {
    word: n + 1
    for n, word in enumerate(
        """first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth
        thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth
        twentieth""".split()
    )
}
_ORDINALS.update({f"twenty-{w}": 20 + _ORDINALS[w] for w in list(_ORDINALS)[:9]})
_ORDINALS.update({"thirtieth": 30, "thirty-first": 31})
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_DAY_WORD = r"(?:the\s+)?(?P<word>" + "|".join(sorted(_ORDINALS, key=len, reverse=True)) + r")"
_FORMS = (
    re.compile(rf"\b(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}(?![a-z])", re.IGNORECASE),
    re.compile(rf"\b{_DAY_WORD}\s+(?:of\s+)?{_MONTH}(?![a-z])", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+(?:the\s+)?{_DAY}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+{_DAY_WORD}\b", re.IGNORECASE),
)
_NUMERIC = re.compile(r"\b(?P<a>\d{1,2})/(?P<b>\d{1,2})\b(?!/\d)")


def _month(name: str) -> int:
    return next(i for i, m in enumerate(MONTHS) if m.lower().startswith(name.lower()[:3])) + 1


def _render(month: int, day: int) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return f"{MONTHS[month - 1]} {day}"


def _named(match: re.Match[str]) -> str:
    groups = match.groupdict()
    day = int(groups["day"]) if groups.get("day") else _ORDINALS[groups["word"].lower()]
    return _render(_month(groups["month"]), day) or match.group(0)


def _digits(match: re.Match[str]) -> str:
    a, b = int(match.group("a")), int(match.group("b"))
    if a > 12 >= b:
        return _render(b, a) or match.group(0)  # 14/11: day first
    if b > 12 >= a:
        return _render(a, b) or match.group(0)  # 11/14: month first
    return match.group(0)  # 3/4: either


_TIME = re.compile(
    r"\b(?P<hour>\d{1,2})(?::(?P<minute>[0-5]\d))?\s*(?:(?P<half>[ap])\.?m\.?|o['’]clock)(?![a-z])",
    re.IGNORECASE,
)
_CLOCK = re.compile(r"\b(?P<hour>[01]?\d|2[0-3]):(?P<minute>[0-5]\d)\b")


def _time(match: re.Match[str]) -> str:
    hour, minute = int(match.group("hour")), int(match.group("minute") or 0)
    half = (match.group("half") or "").lower()
    if (hour > 12 and half) or hour > 23:
        return match.group(0)
    if half == "p" and hour < 12:
        hour += 12
    elif half == "a" and hour == 12:
        hour = 0
    return f"{hour:02d}:{minute:02d}"


def _clock(match: re.Match[str]) -> str:
    return f"{int(match.group('hour')):02d}:{match.group('minute')}"


def canonical_dates(text: str) -> str:
    """``text`` with every date it gives as day and month written "November 14", and
    every clock time as "10:00"."""
    for form in _FORMS:
        text = form.sub(_named, text)
    text = _NUMERIC.sub(_digits, text)
    return _CLOCK.sub(_clock, _TIME.sub(_time, text))
