"""The dates a question names, as spans of time its memories may have been told in."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime

import pytest

from sidecar.memory.language import when
from sidecar.memory.language.when import asks_when, question_spans, tells_time

NOW = int(datetime(2026, 11, 27, 15, 0, tzinfo=UTC).timestamp() * 1000)


def day(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).date()


def shown(text: str) -> list[str]:
    return [
        f"every {s.month}/{s.day}" if s.calendar else f"{day(s.start_ms)}..{day(s.end_ms)}"
        for s in question_spans(text, NOW)
    ]


@pytest.mark.parametrize(
    ("question", "spans"),
    [
        ("What did Nate make on 9 November, 2022?", ["2022-11-09..2022-11-10"]),
        ("What painting did she show on October 13, 2023?", ["2023-10-13..2023-10-14"]),
        ("what did i cook on the 3rd of march 2024", ["2024-03-03..2024-03-04"]),
        ("What did Mel paint in July 2023?", ["2023-07-01..2023-08-01"]),
        ("Any trips in Dec. 2023?", ["2023-12-01..2024-01-01"]),
        ("How many times did I go to the beach in 2023?", ["2023-01-01..2024-01-01"]),
        ("notes from 2023-05-08", ["2023-05-08..2023-05-09"]),
        # No year: that month (or day) in any year.
        ("When did we go camping in June?", ["every 6/None"]),
        ("May I ask what we did in may?", ["every 5/None"]),
        ("Did the Kyiv trip happen in Mar. or since March?", ["every 3/None", "every 3/None"]),
        ("what happened on March 3rd", ["every 3/3"]),
        # Ranges and anchors.
        ("Where was John between August 11 and August 15 2023?", ["2023-08-11..2023-08-16"]),
        ("What did John do the week before August 3, 2023?", ["2023-07-27..2023-08-03"]),
        ("What did she do last weekend before April 10, 2023?", ["2023-04-03..2023-04-10"]),
        # Relative to now (2026-11-27, a Friday).
        ("What did I say last May?", ["2026-05-01..2026-06-01"]),
        ("what did I tell you in march this year", ["every 3/None", "2026-01-01..2026-11-28"]),
        ("what did I eat yesterday", ["2026-11-26..2026-11-27"]),
        ("the doctor I saw last week", ["2026-11-16..2026-11-23"]),
        ("something from last month", ["2026-10-01..2026-11-01"]),
        ("two weeks ago I met someone", ["2026-11-10..2026-11-17"]),
        # Holidays on a fixed day.
        ("What was the airline that I flied with on Valentine's day?", ["every 2/14"]),
        ("valentines day dinner plans", ["every 2/14"]),
        ("What did I cook at Christmas 2022?", ["2022-12-25..2022-12-26"]),
        ("what did we do on the 4th of July", ["every 7/4"]),
        ("Where was I on New Year's Eve?", ["every 12/31"]),
        ("any St. Patrick's Day plans?", ["every 3/17"]),
    ],
)
def test_dates_a_question_names(question: str, spans: list[str]) -> None:
    assert shown(question) == spans


@pytest.mark.parametrize(
    "question",
    [
        "You may go now",
        "May I ask what my dog's name is?",
        "I ran 2000 steps",
        "What is my favourite number, 12?",
        "what did I march for",
        "Where does my sister live?",
        "room 1999 b",
        "When did I last see Valentine?",  # a name, not the day
    ],
)
def test_no_date_is_read_into_a_question_without_one(question: str) -> None:
    assert question_spans(question, NOW) == ()


def test_an_impossible_day_is_no_date() -> None:
    assert question_spans("what happened on February 30, 2023", NOW) == ()


@pytest.mark.parametrize(
    ("question", "asks"),
    [
        ("When did Melanie go camping?", True),
        ("what year did I move to Porto", True),
        ("How long ago did I quit smoking?", True),
        ("Which day is my dentist appointment?", True),
        ("In which month's game did John score 40 points?", True),
        ("After how many weeks did we meet again?", True),
        ("How many dogs do I have?", False),
        ("What did I eat when I was in Rome?", False),
        ("Where does my sister live?", False),
    ],
)
def test_asks_when(question: str, asks: bool) -> None:
    assert asks_when(question) is asks


@pytest.mark.parametrize(
    ("text", "tells"),
    [
        ("I went hiking last weekend.", True),
        ("We adopted her two years ago.", True),
        ("The appointment is on Friday.", True),
        ("I moved to Porto in 2019.", True),
        ("Back in March we painted the kitchen.", True),
        ("I love painting sunsets.", False),
        ("User's sister is Ana.", False),
    ],
)
def test_tells_time(text: str, tells: bool) -> None:
    assert tells_time(text) is tells


def test_an_ascii_text_is_read_lowered_exactly_as_ignoring_case() -> None:
    atoms = [
        "Last", " ", "WEEK", "weekend", "_", "on", "Friday", "new", "Year's", "2019",
        "20190", "x2019", "May", "MARCH", "Valentine’s", "xmas", "ago", "Chicago", "\n",
        "ſummer", "İ", "K", "past", "Nights", "Easter",
    ]  # fmt: skip
    rng = random.Random(3)
    for _ in range(20_000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 8)))
        assert tells_time(text) is (when._TELLS_TIME.search(text) is not None), text
