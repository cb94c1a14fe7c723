"""Every attribute is declared once (sidecar.memory.language.attributes): its
examples set its slot and its near misses none, the registry's rules keep one
priority each, and the docs table is made from the declarations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sidecar.memory.language.attributes import REGISTRY, Attribute, Example, Registry, table
from sidecar.memory.language.attributes.rules import said
from sidecar.memory.language.dates import canonical_dates
from sidecar.memory.language.embedding_text import attribute_words
from sidecar.memory.language.slots import find_slot

DOC = Path(__file__).resolve().parents[3] / "docs" / "attributes.md"
EXAMPLES = [
    pytest.param(attribute, example, id=f"{attribute.name}: {example.text}")
    for attribute in REGISTRY.attributes.values()
    for example in attribute.examples
]


@pytest.mark.parametrize(("attribute", "example"), EXAMPLES)
def test_each_declared_example(attribute: Attribute, example: Example) -> None:
    found = find_slot(canonical_dates(example.text))
    if example.slot is None:
        assert found is None, found
    else:
        assert found is not None
        assert (found.name, found.value) == (example.slot, example.value)


@pytest.mark.parametrize("attribute", list(REGISTRY.attributes.values()), ids=str)
def test_every_attribute_has_an_example_and_a_near_miss(attribute: Attribute) -> None:
    if not attribute.rules:  # placed by its questions alone (tests/memory/write/test_placement.py)
        assert attribute.questions
        return
    assert any(e.slot is not None for e in attribute.examples)
    assert any(e.slot is None for e in attribute.examples)


def test_rules_run_in_priority_order_and_no_priority_is_taken_twice() -> None:
    priorities = [rule.priority for rule, _ in REGISTRY.rules]
    assert priorities == sorted(priorities)
    assert len(set(priorities)) == len(priorities)
    loose = [rule.loose for rule, _ in REGISTRY.rules]
    assert loose == sorted(loose)  # loose rules come after every other
    with pytest.raises(ValueError, match="priorities used twice"):
        Registry.of([Attribute("a", (said(1, "x"),)), Attribute("b", (said(1, "y"),))])
    with pytest.raises(ValueError, match="declared twice"):
        Registry.of([Attribute("a", ()), Attribute("a", ())])


def test_what_questions_call_an_attribute_comes_from_its_declaration() -> None:
    assert attribute_words("residence") == REGISTRY.attributes["residence"].words
    assert attribute_words("sister:residence") is None  # someone else's
    assert attribute_words("surname") == "User's surname"  # declared without words


def test_weekly_and_compatible_values_come_from_the_declarations() -> None:
    assert REGISTRY.weekly("workplace")
    assert not REGISTRY.weekly("residence")
    assert REGISTRY.compatible("diet", "no meat", "vegan")
    assert not REGISTRY.compatible("diet", "vegetarian", "vegan")


def test_the_docs_table_is_made_from_the_declarations() -> None:
    committed = DOC.read_text(encoding="utf-8")
    assert table() in committed, (
        "docs/attributes.md is out of date: run "
        ".venv/bin/python -m sidecar.memory.language.attributes > docs/attributes.md"
    )
    for name in REGISTRY.attributes:
        assert re.search(rf"^\| {re.escape(name)} \|", committed, re.MULTILINE), name


def test_a_declared_attribute_supersedes_through_the_judge_and_names_its_question() -> None:
    """The gym was added as one declaration: a newer gym supersedes the older, and its
    embedding text carries what a question calls it."""
    from sidecar.config import ExtractionConfig
    from sidecar.memory.language.embedding_text import embedding_text
    from sidecar.memory.write.turns.dedup import Candidate, Decision, rule_judgement

    old = Candidate("m1", "User's gym is PureGym Leeds.", 0.3)
    judged = rule_judgement("User trains at Anytime Fitness now.", [old], ExtractionConfig())
    assert (judged.decision, judged.target) == (Decision.SUPERSEDE, "m1")
    assert embedding_text("User's gym is PureGym Leeds.").endswith("(where User works out: gym)")
