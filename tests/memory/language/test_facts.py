"""A fact's shape and slot, read by rules: the write path's "same fact", "another
fact" and "a newer value"."""

from __future__ import annotations

import pytest

from sidecar.memory.language.facts import (
    conflicts,
    contrasts,
    differs,
    equivalent,
    restates,
    richer,
    shape,
    slot_of,
)
from sidecar.memory.language.replacement import replaces
from sidecar.memory.language.slots import find_slot


@pytest.mark.parametrize(
    ("text", "slot", "value"),
    [
        ("User lives in Leipzig.", "residence", "leipzig"),
        ("User lives in leipzig these days haha", "residence", "leipzig"),
        ("User no longer lives in Minneapolis.", "residence", "not minneapolis"),
        ("First night in User's new flat in Glasgow.", "residence", "glasgow"),
        ("Berlin is where User lives.", "residence", "berlin"),
        ("User's sister works at Siemens.", "sister:employer", "siemens"),
        ("User's dog is called Biscuit.", "dog:name", "biscuit"),
        ("User and others renamed the dog, he answers to Pepper now.", "dog:name", "pepper"),
        ("User does not drink alcohol.", "alcohol", "no"),
        ("No booze for User, ever.", "alcohol", "no"),
        ("User quit smoking last year.", "smoking", "no"),
        ("User has started eating meat again.", "diet", "meat eater"),
        ("User is a vegetarian.", "diet", "vegetarian"),
        ("User's favourite food is ramen.", "favorite:food", "ramen"),
        ("Ramen has overtaken everything else as User's number one meal.", "favorite:food",
         "ramen"),
        ("User's new number is 0151 222 9876.", "phone", "01512229876"),
        ("User works as a registered nurse.", "occupation", "nurse"),
        ("User is allergic to penicillin.", "allergy", "penicillin"),
        ("User is single again.", "relationship", "single"),
        ("User's GP is Dr. Hartley.", "gp", "hartley"),
        ("User wants the assistant to use a.b@example.org for work.", "email", "a.b@example.org"),
        ("User is a proper Glasgow local now.", "residence", "glasgow"),
        ("User's mobile: 07700 900123.", "phone", "07700900123"),
        ("User is training to be a paramedic.", "occupation", "paramedic"),
        ("User is studying to become a midwife.", "occupation", "midwife"),
        ("User cheers for the Boston Celtics now.", "team", "boston celtics"),
        ("Everyone calls User Jojo.", "name", "jojo"),
        ("User wants to be called Sam.", "name", "sam"),
        ("User has been seeing someone from the climbing gym.", "relationship", "dating"),
        ("User is dating Priya.", "relationship", "dating"),
        ("Teal is User's colour these days.", "favorite:colour", "teal"),
        ("User's favourite color is red.", "favorite:colour", "red"),
        ("User has been vaping since uni.", "vaping", "yes"),
        ("User quit vaping in March.", "vaping", "no"),
        ("User is a pescatarian.", "diet", "pescatarian"),  # a diet, not a job
        ("User drinks a glass of wine most nights.", "alcohol", "yes"),
        ("User starts at Accenture next month.", "employer", "accenture"),
        ("User still lives with User's parents.", "residence", "parents"),
        ("User finally got User's own flat in Hackney.", "residence", "hackney"),
        ("User has a severe nut allergy.", "allergy", "nut"),
        ("User has an allergy to latex.", "allergy", "latex"),
        ("User has a dog.", "pets", "dog"),
        ("Tagalog is User's mother tongue.", "native language", "tagalog"),
        ("User's diet is strictly vegan.", "diet", "vegan"),
        ("User is 34.", "age", "34"),
        ("User turned 40 last week.", "age", "40"),
        ("User is 1.80m tall.", "height", "1.80m"),  # not 1 year old
        ("User is 6 foot 2.", "height", "6ft2"),
        ("User weighs 90 kilos.", "weight", "90kg"),
        ("User is down to 82 kg after the diet.", "weight", "82kg"),
        ("User weighs about 12 stone.", "weight", "12st"),
        ("User got married and took User's wife's name, so it's Lindqvist now.", "surname",
         "lindqvist"),
        ("User changed User's last name to Berg.", "surname", "berg"),
    ],
)  # fmt: skip
def test_slots(text: str, slot: str | None, value: str | None) -> None:
    found = find_slot(text)
    if slot is None:
        assert found is None, text
        return
    assert found is not None, text
    assert (found.name, found.value) == (slot, value)


@pytest.mark.parametrize(
    "text",
    [
        "User's sister lives in Porto.",  # the sister's residence, not the user's
        "User's dog absolutely loses it during thunderstorms.",
        "User likes long walks.",
        "User is seeing a physio for User's knee.",  # not dating
        "User has a car.",  # not an allergy to cars
        "User is 3 months pregnant.",  # not an age
        "User is 10 minutes late.",
    ],
)
def test_a_fact_the_rules_do_not_cover_has_no_user_slot(text: str) -> None:
    found = find_slot(text)
    assert found is None or ":" in found.name


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("User's dog loses it during thunderstorms.", "User's cat loses it during thunderstorms."),
        ("User tore User's left ACL.", "User tore User's right ACL."),
        ("User visited Portugal last spring.", "User is visiting Portugal again in June."),
        ("User has gym on Tuesdays.", "User has gym on Thursdays."),
        ("User drinks coffee.", "User does not drink coffee."),
        ("User has 2 kids.", "User has 3 kids."),
    ],
)
def test_near_misses_differ_and_are_never_one_fact(a: str, b: str) -> None:
    assert differs(shape(a), shape(b))
    assert not equivalent(shape(a), shape(b))


def test_paraphrases_of_one_slot_are_one_fact_and_the_richer_wording_is_known() -> None:
    a, b = shape("User lives in Berlin."), shape("User is based in Berlin.")
    assert equivalent(a, b)
    assert richer(shape("User lives in Berlin, Germany."), a)
    assert equivalent(shape("User is a Milwaukee Bucks fan."), shape("User is a huge bucks fan."))


def test_another_value_of_a_single_valued_slot_conflicts_but_an_accumulating_one_does_not() -> None:
    assert conflicts(shape("User moved to Phoenix."), shape("User lives in Minneapolis."))
    assert not conflicts(
        shape("User is allergic to shellfish."), shape("User is allergic to nuts.")
    )
    # "No meat" is a looser statement of a vegetarian diet, not another diet.
    assert not conflicts(shape("User does not eat meat."), shape("User is vegetarian."))
    # Events of other years are history, not a change of state.
    assert not conflicts(
        shape("User and others got engaged in June 2014."), shape("User got married in June 2015.")
    )


def test_a_change_cue_with_another_value_of_the_same_thing_replaces_it() -> None:
    # Without a slot for it: the same verb, another object, and a change cue.
    moka = shape("User brews coffee with a moka pot.")
    assert replaces(shape("User now brews coffee with an Aeropress."), moka)
    assert not replaces(shape("User brews coffee with an Aeropress."), moka)
    assert not replaces(shape("User now has a cat."), shape("User has a dog named Rex."))


@pytest.mark.parametrize(
    ("new", "old"),
    [
        # What a chat about many things leaves: "new" and a shared light verb are no
        # change of one thing (the longmemeval-dev replay superseded 1,469 such).
        ("User is looking for some new music recommendations.",
         "User is looking for some coffee-related recipes."),
        ("User recently got a new dog bed from PetSmart.",
         "User recently purchased black leather boots from Zara."),
        ("User is thinking of trying a new cooking technique.",
         "User is thinking of entering a local art competition."),
    ],
)  # fmt: skip
def test_a_light_verb_and_a_new_thing_replace_nothing(new: str, old: str) -> None:
    assert not replaces(shape(new), shape(old))


def test_what_the_user_stopped_replaces_the_habit_it_names_and_nothing_else() -> None:
    drinks = shape("User drinks two coffees a day.")
    assert replaces(shape("User does not drink coffee anymore."), drinks)
    assert not replaces(shape("User does not drink coffee anymore."), shape("User drinks tea."))
    assert replaces(shape("User stopped doing yoga on Sundays."), shape("User does yoga weekly."))
    assert replaces(shape("User sold the Corolla."), shape("User drives a Toyota Corolla."))
    # Two things stopped are two facts; "plays" alone is not what stopped: the guitar is.
    assert not replaces(shape("User stopped eating bread."), shape("User stopped eating sugar."))
    assert not replaces(shape("User no longer plays the guitar."), shape("User plays squash."))


def test_giving_up_a_kind_of_thing_replaces_the_habit_of_one_of_its_members() -> None:
    quit = shape("User gave up caffeine completely, it's herbal tea only for User now.")
    assert replaces(quit, shape("User drinks about four espressos a day."))
    assert not replaces(quit, shape("User drinks herbal tea in the evening."))
    assert replaces(shape("User quit social media."), shape("User is on TikTok every night."))
    assert not replaces(shape("User quit social media."), shape("User reads every night."))


@pytest.mark.parametrize(
    ("new", "old"),
    [
        ("User switched User's current account to Monzo.", "User banks with Barclays."),
        ("User moved everything over to Bitwarden.", "User's password manager is LastPass."),
        ("User upgraded to a Pixel 8 last week.", "User's phone is an iPhone 12."),
        (
            "User has switched to oat cappuccinos lately.",
            "User's go-to coffee order is a flat white.",
        ),
    ],
)
def test_a_change_to_another_thing_of_the_same_kind_replaces_it(new: str, old: str) -> None:
    assert replaces(shape(new), shape(old))


@pytest.mark.parametrize(
    ("new", "old"),
    [
        ("User opened a Monzo account too.", "User banks with Barclays."),  # no change cue
        ("User switched to Monzo.", "User's sister banks with Barclays."),  # her bank
        ("User now uses Firefox.", "User loves coffee."),  # another kind
    ],
)
def test_things_of_other_kinds_or_owners_are_not_swapped(new: str, old: str) -> None:
    assert not replaces(shape(new), shape(old))


def test_a_swap_replaces_what_it_swaps() -> None:
    assert replaces(
        shape("User has swapped User's night classes for Italian."),
        shape("User takes night classes in Spanish."),
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("User's nephew studies in Lyon.", "User's niece is at university in Lyon as well."),
        ("User does yoga on Monday mornings.", "User does pilates on Wednesday mornings."),
        ("User hates horror films.", "User loves horror novels."),
        ("User can read Greek.", "User cannot really speak Greek."),
        ("User ran the Paris marathon in 2019.", "User is running the Paris marathon again."),
        ("User has a dog named Rex.", "User's sister has a dog named Rex."),
    ],
)
def test_near_misses_in_other_words_contrast(a: str, b: str) -> None:
    assert contrasts(shape(a), shape(b))


def test_a_restatement_says_little_more_than_the_richer_memory() -> None:
    rich = shape("User keeps bees in the back garden, two hives, and sells the honey.")
    assert restates(rich, shape("User keeps bees."), 0.75)
    # Nothing in common but the verb: another fact.
    assert not restates(
        shape("User listens to jazz when cooking."), shape("User listens to lo-fi at work."), 0.75
    )


def test_a_doubled_consonant_is_one_stem() -> None:
    # "running days" and "runs" are about running: a change of days replaces them.
    assert replaces(
        shape("User has changed User's running days to Monday and Friday."),
        shape("User runs on Tuesdays and Thursdays."),
    )


def test_the_slot_alone_is_the_shapes_slot() -> None:
    for text in ("User lives in Leeds.", "User's bday is nov 14.", "User likes long walks."):
        assert slot_of(text) == shape(text).slot


@pytest.mark.parametrize(
    ("text", "slot", "value"),
    [
        ("User goes to bed around 11pm.", "bedtime", "11pm"),
        ("User's new routine is lights out at 9:30 every night.", "bedtime", "9:30"),
        ("User is usually asleep by midnight.", "bedtime", "midnight"),
        ("User and others are back in the office four days a week now.", "workplace", "office"),
        ("User moved out, renting a studio in Manchester now.", "residence", "manchester"),
        ("User started eating fish again, so pescatarian now.", "diet", "pescatarian"),
    ],
)
def test_slots_said_in_passing(text: str, slot: str, value: str) -> None:
    found = find_slot(text)
    assert found is not None
    assert (found.name, found.value) == (slot, value)


def test_another_bedtime_or_workplace_conflicts_unless_it_is_another_day() -> None:
    assert conflicts(
        shape("User's new routine is lights out at 9:30 every night."),
        shape("User goes to bed around 11pm."),
    )
    assert conflicts(
        shape("User and others are back in the office four days a week now."),
        shape("User works from home full time."),
    )
    # A hybrid week: both hold.
    office = shape("User is in the office tuesday to thursday.")
    assert not conflicts(office, shape("User works from home on Mondays and Fridays."))


def test_no_longer_in_a_band_replaces_playing_in_it() -> None:
    new = shape("The Offcuts broke up, User is not in a band anymore.")
    assert new.stopped == frozenset({"band"})
    assert replaces(new, shape("User plays bass in a band called The Offcuts."))
    assert not replaces(new, shape("User plays tennis on Sundays."))


def test_what_the_user_does_not_have_or_do_anymore_replaces_it() -> None:
    dog = shape("Max passed away last month, User and others don't have a dog anymore.")
    assert dog.stopped == frozenset({"dog"})
    assert replaces(dog, shape("User has a dog called Max."))
    sober = shape("Not drinking alcohol anymore, it's sparkling water for User these days.")
    assert replaces(sober, shape("User's go-to drink is a gin and tonic."))
    assert not replaces(sober, shape("User's go-to snack is popcorn."))


def test_not_eating_one_meat_is_not_not_eating_another() -> None:
    pork, beef = shape("User does not eat pork."), shape("User does not eat beef.")
    assert pork.slot is None
    assert differs(pork, beef)
    assert not equivalent(pork, beef)
    assert find_slot("User does not eat meat anymore.") is not None
