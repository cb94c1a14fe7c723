"""Follow-up query rewriting: the ambiguity detector, the heuristic resolver, the
confidence score, the cache, the LLM budget and the fast path (no LLM call)."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.config import RewriteConfig
from sidecar.errors import LLMBadOutput, LLMError, LLMUnavailable
from sidecar.memory.language.ambiguity import detect
from sidecar.memory.language.resolver import context_entities, resolve_heuristic, rewrite_confidence
from sidecar.memory.read.rewrite.rewriter import (
    QueryRewriter,
    RewriteCache,
    _Cached,
    build_messages,
    clip_history,
    fuse_rewrite_hits,
    parse_rewrite,
)
from sidecar.memory.records.records import Hit, MemoryRecord
from sidecar.metrics import Metrics
from tests.support.fakes import FakeLLM

# -- detector ---------------------------------------------------------------------------

AMBIGUOUS = [
    ("Where does she live now?", "pronoun"),
    ("What did they say?", "pronoun"),
    ("When did he call her?", "pronoun"),
    ("Is it still broken?", "pronoun"),
    ("Is that true?", "demonstrative"),
    ("What is that?", "demonstrative"),
    ("Did you like that?", "demonstrative"),
    ("Remind me of that one", "demonstrative"),
    ("I think that is wrong", "demonstrative"),
    ("What did I do that weekend?", "temporal"),
    ("What did we talk about earlier?", "temporal"),
    ("Same as last time please", "temporal"),
    ("Book the table again", "temporal"),
    ("Where were we before?", "temporal"),
    ("How is the issue going?", "implicit"),
    ("Give me the same as yesterday", "implicit"),
    ("What was the thing you mentioned", "implicit"),
    ("What about Berlin?", "ellipsis"),
    ("And my brother?", "ellipsis"),
    ("Why?", "short"),
    ("Tell me more", "implicit"),
]

CLEAR = [
    "Where do I live?",
    "What is my sister's name?",
    "What did Caroline say about her mom?",  # the antecedent is in the query
    "Tell me about that restaurant in Rome",  # a demonstrative with a specific noun
    "I think that the meeting is at 5",  # "that" introduces a clause
    "The book that was on the table is mine",  # a relative clause
    "What did I do this weekend?",  # "this weekend" is now
    "Is it raining in Berlin today?",  # expletive "it"
    "What time is it in Tokyo?",
    "How do I reset my router when it freezes?",  # "it" has an antecedent
    "I said that I like tea",
    "What happened before the trip to Spain?",  # "before" with an anchor
    "How many cats do I have?",
    "Any plans for the weekend?",
]


@pytest.mark.parametrize(("query", "kind"), AMBIGUOUS)
def test_ambiguous_queries_are_flagged(query: str, kind: str) -> None:
    found = detect(query)
    assert found.ambiguous
    assert kind in found.kinds


@pytest.mark.parametrize("query", CLEAR)
def test_clear_queries_take_the_fast_path(query: str) -> None:
    assert detect(query).kinds == ()


def test_references_are_the_words_a_rewrite_must_replace() -> None:
    assert detect("When did she go to it?").references == ("she", "it")
    assert detect("What did we talk about earlier?").references == ()  # temporal: no word


# -- heuristic resolver -----------------------------------------------------------------

SUPPORT_GROUP = [
    ("user", "Do you remember what Caroline said about the LGBTQ support group?"),
    ("assistant", "Yes, Caroline mentioned the LGBTQ support group in one of your chats."),
]
MARIA = [
    ("user", "I had coffee with Maria yesterday. She moved to Berlin last year."),
    ("assistant", "That sounds nice! How is Maria doing in Berlin?"),
    ("user", "Where does Maria work?"),
    ("assistant", "I don't know yet."),
]


def test_entities_are_names_and_noun_phrases_with_person_or_thing() -> None:
    entities = context_entities(MARIA)
    assert [(e.text, e.person) for e in entities[:2]] == [("Maria", True), ("Berlin", False)]
    phrases = context_entities([("assistant", "Your new bike arrived. Talk to Ana about it.")])
    assert ("my new bike", False) in [(e.text, e.person) for e in phrases]
    assert ("Ana", True) in [(e.text, e.person) for e in phrases]


@pytest.mark.parametrize(
    ("query", "history", "expected"),
    [
        ("Where does she live now?", MARIA, "Where does Maria live now?"),
        ("What does her husband do?", MARIA, "What does Maria's husband do?"),
        (
            "When did she go to it?",
            SUPPORT_GROUP,
            "When did Caroline go to the LGBTQ support group?",
        ),
        ("Is that one still running?", SUPPORT_GROUP, "Is the LGBTQ support group still running?"),
        ("And Tom?", MARIA, "Where does Tom work?"),
        ("Did you ask him about it?", [("user", "My brother Tom fixed my old car.")], None),
    ],
)
def test_heuristic_resolver_replaces_references_with_recent_entities(
    query: str, history: list[tuple[str, str]], expected: str | None
) -> None:
    rewritten = resolve_heuristic(query, history)
    if expected is not None:
        assert rewritten == expected
    else:
        assert rewritten == "Did you ask Tom about my old car?"


def test_heuristic_resolver_picks_the_latest_person() -> None:
    history = [("user", "I talked to Ana on Monday."), ("user", "Then Tom called me.")]
    assert resolve_heuristic("What did he want?", history) == "What did Tom want?"


def test_heuristic_appends_context_for_unreplaceable_references() -> None:
    rewritten = resolve_heuristic("What did we discuss earlier?", SUPPORT_GROUP)
    assert rewritten.startswith("What did we discuss earlier? (")
    assert "Caroline" in rewritten
    assert "LGBTQ support group" in rewritten


def test_heuristic_leaves_unresolvable_queries_alone() -> None:
    assert resolve_heuristic("Where does she live?", []) == "Where does she live?"
    assert resolve_heuristic("Where does she live?", [("user", "hello there")]) == (
        "Where does she live?"
    )
    assert resolve_heuristic("Where do I live?", MARIA) == "Where do I live?"


# -- confidence --------------------------------------------------------------------------


def test_confidence_rewards_resolved_grounded_sane_rewrites() -> None:
    context = "Do you remember what Caroline said about the LGBTQ support group?"
    good = rewrite_confidence(
        "When did she go to it?", "When did Caroline go to the LGBTQ support group?", context
    )
    assert good == pytest.approx(1.0)
    # Unchanged: nothing gained.
    assert rewrite_confidence("When did she go?", "When did she go?", context) == 0.0
    # A name the conversation never mentioned: resolved but not grounded.
    invented = rewrite_confidence("When did she go?", "When did Beatrice go?", context)
    assert invented == pytest.approx(0.6)
    # Still ambiguous: grounded but not resolved.
    kept = rewrite_confidence("When did she go?", "When did she go with Caroline?", context)
    assert kept == pytest.approx(0.6)
    # Far too long: length term drops.
    rambling = "When did Caroline go " + "support group " * 40
    assert rewrite_confidence("When did she go?", rambling, context) < good
    assert rewrite_confidence("When did she go?", "", context) == 0.0


# -- the rewriter ------------------------------------------------------------------------


def rewrite_llm(
    answer: object = None, *, stall: float = 0.0, error: LLMError | None = None
) -> FakeLLM:
    """An LLM that answers the ``rewrite`` task only (after ``stall`` seconds, or with
    ``error``)."""
    return FakeLLM(
        {"rewrite": answer},
        stalls={"rewrite": stall},
        errors={"rewrite": error} if error is not None else None,
    )


def rewriter(llm: FakeLLM | None, metrics: Metrics | None = None) -> QueryRewriter:
    return QueryRewriter(llm, metrics or Metrics())


HISTORY = [("user", "My sister Ana moved to Lisbon."), ("assistant", "How nice for Ana!")]


async def test_fast_path_makes_no_llm_call() -> None:
    llm, metrics = rewrite_llm({"query": "unused"}), Metrics()
    result = await rewriter(llm, metrics).rewrite(
        "Where do I live?", HISTORY, "u1", RewriteConfig()
    )
    assert result.reason == "fast_path"
    assert not result.changed
    assert llm.calls == []
    assert metrics.value("memory_sidecar_rewrites_total", {"reason": "fast_path"}) == 1


async def test_llm_rewrite_is_used_when_confident() -> None:
    llm = rewrite_llm({"query": "Where does Ana live now?"})
    result = await rewriter(llm).rewrite("Where does she live now?", HISTORY, "u1", RewriteConfig())
    assert (result.reason, result.query) == ("llm", "Where does Ana live now?")
    assert result.confidence >= 0.65
    assert result.header_value() == f"llm;confidence={result.confidence:.2f}"
    (call,) = llm.calls
    assert (call.task, call.temperature) == ("rewrite", 0.0)
    prompt = call.messages
    assert prompt[0]["content"].startswith("[memory-sidecar:rewrite v1]")
    assert "LATEST: Where does she live now?" in prompt[1]["content"]
    assert "user: My sister Ana moved to Lisbon." in prompt[1]["content"]


async def test_low_confidence_llm_answer_falls_back_to_the_original() -> None:
    llm = rewrite_llm({"query": "Where does Beatrice live now?"})  # not in the context
    config = RewriteConfig(min_confidence=0.9, fallback="original")
    history = [("user", "hello"), ("assistant", "hi")]  # the heuristic cannot help either
    result = await rewriter(llm).rewrite("Where does she live now?", history, "u1", config)
    assert result.reason == "low_confidence"
    assert result.query == "Where does she live now?"


async def test_timeout_searches_the_original() -> None:
    llm = rewrite_llm({"query": "Where does Ana live now?"}, stall=1.0)
    config = RewriteConfig(timeout_ms=20, fallback="original")
    started = asyncio.get_running_loop().time()
    result = await rewriter(llm).rewrite("Where does she live now?", HISTORY, "u1", config)
    assert asyncio.get_running_loop().time() - started < 0.5
    assert (result.reason, result.query) == ("timeout", "Where does she live now?")


async def test_timeout_or_error_falls_back_to_the_heuristic() -> None:
    slow = rewrite_llm({"query": "x"}, stall=1.0)
    config = RewriteConfig(timeout_ms=20)
    result = await rewriter(slow).rewrite("Where does she live now?", HISTORY, "u1", config)
    assert (result.reason, result.fallback) == ("timeout", "heuristic")
    assert result.query == "Where does Ana live now?"
    assert result.header_value().endswith(";fallback=heuristic")
    for error in (LLMUnavailable("down"), LLMBadOutput("junk")):
        failing = rewrite_llm(error=error)
        result = await rewriter(failing).rewrite("What does she do?", HISTORY, "u1", config)
        assert (result.reason, result.query) == ("error", "What does Ana do?")


async def test_without_an_llm_the_heuristic_answers() -> None:
    metrics = Metrics()
    result = await rewriter(None, metrics).rewrite(
        "Where does she live now?", HISTORY, "u1", RewriteConfig()
    )
    assert (result.reason, result.query) == ("heuristic", "Where does Ana live now?")
    assert metrics.value("memory_sidecar_rewrites_total", {"reason": "heuristic"}) == 1
    # No context at all: nothing to resolve from, no LLM call.
    llm = rewrite_llm({"query": "x"})
    empty = await rewriter(llm).rewrite("Where does she live?", [], "u1", RewriteConfig())
    assert empty.reason == "low_confidence"
    assert llm.calls == []


async def test_results_are_cached_per_user_query_and_context() -> None:
    llm = rewrite_llm({"query": "Where does Ana live now?"})
    rw = rewriter(llm)
    config = RewriteConfig()
    first = await rw.rewrite("Where does she live now?", HISTORY, "u1", config)
    again = await rw.rewrite("Where does she live now?", HISTORY, "u1", config)
    assert (first.reason, again.reason) == ("llm", "cache")
    assert again.query == first.query
    assert len(llm.calls) == 1
    await rw.rewrite("Where does she live now?", HISTORY, "u2", config)  # another user
    await rw.rewrite("Where does she live now?", HISTORY[:1], "u1", config)  # other context
    assert len(llm.calls) == 3
    off = await rw.rewrite(
        "Where does she live now?", HISTORY, "u3", config.model_copy(update={"cache_ttl_s": 0})
    )
    assert off.reason == "llm"
    assert rw.forget("u1") == 2  # the admin API's forget: that user's rewrites go
    after = await rw.rewrite("Where does she live now?", HISTORY, "u1", config)
    assert after.reason == "llm"
    assert (await rw.rewrite("Where does she live now?", HISTORY, "u2", config)).reason == "cache"
    assert {(call.task, call.temperature) for call in llm.calls} == {("rewrite", 0.0)}


def test_cache_entries_expire_and_are_bounded() -> None:
    now = [100.0]
    cache = RewriteCache(clock=lambda: now[0])
    cache.put("a", _Cached("qa", 1.0, ()), ttl_s=10, max_entries=2)
    cache.put("b", _Cached("qb", 1.0, ()), ttl_s=10, max_entries=2)
    assert cache.get("a") is not None  # "a" is now the most recently used
    cache.put("c", _Cached("qc", 1.0, ()), ttl_s=10, max_entries=2)
    assert cache.get("b") is None
    assert len(cache) == 2
    now[0] += 11
    assert cache.get("a") is None
    assert cache.get("c") is None
    assert len(cache) == 0
    cache.put("d", _Cached("qd", 1.0, ()), ttl_s=10, max_entries=2, owner="u1")
    cache.put("e", _Cached("qe", 1.0, ()), ttl_s=10, max_entries=2, owner="u2")
    assert cache.drop_owner("u1") == 1
    assert cache.get("d") is None
    assert cache.get("e") is not None


def test_history_is_clipped_and_the_answer_parsed_tolerantly() -> None:
    config = RewriteConfig(history_messages=2, max_message_chars=20)
    history = [("user", "one"), ("assistant", "two " * 30), ("user", "three\n\nlines")]
    assert clip_history(history, config) == [
        ("assistant", ("two " * 5).strip()),
        ("user", "three lines"),
    ]
    assert clip_history(history, RewriteConfig(history_messages=0)) == []
    messages = build_messages("Where?", [("user", "Ana")])
    assert messages[1]["content"] == "CONVERSATION:\nuser: Ana\nLATEST: Where?"
    assert parse_rewrite({"query": "  Where does Ana live? "}) == "Where does Ana live?"
    assert parse_rewrite({"rewritten": "x"}) == "x"
    assert parse_rewrite("bare string") == "bare string"
    assert parse_rewrite([{"query": "first"}]) == "first"
    assert parse_rewrite({"query": 3}) is None
    assert parse_rewrite({"query": "  "}) is None


def test_both_mode_fuses_the_two_rankings() -> None:
    def hit(name: str) -> Hit:
        return Hit(MemoryRecord(id=name, user_id="u", content=name), 1.0)

    fused = fuse_rewrite_hits([hit("a"), hit("b")], [hit("c"), hit("a")], 3)
    assert [h.record.id for h in fused] == ["a", "b", "c"]
