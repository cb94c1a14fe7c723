"""Questions asking for an amount and memories stating one, in several registers."""

from __future__ import annotations

import pytest

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
