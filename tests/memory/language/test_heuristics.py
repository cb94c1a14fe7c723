"""Tests for the non-LLM fact extractor (sidecar.memory.language.heuristics)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.memory.language.heuristics import (
    HEURISTIC_CONFIDENCE,
    extract_heuristic,
    rewrite_first_person,
)
from sidecar.memory.records.records import MemoryType
from sidecar.memory.records.turns import Fact


def texts(user_text: str, max_facts: int = 10) -> list[str]:
    return [fact.text for fact in extract_heuristic(user_text, max_facts=max_facts)]


def one(user_text: str) -> Fact:
    facts = extract_heuristic(user_text, max_facts=10)
    assert len(facts) == 1, [f.text for f in facts]
    return facts[0]


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("I live in Berlin", "User lives in Berlin."),
        ("I live in Berlin.", "User lives in Berlin."),
        ("I live in Berlin!", "User lives in Berlin."),
        ("I'm allergic to peanuts", "User is allergic to peanuts."),
        ("I am allergic to peanuts.", "User is allergic to peanuts."),
        ("My sister's name is Ana", "User's sister's name is Ana."),
        (
            "My name is Ana and people call me Annie.",
            "User's name is Ana and people call User Annie.",
        ),
        ("I have a dog named Rex.", "User has a dog named Rex."),
        ("I've been to Japan twice.", "User has been to Japan twice."),
        ("I don't eat meat.", "User does not eat meat."),
        ("I can't stand cilantro.", "User cannot stand cilantro."),
        ("I work as a nurse.", "User works as a nurse."),
        ("I teach math.", "User teaches math."),
        ("I study law.", "User studies law."),
        ("I moved to Lisbon last year.", "User moved to Lisbon last year."),
        ("We have two cats.", "User and others have two cats."),
        ("The house is ours and our dog is old.", "The house is ours and User's dog is old."),
    ],
)
def test_first_person_statements_are_rewritten_about_user(said: str, fact: str) -> None:
    found = one(said)
    assert found.text == fact
    assert found.memory_type == MemoryType.SEMANTIC
    assert found.source == "heuristic"
    assert found.confidence == HEURISTIC_CONFIDENCE
    assert found.importance == 0.5


def test_heuristic_confidence_is_below_the_llm_confidence() -> None:
    from sidecar.memory.write.turns.extraction import LLM_CONFIDENCE

    assert HEURISTIC_CONFIDENCE < LLM_CONFIDENCE


@pytest.mark.parametrize(
    "said",
    [
        "Where do I live?",
        "What's my name?",
        "Can you help me plan my trip?",
        "Could you summarize my notes.",
        "Please tell me a joke about my job.",
        "Tell me about my horoscope.",
        "Help me write my CV.",
        "Write my cover letter for a nurse job.",
        "How do I reset my password.",
        "Do I need a visa for my trip.",
        "Explain my test results.",
        "Give me three names for my cat.",
        "Should I buy a new car for my commute.",
        "Is my code correct.",
        "Let's plan my week.",
    ],
)
def test_questions_and_requests_are_dropped(said: str) -> None:
    assert extract_heuristic(said, max_facts=10) == []


@pytest.mark.parametrize(
    "said",
    [
        "The weather is nice today.",
        "Berlin is the capital of Germany.",
        "You are very helpful.",
        "Python 3.11 was released in 2022.",
        "This function returns a list.",
    ],
)
def test_non_first_person_sentences_are_no_facts_about_the_user(said: str) -> None:
    # At most a fact about a named subject ("Berlin ..."), which the writer keeps only
    # for someone the user's own facts name ("User's sister is Ana.").
    facts = extract_heuristic(said, max_facts=10)
    assert all(f.about and not f.text.startswith("User") for f in facts)


@pytest.mark.parametrize("said", ["", "   ", "\n\n", "Hi!", "Thanks", "ok.", "Yes", "I am."])
def test_empty_and_trivial_text_gives_no_facts(said: str) -> None:
    assert extract_heuristic(said, max_facts=10) == []


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("Always answer in French.", "User wants the assistant to always answer in French."),
        ("Never use emojis!", "User wants the assistant to never use emojis."),
        ("Please never use emojis.", "User wants the assistant to never use emojis."),
        (
            "I want you to answer in bullet points.",
            "User wants the assistant to answer in bullet points.",
        ),
        (
            "I need you to keep answers short.",
            "User wants the assistant to keep answers short.",
        ),
    ],
)
def test_constraints_are_typed_constraint(said: str, fact: str) -> None:
    found = one(said)
    assert found.text == fact
    assert found.memory_type == MemoryType.CONSTRAINT
    assert found.importance == 0.8
    assert found.confidence == HEURISTIC_CONFIDENCE
    assert found.source == "heuristic"


def test_dont_ever_is_a_constraint() -> None:
    found = one("Don't ever call me Bob.")
    assert found.memory_type == MemoryType.CONSTRAINT
    assert found.text.startswith("User wants the assistant to ")


@pytest.mark.parametrize("said", ["Never call me Bob.", "I want you to call me Bob."])
def test_first_person_words_in_constraints_are_rewritten(said: str) -> None:
    found = one(said)
    assert found.memory_type == MemoryType.CONSTRAINT
    assert " me " not in f" {found.text} "
    assert "User Bob" in found.text


def test_id_like_you_to_is_a_clean_constraint() -> None:
    found = one("I'd like you to use metric units.")
    assert found.memory_type == MemoryType.CONSTRAINT
    assert found.text == "User wants the assistant to use metric units."


@pytest.mark.parametrize(
    "said",
    [
        "I usually take the train to work.",
        "I typically code in Rust.",
        "I tend to read before bed.",
        "I prefer to work at night.",
        "I normally walk to work.",
        "I generally skip breakfast.",
    ],
)
def test_habits_are_typed_procedural(said: str) -> None:
    found = one(said)
    assert found.memory_type == MemoryType.PROCEDURAL
    assert found.text.startswith("User ")
    assert found.source == "heuristic"


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("I usually go running in the morning.", "User usually goes running in the morning."),
        ("I always drink tea.", "User always drinks tea."),
        ("I really love jazz.", "User really loves jazz."),
    ],
)
def test_adverbs_between_i_and_the_verb_are_kept(said: str, fact: str) -> None:
    assert one(said).text == fact


def test_lower_case_i_is_rewritten() -> None:
    assert one("i live in berlin").text == "User lives in berlin."


def test_typographic_apostrophes_are_rewritten() -> None:
    assert one("I’m allergic to peanuts.").text == "User is allergic to peanuts."


def test_greetings_are_stripped_before_the_statement() -> None:
    assert texts("Hi, I live in Berlin.") == ["User lives in Berlin."]
    assert texts("Thanks! I'm a vegetarian.") == ["User is a vegetarian."]


def test_several_sentences_in_order() -> None:
    said = (
        "Hello! I live in Berlin. What's the weather like? My sister's name is Ana.\n"
        "Always answer in French. Berlin is big. I'm allergic to peanuts."
    )
    proposed = extract_heuristic(said, max_facts=10)
    # "Berlin is big." is about Berlin: the writer keeps it only if one of the user's
    # relations is called Berlin.
    assert [(f.text, f.about) for f in proposed if f.about] == [("Berlin is big.", "Berlin")]
    facts = [f for f in proposed if not f.about]
    assert [f.text for f in facts] == [
        "User lives in Berlin.",
        "User's sister's name is Ana.",
        "User wants the assistant to always answer in French.",
        "User is allergic to peanuts.",
    ]
    assert [f.memory_type for f in facts] == [
        MemoryType.SEMANTIC,
        MemoryType.SEMANTIC,
        MemoryType.CONSTRAINT,
        MemoryType.SEMANTIC,
    ]


def test_max_facts_caps_the_result_keeping_the_first() -> None:
    said = "I live in Berlin. I have a dog. I work as a nurse. I speak German."
    assert texts(said, max_facts=2) == ["User lives in Berlin.", "User has a dog."]
    assert texts(said, max_facts=1) == ["User lives in Berlin."]
    assert len(texts(said, max_facts=10)) == 4


def test_duplicates_are_dropped_case_insensitively() -> None:
    said = "I live in Berlin. I live in Berlin! i'm here. I LIVE IN BERLIN. I have a dog."
    found = texts(said)
    assert found.count("User lives in Berlin.") == 1
    assert [t.casefold() for t in found].count("user lives in berlin.") == 1
    assert found[-1] == "User has a dog."


def test_duplicates_do_not_count_towards_max_facts() -> None:
    said = "I live in Berlin. I live in Berlin. I have a dog."
    assert texts(said, max_facts=2) == ["User lives in Berlin.", "User has a dog."]


def test_newlines_split_sentences() -> None:
    assert texts("I live in Berlin\nI have a dog") == ["User lives in Berlin.", "User has a dog."]


@given(st.text(max_size=400), st.integers(min_value=1, max_value=5))
def test_never_crashes_and_respects_the_contract(text: str, max_facts: int) -> None:
    facts = extract_heuristic(text, max_facts=max_facts)
    assert len(facts) <= max_facts
    assert len({f.text.casefold() for f in facts}) == len(facts)
    for fact in facts:
        assert fact.source == "heuristic"
        assert fact.confidence == HEURISTIC_CONFIDENCE
        assert fact.text.endswith(".")
        assert fact.memory_type in (
            MemoryType.SEMANTIC,
            MemoryType.PROCEDURAL,
            MemoryType.CONSTRAINT,
        )


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("I live in Berlin", "User lives in Berlin."),
        ("I'll move to Rome.", "User will move to Rome."),
        ("I'd rather walk", "User would rather walk."),
        ("I won't fly", "User will not fly."),
        ("I do not smoke", "User does not smoke."),
        ("I go hiking", "User goes hiking."),
        ("I fix bikes", "User fixes bikes."),
        ("I play chess", "User plays chess."),
        ("I hurt myself", "User hurts themselves."),
        ("my cat likes me", "User's cat likes User."),
    ],
)
def test_rewrite_first_person(sentence: str, expected: str) -> None:
    assert rewrite_first_person(sentence) == expected


# -- what the issue quoted: extraction that never changes meaning -------------------------


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("No booze for me, ever.", "No booze for User, ever."),
        ("No Friday afternoon meetings for me, please.",
         "No Friday afternoon meetings for User, please."),
        ("I don't eat meat anymore.", "User does not eat meat anymore."),
        ("I no longer live in Leeds.", "User no longer lives in Leeds."),
        ("I used to smoke.", "User used to smoke."),
        ("I'm not a morning person.", "User is not a morning person."),
        ("I had to explain it twice.", "User had to explain it twice."),
        ("I left accounting in 2020.", "User left accounting in 2020."),
        ("I dont drink.", "User does not drink."),
        ("i dnot drink", "User does not drink."),
        ("Im t1d so I need to watch my carbs.", "User is t1d so User needs to watch User's carbs."),
        ("Honestly the best decision I ever made was a four-day week.",
         "The best decision User ever made was a four-day week."),
        ("I quit vaping 40 days ago and I'm not going back.",
         "User quit vaping 40 days ago and User is not going back."),  # not "User quits"
        ("Please call me Robert.", "User wants to be called Robert."),
        ("been living in galway for 6 yrs now", "User has been living in galway for 6 yrs now."),
        ("I'm learning Welsh at the moment.", "User is learning Welsh at the moment."),
        ("call me Liz from now on", "User wants to be called Liz."),
    ],
)  # fmt: skip
def test_negation_modality_and_grammar_are_kept(said: str, fact: str) -> None:
    assert texts(said) == [fact]


@pytest.mark.parametrize(
    "said",
    [
        "That's my focus time.",  # what is "that"?
        "I never take meetings then.",  # when is "then"?
        "They're my team.",
        "ugh so tired today",
        "My alarm didn't go off this morning.",
        "Sorry, I was away.",
        "haha ok thanks!",
        "Never learned, it just never seemed worth it.",  # not an instruction
        "Always has been.",
        "Call me back later.",  # a request, not a name
        "Quick one before my appointment.",
        "My sister is going to love that.",  # love what?
        "I was arguing with a friend about films last night.",  # a scene being told
        "I just got back from the shops.",
    ],
)
def test_fragments_moods_and_chit_chat_are_not_stored(said: str) -> None:
    assert texts(said) == []


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("By the way, I just got a smoker today and I'm excited to try different woods.",
         "User just got a smoker today and User is excited to try different woods."),
        ("I caught up with Emma, a freelance writer, over lunch today.",
         "User caught up with Emma, a freelance writer, over lunch today."),
        ("btw I adopted a kitten yesterday!", "User adopted a kitten yesterday."),
        ("I finally booked the flights to Lisbon tonight.",
         "User finally booked the flights to Lisbon tonight."),
    ],
)  # fmt: skip
def test_an_event_told_as_it_happened_is_kept_with_its_day(said: str, fact: str) -> None:
    # The writer turns "today" into the turn's date (sidecar.memory.language.absolute):
    # what the user got, met or did that day is a fact about their life, not a mood.
    assert texts(said) == [fact]


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("Please keep your answers under 100 words.",
         "User wants the assistant to keep your answers under 100 words."),
        ("Answer in Spanish from now on, please.",
         "User wants the assistant to answer in Spanish from now on."),
        ("When you show code, use Python please.",
         "User wants the assistant to use Python when you show code."),
        ("Always use bullet points.", "User wants the assistant to always use bullet points."),
        ("pls reply in English only from now on thx",
         "User wants the assistant to reply in English only from now on."),
    ],
)  # fmt: skip
def test_how_to_answer_asked_as_a_request_is_a_lasting_preference(said: str, fact: str) -> None:
    # The writer names the assistant ("your answers": the assistant's).
    assert texts(said) == [fact]


@pytest.mark.parametrize(
    "said",
    [
        "Give me a list of hotels in Miami.",
        "Write a short story in Spanish.",
        "Use bullet points for this one.",
        "Reply 'yes' to every question from now on.",
    ],
)
def test_a_one_off_request_or_a_fixed_reply_is_no_preference(said: str) -> None:
    assert texts(said) == []


@pytest.mark.parametrize(
    "said",
    ["I just got home, so tired today.", "I just got really bored today.", "Got up late today."],
)
def test_getting_home_or_a_mood_is_still_the_moment(said: str) -> None:
    assert texts(said) == []


def test_a_sentence_that_leans_on_the_previous_one_is_joined_to_it() -> None:
    assert texts("I block 2-4pm every day. That's my focus time.") == [
        "User blocks 2-4pm every day; that's User's focus time."
    ]
    assert texts("Three weeks without a single cigarette. I've quit for good.") == [
        "Three weeks without a single cigarette; User has quit for good."
    ]
    assert texts("I've been seeing someone. Her name's Ayesha and it's going well.") == [
        "User has been seeing someone; her name's Ayesha and it's going well."
    ]


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("Moved to Phoenix last week.", "User moved to Phoenix last week."),
        ("Officially single again.", "User is single again."),
        ("Down to 82 kilos after the diet!", "User is down to 82 kilos after the diet."),
        ("New number: 07700 900863.", "User's new number is 07700 900863."),
        ("Switched sides: I root for the White Sox now.", "User roots for the White Sox now."),
        ("Morning! Rain again. Anyway, I'm vegetarian.", "User is vegetarian."),
    ],
)
def test_statements_without_their_subject_or_after_chit_chat_are_the_users(
    said: str, fact: str
) -> None:
    assert texts(said) == [fact]


def test_an_instruction_from_now_on_is_a_constraint() -> None:
    found = one("Use my work address for invoices from now on.")
    assert found.memory_type == MemoryType.CONSTRAINT
    assert (
        found.text
        == "User wants the assistant to use User's work address for invoices from now on."
    )
    clause = texts("i dont do mornings, dont book anything before 10")
    assert clause == [
        "User does not do mornings.",
        "User wants the assistant to not book anything before 10.",
    ]


@pytest.mark.parametrize(
    ("said", "stored"),
    [
        (
            "Please use samh@proton.me from now on.",
            "User wants the assistant to please use samh@proton.me from now on.",
        ),
        ("My email is me@example.com.", "User's email is me@example.com."),
        ("My blog is my.site.io", "User's blog is my.site.io."),
    ],
)
def test_addresses_are_kept_as_written(said: str, stored: str) -> None:
    """An address is a literal: "me" in "proton.me" is not a pronoun (it was stored as
    "samh@proton.User")."""
    assert [f.text for f in extract_heuristic(said, max_facts=5)] == [stored]
