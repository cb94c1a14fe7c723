"""Deep search: the confidence formula, candidate expansion (in scope only), the
token budget, tolerant parsing, blending, the rate limit, timeouts, the non-LLM
re-rank and the feedback record."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sidecar.config import DeepSearchConfig
from sidecar.errors import LLMUnavailable
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.deep.ranking import (
    blend,
    build_rank_prompt,
    estimate_tokens,
    evidence,
    expand_candidates,
    in_scope,
    parse_ranked,
    primary_confidence,
)
from sidecar.memory.read.deep.search import (
    DeepReport,
    DeepSearcher,
    FeedbackLog,
    RateLimiter,
    query_hash,
)
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.records.records import Hit, MemoryRecord, MemoryType, Scope, Visibility
from sidecar.metrics import Metrics
from tests.support.fakes import FakeLLM
from tests.support.vectors import unit

DIM = 4
ALICE = Scope("alice")


def record(
    rid: str,
    content: str,
    *,
    user: str = "alice",
    session: str = "s1",
    at: int = 0,
    related: tuple[str, ...] = (),
    category: str = "",
    kind: MemoryType = MemoryType.SEMANTIC,
    embedding: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0),
) -> MemoryRecord:
    return MemoryRecord(
        id=rid,
        user_id=user,
        content=content,
        embedding=unit(*embedding),
        session_id=session,
        created_at=at,
        related_ids=related,
        category_id=category,
        memory_type=kind,
    )


def corpus_with_foreigner() -> Corpus:
    """Alice's session s1 (a0..a4), a link from a1 to Bob's row, Bob's row in the
    same session id and category: a corpus that (wrongly) holds another user's row,
    so that the scope check inside expansion is what keeps it out."""
    rows = [
        record("a0", "Alice asked about the trip", at=1, category="c1"),
        record("a1", "The trip was to Lisbon", at=2, related=("b0",), category="c1"),
        record("a2", "Ana booked the hotel", at=3, category="c1"),
        record("a3", "Dinner was great", at=4),
        record("a4", "Back home on Sunday", at=5),
        record("b0", "Bob's secret plans", user="bob", at=6, category="c1"),
        record("b1", "Bob's diary", user="bob", session="s1", at=7),
    ]
    return Corpus.build(rows, DIM)


def hit(rec: MemoryRecord, cosine: float = 0.5, lexical: float = 0.5, score: float = 1.0) -> Hit:
    return Hit(rec, score, {"cosine": cosine, "lexical": lexical})


# -- confidence ------------------------------------------------------------------------


def test_evidence_and_confidence_formula_by_hand() -> None:
    assert evidence({"cosine": 0.7, "lexical": 1.0}) == pytest.approx(1.0)
    assert evidence({"cosine": 0.2, "lexical": 0.0}) == pytest.approx(0.0)
    assert evidence({"cosine": 0.45, "lexical": 0.2}) == pytest.approx(0.5 * 0.5 + 0.5 * 0.2)
    assert evidence({}, score=0.7) == pytest.approx(0.5)  # store-side hit: score is cosine
    rows = [record(f"r{i}", "x") for i in range(5)]
    hits = [
        hit(rows[0], 0.7, 0.8),  # e = 0.9
        hit(rows[1], 0.45, 0.3),  # e = 0.4
        hit(rows[2], 0.3, 0.1),  # e = 0.15
    ]
    conf = primary_confidence(hits, top_k=5)
    assert conf.top == pytest.approx(0.9)
    assert conf.gap == pytest.approx(0.5)
    assert conf.count == 2  # e >= 0.4
    assert conf.value == pytest.approx(0.6 * 0.9 + 0.25 * 1.0 + 0.15 * 2 / 5)
    weak = primary_confidence([hit(rows[0], 0.3, 0.1), hit(rows[1], 0.3, 0.1)], top_k=5)
    assert weak.value == pytest.approx(0.6 * 0.15)
    assert weak.value < DeepSearchConfig().threshold
    assert primary_confidence([], top_k=5).value == 0.0


# -- expansion ---------------------------------------------------------------------------


def test_expansion_follows_sessions_links_and_categories_in_scope_only() -> None:
    corpus = corpus_with_foreigner()
    config = DeepSearchConfig(primary_k=1, session_hops=1, category_members=5)
    primary = [hit(corpus.records[corpus.index_of["a1"]])]
    pool = expand_candidates(primary, corpus, ALICE, config)
    chosen = {corpus.records[c.index].id: c.source for c in pool}
    assert chosen["a1"] == "primary"
    assert chosen["a0"] == "session"
    assert chosen["a2"] == "session"
    assert "a3" not in chosen or chosen["a3"] == "category"
    # Bob's rows are linked, share the session id and the category: never candidates.
    assert not {"b0", "b1"} & set(chosen)
    for candidate in pool:
        assert corpus.records[candidate.index].user_id == "alice"


def test_expansion_is_capped_and_primary_first() -> None:
    corpus = corpus_with_foreigner()
    config = DeepSearchConfig(primary_k=2, max_candidates=3)
    primary = [hit(corpus.records[corpus.index_of[i]]) for i in ("a3", "a1")]
    pool = expand_candidates(primary, corpus, ALICE, config)
    assert [corpus.records[c.index].id for c in pool][:2] == ["a3", "a1"]
    assert len(pool) == 3


def test_scope_rule() -> None:
    scope = Scope("alice", ("team",))
    assert in_scope(MemoryRecord(id="x", user_id="alice", content=""), scope)
    assert not in_scope(MemoryRecord(id="x", user_id="bob", content=""), scope)
    shared = MemoryRecord(
        id="x", user_id="bob", content="", group_id="team", visibility=Visibility.GROUP
    )
    assert in_scope(shared, scope)
    assert not in_scope(shared, Scope("alice", ("other",)))
    public = MemoryRecord(id="x", user_id="bob", content="", visibility=Visibility.PUBLIC)
    assert in_scope(public, Scope("carol"))


# -- the rank prompt ---------------------------------------------------------------------


def test_token_budget_drops_what_does_not_fit() -> None:
    rows = [record(f"m{i}", f"memory number {i} " + "x" * 396, at=i) for i in range(30)]
    corpus = Corpus.build(rows, DIM)
    pool = expand_candidates([hit(r) for r in rows], corpus, ALICE, DeepSearchConfig())
    roomy = build_rank_prompt("query", pool, corpus, DeepSearchConfig())
    assert len(roomy.ids) == 21  # primary_k 20, plus the session neighbour of the 20th
    assert roomy.dropped == 0
    tight = DeepSearchConfig(max_tokens=1000, candidate_chars=400)
    prompt = build_rank_prompt("query", pool, corpus, tight)
    used = sum(estimate_tokens(m["content"]) for m in prompt.messages)
    assert used + prompt.answer_tokens <= 1000
    assert prompt.dropped == len(pool) - len(prompt.ids) > 0
    assert prompt.messages[0]["content"].startswith("[memory-sidecar:rank v1]")
    assert "[c1] memory number 0" in prompt.messages[1]["content"]


def test_rank_answers_are_parsed_tolerantly() -> None:
    ids = {"c1": 10, "c2": 20, "c3": 30}
    answer = {
        "ranked": [
            {"id": "c2", "score": 0.9, "reason": "names the trip"},
            {"id": "[c1]", "score": "0.4"},
            {"id": "3", "score": 7},  # clipped to 1
            {"id": "c9", "score": 1.0},  # unknown
            {"id": "c1", "score": 0.2},  # a duplicate keeps the higher
            {"score": 0.5},
        ]
    }
    assert parse_ranked(answer, ids) == {20: 0.9, 10: 0.4, 30: 1.0}
    assert parse_ranked(["c3", "c1"], ids) == {30: 1.0, 10: 0.5}
    assert parse_ranked({"nothing": 1}, ids) == {}
    assert parse_ranked("junk", ids) == {}


# -- blending ----------------------------------------------------------------------------


def test_blend_keeps_the_higher_score_and_always_surfaces_constraints() -> None:
    rows = [record(f"m{i}", f"m{i}", at=i) for i in range(6)]
    rows.append(record("rule", "Never book red-eye flights", at=9, kind=MemoryType.CONSTRAINT))
    corpus = Corpus.build(rows, DIM)
    # Evidence 0.55, 0.55, 0.55, 0.3 (below the envelope only for m3), 0.55.
    signals = [(0.5, 0.5), (0.5, 0.5), (0.5, 0.5), (0.3, 0.4), (0.5, 0.5)]
    primary = [
        hit(corpus.records[corpus.index_of[f"m{i}"]], cos, lex)
        for i, (cos, lex) in enumerate(signals)
    ]
    # The primary order is kept on the evidence scale (upper envelope).
    unchanged = blend(primary, {}, corpus, top_k=3)
    assert [h.record.id for h in unchanged] == ["m0", "m1", "m2", "m3", "m4"]
    assert [h.score for h in unchanged] == pytest.approx([0.55] * 5)
    ranked = {corpus.index_of["m4"]: 0.9, corpus.index_of["m5"]: 0.8, corpus.index_of["m1"]: 0.2}
    hits = blend(primary, ranked, corpus, top_k=3)
    ids = [h.record.id for h in hits]
    assert ids == ["m4", "m5", "m0", "m1", "m2", "m3"]  # one entry each
    assert hits[0].score == pytest.approx(0.9)  # the higher of 0.55 and 0.9
    assert hits[3].score == pytest.approx(0.55)  # the higher of 0.55 and 0.2
    assert hits[1].via == "deep"
    ranked[corpus.index_of["rule"]] = 0.1  # found, even if ranked last
    with_rule = [h.record.id for h in blend(primary, ranked, corpus, top_k=3)]
    assert with_rule[:3] == ["m4", "m5", "rule"]
    assert len(with_rule) == 7


# -- rate limit --------------------------------------------------------------------------


def test_rate_limit_per_key_in_a_rolling_window_with_bounded_keys() -> None:
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0])
    assert all(limiter.allow("s1", 2, 60, 10) for _ in range(2))
    assert not limiter.allow("s1", 2, 60, 10)
    assert limiter.allow("s2", 2, 60, 10)  # another session
    now[0] = 61.0
    assert limiter.allow("s1", 2, 60, 10)
    for i in range(20):
        limiter.allow(f"k{i}", 2, 60, 10)
    assert len(limiter) == 10


def test_decision_counts_rate_limited_escalations() -> None:
    searcher = DeepSearcher(None, Metrics())
    weak = [hit(record("a", "x"), 0.25, 0.0)]
    config = DeepSearchConfig(rate_limit=1)
    assert searcher.decide(weak, config, 5, "session")[0] == "escalate"
    assert searcher.decide(weak, config, 5, "session")[0] == "rate_limited"
    assert searcher.decide(weak, config, 5, "other")[0] == "escalate"
    strong = [hit(record("a", "x"), 0.9, 1.0)]
    assert searcher.decide(strong, config, 5, "session")[0] == "confident"
    assert DeepReport("shadow", 0.123).header_value() == "shadow;confidence=0.12"


# -- the searcher ------------------------------------------------------------------------


def lisbon_corpus() -> tuple[Corpus, list[Hit], Query]:
    rows = [
        record("q", "Where did we go?", at=1, embedding=(1, 0, 0, 0)),
        record("ans", "We flew to Lisbon in May", at=2, embedding=(0, 1, 0, 0)),
        record("x", "Unrelated chatter", at=3, embedding=(0, 0, 1, 0)),
    ]
    corpus = Corpus.build(rows, DIM)
    primary = [Hit(corpus.records[0], 1.0, {"cosine": 0.3, "lexical": 0.2})]
    query = Query("where did we travel", np.asarray(unit(1, 0, 0, 0), dtype=np.float32))
    return corpus, primary, query


async def test_llm_ranking_surfaces_a_neighbour_and_writes_feedback(tmp_path: Path) -> None:
    corpus, primary, query = lisbon_corpus()
    llm = FakeLLM({"rank": {"ranked": [{"id": "c2", "score": 0.95, "reason": "the answer"}]}})
    metrics = Metrics()
    searcher = DeepSearcher(llm, metrics)
    config = DeepSearchConfig(feedback_path=str(tmp_path / "fb.jsonl"))
    result = await searcher.run(query, primary, corpus, ALICE, config, 1, mode="on", profile="p")
    assert result.outcome == "ok"
    assert result.method == "llm"
    assert result.hits[0].record.id == "ans"
    assert result.new_ids == ("ans",)
    (call,) = llm.calls
    assert (call.task, call.temperature) == ("rank", 0.0)
    assert "[c2] We flew to Lisbon in May" in call.messages[1]["content"]
    assert (
        metrics.value(
            "memory_sidecar_deep_search_runs_total",
            {"mode": "on", "method": "llm", "outcome": "ok"},
        )
        == 1
    )
    assert metrics.value("memory_sidecar_deep_search_new_memories_total", {"mode": "on"}) == 1
    await searcher.drain()
    entry = json.loads((tmp_path / "fb.jsonl").read_text().splitlines()[0])
    assert entry["primary_ids"] == ["q"]
    assert entry["deep_ids"] == ["ans"]
    assert entry["new_ids"] == ["ans"]
    assert entry["query_sha256"] == query_hash("where did we travel")
    assert "query" not in entry  # no text without debug_content
    assert entry["mode"] == "on"
    assert set(entry["timings_ms"]) == {"expand_ms", "total_ms"}
    await searcher.close()


async def test_feedback_carries_the_query_text_only_with_debug_content(tmp_path: Path) -> None:
    corpus, primary, query = lisbon_corpus()
    searcher = DeepSearcher(None, Metrics(), debug_content=True)
    config = DeepSearchConfig(feedback_path=str(tmp_path / "fb.jsonl"))
    await searcher.run(query, primary, corpus, ALICE, config, 1, mode="shadow")
    await searcher.drain()
    assert json.loads((tmp_path / "fb.jsonl").read_text())["query"] == "where did we travel"
    await searcher.close()


async def test_timeout_and_errors_keep_the_primary_results() -> None:
    corpus, primary, query = lisbon_corpus()
    config = DeepSearchConfig(timeout_ms=30, feedback_path="")
    stalled = FakeLLM({"rank": {"ranked": []}}, stalls={"rank": 2.0})
    slow = DeepSearcher(stalled, Metrics())
    result = await slow.run(query, primary, corpus, ALICE, config, 1, mode="on")
    assert result.outcome == "timeout"
    assert result.hits == primary
    failing = FakeLLM(errors={"rank": LLMUnavailable("down")})
    broken = DeepSearcher(failing, Metrics())
    result = await broken.run(query, primary, corpus, ALICE, config, 1, mode="on")
    assert result.outcome == "error"
    assert result.hits == primary
    assert stalled.tasks() == failing.tasks() == ["rank"]


async def test_without_an_llm_the_non_llm_rerank_runs_and_says_so() -> None:
    corpus, primary, query = lisbon_corpus()
    metrics = Metrics()
    searcher = DeepSearcher(None, metrics)
    result = await searcher.run(
        query, primary, corpus, ALICE, DeepSearchConfig(feedback_path=""), 2, mode="on"
    )
    assert result.method == "heuristic"
    assert {h.record.id for h in result.hits} >= {"q", "ans"}  # the session neighbour joins
    labels = {"mode": "on", "method": "heuristic", "outcome": "ok"}
    assert metrics.value("memory_sidecar_deep_search_runs_total", labels) == 1


def test_feedback_file_is_rotated(tmp_path: Path) -> None:
    path = tmp_path / "fb.jsonl"
    log = FeedbackLog(str(path), max_bytes=1024)
    for i in range(40):
        log.record({"i": i, "pad": "x" * 50})
    log.flush()
    log.close()
    assert path.stat().st_size <= 1024
    rotated = tmp_path / "fb.jsonl.1"
    assert rotated.exists()
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["i"] == 39
