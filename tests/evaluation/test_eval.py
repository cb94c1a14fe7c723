"""``sidecar eval``: metrics by hand, dataset validation, and an end-to-end run on a
small dataset with users, a group memory and a public memory."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main
from sidecar.config import EmbeddingConfig, SidecarConfig
from sidecar.errors import InvalidInput
from sidecar.evaluation.dataset import Dataset, load_dataset, parse_dataset, visible
from sidecar.evaluation.metrics import (
    Scores,
    mean_scores,
    ndcg_at,
    percentile,
    precision_at,
    recall_at,
    reciprocal_rank,
    score_query,
)
from sidecar.evaluation.report import format_text, to_json, write_json
from sidecar.evaluation.runner import (
    EvalOptions,
    EvalResult,
    registered_strategies,
    resolve_strategies,
)
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.service import MemoryService
from sidecar.memory.records.records import Hit, MemoryRecord, Scope, Visibility

#: The conftest's ``evaluate``: the runner on this module's dataset.
Evaluate = Callable[[EvalOptions], Awaitable[EvalResult]]

# -- metrics -----------------------------------------------------------------------


def test_recall_hit_precision_by_hand() -> None:
    ranked = ["a", "x", "b", "y", "z"]
    relevant = {"a", "b", "c"}
    assert recall_at(ranked, relevant, 1) == pytest.approx(1 / 3)
    assert recall_at(ranked, relevant, 5) == pytest.approx(2 / 3)
    assert precision_at(ranked, relevant, 1) == 1.0
    assert precision_at(ranked, relevant, 5) == pytest.approx(2 / 5)
    # The denominator is k, not the 5 memories returned.
    assert precision_at(ranked, relevant, 10) == pytest.approx(2 / 10)
    assert precision_at(["a"], {"a"}, 5) == pytest.approx(1 / 5)
    scores = score_query(ranked, relevant, (1, 2, 5))
    assert scores.hit == {1: 1.0, 2: 1.0, 5: 1.0}
    assert score_query(["x", "a"], {"a"}, (1, 2)).hit == {1: 0.0, 2: 1.0}


def test_mrr_counts_the_first_relevant_within_50() -> None:
    assert reciprocal_rank(["x", "y", "a", "b"], {"a", "b"}) == pytest.approx(1 / 3)
    filler = [f"f{i}" for i in range(49)]
    assert reciprocal_rank([*filler, "a"], {"a"}) == pytest.approx(1 / 50)
    assert reciprocal_rank([*filler, "f49", "a"], {"a"}) == 0.0  # rank 51
    assert reciprocal_rank([], {"a"}) == 0.0


def test_ndcg_with_binary_gains() -> None:
    ranked = ["a", "x", "b", "y", "z"]
    relevant = {"a", "b", "c"}
    dcg = 1 / math.log2(2) + 1 / math.log2(4)
    ideal = 1 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at(ranked, relevant, 5) == pytest.approx(dcg / ideal)  # 0.7039
    assert ndcg_at(ranked, relevant, 5) == pytest.approx(0.70392, abs=1e-5)
    # k=2: ideal has min(2, 3) relevant at the top.
    assert ndcg_at(ranked, relevant, 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert ndcg_at(["x", "a"], {"a"}, 1) == 0.0
    assert ndcg_at(["a", "b"], {"a", "b"}, 2) == pytest.approx(1.0)


def test_means_and_percentiles() -> None:
    ks = (1, 5)
    first = score_query(["a", "x"], {"a"}, ks)  # perfect
    second = score_query(["x", "y", "z"], {"a"}, ks)  # nothing
    mean = mean_scores([first, second], ks)
    assert mean.count == 2
    assert mean.recall == {1: 0.5, 5: 0.5}
    assert mean.precision == {1: 0.5, 5: pytest.approx(0.1)}
    assert mean.mrr == 0.5
    assert mean_scores([], ks) == Scores(
        {1: 0.0, 5: 0.0}, {1: 0.0, 5: 0.0}, {1: 0.0, 5: 0.0}, {1: 0.0, 5: 0.0}, 0.0, 0
    )
    assert mean.as_dict()["precision@5"] == pytest.approx(0.1)
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([], 50) == 0.0


# -- dataset validation ------------------------------------------------------------


def doc(memories: list[dict[str, Any]], queries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "t", "memories": memories, "queries": queries}


MEM = {"id": "m1", "user_id": "u1", "content": "Some fact."}
QUERY = {"id": "q1", "user_id": "u1", "query": "what?", "relevant_ids": ["m1"]}


def test_optional_fields_may_be_absent_or_null() -> None:
    nulls = dict.fromkeys(
        ("session_id", "created_at", "group_id", "visibility", "related_ids", "cluster"), None
    )
    data = parse_dataset(
        doc(
            [MEM, {**MEM, "id": "m2", **nulls}],
            [QUERY, {**QUERY, "id": "q2", "category": None, "group_ids": None, "context": None}],
        )
    )
    for memory in data.memories:
        assert memory.group_id == ""
        assert memory.visibility == Visibility.USER
        assert memory.created_at == 0
        assert memory.related_ids == ()
    assert data.queries[1].group_ids == ()
    assert data.queries[1].category is None


def test_times_and_visibility_are_parsed() -> None:
    data = parse_dataset(
        doc(
            [
                {**MEM, "created_at": "2023-05-08T13:56:00Z", "visibility": "public"},
                {
                    **MEM,
                    "id": "m2",
                    "created_at": "2023-05-08T13:56:00",
                    "group_id": "g",
                    "visibility": "group",
                },
            ],
            [{**QUERY, "context": [{"role": "user", "content": "hi"}], "group_ids": ["g"]}],
        )
    )
    assert data.memories[0].created_at == 1683554160000
    assert data.memories[1].created_at == 1683554160000  # no zone: UTC
    assert data.memories[0].visibility == Visibility.PUBLIC
    assert data.queries[0].scope == Scope("u1", ("g",))
    assert len(data.queries[0].context) == 1


@pytest.mark.parametrize(
    ("memories", "queries", "message"),
    [
        (
            [{"id": "m1", "user_id": "u1"}],
            [QUERY],
            r"memories\[0\] \(id 'm1'\): 'content' is required",
        ),
        (
            [MEM, {**MEM, "id": "m2", "user_id": "bad\x00id"}],
            [QUERY],
            r"memories\[1\] \(id 'm2'\): user_id contains a control",
        ),
        ([MEM, MEM], [QUERY], r"memories\[1\]: duplicate id 'm1'"),
        ([{**MEM, "id": "x" * 65}], [QUERY], r"id is longer than 64 bytes"),
        ([{**MEM, "created_at": "yesterday"}], [QUERY], r"'created_at' is not an ISO-8601"),
        ([{**MEM, "created_at": 1700000000}], [QUERY], r"'created_at' must be an ISO-8601"),
        ([{**MEM, "visibility": "team"}], [QUERY], r"'visibility' must be one of user, group"),
        ([{**MEM, "visibility": "group"}], [QUERY], r"visibility 'group' needs a 'group_id'"),
        (
            [MEM],
            [{**QUERY, "relevant_ids": ["m9"]}],
            r"queries\[0\] \(id 'q1'\): relevant id 'm9' is not a memory",
        ),
        ([MEM], [{**QUERY, "relevant_ids": []}], r"'relevant_ids' must name at least one"),
        ([MEM], [{**QUERY, "user_id": "u2"}], r"relevant memory 'm1' is not visible"),
        ([MEM], [{k: v for k, v in QUERY.items() if k != "query"}], r"'query' is required"),
        ([MEM], [QUERY, QUERY], r"queries\[1\] \(id 'q1'\): duplicate id"),
        ([MEM], [{**QUERY, "group_ids": "g"}], r"'group_ids' must be a list of ids"),
        ([MEM], [{**QUERY, "context": [{"role": "user"}]}], r"context\[0\] must be an object"),
        ([MEM], [], r"'queries' is empty"),
        ([MEM], "nope", r"'queries' must be a list"),
    ],
)
def test_invalid_entries_are_named(memories: Any, queries: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_dataset(doc(memories, queries), source="d.json")


def test_unreadable_files_are_clear(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read dataset"):
        load_dataset(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(InvalidInput, match="invalid JSON"):
        load_dataset(bad)
    with pytest.raises(InvalidInput, match="top level must be an object"):
        parse_dataset([])


def test_visibility_rule() -> None:
    member, stranger = Scope("u2", ("g",)), Scope("u3")
    assert visible("u1", "", Visibility.USER, Scope("u1"))
    assert not visible("u1", "g", Visibility.USER, member)
    assert visible("u1", "g", Visibility.GROUP, member)
    assert not visible("u1", "g", Visibility.GROUP, stranger)
    assert visible("u1", "", Visibility.PUBLIC, stranger)


def test_strategy_names_are_resolved() -> None:
    known = registered_strategies()
    assert {"dense", "bm25", "default"} <= set(known)
    assert resolve_strategies(None, known) == (tuple(known), ())
    assert resolve_strategies(["default"], known) == (
        ("dense", "bm25", "default"),
        ("dense", "bm25"),
    )
    assert resolve_strategies(["bm25", "default", "bm25"], known) == (
        ("dense", "bm25", "default"),
        ("dense",),
    )
    with pytest.raises(InvalidInput, match=r"unknown strategy 'nope' \(known: dense, "):
        resolve_strategies(["nope"], known)


# -- end to end ----------------------------------------------------------------------

TEAM = "team-x"


def small_dataset() -> dict[str, Any]:
    """Three users; alice shares two team memories with bob (both in the team), carol
    (not in it) publishes one memory to everyone."""
    alice = [
        "Alice adopted a golden retriever puppy named Biscuit last spring.",
        "Biscuit, Alice's dog, loves chasing tennis balls in the park.",
        "Alice works as a backend engineer writing Rust services.",
        "Alice prefers the Neovim editor with a dark colour scheme.",
        "Alice is training for the Berlin marathon in September.",
        "Alice runs forty kilometres a week to prepare for the marathon.",
        "Alice is allergic to peanuts and avoids satay sauce.",
        "Alice's favourite dish is mushroom risotto.",
        "Alice lives in Hamburg near the harbour.",
        "Alice plays the cello in a community orchestra.",
    ]
    bob = [
        "Bob grows tomatoes and basil in his balcony garden.",
        "Bob's balcony garden also has chili peppers and mint.",
        "Bob drives an old blue Volvo station wagon.",
        "Bob is learning Japanese and practises kanji every evening.",
        "Bob plans a trip to Kyoto next April to see the cherry blossoms.",
        "Bob is a high-school chemistry teacher.",
        "Bob drinks his coffee black without sugar.",
        "Bob has two cats called Miso and Tofu.",
        "Bob supports the Liverpool football club.",
        "Bob's sister lives in Toronto.",
    ]
    carol = [
        "Carol is a wildlife photographer who shoots with a Nikon camera.",
        "Carol photographed puffins in Iceland last summer.",
        "Carol is vegetarian and cooks a lot of lentil curry.",
        "Carol climbs at the bouldering gym twice a week.",
        "Carol is writing a novel about a lighthouse keeper.",
        "Carol deploys her photography website every Friday evening.",
    ]
    memories: list[dict[str, Any]] = []
    for user, texts in (("alice", alice), ("bob", bob), ("carol", carol)):
        for i, text in enumerate(texts, start=1):
            memories.append(
                {
                    "id": f"{user[0]}{i}",
                    "user_id": user,
                    "content": text,
                    "session_id": f"{user}:s{1 + i // 4}",
                    "created_at": f"2024-0{1 + i // 4}-{10 + i}T09:00:00Z",
                }
            )
    memories += [
        {"id": "g1", "user_id": "alice", "group_id": TEAM, "visibility": "group",
         "content": "Team X deploys the payment service every Tuesday at 10:00 UTC."},
        {"id": "g2", "user_id": "alice", "group_id": TEAM, "visibility": "group",
         "content": "Team X's on-call rotation for the payment service changes on Mondays."},
        {"id": "p1", "user_id": "carol", "visibility": "public", "group_id": None,
         "content": "The office Wi-Fi is called Orbit; its guest password changes monthly."},
    ]  # fmt: skip
    queries = [
        {"id": "alice-dog", "user_id": "alice", "query": "What is my dog called?",
         "relevant_ids": ["a1", "a2"], "category": "pets"},
        {"id": "alice-marathon", "user_id": "alice", "query": "How am I training for the marathon?",
         "relevant_ids": ["a5", "a6"], "category": "sport"},
        {"id": "alice-deploy", "user_id": "alice", "group_ids": [TEAM],
         "query": "When does the payment service get deployed?",
         "relevant_ids": ["g1"], "category": "work"},
        {"id": "bob-deploy", "user_id": "bob", "group_ids": [TEAM],
         "query": "Which day does the team deploy the payment service?",
         "relevant_ids": ["g1"], "category": "work"},
        {"id": "carol-deploy", "user_id": "carol", "group_ids": [],
         "query": "Which day does the team deploy the payment service?",
         "relevant_ids": ["c6"], "category": "work"},
        {"id": "bob-wifi", "user_id": "bob", "query": "What is the office Wi-Fi network called?",
         "relevant_ids": ["p1"], "category": "office"},
        {"id": "bob-garden", "user_id": "bob", "query": "Which plants grow on my balcony?",
         "relevant_ids": ["b1", "b2"], "category": "garden"},
        {"id": "bob-trip", "user_id": "bob", "query": "Where am I travelling next spring?",
         "relevant_ids": ["b5"], "category": "travel"},
        {"id": "carol-birds", "user_id": "carol", "query": "Which birds did I photograph?",
         "relevant_ids": ["c2"], "category": "photography"},
    ]  # fmt: skip
    return {"name": "small", "description": "test set", "memories": memories, "queries": queries}


@pytest.fixture(scope="module")
def dataset_file(write_dataset: Callable[[dict[str, Any]], Path]) -> Path:
    return write_dataset(small_dataset())


@pytest.fixture(scope="module")
async def result(evaluate: Evaluate) -> EvalResult:
    return await evaluate(EvalOptions(no_threshold=True))


def test_every_strategy_is_evaluated(result: EvalResult) -> None:
    assert result.strategy_names == registered_strategies()
    assert result.added_baselines == ()
    text = format_text(result)
    rows = {line.split()[0] for line in text.splitlines() if line.strip()}
    assert {"dense", "bm25", "default"} <= rows
    assert "evidence gate OFF" in text
    assert "vs baselines" in text
    assert "recall@10 by category" in text
    assert "visibility check: 0 violations" in text


def test_dense_finds_the_relevant_memories(result: EvalResult) -> None:
    dense = result.strategy("dense").overall
    assert dense.count == 9
    assert dense.recall[5] >= 0.8, dense.recall
    assert dense.mrr >= 0.7, dense.mrr
    assert set(result.strategy("dense").by_category) == {
        "garden", "office", "pets", "photography", "sport", "travel", "work"
    }  # fmt: skip


def test_no_memory_leaves_its_scope(result: EvalResult) -> None:
    assert result.violations == 0
    for strategy in result.strategies:
        assert strategy.violations == 0, strategy.name
        # A team member who did not write them reads the team's memories...
        assert "g1" in strategy.query("bob-deploy").ranked[:5], strategy.name
        assert "g1" in strategy.query("alice-deploy").ranked[:5], strategy.name
        # ...someone outside the team never does, however well they match.
        carol = strategy.query("carol-deploy").ranked
        assert "g1" not in carol, strategy.name
        assert "g2" not in carol, strategy.name
        # Public memories are everyone's.
        assert "p1" in strategy.query("bob-wifi").ranked[:5], strategy.name


async def test_results_are_deterministic(result: EvalResult, evaluate: Evaluate) -> None:
    again = await evaluate(
        EvalOptions(strategies=("default", "hybrid"), no_threshold=True, ks=(1, 5))
    )
    assert again.strategy_names == ["dense", "bm25", "default", "hybrid"]
    assert again.added_baselines == ("dense", "bm25")
    for strategy in again.strategies:
        before = result.strategy(strategy.name)
        assert [q.ranked for q in strategy.queries] == [q.ranked for q in before.queries]
        assert strategy.overall.mrr == before.overall.mrr
    assert "note: added baselines dense, bm25" in format_text(again)


def test_json_has_every_number(result: EvalResult, tmp_path: Path) -> None:
    path = tmp_path / "out" / "eval.json"
    write_json(result, path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data == json.loads(json.dumps(to_json(result)))
    assert data["dataset"]["name"] == "small"
    assert data["dataset"]["memories"] == 29
    assert data["dataset"]["queries"] == 9
    assert data["ks"] == [1, 5, 10, 20]
    dense = data["strategies"]["dense"]
    assert set(dense["overall"]) >= {"recall@1", "hit@5", "precision@10", "ndcg@20", "mrr"}
    assert dense["by_category"]["work"]["queries"] == 3
    assert dense["latency_ms"]["p50"] > 0
    assert data["visibility_violations"] == 0
    assert data["config"]["no_threshold"] is True
    assert data["config"]["oracle_topics"] is False  # never the default
    assert data["config"]["retrieval"]["threshold"] == -1
    assert data["config"]["file"]["defaults"]["retrieval"]["threshold"] == 0.2
    assert data["machine"]["cpus"] >= 1
    assert data["timings"]["ingest_s"] > 0


def test_dataset_labels_are_filed_only_when_asked_and_then_called_an_upper_bound() -> None:
    from types import SimpleNamespace

    from sidecar.evaluation.report import _describe_topics

    labelled = SimpleNamespace(
        memories=[SimpleNamespace(cluster="rag"), SimpleNamespace(cluster=None)]
    )
    honest = _describe_topics(SimpleNamespace(dataset=labelled, oracle_topics=False))  # type: ignore[arg-type]
    assert "1 'cluster' labels ignored" in honest
    assert "ORACLE" not in honest
    oracle = _describe_topics(SimpleNamespace(dataset=labelled, oracle_topics=True))  # type: ignore[arg-type]
    assert "ORACLE TOPICS" in oracle
    assert "upper bound" in oracle
    assert EvalOptions().oracle_topics is False


def test_gate_applies_without_no_threshold(config: SidecarConfig) -> None:
    from sidecar.evaluation.runner import evaluation_retrieval

    gated = evaluation_retrieval(config, no_threshold=False)
    assert gated == config.defaults.retrieval
    open_gate = evaluation_retrieval(config, no_threshold=True)
    assert (open_gate.threshold, open_gate.lexical_threshold) == (-1.0, 0.0)


def test_cli_eval(
    dataset_file: Path,
    embedding_config: EmbeddingConfig,
    embedder: Embedder,  # the model is exported to the cache before the CLI loads it
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config_file = tmp_path / "sidecar.yaml"
    config_file.write_text(
        f"embedding: {{cache_dir: {json.dumps(embedding_config.cache_dir)}}}\n"
        "defaults: {retrieval: {threshold: 0.25}}\n",
        encoding="utf-8",
    )
    out = tmp_path / "eval.json"
    code = main(
        [
            "eval", "--dataset", str(dataset_file), "--config", str(config_file),
            "--strategies", "default", "--k", "1,5", "--json", str(out), "--quiet",
            "--variant", "plain=conversation.enabled=false,cues.subject_weight=0",
            "--variant", "dense-again=strategy=dense", "--off-topic",
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (
        "variant plain: the configured retrieval with conversation.enabled=False, "
        "cues.subject_weight=0"
    ) in captured.out
    assert "note: added baselines dense, bm25" in captured.out
    assert "evidence gate ON (threshold 0.25" in captured.out
    assert f"defaults.retrieval of {config_file}" in captured.out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["strategy_order"] == ["dense", "bm25", "default", "plain", "dense-again"]
    assert data["config"]["variants"]["plain"] == {
        "conversation.enabled": False,
        "cues.subject_weight": 0,
    }
    # The same strategy as a variant ranks exactly as it does as a strategy.
    dense, again = data["strategies"]["dense"], data["strategies"]["dense-again"]
    assert again["overall"] == dense["overall"]
    assert data["ks"] == [1, 5]
    # --off-topic: each question asked of a user without its answers, in both reports.
    assert "asked of another user" in captured.out
    assert data["config"]["off_topic"] is True
    assert data["strategies"]["plain"]["off_topic"]["questions"] == 8

    for bad in ("nope=conversation.wings=1", "nope=conversation.weight=7"):
        code = main(["eval", "--dataset", str(dataset_file), "--variant", bad, "--quiet"])
        assert code != 0
    with pytest.raises(SystemExit):
        main(["eval", "--dataset", str(dataset_file), "--variant", "nope=x"])
    errors = capsys.readouterr().err
    assert "not NAME=path=value" in errors
    assert "unknown retrieval setting 'conversation.wings'" in errors
    assert "invalid retrieval settings" in errors

    assert main(["eval", "--dataset", str(dataset_file), "--strategies", "nope"]) == 1
    assert "unknown strategy 'nope'" in capsys.readouterr().err


def test_dataset_limit(dataset_file: Path) -> None:
    data: Dataset = load_dataset(dataset_file)
    assert len(data.limited(3).queries) == 3
    assert data.limited(None) is data
    assert data.limited(3).memories == data.memories


async def test_out_of_scope_results_are_counted(
    evaluate: Evaluate, monkeypatch: pytest.MonkeyPatch
) -> None:
    search = MemoryService.search
    leaked = MemoryRecord(
        id="g1", user_id="alice", content="x", group_id=TEAM, visibility=Visibility.GROUP
    )

    async def leaky(self: MemoryService, query: Query, scope: Scope, *args: Any, **kw: Any) -> Any:
        hits = await search(self, query, scope, *args, **kw)
        return [*hits, Hit(leaked, 0.0)] if scope.user_id == "carol" else hits

    monkeypatch.setattr(MemoryService, "search", leaky)
    result = await evaluate(EvalOptions(strategies=("dense", "bm25")))
    # Two carol queries per strategy; alice owns g1 and bob is in the team.
    assert result.strategy("dense").violations == 2
    assert result.violations == 4
    assert result.strategy("dense").query("carol-deploy").violations == ("g1",)
    assert "VISIBILITY VIOLATIONS: 4 (dense 2, bm25 2)" in format_text(result)


async def test_store_uri_gets_a_collection_that_is_dropped(
    evaluate: Evaluate, tmp_path: Path
) -> None:
    from pymilvus import MilvusClient

    uri = str(tmp_path / "shared.db")
    result = await evaluate(EvalOptions(strategies=("dense",), store_uri=uri, limit_queries=2))
    assert result.store.startswith(f"{uri}, collection eval_")
    assert len(result.dataset.queries) == 2
    assert result.total_queries == 9
    client = MilvusClient(uri)
    try:
        assert client.list_collections() == []
    finally:
        client.close()
