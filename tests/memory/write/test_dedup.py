"""Deduplication, updates and supersession through the real write pipeline.

The paraphrase set and the contradictions run with the heuristic extractor and the
non-LLM rule (no LLM configured), and again with the mock LLM as extractor and judge.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from e2e.mock_llm import MockLLM
from sidecar.config import ExtractionConfig
from sidecar.errors import LLMUnavailable
from sidecar.memory.embedding.protocol import Embedder, Vectors
from sidecar.memory.language.embedding_text import embedding_text
from sidecar.memory.language.topics import BUILTIN_TOPICS
from sidecar.memory.records.records import Scope, Status, now_ms
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.memory.write.turns.dedup import (
    JUDGE_PROMPT,
    Candidate,
    Decision,
    DedupJudge,
    Judgement,
    guarded,
    render_judge_input,
    rule_judgement,
)
from sidecar.metrics import Metrics
from sidecar.runtime.components import Components
from tests.support.boot import sidecar_config
from tests.support.fakes import FakeLLM

PARAPHRASES = {
    "berlin": [
        "I live in Berlin.", "I'm living in Berlin.", "Berlin is where I live.",
        "I live in Berlin, Germany.", "My home is in Berlin.", "I reside in Berlin.",
        "These days I live in Berlin.", "I currently live in Berlin.",
        "I've been living in Berlin for a while.", "I live in Berlin at the moment.",
        "I am based in Berlin.", "I stay in Berlin.", "I live in the city of Berlin.",
        "I'm a Berlin resident.", "Honestly, I live in Berlin.",
    ],
    "peanuts": [
        "I'm allergic to peanuts.", "I am allergic to peanuts.", "I have a peanut allergy.",
        "I have an allergy to peanuts.", "I'm severely allergic to peanuts.",
        "I suffer from a peanut allergy.", "I am peanut allergic.", "I've got a peanut allergy.",
        "My peanut allergy is severe.", "I'm really allergic to peanuts.",
        "I am very allergic to peanuts.", "I'm allergic to peanuts, badly.",
        "I'm actually allergic to peanuts.", "I'm still allergic to peanuts.",
        "I'm allergic to peanuts and always have been.",
    ],
    "nurse": [
        "I work as a nurse.", "I'm a nurse.", "I am a nurse by profession.",
        "I work as a registered nurse.", "I'm working as a nurse.", "I'm employed as a nurse.",
        "I've been a nurse for years.", "I am working as a nurse.", "I work as a nurse now.",
        "I still work as a nurse.", "I currently work as a nurse.", "I'm a nurse at work.",
        "I'm a working nurse.", "My job is nurse.", "I really work as a nurse.",
    ],
}  # fmt: skip

TOPIC_WORDS = {"berlin": "berlin", "peanuts": "peanut", "nurse": "nurse"}


async def build(tmp: Path, embedder: Embedder, llm: str | None) -> Components:
    sections: dict[str, Any] = {"llm": {"base_url": llm}} if llm else {}
    config = sidecar_config(tmp, hierarchy={"schedule_s": 0}, **sections)
    return await Components.build(config, embedder=embedder)


async def say(components: Components, user: str, text: str, at: int) -> None:
    turn = Turn(user_id=user, user_text=text, assistant_text="Noted.", created_at=at)
    await components.write.writer.write_turn(turn)


@pytest.mark.parametrize(
    ("new", "old", "cosine", "decision"),
    [
        ("User lives in Berlin.", "User lives in Berlin.", 0.99, Decision.NOOP),
        ("User lives in Berlin, Germany.", "User lives in Berlin.", 0.95, Decision.UPDATE),
        ("User resides in Berlin.", "User lives in Berlin.", 0.85, Decision.NOOP),
        ("User moved to Lisbon.", "User lives in Berlin.", 0.55, Decision.SUPERSEDE),
        ("User's favourite colour is green.", "User's favourite colour is blue.", 0.77,
         Decision.SUPERSEDE),  # one favourite colour at a time
        ("User has a dog named Rex.", "User has two cats.", 0.53, Decision.ADD),
        # Near misses: another content word, name, number, day or tense is another fact,
        # however similar.
        ("User's cat absolutely loses it during thunderstorms.",
         "User's dog absolutely loses it during thunderstorms.", 0.93, Decision.ADD),
        ("User's right knee has tendinitis.", "User's left knee has tendinitis.", 0.95,
         Decision.ADD),
        ("User drinks tea in the evening.", "User drinks coffee in the evening.", 0.9,
         Decision.ADD),
        ("User's sister lives in Lyon.", "User's brother lives in Lyon.", 0.94, Decision.ADD),
        ("User is visiting Portugal in June.", "User visited Portugal in June.", 0.93,
         Decision.ADD),
        ("User has standup on Thursdays.", "User has standup on Tuesdays.", 0.96, Decision.ADD),
        # The same statement with the other polarity is never one fact: the newer wins.
        ("User does not drink coffee.", "User drinks coffee.", 0.9, Decision.SUPERSEDE),
        ("User has 3 kids.", "User has 2 kids.", 0.95, Decision.ADD),
        # The same slot supersedes whatever the similarity ...
        ("User moved to Phoenix.", "User lives in Minneapolis, loves the lakes.", 0.3,
         Decision.SUPERSEDE),
        ("User's new number is 0151 222 9876.", "User's phone number is 0176 555 1234.", 0.4,
         Decision.SUPERSEDE),
        # ... but an accumulating slot does not (two allergies at once).
        ("User is allergic to shellfish.", "User is allergic to peanuts.", 0.8, Decision.ADD),
        # What the user says they stopped replaces that habit, not another one.
        ("User no longer plays the guitar.", "User plays squash on Tuesdays.", 0.5,
         Decision.ADD),
        ("User no longer plays the guitar.", "User plays the guitar in a band.", 0.6,
         Decision.SUPERSEDE),
        ("User gave up vaping.", "User vapes all day.", 0.5, Decision.SUPERSEDE),
        # A new value of a slot said another way than the old one.
        ("User is a proper Glasgow local now.", "User lives in Leeds.", 0.4,
         Decision.SUPERSEDE),
        ("Everyone calls User Jojo.", "User wants to be called Joanna.", 0.6,
         Decision.SUPERSEDE),
        ("User has been seeing someone for a month.", "User is single.", 0.5,
         Decision.SUPERSEDE),
        # A negation is kept apart from its positive.
        ("User no longer lives in Berlin.", "User lives in Berlin.", 0.9, Decision.SUPERSEDE),
    ],
)  # fmt: skip
def test_rule(new: str, old: str, cosine: float, decision: Decision) -> None:
    judged = rule_judgement(new, [Candidate("old", old, cosine)], ExtractionConfig())
    assert judged.decision == decision


# -- the judge alone (a scripted LLM) -------------------------------------------------------

GREEN = "User now brews coffee with an Aeropress."
# The rule: SUPERSEDE (a change cue, the same verb, another means), in the gray zone.
GRAY = [Candidate("blue", "User brews coffee with a moka pot.", 0.77)]


async def test_the_judge_asks_the_llm_only_in_the_gray_zone() -> None:
    llm = FakeLLM({"dedup": {"decision": "SUPERSEDE", "target": "blue", "text": None}})
    metrics = Metrics()
    judge = DedupJudge(llm, metrics)
    assert await judge.judge(GREEN, GRAY, ExtractionConfig()) == Judgement(
        Decision.SUPERSEDE, "blue", None, "llm"
    )
    (call,) = llm.calls
    assert (call.task, call.max_tokens) == ("dedup", 200)
    assert [m["content"] for m in call.messages] == [
        JUDGE_PROMPT,
        render_judge_input(GREEN, GRAY),
    ]
    assert metrics.value("memory_sidecar_facts_total", {"decision": "supersede_llm"}) == 1
    # Clear cases, use_llm off and no LLM configured never reach it.
    near = [Candidate("same", GREEN, 0.99)]
    assert (await judge.judge(GREEN, near, ExtractionConfig())).decision == Decision.NOOP
    far = [Candidate("far", "User has a dog.", 0.2)]
    assert (await judge.judge(GREEN, far, ExtractionConfig())).by == "exact"
    # Another value of one attribute is clear too: no judge.
    colour = [Candidate("c", "User's favourite colour is blue.", 0.77)]
    clear = await judge.judge("User's favourite colour is green.", colour, ExtractionConfig())
    assert clear == Judgement(Decision.SUPERSEDE, "c", None, "exact")
    assert (await judge.judge(GREEN, GRAY, ExtractionConfig(use_llm=False))).by == "rule"
    unconfigured = DedupJudge(FakeLLM(configured=False), metrics)
    assert (await unconfigured.judge(GREEN, GRAY, ExtractionConfig())).by == "rule"
    assert len(llm.calls) == 1


@pytest.mark.parametrize(
    "llm",
    [
        FakeLLM(errors={"dedup": LLMUnavailable("down")}),
        FakeLLM({"dedup": {"decision": "add"}}, stalls={"dedup": 5.0}, timeout_s=0.01),
        FakeLLM({"dedup": {"decision": "maybe"}}),
        FakeLLM({"dedup": {"decision": "supersede", "target": "not-a-candidate"}}),
    ],
    ids=["unavailable", "timeout", "unknown-decision", "unknown-target"],
)
async def test_the_judge_falls_back_to_the_rule(llm: FakeLLM) -> None:
    metrics = Metrics()
    judged = await DedupJudge(llm, metrics).judge(GREEN, GRAY, ExtractionConfig())
    assert judged == Judgement(Decision.SUPERSEDE, "blue")  # what the rule says of the pair
    assert llm.tasks() == ["dedup"]
    assert metrics.value("memory_sidecar_facts_total", {"decision": "supersede_rule"}) == 1


# -- through the write pipeline ------------------------------------------------------------


@pytest.mark.parametrize("with_llm", [False, True])
async def test_paraphrases_become_one_memory_per_fact(
    tmp_path: Path, embedder: Embedder, mock_llm: MockLLM, with_llm: bool
) -> None:
    components = await build(tmp_path, embedder, mock_llm.base_url if with_llm else None)
    try:
        rows_of = [(topic, text) for topic, texts in PARAPHRASES.items() for text in texts]
        # Interleave topics like a real conversation would.
        order = list(itertools.chain.from_iterable(zip(*PARAPHRASES.values(), strict=True)))
        assert len(order) == len(rows_of) == 45
        for at, text in enumerate(order):
            await say(components, "para", text, 1_700_000_000_000 + at)
        rows = await components.store.query(build_filter(owner="para"))
        for topic, word in TOPIC_WORDS.items():
            about = [r for r in rows if word in r.content.lower()]
            assert len(about) == 1, (topic, [r.content for r in about])
        assert len(rows) == 3, [r.content for r in rows]
        if with_llm:
            assert mock_llm.stats()["tasks"].get("extract", 0) == 45
    finally:
        await components.close()


@pytest.mark.parametrize("with_llm", [False, True])
async def test_contradiction_supersedes_and_keeps_history(
    tmp_path: Path, embedder: Embedder, mock_llm: MockLLM, with_llm: bool
) -> None:
    components = await build(tmp_path, embedder, mock_llm.base_url if with_llm else None)
    try:
        await say(components, "mover", "I live in Berlin.", 1_700_000_000_000)
        second_written = now_ms()
        await say(components, "mover", "I moved to Lisbon last month.", 1_700_000_100_000)
        active = await components.store.query(build_filter(owner="mover"))
        assert [r.content for r in active] == ["User moved to Lisbon in October 2023."]
        history = await components.store.query(build_filter(owner="mover", status=None))
        old = next(r for r in history if "Berlin" in r.content)
        assert old.status == Status.SUPERSEDED
        assert old.superseded_by == active[0].id
        assert old.updated_at >= second_written  # when the store changed, not the turn
        assert active[0].created_at == 1_700_000_100_000
        assert old.id in active[0].related_ids

        retrieval = components.config.defaults.retrieval
        (query,) = await components.read.memory.embed(["Where do I live?"], retrieval)
        hits = await components.read.memory.search(query, Scope("mover"), retrieval)
        assert [h.record.content for h in hits] == ["User moved to Lisbon in October 2023."]
    finally:
        await components.close()


async def test_llm_judge_decides_the_gray_zone(
    tmp_path: Path, embedder: Embedder, mock_llm: MockLLM
) -> None:
    components = await build(tmp_path, embedder, mock_llm.base_url)
    try:
        await say(components, "gym", "My gym days are Monday and Wednesday.", 1)
        await say(components, "gym", "My gym days are now Tuesday and Thursday.", 2)
        active = await components.store.query(build_filter(owner="gym"))
        assert [r.content for r in active] == ["User's gym days are now Tuesday and Thursday."]
        assert mock_llm.stats()["tasks"].get("dedup", 0) >= 1
        metrics = components.metrics
        assert metrics.value("memory_sidecar_facts_total", {"decision": "supersede_llm"}) == 1
    finally:
        await components.close()


async def test_judge_failure_falls_back_to_the_rule(
    tmp_path: Path, embedder: Embedder, mock_llm: MockLLM
) -> None:
    mock_llm.configure(garbage_tasks=True)
    components = await build(tmp_path, embedder, mock_llm.base_url)
    try:
        await say(components, "g", "My favourite colour is blue.", 1)
        await say(components, "g", "My favourite colour is green.", 2)
        active = await components.store.query(build_filter(owner="g"))
        # Extraction fell back to the heuristics, the judge to the rule: one favourite
        # colour at a time.
        assert [r.content for r in active] == ["User's favourite colour is green."]
        failed = components.metrics.value(
            "memory_sidecar_llm_calls_total", {"task": "extract", "outcome": "bad_output"}
        )
        assert failed >= 2
    finally:
        await components.close()


async def test_update_keeps_the_richer_wording_and_reembeds(
    tmp_path: Path, embedder: Embedder
) -> None:
    components = await build(tmp_path, embedder, None)
    try:
        await say(components, "rich", "I live in Berlin.", 1)
        before = await components.store.query(build_filter(owner="rich"), with_vectors=True)
        await say(components, "rich", "I live in Berlin, Germany.", 2)
        after = await components.store.query(build_filter(owner="rich"), with_vectors=True)
        assert [r.id for r in after] == [r.id for r in before]
        assert after[0].content == "User lives in Berlin, Germany."
        assert after[0].embedding != before[0].embedding
        # The vector is of the text with its attribute's words (a residence).
        vector = (await embedder.embed([embedding_text(after[0].content)]))[0]
        stored = after[0].embedding
        assert stored is not None
        assert sum(a * b for a, b in zip(vector, stored, strict=True)) > 0.999
    finally:
        await components.close()


class CountingEmbedder:
    """The suite's embedder, remembering what it was asked to embed (the taxonomy's
    topic descriptions, embedded once per process, left out)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.texts: list[str] = []
        self._descriptions = {t.description for t in BUILTIN_TOPICS}

    @property
    def dim(self) -> int:
        return self.inner.dim

    async def embed(self, texts: Sequence[str], *, urgent: bool = False) -> Vectors:
        self.texts.extend(t for t in texts if t not in self._descriptions)
        return await self.inner.embed(texts, urgent=urgent)

    async def close(self) -> None:
        """The suite's embedder outlives this test."""


async def test_a_restated_fact_takes_its_memorys_vector_and_is_not_embedded_again(
    tmp_path: Path, embedder: Embedder
) -> None:
    counting = CountingEmbedder(embedder)
    components = await build(tmp_path, counting, None)
    try:
        await say(components, "again", "I live in Berlin.", 1)
        assert len(counting.texts) == 1
        await say(components, "again", "I live in Berlin. I play the cello.", 2)
        assert counting.texts[1:] == [embedding_text("User plays the cello.")]
        rows = await components.store.query(build_filter(owner="again"))
        assert sorted(r.content for r in rows) == [
            "User lives in Berlin.",
            "User plays the cello.",
        ]
        decisions = components.metrics.value(
            "memory_sidecar_facts_total", {"decision": "noop_exact"}
        )
        assert decisions == 1
        # A fact superseded since is embedded afresh when it is said again.
        await say(components, "again", "I moved to Lisbon.", 3)
        await say(components, "again", "I live in Berlin.", 4)
        assert counting.texts[-1] == embedding_text("User lives in Berlin.")
    finally:
        await components.close()


def test_the_llm_may_not_merge_a_near_miss_nor_supersede_without_evidence() -> None:
    kiwi = "User is allergic to kiwi as well."
    cashews = [Candidate("c", "User is allergic to cashews.", 0.9)]
    noop = Judgement(Decision.NOOP, "c", by="llm")
    assert guarded(noop, kiwi, cashews).decision == Decision.ADD
    supersede = Judgement(Decision.SUPERSEDE, "c", by="llm")
    assert guarded(supersede, kiwi, cashews).decision == Decision.ADD  # allergies add up
    aunt = [Candidate("a", "User's aunt lives in Valencia.", 0.9)]
    uncle = "User's uncle also lives in Valencia."
    assert guarded(Judgement(Decision.SUPERSEDE, "a", by="llm"), uncle, aunt).decision == (
        Decision.ADD
    )
    iceland = [Candidate("i", "User has been to Iceland twice.", 0.9)]
    ireland = "User has been to Ireland twice too."
    assert guarded(Judgement(Decision.SUPERSEDE, "i", by="llm"), ireland, iceland).decision == (
        Decision.ADD
    )
    # With evidence in the words the LLM's SUPERSEDE stands.
    moved = "User has moved to Madrid."
    home = [Candidate("h", "User lives in Valencia.", 0.6)]
    assert guarded(Judgement(Decision.SUPERSEDE, "h", by="llm"), moved, home).decision == (
        Decision.SUPERSEDE
    )
