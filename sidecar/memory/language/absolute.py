"""Relative dates made absolute when a fact is stored: "User went hiking yesterday."
said on 30 May 2023 is stored as "User went hiking on 29 May 2023.", so the memory
does not go stale and a question about May 2023 finds it.

Rules, and conservative: only phrases whose date the turn's time fixes are resolved
— "yesterday", "today", "tonight", "tomorrow", "last/this/next week|weekend|month|
year", "last/this/next <weekday>", "N days|weeks|months|years ago". Vague ones ("a
few days ago", "recently", "last summer") and ones that may be a duration ("in two
weeks") stay as said; the memory's date (when it was said) is shown beside it. The
turn's time is UTC: a message sent just after midnight UTC may mean the user's
previous day.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from sidecar.memory.language.lexicon import MONTHS, WEEKDAYS

_NUMBER = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a couple of": 2,
    "couple of": 2,
}
_COUNT = (
    r"(?P<n>\d{1,2}|a couple of|couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten)"
)
_DAYS = "|".join(WEEKDAYS)
_PHRASE = re.compile(
    r"\b(?:"
    r"(?P<before_yesterday>the day before yesterday)"
    r"|(?P<yesterday>yesterday)(?!['’]s)"
    r"|(?P<last_night>last night)"
    r"|(?P<today>today|tonight|this (?:morning|afternoon|evening))(?!['’]s)"
    r"|(?P<tomorrow>tomorrow)(?!['’]s)"
    r"|(?P<rel>last|this|next|this past)\s+(?P<unit>weekend|week|month|year)"
    rf"|(?P<rel_day>last|this|next|this past)\s+(?P<weekday>{_DAYS})"
    rf"|{_COUNT}\s+(?P<ago_unit>day|week|month|year)s?\s+ago"
    r")\b",
    re.IGNORECASE,
)
_MONTH_NAMES = "|".join(m[:3] + r"[a-z]*\.?" for m in MONTHS)
#: The date itself, said just after the phrase ("last weekend, on Saturday, March
#: 12th", "yesterday (the 3rd of May)"): the user's own date stands, unresolved.
_SAID_DATE = re.compile(
    r"\s*[,(]?\s*(?:on\s+)?(?:(?:" + _DAYS + r")[a-z]*,?\s+)?(?:the\s+)?"
    r"(?:\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:" + _MONTH_NAMES + r")"
    r"|(?:" + _MONTH_NAMES + r")\s+\d{1,2}(?:st|nd|rd|th)?\b)",
    re.IGNORECASE,
)
#: Prepositions that already say how the resolved date reads ("since last week").
_LEAD = re.compile(r"\b(?:since|until|till|before|after|by|from|through)\s+$", re.IGNORECASE)


def _day(when: date) -> str:
    return f"{when.day} {MONTHS[when.month - 1]} {when.year}"


def _weekday(when: date) -> str:
    return f"{WEEKDAYS[when.weekday()].title()}, {_day(when)}"


def _month(when: date) -> str:
    return f"{MONTHS[when.month - 1]} {when.year}"


def _shift_months(when: date, months: int) -> date:
    index = when.year * 12 + when.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _monday(when: date) -> date:
    return when - timedelta(days=when.weekday())


def _resolve(match: re.Match[str], today: date) -> tuple[str, str]:
    """(preposition, date) for the phrase ``match`` found."""
    group = match.group
    if group("before_yesterday"):
        return "on", _day(today - timedelta(days=2))
    if group("yesterday"):
        return "on", _day(today - timedelta(days=1))
    if group("last_night"):
        return "on the night of", _day(today - timedelta(days=1))
    if group("today"):
        return "on", _day(today)
    if group("tomorrow"):
        return "on", _day(today + timedelta(days=1))
    if group("unit"):
        rel, unit = group("rel").lower(), group("unit").lower()
        step = {"last": -1, "this past": -1, "this": 0, "next": 1}[rel]
        if unit == "month":
            return "in", _month(_shift_months(today, step))
        if unit == "year":
            return "in", str(today.year + step)
        if unit == "week":
            return "in the week of", _day(_monday(today) + timedelta(weeks=step))
        saturday = _monday(today) + timedelta(days=5)
        if rel in ("last", "this past"):
            saturday -= timedelta(weeks=1 if today.weekday() < 5 else 0)
        elif rel == "next":
            saturday += timedelta(weeks=1)
        return "on the weekend of", _day(saturday)
    if group("weekday"):
        rel, target = group("rel_day").lower(), WEEKDAYS.index(group("weekday").lower())
        if rel in ("last", "this past"):
            back = (today.weekday() - target) % 7 or 7
            return "on", _weekday(today - timedelta(days=back))
        if rel == "next":
            ahead = (target - today.weekday()) % 7 or 7
            return "on", _weekday(today + timedelta(days=ahead))
        ahead = (target - today.weekday()) % 7  # "this Friday": this week's, or today
        return "on", _weekday(today + timedelta(days=ahead))
    count = _NUMBER.get(group("n").lower())
    n = int(group("n")) if count is None else count
    unit = group("ago_unit").lower()
    if unit == "day":
        return "on", _day(today - timedelta(days=n))
    if unit == "week":
        return "around", _day(today - timedelta(weeks=n))
    if unit == "month":
        return "in", _month(_shift_months(today, -n))
    return "in", str(today.year - n)


def dated_quote(text: str, said_at_ms: int) -> str:
    """``text`` (a quote: its words stay) with the date each relative phrase means
    beside it: "yesterday" said on 30 May 2023 reads "yesterday (29 May 2023)"."""
    if said_at_ms <= 0 or _PHRASE.search(text) is None:
        return text
    today = datetime.fromtimestamp(said_at_ms / 1000, tz=UTC).date()

    def annotate(match: re.Match[str]) -> str:
        _, when = _resolve(match, today)
        return f"{match.group(0)} ({when})"

    return _PHRASE.sub(annotate, text)


def absolute_dates(text: str, said_at_ms: int) -> str:
    """``text`` with its relative dates resolved against ``said_at_ms`` (epoch ms):
    "last month" said in November 2026 reads "in October 2026"."""
    if said_at_ms <= 0 or _PHRASE.search(text) is None:
        return text
    today = datetime.fromtimestamp(said_at_ms / 1000, tz=UTC).date()
    out: list[str] = []
    position = 0
    for match in _PHRASE.finditer(text):
        if _SAID_DATE.match(text, match.end()):
            continue  # the date is said: "last weekend, on Saturday, March 12th"
        preposition, when = _resolve(match, today)
        before = text[position : match.start()]
        # "since last week" -> "since the week of …": the text's own word leads.
        if _LEAD.search(before):
            preposition = preposition.removeprefix("on").removeprefix("in").strip()
            preposition = preposition or ""
        phrase = f"{preposition} {when}".strip()
        out.append(before)
        out.append(phrase)
        position = match.end()
    out.append(text[position:])
    return "".join(out)
