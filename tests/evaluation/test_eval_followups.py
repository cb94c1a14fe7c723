"""``sidecar eval --rewrite --deep-search``: variant rows and follow-up statistics in one
run, and ``scripts.build_followups`` (deterministic, LoCoMo-shaped input)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from scripts import build_followups
from sidecar.cli import main
from sidecar.config import EmbeddingConfig
from sidecar.evaluation.dataset import parse_dataset
from sidecar.evaluation.report import format_text, to_json
from sidecar.evaluation.runner import EvalOptions, EvalResult

REPO = Path(__file__).resolve().parents[2]
LOCOMO = REPO.parent / "shared" / "data" / "locomo-dev.json"


def followup_dataset() -> dict[str, Any]:
    """One conversation in LoCoMo's shape: every memory is 'Speaker: text'."""
    lines = [
        ("Ana", "I moved to Lisbon in May, the light there is amazing."),
        ("Tom", "I moved to Oslo in June for the new job."),
        ("Ana", "My cat Pixel hates the tram noise."),
        ("Tom", "I bought a red kayak for the fjords."),
        ("Ana", "The pottery class on Thursdays keeps me sane."),
        ("Tom", "Work keeps me busy most weekends."),
        ("Ana", "I finally finished the blue vase in the pottery class."),
        ("Tom", "The kayak club meets on Saturdays."),
    ]
    memories = [
        {
            "id": f"d1:{i}",
            "user_id": "conv",
            "content": f"{speaker}: {text}",
            "session_id": "conv:s1",
            "created_at": f"2024-05-{10 + i}T09:00:00Z",
        }
        for i, (speaker, text) in enumerate(lines)
    ]
    about_ana = [
        {"role": "user", "content": "Can we talk about Ana for a moment?"},
        {"role": "assistant", "content": "Of course. What do you want to know about Ana?"},
    ]
    about_tom = [
        {"role": "user", "content": "I have a question about Tom."},
        {"role": "assistant", "content": "Sure, what about Tom?"},
    ]
    about_class = [
        {"role": "user", "content": "Do you remember what Ana said about the pottery class?"},
        {"role": "assistant", "content": "Yes, Ana mentioned the pottery class."},
    ]
    queries = [
        {"id": "q1", "user_id": "conv", "query": "Where did she move?",
         "relevant_ids": ["d1:0"], "category": "pronoun", "context": about_ana},
        {"id": "q2", "user_id": "conv", "query": "Where did he move?",
         "relevant_ids": ["d1:1"], "category": "pronoun", "context": about_tom},
        {"id": "q3", "user_id": "conv", "query": "What did she make in it?",
         "relevant_ids": ["d1:6"], "category": "pronoun+it", "context": about_class},
        {"id": "q4", "user_id": "conv", "query": "What did Tom buy for the fjords?",
         "relevant_ids": ["d1:3"], "category": "clear"},
    ]  # fmt: skip
    return {"name": "followups", "description": "test", "memories": memories, "queries": queries}


@pytest.fixture(scope="module")
def dataset_file(write_dataset: Callable[[dict[str, Any]], Path]) -> Path:
    return write_dataset(followup_dataset())


@pytest.fixture(scope="module")
async def result(evaluate: Callable[[EvalOptions], Awaitable[EvalResult]]) -> EvalResult:
    return await evaluate(EvalOptions(strategies=("default",), rewrite=True, deep_search=True))


def test_variant_rows_are_added_in_the_same_run(result: EvalResult) -> None:
    assert result.strategy_names == [
        "dense",
        "bm25",
        "default",
        "default+rewrite",
        "default+deep",
        "default+rewrite+deep",
    ]
    assert result.violations == 0


def test_rewriting_raises_recall_on_the_followups(result: EvalResult) -> None:
    base = result.strategy("default")
    rewritten = result.strategy("default+rewrite")
    assert rewritten.overall.recall[1] > base.overall.recall[1]
    assert rewritten.overall.recall[1] == 1.0
    assert rewritten.query("q4").ranked == base.query("q4").ranked  # clear: fast path


def test_followup_statistics_say_what_answered(result: EvalResult) -> None:
    stats = result.followup
    assert stats is not None
    assert stats.llm.startswith("no LLM")
    assert stats.rewrite_reasons == {"fast_path": 1, "heuristic": 3}
    assert stats.rewrite_changed == 3
    assert stats.deep_methods == {"heuristic": 8}  # 4 queries x 2 primaries
    assert [r.primary for r in stats.recoveries] == ["default", "default+rewrite"]
    for recovery in stats.recoveries:
        assert recovery.queries == 4
        assert recovery.recovered_ungated <= recovery.missed_in_pool <= recovery.missed
        assert recovery.recovered_gated <= recovery.missed_escalated <= recovery.missed
    text = format_text(result)
    assert "follow-ups: rewriting and ranking by no LLM" in text
    assert "recovered (every query deep)" in text
    data = to_json(result)
    assert data["followup"]["rewrite"]["reasons"] == {"fast_path": 1, "heuristic": 3}
    assert len(data["followup"]["deep_search"]["by_primary"]) == 2


def test_cli_flags(dataset_file: Path, tmp_path: Path, embedding_config: EmbeddingConfig) -> None:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(f"embedding: {{cache_dir: '{embedding_config.cache_dir}'}}\n")
    out = tmp_path / "eval.json"
    code = main(
        [
            "eval",
            "--dataset",
            str(dataset_file),
            "--config",
            str(config_file),
            "--strategies",
            "default",
            "--rewrite",
            "--quiet",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert "default+rewrite" in data["strategies"]
    assert "default+deep" not in data["strategies"]
    assert data["followup"]["deep_search"]["by_primary"] == []


# -- the dataset builder -----------------------------------------------------------------


def locomo_like() -> dict[str, Any]:
    memories = [
        {"id": f"c:D1:{i}", "user_id": "c", "content": f"{name}: line {i}"}
        for i, name in enumerate(["Caroline", "Melanie"] * 3)
    ]
    queries = [
        {"id": "c:q0", "user_id": "c", "query": "When did Caroline go to the LGBTQ support group?",
         "relevant_ids": ["c:D1:0"], "category": "temporal"},
        {"id": "c:q1", "user_id": "c", "query": "What did Melanie paint?",
         "relevant_ids": ["c:D1:1"], "category": "single-hop"},
        {"id": "c:q2", "user_id": "c", "query": "Who visited Caroline's family?",
         "relevant_ids": ["c:D1:2"], "category": "single-hop"},
        {"id": "c:q3", "user_id": "c", "query": "Did Caroline and Melanie meet?",
         "relevant_ids": ["c:D1:3"], "category": "multi-hop"},
    ]  # fmt: skip
    return {"name": "locomo-like", "memories": memories, "queries": queries}


def test_builder_replaces_names_and_objects_deterministically() -> None:
    module = build_followups
    built = module.build(locomo_like())
    assert built == module.build(locomo_like())
    by_id = {q["id"]: q for q in built["queries"]}
    assert set(by_id) == {"c:q0:followup", "c:q1:followup", "c:q2:followup"}  # q3: two names
    assert by_id["c:q0:followup"]["query"] == "When did she go to the LGBTQ support group?"
    assert by_id["c:q1:followup"]["query"] == "What did she paint?"
    assert by_id["c:q2:followup"]["query"] == "Who visited her family?"
    for query in built["queries"]:
        names = " ".join(turn["content"] for turn in query["context"])
        assert "Caroline" in names or "Melanie" in names
        assert query["relevant_ids"]
    assert module.pronominalise("Is Jon happy?", "Jon") == "Is he happy?"
    assert module.pronominalise("Why did Maria call Jon?", "Jon") == "Why did Maria call him?"
    assert module.object_phrase("When did she paint a sunrise?") == "a sunrise"
    assert module.object_phrase("When did she go there?") is None
    parse_dataset(built, source="built")  # the FORMAT.md shape


@pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo dev set not present")
def test_builder_makes_at_least_50_followups_from_locomo(tmp_path: Path) -> None:
    module = build_followups
    out = tmp_path / "followups.json"
    assert module.main(["--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["queries"]) >= 50
    assert {q["category"] for q in data["queries"]} == {"pronoun", "pronoun+it"}
    assert all(q["context"] for q in data["queries"])
    assert "she" in data["queries"][0]["query"] or "he" in data["queries"][0]["query"]
