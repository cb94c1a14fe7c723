"""Stored facts never say "you": the assistant is named as such, a generic "you" is
"one", a request to the assistant is cut off the fact it follows, and a bare reply
to the assistant is no fact at all."""

from __future__ import annotations

import pytest

from sidecar.memory.language.addressee import is_reaction, name_the_assistant


@pytest.mark.parametrize(
    ("fact", "stored"),
    [
        ("User likes it when you use bullet points.",
         "User likes it when the assistant uses bullet points."),
        ("User wants you to answer in French.", "User wants the assistant to answer in French."),
        ("User prefers that you keep answers short.",
         "User prefers that the assistant keeps answers short."),
        ("User would rather you didn't use emojis.",
         "User would rather the assistant didn't use emojis."),
        ("User hates when you're too formal.", "User hates when the assistant is too formal."),
        ("User thinks your summaries are too long.",
         "User thinks the assistant's summaries are too long."),
        ("User asked you to call User Liz.", "User asked the assistant to call User Liz."),
        ("User is interested in trying the Crème Brûlée recipe you mentioned.",
         "User is interested in trying the Crème Brûlée recipe the assistant mentioned."),
        ("User doesn't want you always correcting User's grammar.",
         "User doesn't want the assistant always correcting User's grammar."),
        ("User has told you before that User is vegan.",
         "User has told the assistant before that User is vegan."),
        ("User thinks you guys did a great job with the summary.",
         "User thinks the assistant did a great job with the summary."),
        ("User will send you the draft tomorrow.",
         "User will send the assistant the draft tomorrow."),
    ],
)  # fmt: skip
def test_the_assistant_is_named(fact: str, stored: str) -> None:
    assert name_the_assistant(fact) == stored


@pytest.mark.parametrize(
    ("fact", "stored"),
    [
        ("User thinks you can't beat a home-cooked meal.",
         "User thinks one can't beat a home-cooked meal."),
        ("User finds that you never really know until you try.",
         "User finds that one never really knows until one tries."),
        ("User loves Lisbon, you know, the food is great.",
         "User loves Lisbon, the food is great."),
        ("User is glad User found the scarf; it's funny how you don't notice what you've got.",
         "User is glad User found the scarf; it's funny how one doesn't notice what one has got."),
        ("User says that when you run every day your knees hurt.",
         "User says that when one runs every day one's knees hurt."),
    ],
)  # fmt: skip
def test_a_generic_you_is_one(fact: str, stored: str) -> None:
    assert name_the_assistant(fact) == stored


@pytest.mark.parametrize(
    ("fact", "stored"),
    [
        ("User is planning a trip to Miami and User was wondering if you could recommend hotels.",
         "User is planning a trip to Miami."),
        ("User has been into Korean dramas lately, and was wondering if you can suggest some.",
         "User has been into Korean dramas lately."),
        ("User is thinking of buying a car, so User would love it if you could help compare a few.",
         "User is thinking of buying a car."),
    ],
)  # fmt: skip
def test_a_request_is_cut_off_the_fact_before_it(fact: str, stored: str) -> None:
    assert name_the_assistant(fact) == stored


@pytest.mark.parametrize(
    "fact",
    [
        "User was wondering if you could suggest some Korean soups.",
        "User appreciates your assistance.",
        "User is glad you think so.",
        "User thinks you're right, User must have gotten it mixed up.",
        "User is so grateful for your help!",
        "Thank you so much.",
        "User would love it if you could help.",
    ],
)
def test_a_bare_reply_or_request_to_the_assistant_is_no_fact(fact: str) -> None:
    assert name_the_assistant(fact) is None


@pytest.mark.parametrize(
    "fact",
    [
        "User lives in Leeds.",
        'User wants to title the post "Why you have not found your passion yet".',
        "User's band is called You Me At Six.",
        "User loves the song Someone Like You.",
    ],
)
def test_a_fact_without_an_addressed_you_is_left_as_it_is(fact: str) -> None:
    assert name_the_assistant(fact) == fact


@pytest.mark.parametrize(
    "fact",
    [
        "User will definitely check some of those out.",
        "User loves these ideas.",
        "User really appreciates the detailed recommendations.",
        "Let User try that again.",
        "User thinks that sounds great.",
        "User will keep that in mind.",
        "User totally agrees.",
        "These tips are really helpful, User appreciates it.",
        "User is glad User could help.",
    ],
)
def test_a_reaction_to_the_answer_is_no_fact(fact: str) -> None:
    assert is_reaction(fact)
    assert name_the_assistant(fact) is None


@pytest.mark.parametrize(
    "fact",
    [
        "User will definitely check out the Ziptrek zipline in Whistler.",
        "User loves Modern Family.",
        "User feels vulnerable and scared.",
        "User is in 10021.",
        "User likes the idea of tracking User's expenses.",
        "User's budget is around $500.",
        "User thinks the trip to Kyoto was great.",
        'User loves the tips in "Atomic Habits".',
    ],
)
def test_a_fact_that_names_something_is_no_reaction(fact: str) -> None:
    assert not is_reaction(fact)
