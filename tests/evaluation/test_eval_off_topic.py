"""``sidecar eval --off-topic``: every question also asked of a user whose memories
hold none of its answers, and what the block would inject there."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import SidecarConfig
from sidecar.evaluation.dataset import load_dataset, parse_dataset
from sidecar.evaluation.off_topic import off_topic_scopes
from sidecar.evaluation.report import format_text, to_json
from sidecar.evaluation.runner import EvalOptions, run_eval
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import Scope
from tests.evaluation.test_eval import TEAM, small_dataset


@pytest.fixture(scope="module")
def dataset_file(write_dataset: Callable[[dict[str, Any]], Path]) -> Path:
    return write_dataset(small_dataset())


def test_each_question_moves_to_the_next_user_who_cannot_see_its_answers() -> None:
    data = parse_dataset(small_dataset(), source="small")
    scopes = off_topic_scopes(data)
    # alice -> bob -> carol -> alice, without the asker's groups.
    assert scopes["alice-dog"] == Scope("bob", ())
    assert scopes["bob-garden"] == Scope("carol", ())
    assert scopes["carol-birds"] == Scope("alice", ())
    # Bob is in the team, but moved without his groups he cannot read its memory.
    assert scopes["alice-deploy"] == Scope("bob", ())
    assert scopes["bob-deploy"] == Scope("carol", ())
    # A public answer is everyone's: no user lacks it, so the question is not asked.
    assert "bob-wifi" not in scopes
    assert len(scopes) == len(data.queries) - 1


def test_a_user_who_can_read_the_answer_is_skipped() -> None:
    document = small_dataset()
    # Carol's answer made public: every user reads it, so no one lacks it.
    for memory in document["memories"]:
        if memory["id"] == "c2":
            memory.update(visibility="public", group_id=None)
    scopes = off_topic_scopes(parse_dataset(document, source="small"))
    assert "carol-birds" not in scopes
    assert scopes["alice-deploy"] == Scope("bob", ())
    assert TEAM not in scopes["alice-deploy"].group_ids


def test_one_user_has_no_one_to_ask() -> None:
    document = small_dataset()
    document["memories"] = [m for m in document["memories"] if m["user_id"] == "alice"]
    document["queries"] = [q for q in document["queries"] if q["user_id"] == "alice"]
    assert off_topic_scopes(parse_dataset(document, source="alice")) == {}


async def test_without_the_gate_every_moved_question_gets_a_full_block(
    dataset_file: Path, config: SidecarConfig, embedder: Embedder
) -> None:
    result = await run_eval(
        load_dataset(dataset_file),
        config,
        EvalOptions(strategies=("default", "hybrid"), no_threshold=True, off_topic=True),
        embedder=embedder,
    )
    top_k = result.retrieval.top_k
    for strategy in result.strategies:
        off = strategy.off_topic
        assert off is not None, strategy.name
        assert off.questions == 8, strategy.name
        assert off.violations == 0, strategy.name
        assert off.with_lines == 8, strategy.name
        assert off.lines == 8 * top_k, strategy.name
    text = format_text(result)
    assert "asked of another user" in text
    data = json.loads(json.dumps(to_json(result)))
    assert data["strategies"]["default"]["off_topic"] == {
        "questions": 8,
        "with_lines": 8,
        "with_lines_share": 1.0,
        "lines": 8 * top_k,
        "lines_per_question": float(top_k),
        "visibility_violations": 0,
    }


async def test_the_gate_keeps_lines_out_of_the_moved_questions(
    dataset_file: Path, config: SidecarConfig, embedder: Embedder
) -> None:
    data = load_dataset(dataset_file)
    gated = await run_eval(
        data,
        config,
        EvalOptions(
            strategies=("default",),
            off_topic=True,
            variants=(("shut", {"threshold": 0.99, "lexical_threshold": 1.0, "joint_gate": 1.0}),),
        ),
        embedder=embedder,
    )
    default, shut = gated.strategy("default"), gated.strategy("shut")
    assert default.off_topic is not None
    assert shut.off_topic is not None
    # The default gate lets fewer lines into another user's block than into the
    # asker's own, and a shut gate lets none in anywhere.
    assert default.off_topic.lines / 8 < default.injected_lines / 9
    assert shut.off_topic.lines == 0
    assert shut.injected_lines == 0
    # Not asked for: not measured, and not reported.
    plain = await run_eval(
        data, config, EvalOptions(strategies=("default",), limit_queries=2), embedder=embedder
    )
    assert all(s.off_topic is None for s in plain.strategies)
    assert "asked of another user" not in format_text(plain)
    assert to_json(plain)["strategies"]["default"]["off_topic"] is None
