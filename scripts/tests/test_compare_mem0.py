"""``scripts.compare_mem0``: the user-turn set it compares on, and mem0's rankings
scored exactly as ``sidecar eval`` scores a strategy (no mem0 needed here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import compare_mem0
from sidecar.evaluation.dataset import Dataset, EvalMemory, EvalQuery


def _dataset() -> Dataset:
    memories = (
        EvalMemory("m1", "u1", "user: I adopted a greyhound called Pix"),
        EvalMemory("m2", "u1", "assistant: Greyhounds love short sprints."),
        EvalMemory("m3", "u1", "user: Pix hates the rain"),
        EvalMemory("m4", "u2", "assistant: Try a lighter glaze."),
    )
    queries = (
        EvalQuery("q1", "u1", "what dog did I adopt?", ("m1", "m2"), category="single"),
        EvalQuery("q2", "u2", "which glaze?", ("m4",), category="single"),
        EvalQuery("q3", "u1", "what does my dog hate?", ("m3",), category="multi"),
    )
    return Dataset("toy", "", memories, queries, "toy.json")


def test_user_turns_keeps_the_users_lines_and_the_queries_with_evidence_among_them() -> None:
    kept = compare_mem0.user_turns(_dataset())
    assert [m.id for m in kept.memories] == ["m1", "m3"]
    # q2's only evidence is an assistant turn: it has nothing left to find.
    assert [q.id for q in kept.queries] == ["q1", "q3"]
    assert kept.queries[0].relevant_ids == ("m1",)
    assert kept.name == "toy (user turns)"


def test_the_job_carries_every_memory_and_query_with_both_depths() -> None:
    job = compare_mem0.mem0_job(_dataset(), Path("/tmp/store"))
    assert [m["id"] for m in job["memories"]] == ["m1", "m2", "m3", "m4"]
    assert job["queries"][2] == {"id": "q3", "user_id": "u1", "query": "what does my dog hate?"}
    assert job["depths"] == [10, 50]


def test_mem0_rankings_are_scored_as_sidecar_eval_scores_a_strategy() -> None:
    dataset = compare_mem0.user_turns(_dataset())
    rankings = {
        # The top 10 misses it (say, under mem0's threshold); the 50-deep search
        # finds it second: recall@10 reads the first, MRR the second.
        "q1": {"10": ["m3"], "50": ["m3", "m1"]},
        "q3": {"10": ["m3", "m1"], "50": ["m3", "m1"]},
    }
    result = compare_mem0.mem0_result(dataset, rankings, [30.0, 40.0])
    first, second = result.queries
    assert first.ranked == ("m3",)
    assert first.scores.recall[10] == 0.0
    assert first.scores.mrr == pytest.approx(0.5)
    assert second.scores.recall[10] == 1.0
    assert result.overall.mrr == pytest.approx(0.75)
    assert result.latencies_ms == [30.0, 40.0]
    assert set(result.by_category) == {"single", "multi"}


@pytest.mark.skipif(
    not compare_mem0.MEM0_PYTHON.exists(),
    reason="no .venv-mem0 (./scripts/setup_mem0.sh makes it; mem0ai is not a dependency)",
)
def test_mem0_ranks_the_toy_users_memories_through_its_own_environment() -> None:
    dataset = _dataset()
    result, ran = compare_mem0.run_mem0(dataset, compare_mem0.MEM0_PYTHON)
    assert ran["version"] == "2.2.1"
    by_query = {q.query_id: q for q in result.queries}
    # mem0 searches one user's memories: never another's.
    assert set(by_query["q1"].ranked) <= {"m1", "m2", "m3"}
    assert by_query["q1"].ranked[0] == "m1"
    assert by_query["q2"].ranked == ("m4",)
