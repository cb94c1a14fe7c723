"""The mock LLM's ``rewrite`` and ``rank`` handlers: deterministic rules, and the
sidecar's own prompts (rewrite.build_messages, deep_search.build_rank_prompt)
understood as sent."""

from __future__ import annotations

import json

from e2e.mock_search import handle_rank, handle_rewrite, rank, rewrite
from e2e.mock_service import DEFAULT_TASK_HANDLERS
from sidecar.config import DeepSearchConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.deep.ranking import Candidate, build_rank_prompt, parse_ranked
from sidecar.memory.read.rewrite.rewriter import build_messages, parse_rewrite
from sidecar.memory.records.records import MemoryRecord


def test_handlers_are_registered() -> None:
    assert DEFAULT_TASK_HANDLERS["rewrite"] is handle_rewrite
    assert DEFAULT_TASK_HANDLERS["rank"] is handle_rank


def test_rewrite_resolves_pronouns_from_the_context() -> None:
    context = [
        "Do you remember what Caroline said about the LGBTQ support group?",
        "Yes, Caroline mentioned the LGBTQ support group in one of your chats.",
    ]
    assert rewrite(context, "When did she go to it?") == (
        "When did Caroline go to the LGBTQ support group?"
    )
    assert rewrite(context, "What about her sister?") == "What about Caroline's sister?"
    assert rewrite(context, "Did you call her?") == "Did you call Caroline?"
    assert rewrite(["I moved to Berlin with Tom."], "Does he like it?") == (
        "Does Tom like it?"  # "Berlin" follows "to": a place, and no "the ..." phrase
    )
    assert rewrite([], "Where does she live?") == "Where does she live?"


def test_rewrite_answers_the_sidecars_prompt() -> None:
    messages = build_messages("Where does she live now?", [("user", "Tell me about Ana.")])
    answer = handle_rewrite({"messages": messages})
    assert parse_rewrite(json.loads(answer)) == "Where does Ana live now?"
    assert handle_rewrite({"messages": messages}) == answer  # deterministic


def test_rank_scores_word_overlap_best_first() -> None:
    ranked = rank(
        "When did Caroline go to the support group?",
        [
            ("c1", "Melanie painted a sunrise."),
            ("c2", "Caroline went to a support group yesterday."),
            ("c3", "The group met on Friday."),
        ],
    )
    assert [r["id"] for r in ranked] == ["c2", "c3"]
    assert ranked[0]["score"] == 1.0  # caroline, support, group (went ~ go is not stemmed)
    assert 0 < ranked[1]["score"] < ranked[0]["score"]
    assert rank("", [("c1", "x")]) == []


def test_rank_answers_the_sidecars_prompt() -> None:
    rows = [
        MemoryRecord(id="a", user_id="u", content="We flew to Lisbon in May."),
        MemoryRecord(id="b", user_id="u", content="Dinner was great."),
    ]
    corpus = Corpus.build(rows, 4)
    prompt = build_rank_prompt(
        "When did we fly to Lisbon?",
        [Candidate(0, "primary"), Candidate(1, "session")],
        corpus,
        DeepSearchConfig(),
    )
    answer = json.loads(handle_rank({"messages": prompt.messages}))
    assert parse_ranked(answer, prompt.ids) == {corpus.index_of["a"]: 0.5}  # lisbon, not fly
