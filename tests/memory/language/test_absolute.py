"""Relative dates are stored absolute, against the time the turn was said."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sidecar.memory.language.absolute import absolute_dates

#: Tuesday, 30 May 2023, noon UTC.
SAID = int(datetime(2023, 5, 30, 12, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("fact", "stored"),
    [
        ("User went hiking yesterday.", "User went hiking on 29 May 2023."),
        ("User moved to Porto last month.", "User moved to Porto in April 2023."),
        ("User has been vegan since last year.", "User has been vegan since 2022."),
        ("User's sister visits next week.", "User's sister visits in the week of 5 June 2023."),
        ("User bought a car two weeks ago.", "User bought a car around 16 May 2023."),
        ("User ran a 5k last Saturday.", "User ran a 5k on Saturday, 27 May 2023."),
        ("User starts a new job next Monday.", "User starts a new job on Monday, 5 June 2023."),
        ("User got a dog 3 days ago.", "User got a dog on 27 May 2023."),
        ("User went camping last weekend.", "User went camping on the weekend of 27 May 2023."),
        ("User quit smoking a couple of months ago.", "User quit smoking in March 2023."),
        (
            "User has a dentist appointment tomorrow.",
            "User has a dentist appointment on 31 May 2023.",
        ),
        ("User got promoted THIS YEAR.", "User got promoted in 2023."),
        (
            "User finished the book the day before yesterday.",
            "User finished the book on 28 May 2023.",
        ),
        ("User graduated 5 years ago.", "User graduated in 2018."),
        ("User adopted a cat last Tuesday.", "User adopted a cat on Tuesday, 23 May 2023."),
    ],
)
def test_relative_dates_become_dates(fact: str, stored: str) -> None:
    assert absolute_dates(fact, SAID) == stored


@pytest.mark.parametrize(
    "fact",
    [
        "User lost ten pounds in two weeks.",  # a duration, not a date
        "User talked about yesterday's game.",  # a possessive stays as said
        "User went to Rome a few days ago.",  # vague
        "User visited Lisbon recently.",
        "User went skiing last winter.",
        "User lives in Berlin.",
        "User plays tennis every week.",
        "User's last name is Weekes.",
    ],
)
def test_vague_or_no_dates_stay_as_said(fact: str) -> None:
    assert absolute_dates(fact, SAID) == fact


def test_no_time_no_change() -> None:
    assert absolute_dates("User went hiking yesterday.", 0) == "User went hiking yesterday."


@pytest.mark.parametrize(
    "fact",
    [
        "User set up the new TV last weekend, on Saturday, March 12th, after weeks.",
        "User met her last Friday, May 26th.",
        "User went there yesterday (the 29th of May) with Ana.",
    ],
)
def test_a_phrase_the_user_dates_in_the_next_words_stays_as_said(fact: str) -> None:
    # Resolving it as well would give the fact two dates ("on the weekend of 20 May
    # 2023, on Saturday, March 12th"); the user's own date is the one to keep.
    assert absolute_dates(fact, SAID) == fact


def test_a_word_that_starts_like_a_month_is_no_date() -> None:
    assert absolute_dates("User saw it last week, Mayhem was great.", SAID) == (
        "User saw it in the week of 22 May 2023, Mayhem was great."
    )
