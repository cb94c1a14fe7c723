"""Dates in one form: one date said other ways is one fact, another date another."""

from __future__ import annotations

import pytest

from sidecar.memory.language.dates import canonical_dates
from sidecar.memory.language.facts import contrasts, equivalent, shape


@pytest.mark.parametrize(
    ("said", "canonical"),
    [
        ("User's bday is nov 14.", "User's bday is November 14."),
        ("14/11 is User's birthday.", "November 14 is User's birthday."),
        ("on the fourteenth of November", "on November 14"),
        ("November 14th", "November 14"),
        ("on 14 Nov", "on November 14"),
        ("the twenty-first of June", "June 21"),
        ("3/4 of a pizza", "3/4 of a pizza"),  # day and month order unknown: as written
        ("from 9.30 to 5", "from 9.30 to 5"),  # a time, not a date
        ("User will march on the 5th", "User will march on the 5th"),
        ("nothing before 10am", "nothing before 10:00"),
        ("nothing before 10 o'clock", "nothing before 10:00"),
        ("gym at 7pm", "gym at 19:00"),
        ("8:30 invites", "08:30 invites"),
    ],
)
def test_dates_are_written_one_way(said: str, canonical: str) -> None:
    assert canonical_dates(said) == canonical


def test_one_birthday_said_five_ways_is_one_fact_and_another_date_is_not() -> None:
    ways = [
        "User's bday is nov 14.",
        "14/11 is User's birthday.",
        "User's birthday falls on the fourteenth of November every year.",
        "User celebrates User's birthday on 14 Nov.",
        "November 14th is User's birthday.",
    ]
    shapes = [shape(w) for w in ways]
    assert all(equivalent(shapes[0], s) for s in shapes)
    other = shape("User's birthday is on 15 November.")
    assert not equivalent(shapes[0], other)
    assert contrasts(
        shape("User's dentist visit is on 3 May."), shape("User's dentist visit is on 5 May.")
    )


def test_days_of_one_schedule_are_no_near_miss_but_other_days_are() -> None:
    week = shape("Fridays are User's day off, User works Monday to Thursday.")
    assert not contrasts(week, shape("User is off on Fridays."))
    assert contrasts(shape("User swims on Tuesday."), shape("User swims on Thursday."))
