"""Proper names read from memory text, for entity links."""

from __future__ import annotations

import pytest

from sidecar.memory.language.entities import (
    is_user_fact,
    mentions,
    named_subject,
    names,
    speaker,
    subject,
)


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


def test_the_subject_a_text_opens_with_is_found_without_reading_every_name() -> None:
    """Only the runs of capitalised words that hold the text's first letters are
    read; a name the opening rule drops counts when the text names it later."""
    long_tail = " ".join(f"Then Zed{i} met Quinn{i} in Oslo." for i in range(200))
    assert named_subject(f"Ana lives in Porto. {long_tail}") == "Ana"
    assert named_subject("Caroline: Glad you agree, Caroline. Thanks.") == "Caroline"
    assert named_subject(f"Switched to Rust. {long_tail}") is None


def test_a_transcript_line_names_its_speaker() -> None:
    assert speaker("user: I moved to Lisbon") == "user"
    assert speaker("Melanie: we went camping") == "melanie"
    assert speaker("assistant: Sure: here are three") == "assistant"
    assert speaker("User lives in Lisbon.") is None
    assert speaker("2024: a good year") is None
