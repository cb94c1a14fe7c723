"""Tests for fact extraction (sidecar.memory.write.turns.extraction), LLM and heuristic paths.

The LLM is the project's deterministic mock_llm (``e2e.mock_llm``), on loopback.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from e2e.mock_extract import parse_extract_turn
from e2e.mock_llm import MockLLM
from e2e.mock_protocol import parse_task_tag
from sidecar.config import ExtractionConfig, LLMConfig
from sidecar.errors import LLMBadOutput
from sidecar.llm import LLMClient
from sidecar.memory.language.heuristics import HEURISTIC_CONFIDENCE
from sidecar.memory.records.records import MemoryType
from sidecar.memory.records.turns import Fact, Turn
from sidecar.memory.write.turns.extraction import (
    LLM_CONFIDENCE,
    MAX_FACT_CHARS,
    PROMPT_VERSION,
    SYSTEM_PROMPT,
    FactExtractor,
    keep_polarity,
    parse_facts,
    render_turn,
)
from sidecar.metrics import Metrics

EXTRACTIONS = "memory_sidecar_extractions_total"
CALLS = "memory_sidecar_llm_calls_total"
WHEN_MS = int(datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC).timestamp() * 1000)


def turn(user: str, assistant: str = "Noted.", created_at: int = WHEN_MS) -> Turn:
    return Turn(
        user_id="alice",
        user_text=user,
        assistant_text=assistant,
        created_at=created_at,
        request_id="req-1",
    )


# -- parse_facts --------------------------------------------------------------------------


def test_parse_facts_reads_the_documented_shape() -> None:
    facts = parse_facts(
        {
            "facts": [
                {"text": "User lives in Berlin.", "type": "semantic", "importance": 0.4},
                {"text": "User runs daily.", "type": "procedural", "importance": 0.6},
                {"text": "User met Ana on 2026-11-21.", "type": "episodic", "importance": 1},
                {"text": "Answer in French.", "type": "constraint", "importance": 0},
            ]
        },
        max_facts=10,
    )
    assert facts == [
        Fact("User lives in Berlin.", MemoryType.SEMANTIC, 0.4, LLM_CONFIDENCE, "llm"),
        Fact("User runs daily.", MemoryType.PROCEDURAL, 0.6, LLM_CONFIDENCE, "llm"),
        Fact("User met Ana on 2026-11-21.", MemoryType.EPISODIC, 1.0, LLM_CONFIDENCE, "llm"),
        Fact("Answer in French.", MemoryType.CONSTRAINT, 0.0, LLM_CONFIDENCE, "llm"),
    ]


def test_parse_facts_accepts_a_bare_list() -> None:
    facts = parse_facts([{"text": "User has a dog."}], max_facts=10)
    assert [f.text for f in facts] == ["User has a dog."]


def test_parse_facts_tolerates_strings_in_the_list() -> None:
    facts = parse_facts({"facts": ["User has a dog.", {"text": "User has a cat."}]}, max_facts=10)
    assert facts == [
        Fact("User has a dog.", MemoryType.SEMANTIC, 0.5, LLM_CONFIDENCE, "llm"),
        Fact("User has a cat.", MemoryType.SEMANTIC, 0.5, LLM_CONFIDENCE, "llm"),
    ]


def test_parse_facts_skips_items_of_bad_types() -> None:
    facts = parse_facts(
        {
            "facts": [
                None,
                42,
                ["User nested."],
                {"txt": "wrong key"},
                {"text": None},
                {"text": 5},
                {"text": ""},
                {"text": "   \n "},
                "",
                "   ",
                {"text": "User is kept."},
            ]
        },
        max_facts=10,
    )
    assert [f.text for f in facts] == ["User is kept."]


@pytest.mark.parametrize(
    "value",
    [{}, {"facts": None}, {"facts": "User has a dog."}, {"facts": {"text": "x"}}, "x", 5, None],
)
def test_parse_facts_without_a_fact_list_raises_bad_output(value: Any) -> None:
    with pytest.raises(LLMBadOutput):
        parse_facts(value, max_facts=10)


def test_parse_facts_with_an_empty_list() -> None:
    assert parse_facts({"facts": []}, max_facts=10) == []


@pytest.mark.parametrize(
    ("importance", "expected"),
    [
        (0.7, 0.7),
        (1, 1.0),
        (0, 0.0),
        (5, 1.0),
        (1.0001, 1.0),
        (-3, 0.0),
        (-0.1, 0.0),
        (float("inf"), 1.0),
        (float("-inf"), 0.0),
        ("0.9", 0.5),
        (None, 0.5),
        (True, 0.5),
        (False, 0.5),
        ([0.9], 0.5),
    ],
)
def test_parse_facts_clamps_and_defaults_importance(importance: Any, expected: float) -> None:
    (fact,) = parse_facts({"facts": [{"text": "User x.", "importance": importance}]}, max_facts=5)
    assert fact.importance == expected
    assert isinstance(fact.importance, float)


def test_parse_facts_rejects_nan_importance() -> None:
    (fact,) = parse_facts({"facts": [{"text": "User x.", "importance": math.nan}]}, max_facts=5)
    assert 0.0 <= fact.importance <= 1.0


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("semantic", MemoryType.SEMANTIC),
        ("PROCEDURAL", MemoryType.PROCEDURAL),
        ("Episodic", MemoryType.EPISODIC),
        ("constraint", MemoryType.CONSTRAINT),
        ("preference", MemoryType.SEMANTIC),
        ("", MemoryType.SEMANTIC),
        (None, MemoryType.SEMANTIC),
        (3, MemoryType.SEMANTIC),
        (["constraint"], MemoryType.SEMANTIC),
    ],
)
def test_parse_facts_unknown_type_is_semantic(kind: Any, expected: MemoryType) -> None:
    (fact,) = parse_facts({"facts": [{"text": "User x.", "type": kind}]}, max_facts=5)
    assert fact.memory_type == expected


def test_parse_facts_missing_type_is_semantic() -> None:
    (fact,) = parse_facts({"facts": [{"text": "User x."}]}, max_facts=5)
    assert fact.memory_type == MemoryType.SEMANTIC


def test_parse_facts_dedupes_case_and_whitespace_insensitively() -> None:
    facts = parse_facts(
        {
            "facts": [
                {"text": "User lives in Berlin.", "importance": 0.9},
                {"text": "user  lives in\nberlin.", "importance": 0.1},
                "USER LIVES IN BERLIN.",
                {"text": "User has a dog."},
            ]
        },
        max_facts=10,
    )
    assert [(f.text, f.importance) for f in facts] == [
        ("User lives in Berlin.", 0.9),
        ("User has a dog.", 0.5),
    ]


def test_parse_facts_normalises_whitespace_and_truncates() -> None:
    (fact,) = parse_facts({"facts": ["  User\n likes\t\ttea.  "]}, max_facts=5)
    assert fact.text == "User likes tea."
    (long,) = parse_facts({"facts": ["x" * (MAX_FACT_CHARS * 2)]}, max_facts=5)
    assert len(long.text) == MAX_FACT_CHARS


def test_parse_facts_caps_at_max_facts() -> None:
    items = [f"User fact {i}." for i in range(20)]
    facts = parse_facts({"facts": items}, max_facts=3)
    assert [f.text for f in facts] == items[:3]


def test_parse_facts_duplicates_and_junk_do_not_count_towards_the_cap() -> None:
    facts = parse_facts({"facts": ["A.", "a.", None, "", "B.", "C."]}, max_facts=2)
    assert [f.text for f in facts] == ["A.", "B."]


# -- render_turn / prompt ---------------------------------------------------------------------


def test_render_turn_format() -> None:
    rendered = render_turn(turn("I live in Berlin.", "Nice city!"), max_chars=1000)
    assert rendered == (
        "Turn time: 2026-11-22T10:00:00Z\nUser: I live in Berlin.\nAssistant: Nice city!"
    )


def test_render_turn_drops_milliseconds_and_uses_utc() -> None:
    rendered = render_turn(turn("x", "y", created_at=WHEN_MS + 999), max_chars=100)
    assert rendered.splitlines()[0] == "Turn time: 2026-11-22T10:00:00Z"
    rendered = render_turn(turn("x", "y", created_at=0), max_chars=100)
    assert rendered.splitlines()[0] == "Turn time: 1970-01-01T00:00:00Z"


def test_render_turn_truncates_each_side() -> None:
    rendered = render_turn(turn("u" * 500, "a" * 500), max_chars=100)
    assert rendered == f"Turn time: 2026-11-22T10:00:00Z\nUser: {'u' * 100}\nAssistant: {'a' * 100}"


def test_render_turn_is_what_the_mock_parses() -> None:
    rendered = render_turn(turn("I live in Berlin.\nI have a dog.", "Great."), max_chars=1000)
    assert parse_extract_turn(rendered) == "I live in Berlin.\nI have a dog."


def test_system_prompt_starts_with_the_versioned_task_tag() -> None:
    assert PROMPT_VERSION == 4
    assert SYSTEM_PROMPT.startswith("[memory-sidecar:extract v4]\n")
    tag = parse_task_tag({"messages": [{"role": "system", "content": SYSTEM_PROMPT}]})
    assert tag is not None
    assert (tag.task, tag.version) == ("extract", 4)


# -- FactExtractor against the mock LLM ----------------------------------------------------------

SAID = "Hi! I live in Berlin. We have two cats. Always answer in French. Can you help me?"
LLM_FACTS = [
    Fact("User lives in Berlin.", MemoryType.SEMANTIC, 0.5, LLM_CONFIDENCE, "llm"),
    Fact("User and family have two cats.", MemoryType.SEMANTIC, 0.5, LLM_CONFIDENCE, "llm"),
    Fact(
        "User wants the assistant to always answer in French.",
        MemoryType.CONSTRAINT,
        0.8,
        LLM_CONFIDENCE,
        "llm",
    ),
]
HEURISTIC_FACTS = [
    Fact("User lives in Berlin.", MemoryType.SEMANTIC, 0.5, HEURISTIC_CONFIDENCE, "heuristic"),
    Fact(
        "User and others have two cats.",
        MemoryType.SEMANTIC,
        0.5,
        HEURISTIC_CONFIDENCE,
        "heuristic",
    ),
    Fact(
        "User wants the assistant to always answer in French.",
        MemoryType.CONSTRAINT,
        0.8,
        HEURISTIC_CONFIDENCE,
        "heuristic",
    ),
]


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
async def extractor(mock_llm: MockLLM, metrics: Metrics) -> AsyncIterator[FactExtractor]:
    llm = LLMClient(LLMConfig(base_url=mock_llm.base_url, timeout_s=5), metrics)
    try:
        yield FactExtractor(llm, metrics)
    finally:
        await llm.close()


def extraction_count(metrics: Metrics, extractor: str, outcome: str) -> float:
    return metrics.value(EXTRACTIONS, {"extractor": extractor, "outcome": outcome})


def llm_calls(metrics: Metrics, outcome: str) -> float:
    return metrics.value(CALLS, {"task": "extract", "outcome": outcome})


async def test_llm_facts_from_the_mock(
    extractor: FactExtractor, mock_llm: MockLLM, metrics: Metrics
) -> None:
    facts = await extractor.extract(turn(SAID), ExtractionConfig())
    assert facts == LLM_FACTS
    assert extraction_count(metrics, "llm", "ok") == 1
    assert extraction_count(metrics, "heuristic", "ok") == 0
    assert llm_calls(metrics, "ok") == 1


async def test_llm_request_carries_the_prompt_and_the_rendered_turn(
    extractor: FactExtractor, mock_llm: MockLLM
) -> None:
    await extractor.extract(turn("I live in Berlin.", "Nice."), ExtractionConfig())
    (request,) = mock_llm.task_requests("extract")
    messages = request["body"]["messages"]
    assert messages == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": "Turn time: 2026-11-22T10:00:00Z\nUser: I live in Berlin.\nAssistant: Nice.",
        },
    ]
    assert request["body"]["response_format"] == {"type": "json_object"}


async def test_max_turn_chars_limits_what_the_llm_sees(
    extractor: FactExtractor, mock_llm: MockLLM
) -> None:
    await extractor.extract(
        turn("I live in Berlin." + " x" * 500), ExtractionConfig(max_turn_chars=100)
    )
    content = mock_llm.task_requests("extract")[0]["body"]["messages"][1]["content"]
    assert "User: " + ("I live in Berlin." + " x" * 500)[:100] + "\n" in content


async def test_max_facts_per_turn_caps_llm_facts(extractor: FactExtractor) -> None:
    facts = await extractor.extract(turn(SAID), ExtractionConfig(max_facts_per_turn=2))
    assert facts == LLM_FACTS[:2]


@pytest.mark.parametrize(
    "knobs",
    [{"think_tags": True}, {"json_fences": True}, {"think_tags": True, "json_fences": True}],
)
async def test_llm_facts_through_think_tags_and_fences(
    extractor: FactExtractor, mock_llm: MockLLM, metrics: Metrics, knobs: dict[str, bool]
) -> None:
    mock_llm.configure(**knobs)
    assert await extractor.extract(turn(SAID), ExtractionConfig()) == LLM_FACTS
    assert extraction_count(metrics, "llm", "ok") == 1


async def test_nothing_to_remember_is_an_empty_llm_result(
    extractor: FactExtractor, metrics: Metrics
) -> None:
    facts = await extractor.extract(turn("What is the capital of France?"), ExtractionConfig())
    assert facts == []
    assert extraction_count(metrics, "llm", "ok") == 1
    assert extraction_count(metrics, "heuristic", "ok") == 0


async def test_failing_llm_falls_back_to_heuristics(
    extractor: FactExtractor, mock_llm: MockLLM, metrics: Metrics
) -> None:
    mock_llm.configure(fail_tasks=True)
    facts = await extractor.extract(turn(SAID), ExtractionConfig())
    assert facts == HEURISTIC_FACTS
    assert all(f.confidence < LLM_CONFIDENCE for f in facts)
    assert extraction_count(metrics, "llm", "failed") == 1
    assert extraction_count(metrics, "llm", "ok") == 0
    assert extraction_count(metrics, "heuristic", "ok") == 1
    assert llm_calls(metrics, "http_error") == 1
    assert len(mock_llm.task_requests("extract")) == 1


async def test_garbage_llm_output_falls_back_to_heuristics(
    extractor: FactExtractor, mock_llm: MockLLM, metrics: Metrics
) -> None:
    mock_llm.configure(garbage_tasks=True)
    facts = await extractor.extract(turn(SAID), ExtractionConfig())
    assert facts == HEURISTIC_FACTS
    assert extraction_count(metrics, "llm", "failed") == 1
    assert extraction_count(metrics, "heuristic", "ok") == 1
    assert llm_calls(metrics, "bad_output") == 1


async def test_slow_llm_falls_back_to_heuristics(mock_llm: MockLLM, metrics: Metrics) -> None:
    mock_llm.configure(task_latency_ms=600)
    llm = LLMClient(LLMConfig(base_url=mock_llm.base_url, timeout_s=0.1), metrics)
    try:
        facts = await FactExtractor(llm, metrics).extract(turn(SAID), ExtractionConfig())
    finally:
        await llm.close()
    assert facts == HEURISTIC_FACTS
    assert extraction_count(metrics, "llm", "failed") == 1
    assert extraction_count(metrics, "heuristic", "ok") == 1
    assert llm_calls(metrics, "timeout") == 1
    assert llm_calls(metrics, "ok") == 0


async def test_heuristic_fallback_respects_max_facts(
    extractor: FactExtractor, mock_llm: MockLLM
) -> None:
    mock_llm.configure(fail_tasks=True)
    facts = await extractor.extract(turn(SAID), ExtractionConfig(max_facts_per_turn=1))
    assert facts == HEURISTIC_FACTS[:1]


async def test_no_base_url_uses_heuristics_without_any_http_call(
    mock_llm: MockLLM, metrics: Metrics
) -> None:
    llm = LLMClient(LLMConfig(), metrics)
    assert not llm.configured
    facts = await FactExtractor(llm, metrics).extract(turn(SAID), ExtractionConfig())
    assert facts == HEURISTIC_FACTS
    assert extraction_count(metrics, "heuristic", "ok") == 1
    assert extraction_count(metrics, "llm", "failed") == 0
    assert extraction_count(metrics, "llm", "ok") == 0
    for outcome in ("ok", "unavailable", "http_error", "timeout", "bad_output", "empty"):
        assert llm_calls(metrics, outcome) == 0
    assert metrics.value("memory_sidecar_llm_seconds_count", {"task": "extract"}) == 0
    assert mock_llm.requests() == []


async def test_use_llm_false_skips_a_configured_llm(
    extractor: FactExtractor, mock_llm: MockLLM, metrics: Metrics
) -> None:
    facts = await extractor.extract(turn(SAID), ExtractionConfig(use_llm=False))
    assert facts == HEURISTIC_FACTS
    assert mock_llm.requests() == []
    assert extraction_count(metrics, "heuristic", "ok") == 1
    assert extraction_count(metrics, "llm", "failed") == 0


async def test_counters_accumulate_over_turns(
    extractor: FactExtractor, mock_llm: MockLLM, metrics: Metrics
) -> None:
    await extractor.extract(turn(SAID), ExtractionConfig())
    await extractor.extract(turn(SAID), ExtractionConfig())
    mock_llm.configure(fail_tasks=True)
    await extractor.extract(turn(SAID), ExtractionConfig())
    assert extraction_count(metrics, "llm", "ok") == 2
    assert extraction_count(metrics, "llm", "failed") == 1
    assert extraction_count(metrics, "heuristic", "ok") == 1
    assert llm_calls(metrics, "ok") == 2
    assert llm_calls(metrics, "http_error") == 1


def test_an_llm_fact_that_flips_the_users_polarity_is_replaced_by_the_users_words() -> None:
    said = "i dont drink, so skip the wine pairing pls. I live in Rome."
    facts = [Fact("User drinks, so skip the wine pairing."), Fact("User lives in Rome.")]
    checked, fixed = keep_polarity(facts, said, max_facts=5)
    assert fixed == 1
    assert [f.text for f in checked] == [
        "User does not drink, so skip the wine pairing pls.",
        "User lives in Rome.",
    ]
    # The same polarity, in other words, is the LLM's to write.
    kept, fixed = keep_polarity([Fact("User has never flown.")], "Never been on a plane lol", 5)
    assert (fixed, [f.text for f in kept]) == (0, ["User has never flown."])


def test_a_fact_the_model_marks_as_not_durable_is_not_stored() -> None:
    value = {
        "facts": [
            {"text": "User is exhausted today.", "durable": False},
            {"text": "User works night shifts.", "durable": True},
            {"text": "User has two cats."},  # no flag: kept
        ]
    }
    assert [f.text for f in parse_facts(value, max_facts=5)] == [
        "User works night shifts.",
        "User has two cats.",
    ]
