"""How a fact tells a change (issue O, item 1): the cues, the ones that move a thing
instead, an ending that names what ends, whose attribute it is, and the attribute
words a change told as an event carries into its vector and lexical key."""

from __future__ import annotations

import pytest

from sidecar.memory.language.changes import changes, names_ending, people_of, told
from sidecar.memory.language.embedding_text import changed_words, embedding_text


@pytest.mark.parametrize(
    "text",
    [
        "User and others emigrated to Toronto in March.",
        "User has transfered to Exeter, starting there in september.",  # a typo
        "User dropped Gymbox, it was way too pricey.",
        "User finally got rid of the fiesta, picked up a used Golf on saturday.",
        "User accepted the offer from HSBC, User's last day at Barclays is friday.",
        "The lease in camden ended so now User is in a house share in Brixton.",
        "User left the company in March.",
        "User left User's job at Google to freelance.",
    ],
)
def test_a_change_told_as_an_event_is_a_change(text: str) -> None:
    assert changes(text)


@pytest.mark.parametrize(
    "text",
    [
        "User left User's headphones at the gym again.",
        "User moved desks to the third floor at work.",
        "User forgot the charger in the car.",
        "User drives a blue Skoda Octavia.",
    ],
)
def test_moving_or_leaving_a_thing_is_no_change(text: str) -> None:
    assert not changes(text)


def test_an_ending_names_what_ends_near_it() -> None:
    assert names_ending("User left nursing in 2025, User is a tester now.", "User is a nurse.")
    assert names_ending(
        "User cancelled User's PureGym membership and joined a climbing wall.",
        "User trains at PureGym on Mill Road.",
    )
    assert names_ending("The leaf got written off in a crash.", "User drives a Nissan Leaf.")
    # Named, but not as what ends; and the old fact's verb is not its value.
    assert names_ending("User left York for Leeds.", "User lives in York.")
    assert not names_ending("User left a glowing review for a York cafe.", "User lives in York.")
    assert not names_ending("User stopped working late.", "User works at Siemens.")
    assert not names_ending("User left User's keys at PureGym.", "User trains at PureGym.")


def test_a_role_the_user_holds_is_not_another_person() -> None:
    assert people_of("User is a primary school teacher.") == frozenset()
    assert people_of("User's sister just moved to Leeds.") == {"sister"}
    assert people_of("User's brother's teacher retired.") >= {"brother"}


def test_events_tell_the_attribute_they_change() -> None:
    assert "residence" in told("The movers came on Friday, User and others are in Hamburg.")
    assert "employer" in told("User handed in User's notice at Deloitte.")
    assert told("User loves the smell of rain.") == ()


def test_a_change_told_as_an_event_carries_its_attribute_words() -> None:
    text = "User handed in User's notice at Deloitte, starting at KPMG on Monday."
    assert changed_words(text) == "where User works: employer, company, job"
    assert embedding_text(text).endswith("(where User works: employer, company, job)")
    # Someone else's change, and an event that changes nothing of the user's: none.
    assert changed_words("User's sister got laid off from Tesco.") is None
    assert changed_words("User is thinking about a new car.") is None
