"""Proper names read from memory text, for entity links."""

from __future__ import annotations

import pytest

from sidecar.memory.language.entities import is_user_fact, mentions, names, subject


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("User's sister is Ana.", {"Ana"}),
        ("Ana lives in Porto.", {"Ana", "Porto"}),
        ("User works at Helix Labs.", {"Helix Labs"}),
        ("Dr. Okafor's clinic is on Mill Street.", {"Okafor", "Mill Street"}),
        ("The Skoda Octavia needs its MOT in March.", {"Skoda Octavia", "MOT"}),
        ("Mrs. Kowalski waters the plants when User travels.", {"Kowalski"}),
        ("Rio can say about forty words.", {"Rio"}),
        # an ordinary word opening a sentence names nothing; the place still counts
        ("Went to Paris last May.", {"Paris"}),
        ("Glad to hear it. Sounds great! You're awesome.", set()),
        # a run never crosses a sentence end; openers ahead of a name are dropped
        ("I saw Melanie. It was fine.", {"Melanie"}),
        ("Yeah Mel, that was fun.", {"Mel"}),
        ("Gina: Wow Jon, Door Dash is cool", {"Jon", "Door Dash"}),
        ("User has a meeting on Monday in January.", set()),
        ("", set()),
    ],
)
def test_names(text: str, expected: set[str]) -> None:
    assert names(text) == expected


def test_mentions_needs_the_whole_name() -> None:
    assert mentions("Ana lives in Porto.", "Ana")
    assert mentions("User's sister is Ana.", "Ana")
    assert not mentions("Anastasia lives in Porto.", "Ana")
    assert not mentions("Banana bread.", "Ana")
    assert mentions("Anastasia and Ana met.", "Ana")  # a later whole-word match counts


def test_user_facts_are_the_write_paths_wording() -> None:
    assert is_user_fact("User's father is Piotr.")
    assert is_user_fact("User works at Helix Labs.")
    assert not is_user_fact("Piotr retired from teaching maths.")
    assert not is_user_fact("Username is taken.")


@pytest.mark.parametrize(
    ("text", "about"),
    [
        ("Melanie: We love painting together lately.", "Melanie"),
        ("Dr. Okafor: the results are fine.", "Dr. Okafor"),
        ("Mary Jane Watson: hi there", "Mary Jane Watson"),
        ("Ana just moved to Porto.", "Ana"),
        ("User: I like jazz.", None),
        ("User's sister is Ana.", None),
        ("went to Paris last week", None),
    ],
)
def test_subject_is_the_speaker_or_the_opening_name(text: str, about: str | None) -> None:
    assert subject(text) == about
