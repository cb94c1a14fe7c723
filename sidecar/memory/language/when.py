"""The dates a question names, as spans of time its memories may have been told in.

"What did I cook on 9 November, 2022?", "When did we go camping in June?", "Where
was John between August 11 and August 15 2023?", "What did I do the week before
August 3?", "last May", "two weeks ago". A memory's ``created_at`` is when it was
said, so a question that names a date is better answered by what was said then;
retrieval lifts those memories (:mod:`sidecar.memory.read.retrieval.cues`).

Rules, not a tagger, and conservative: a date must be spelled with a month name
(or ISO ``2023-05-08``), a four-digit year from 1900 to 2099, or a relative phrase
("yesterday", "last week", "N days ago", "last <month>"); bare numbers are never
dates. "may" and "march" count as months only next to a day or a year, after "in",
"last", "since"…, or capitalised inside a sentence. A date without a year ("in
June", "on March 3") matches that month or day in any year: the question does not
say which.

Spans are half-open ranges of epoch milliseconds (UTC), or calendar spans (a month,
or a month and day) for dates without a year.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sidecar.memory.language.lexicon import MONTHS, WEEKDAYS
from sidecar.memory.language.text import STOPWORDS

DAY_MS = 86_400_000

#: Month names and their usual abbreviations ("jan", "sept"), to month numbers.
_MONTHS = {
    name: number
    for number, full in enumerate(MONTHS, start=1)
    for name in (full.lower(), full[:3].lower(), *(("sept",) if number == 9 else ()))
}
_MONTH = r"(?:" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\b\.?"
_YEAR = r"(?:19|20)\d\d"
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_DATE = re.compile(
    r"\b(?:"
    rf"(?P<iso>{_YEAR})-(?P<iso_m>\d\d)-(?P<iso_d>\d\d)"
    rf"|(?P<m1>{_MONTH})\s+(?P<d1>{_DAY})\b(?:,?\s+(?P<y1>{_YEAR}))?"
    rf"|(?P<d2>{_DAY})\s+(?:of\s+)?(?P<m2>{_MONTH})(?:,?\s+(?P<y2>{_YEAR}))?"
    rf"|(?P<m3>{_MONTH})(?:,?\s+(?:of\s+)?(?P<y3>{_YEAR}))?"
    rf"|(?P<y4>{_YEAR})"
    r")(?!\d)",
    re.IGNORECASE,
)
#: Holidays on a fixed day of the year ("on Valentine's Day", "at Christmas 2022"):
#: that day, in the year said or in any year; each named group is ``d<MMDD>``.
#: Holidays that move (Easter, Thanksgiving) are left out rather than guessed.
_HOLIDAY = re.compile(
    r"\b(?:(?P<d0214>valentine(?:['’]s|s\s+day|\s+day)(?:\s+day)?)"
    r"|(?P<d1224>christmas\s+eve)|(?P<d1225>christmas|xmas)"
    r"|(?P<d1231>new\s+year['’]?s\s+eve)|(?P<d0101>new\s+year['’]?s\s+day)"
    r"|(?P<d1031>halloween)|(?P<d0317>(?:st\.?|saint)\s+patrick(?:['’]?s)?\s+day)"
    r"|(?P<d0704>independence\s+day|(?:fourth|4th)\s+of\s+july))"
    rf"(?:,?\s+(?P<year>{_YEAR}))?\b",
    re.IGNORECASE,
)
#: Month names that are also everyday words ("you may", "we march"), and the words
#: before one that make it the month ("in May", "last may").
_AMBIGUOUS = frozenset({"may", "march", "mar"})
_MONTH_CUES = frozenset(
    "in last this next early mid late since of during until before after by from".split()
)
_ENDS = (".", "!", "?", ":", ";")
_RELATIVE = re.compile(
    r"\b(?:(?P<yesterday>yesterday|last night)|(?P<today>today|tonight|this morning)"
    r"|(?P<last>last|past|this)\s+(?P<unit>week(?:end)?|month|year)"
    r"|(?P<n>\d+|a|an|one|two|three|four|five|six)\s+(?P<ago_unit>day|week|month|year)s?\s+ago)\b",
    re.IGNORECASE,
)
_NEXT = re.compile(r"\s+([A-Za-z]+)")
#: A relative phrase anchored to a date that follows it ("last weekend before April
#: 10") is that date's, not today's.
_ANCHORED = re.compile(r"\s+(?:before|after)\b", re.I)
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_BEFORE = re.compile(r"\b(?:the\s+)?(?:week(?:end)?|days?)\s+before\s*$|\bbefore\s*$", re.I)
_AFTER = re.compile(r"\b(?:the\s+)?(?:week(?:end)?|days?)\s+after\s*$|\bafter\s*$", re.I)
_BETWEEN = re.compile(r"\b(?:between|from)\s*$", re.I)
_AND = re.compile(r"^\s*(?:and|to|until|-|–)\s*$", re.I)


_ASKS_WHEN = re.compile(
    r"^\W*(?:when\b|(?:in\s+|on\s+|during\s+)?(?:what|which)\s+(?:time|date|day|week|"
    r"weekend|year|month|season)\b|how\s+long\s+ago\b|since\s+when\b"
    r"|(?:after\s+)?how\s+many\s+(?:days|weeks|months|years)\b)",
    re.IGNORECASE,
)
#: Full month names but "May", which is as often the verb.
_NAMED_MONTHS = "(?:" + "|".join(m.lower() for m in MONTHS if m != "May") + ")"
_WEEKDAY = "(?:" + "|".join(WEEKDAYS) + ")"
_TELLS_TIME = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|ago|recently|"
    rf"(?:last|next|this|past)\s+(?:week(?:end)?|month|year|night|summer|winter|spring|"
    rf"fall|autumn|{_WEEKDAY})|(?:on|since|by)\s+{_WEEKDAY}|"
    rf"{_NAMED_MONTHS}|{_YEAR}|valentine['’]?s|christmas|xmas|halloween|thanksgiving|easter|"
    r"new\s+year['’]?s\s+(?:eve|day))\b",
    re.IGNORECASE,
)


def asks_when(question: str) -> bool:
    """Whether ``question`` asks for a time ("When did…", "What year…")."""
    return _ASKS_WHEN.search(question) is not None


#: ``_TELLS_TIME`` for lower-case text: its words are lower-case, and on an ASCII
#: text, matching the lowered text exactly is matching the text ignoring case, at
#: less than half the cost.
_TELLS_TIME_LOWER = re.compile(_TELLS_TIME.pattern)


def tells_time(text: str) -> bool:
    """Whether ``text`` says when something happened ("last week", "on Friday",
    "in March", "2019", "two days ago")."""
    if text.isascii():
        return _TELLS_TIME_LOWER.search(text.lower()) is not None
    return _TELLS_TIME.search(text) is not None


@dataclass(frozen=True, slots=True)
class Span:
    """A stretch of time: ``[start_ms, end_ms)`` when ``month`` is None, else a
    calendar span (that month, or that month's ``day``) in any year."""

    start_ms: int = 0
    end_ms: int = 0
    month: int | None = None
    day: int | None = None

    @property
    def calendar(self) -> bool:
        return self.month is not None


@dataclass(frozen=True, slots=True)
class _Found:
    start: int
    end: int
    year: int | None
    month: int | None
    day: int | None


def question_spans(text: str, now_ms: int) -> tuple[Span, ...]:
    """The spans of time ``text`` names (none: it names no date). ``now_ms`` anchors
    relative phrases ("last week")."""
    found = _dates(text)
    _share_years(found)
    spans: list[Span] = []
    used: set[int] = set()
    for i, item in enumerate(found):
        if i in used:
            continue
        before = text[: item.start]
        nxt = found[i + 1] if i + 1 < len(found) else None
        if (
            nxt is not None
            and _BETWEEN.search(before)
            and _AND.match(text[item.end : nxt.start])
            and item.year is not None
            and nxt.year is not None
        ):
            first, last = _range(item), _range(nxt)
            if first is not None and last is not None:
                spans.append(Span(first.start_ms, last.end_ms))
                used.add(i + 1)
                continue
        span = _month_relative(item, before, now_ms) or _range(item)
        if span is None and item.year is None:  # a dated span that is no date stays out
            span = _calendar(item)
        if span is None:
            continue
        spans.append(_shifted(span, before))
    spans.extend(_relative(text, now_ms))
    return tuple(spans)


def _dates(text: str) -> list[_Found]:
    out = _holidays(text)
    taken = [(found.start, found.end) for found in out]
    for match in _DATE.finditer(text):
        if any(start < match.end() and match.start() < end for start, end in taken):
            continue  # "the 4th of July", "Christmas 2022": read as the holiday
        groups = match.groupdict()
        if groups["iso"]:
            iso_month, iso_day = int(groups["iso_m"]), int(groups["iso_d"])
            if 1 <= iso_month <= 12 and 1 <= iso_day <= 31:
                out.append(
                    _Found(match.start(), match.end(), int(groups["iso"]), iso_month, iso_day)
                )
            continue
        if groups["y4"] and not _year_alone(text, match.end()):
            continue
        word = groups["m1"] or groups["m2"] or groups["m3"]
        day_text = groups["d1"] or groups["d2"]
        year_text = groups["y1"] or groups["y2"] or groups["y3"] or groups["y4"]
        month = _MONTHS[word.rstrip(".").lower()] if word else None
        day = int(re.sub(r"\D", "", day_text)) if day_text else None
        if day is not None and not 1 <= day <= 31:
            continue
        if (
            word
            and word.rstrip(".").lower() in _AMBIGUOUS
            and not _is_month_word(text, match.start(), word, day, year_text)
        ):
            continue
        out.append(
            _Found(match.start(), match.end(), int(year_text) if year_text else None, month, day)
        )
    out.sort(key=lambda found: found.start)
    return out


def _holidays(text: str) -> list[_Found]:
    """The fixed-day holidays ``text`` names (``_HOLIDAY``)."""
    out: list[_Found] = []
    for match in _HOLIDAY.finditer(text):
        group = next(k for k, v in match.groupdict().items() if v and k.startswith("d"))
        year = int(match.group("year")) if match.group("year") else None
        out.append(_Found(match.start(), match.end(), year, int(group[1:3]), int(group[3:])))
    return out


def _year_alone(text: str, end: int) -> bool:
    """A bare year ends the text or a clause, or a name or a function word follows it
    ("in 2023 I…", "in 2023, …"): "2000 steps" is a count, not a year."""
    following = _NEXT.match(text, end)
    if following is None:
        return True
    word = following.group(1)
    return word[0].isupper() or word.lower() in STOPWORDS


def _is_month_word(text: str, start: int, word: str, day: int | None, year: str | None) -> bool:
    """Whether "may" / "march" at ``start`` is the month: next to a day or a year,
    after "in", "last", "since"…, or capitalised inside a sentence ("May I ask" is
    not a date, "in may" and "since May" are)."""
    if day is not None or year is not None:
        return True
    previous = text[:start].split()
    if previous and previous[-1].lower() in _MONTH_CUES:
        return True
    return word[0].isupper() and bool(previous) and not previous[-1].endswith(_ENDS)


def _share_years(found: list[_Found]) -> None:
    """ "between August 11 and August 15 2023": a date without a year takes the year of
    the next or previous date that has one."""
    for i, item in enumerate(found):
        if item.year is None and item.month is not None:
            near = [f.year for f in found[i + 1 :] + found[:i][::-1] if f.year is not None]
            if near:
                found[i] = _Found(item.start, item.end, near[0], item.month, item.day)


def _range(item: _Found) -> Span | None:
    """A dated span: a day, a month of a year, or a year."""
    if item.year is None:
        return None
    try:
        if item.month is None:
            return _between(date(item.year, 1, 1), date(item.year + 1, 1, 1))
        if item.day is None:
            following = date(item.year + item.month // 12, item.month % 12 + 1, 1)
            return _between(date(item.year, item.month, 1), following)
        day = date(item.year, item.month, item.day)
    except ValueError:  # "February 30"
        return None
    return _between(day, day + timedelta(days=1))


def _calendar(item: _Found) -> Span | None:
    if item.month is None:
        return None
    return Span(month=item.month, day=item.day)


def _month_relative(item: _Found, before: str, now_ms: int) -> Span | None:
    """ "last May" / "this May": that month of the year ``now`` says."""
    if item.year is not None or item.month is None or item.day is not None:
        return None
    words = before.split()
    cue = words[-1].lower() if words else ""
    if cue not in ("last", "this"):
        return None
    today = _date(now_ms)
    year = today.year if cue == "this" or item.month < today.month else today.year - 1
    return _range(_Found(item.start, item.end, year, item.month, None))


def _shifted(span: Span, before: str) -> Span:
    """ "the week before <date>" → the seven days up to it; "after" → the seven from
    it (a calendar span stays as it is)."""
    if span.calendar:
        return span
    if _BEFORE.search(before):
        return Span(span.start_ms - 7 * DAY_MS, span.start_ms)
    if _AFTER.search(before):
        return Span(span.end_ms, span.end_ms + 7 * DAY_MS)
    return span


def _relative(text: str, now_ms: int) -> list[Span]:
    today = _date(now_ms)
    out: list[Span] = []
    for match in _RELATIVE.finditer(text):
        if _ANCHORED.match(text, match.end()):
            continue
        if match.group("yesterday"):
            out.append(_between(today - timedelta(days=1), today))
        elif match.group("today"):
            out.append(_between(today, today + timedelta(days=1)))
        elif match.group("unit"):
            out.append(_last(today, match.group("last").lower(), match.group("unit").lower()))
        else:
            count = match.group("n").lower()
            n = _NUMBERS.get(count) or int(count)
            unit = match.group("ago_unit").lower()
            days = {"day": 1, "week": 7, "month": 30, "year": 365}[unit] * n
            slack = {"day": 1, "week": 3, "month": 10, "year": 60}[unit]
            centre = today - timedelta(days=days)
            out.append(_between(centre - timedelta(days=slack), centre + timedelta(days=slack + 1)))
    return out


def _last(today: date, which: str, unit: str) -> Span:
    if unit.startswith("week"):
        monday = today - timedelta(days=today.weekday())
        if which == "this":
            return _between(monday, today + timedelta(days=1))
        return _between(monday - timedelta(days=7), monday)
    if unit == "month":
        first = today.replace(day=1)
        if which == "this":
            return _between(first, today + timedelta(days=1))
        previous = (first - timedelta(days=1)).replace(day=1)
        return _between(previous, first)
    if which == "this":
        return _between(date(today.year, 1, 1), today + timedelta(days=1))
    return _between(date(today.year - 1, 1, 1), date(today.year, 1, 1))


def _between(first: date, end: date) -> Span:
    return Span(_ms(first), _ms(end))


def _ms(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def _date(epoch_ms: int) -> date:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).date()
