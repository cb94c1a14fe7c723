"""Questions asking for an amount and memories stating one, in several registers."""

from __future__ import annotations

import random
import re

import pytest

from sidecar.memory.language import amounts
from sidecar.memory.language.amounts import asks_amount, tells_amount


@pytest.mark.parametrize(
    "question",
    [
        "How long was I in Japan for?",
        "What size is my new Samsung TV?",
        "What is the total amount I spent on luxury items in the past few months?",
        "how many siblings do i have",
        "How much did I pay for the concert tickets?",
        "what's the price of the bike I bought",
        "How far is my commute?",
        "How old is my dog?",
        "how often do I go to the gym these days?",
        "What percentage of my salary do I save?",
        "Remind me, how many books did I read last year?",
        "I forgot - what was the total weight of the feed I bought?",
        "what was the cost of my flight to lisbon",
        "number of plants i own?",
        "hw many books do i own, roughly? how many",
    ],
)
def test_questions_that_ask_an_amount(question: str) -> None:
    assert asks_amount(question)


@pytest.mark.parametrize(
    "question",
    [
        "When did I volunteer at the shelter's fundraising dinner?",
        "Where do I currently keep my old sneakers?",
        "What kitchen appliance did I buy 10 days ago?",
        "How did I get to work before I moved?",
        "how are you today?",
        "Which airline did I fly with on Valentine's day?",
        "How many days ago did I buy the smoker?",
        "How long ago did I start running?",
        "How many weeks had I been taking pottery classes when I bought a kiln?",
        "What's my sister's name?",
    ],
)
def test_questions_that_ask_something_else(question: str) -> None:
    assert not asks_amount(question)


@pytest.mark.parametrize(
    "text",
    [
        "User spent two weeks traveling solo around the country.",
        "User got a 50-pound batch of layer feed.",
        "User actually spent around $120 on the purchase.",
        "User has a 55-inch TV in the living room.",
        "User saves 15% of User's salary.",
        "User reads about 3-4 books a month.",
        "User has three siblings.",
        "User runs 5k every Saturday.",
        "User's commute is 45 minutes each way.",
        "User cooks at home about 4 times a week for the past 3 months.",
        "User paid twelve dollars for it.",
        "User has a dozen plants on the balcony.",
        "User goes climbing twice a week.",
        "Caroline: it took me a couple of hours to finish",
    ],
)
def test_memories_that_state_an_amount(text: str) -> None:
    assert tells_amount(text)


@pytest.mark.parametrize(
    "text",
    [
        "User just got a smoker on 15 March 2023.",
        "User moved to Denver in 2019.",
        "User's best friend's party was on the 22nd of April.",
        "User is planning a trip in June 2023.",
        "User has a dog named Max.",
        "User is one of the organisers of the book club.",
        "User meets Sarah at 3pm on Fridays.",
        "User finally set up the TV on the weekend of 27 May 2023.",
        "User's flight is on March 3rd, 2024.",
        "User loved the 1990s sitcoms.",
        "assistant: Here are some ideas:\n1. Visit the museum\n2) Walk along the river",
        "Step 2 of the recipe is where User got stuck.",
    ],
)
def test_memories_without_an_amount(text: str) -> None:
    assert not tells_amount(text)


def _by_definition(text: str) -> bool:
    """The amount test as first written: every non-amount blanked by one ``sub``
    over the whole text, then any amount left (exact, and slow on long texts)."""
    lower = text.lower()
    if any(part in lower for part in amounts._NUMBER_PARTS) and (
        not amounts._NUMBER_WORD_SET.isdisjoint(amounts._LETTERS.findall(lower))
        or amounts._PHRASE_AMOUNT.search(lower) is not None
    ):
        return True
    if re.search(r"\d", text) is None:
        return False
    return amounts._DIGIT_AMOUNT.search(amounts._NOT_AMOUNTS.sub(" ", text)) is not None


def test_the_fast_amount_test_is_the_definition_on_awkward_texts() -> None:
    """Only the starts a non-amount can have are tried, on the lowered text when it
    is ASCII: the same answer as one substitution over the whole text, checked on
    random runs of dates, list numbers, times, currency and Unicode look-alikes."""
    atoms = [
        "5", " ", "\n", "  \n ", "March", "mar.", "Sept.", "1st", "2023", "10:30", "pm",
        "a.m.", "#", "no.", "Step", "$", "€", "-", "1.", ")", "x", "_", "of", ",", "\t",
        "\u00a0", "5th", "1990s", "2023-05-01", "12", "3%", "inch", "two", "K", "ſ", "İ",
        "ᛯ", "٣",
    ]  # fmt: skip
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 14)))
        assert tells_amount(text) is _by_definition(text), text
