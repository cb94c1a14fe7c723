"""``sidecar eval-conversations``: turns replayed as conversations, questions asked
through the request path, scored by provenance — and the CI floor on a slice of the
LongMemEval dev sample (skipped where ``../shared`` is absent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.config import SidecarConfig
from sidecar.errors import InvalidInput
from sidecar.evaluation.conversations.replay import TURN_GAP_MS, conversations
from sidecar.evaluation.conversations.report import as_json, format_text
from sidecar.evaluation.conversations.runner import (
    ConversationEvalOptions,
    run_conversation_eval,
)
from sidecar.evaluation.conversations.scoring import answer_in, eligible_answer
from sidecar.evaluation.dataset import Dataset, load_dataset, parse_dataset
from sidecar.memory.embedding.protocol import Embedder

DATA = Path(__file__).parents[2].parent / "shared" / "data" / "longmemeval-dev.json"
#: One question each of three kinds, users of the dev sample's usual size.
SLICE = ("4f54b7c9:q", "c8090214:q", "c8f1aeed:q")


def tiny() -> Dataset:
    def turn(i: str, session: str, day: str, text: str, user: str = "u1") -> dict[str, str]:
        return {
            "id": i, "user_id": user, "session_id": session,
            "created_at": f"{day}T10:00:00Z", "content": text,
        }  # fmt: skip

    return parse_dataset(
        {
            "name": "tiny",
            "memories": [
                turn("b0", "s2", "2023-05-02", "assistant: Welcome back!"),  # opens: no turn
                turn("b1", "s2", "2023-05-02", "user: I adopted a cat named Miso."),
                turn("b2", "s2", "2023-05-02", "assistant: Congratulations!"),
                turn("a1", "s1", "2023-05-01", "user: I live in Leeds."),
                turn("a2", "s1", "2023-05-01", "assistant: Nice city."),
                turn("a3", "s1", "2023-05-01", "assistant: Anything else?"),
                turn("a4", "s1", "2023-05-01", "user: Thanks, bye"),
                turn("c1", "t1", "2023-05-03", "user: I play the trumpet in a brass band.", "u2"),
                turn("c2", "t1", "2023-05-03", "assistant: Lovely!", "u2"),
            ],
            "queries": [
                {
                    "id": "q1",
                    "user_id": "u1",
                    "query": "What is my cat called?",
                    "relevant_ids": ["b1"],
                    "answer": "Miso",
                    "question_date": "2023-06-01T00:00:00Z",
                    "category": "single-session-user",
                },
                {
                    "id": "q2",
                    "user_id": "u2",
                    "query": "Which instrument do I play?",
                    "relevant_ids": ["c1"],
                    "answer": "trumpet",
                    "question_date": "2023-06-01T00:00:00Z",
                    "category": "single-session-user",
                },
            ],
        }
    )


def test_turns_are_replayed_by_session_date_each_user_message_with_its_reply() -> None:
    talks = conversations(tiny(), {"u1"})
    turns = [t.turn for t in talks.turns]
    assert [t.user_text for t in turns] == [
        "I live in Leeds.",
        "Thanks, bye",
        "I adopted a cat named Miso.",
    ]
    assert turns[0].assistant_text == "Nice city.\n\nAnything else?"
    assert [t.ids for t in talks.turns] == [("a1", "a2", "a3"), ("a4",), ("b1", "b2")]
    assert turns[1].created_at - turns[0].created_at == 3 * TURN_GAP_MS
    assert (turns[2].session_id, turns[2].message_index) == ("s2", 1)
    assert talks.orphan_replies == 1


def test_a_memory_that_is_no_turn_is_refused() -> None:
    data = tiny()
    odd = parse_dataset(
        {
            "name": "odd",
            "memories": [{"id": "x", "user_id": "u1", "content": "User lives in Leeds."}],
            "queries": [{"id": "q", "user_id": "u1", "query": "?", "relevant_ids": ["x"]}],
        }
    )
    with pytest.raises(InvalidInput, match="not a conversation turn"):
        conversations(odd)
    assert conversations(data, {"nobody"}).turns == []


@pytest.mark.parametrize(
    ("answer", "block", "found"),
    [
        ("two weeks", "- User spent two weeks in Japan.", True),
        ("$2,500", "- User spent $2,500 on bags.", True),
        ("Miso", "- User has a cat named Misoshiru.", False),  # whole words only
    ],
)
def test_an_answer_is_found_in_the_block_as_whole_words(
    answer: str, block: str, found: bool
) -> None:
    assert answer_in(answer, block) is found
    assert eligible_answer(answer)
    assert not eligible_answer("The user would prefer suggestions of hotels with great views")


async def test_the_tiny_conversation_end_to_end(config: SidecarConfig, embedder: Embedder) -> None:
    result = await run_conversation_eval(
        tiny(), config, ConversationEvalOptions(), embedder=embedder
    )
    document = as_json(result)
    assert document["evidence.hit@10"] == 1.0
    assert document["evidence.lost"] == 0.0
    assert document["answer.in_block"] == 1.0
    assert document["baseline.raw_turns.hit@10"] == 1.0
    assert document["turns.user"] == 4
    assert document["turns.no_memory"] == 1  # "Thanks, bye"
    assert document["by_category"]["single-session-user"]["questions"] == 2
    # Each question asked of the other user too: nothing of theirs answers it, and
    # nothing of theirs is injected.
    assert document["stranger.questions"] == 2
    assert document["stranger.with_block"] == 0.0
    assert document["stranger.lines.mean"] == 0.0
    assert [q["stranger_lines"] for q in document["per_question"]] == [0, 0]
    text = format_text(result)
    assert "eval-conversations: tiny" in text
    assert "asked of another user: 0% get a block" in text


async def test_the_ci_floor_on_a_slice_of_longmemeval(
    config: SidecarConfig, embedder: Embedder, tmp_path: Path
) -> None:
    """Real conversations, three kinds of question: nothing of the evidence is lost,
    what the facts find is within one question of what the raw turns find, and the
    block stays small."""
    if not DATA.exists():
        pytest.skip(f"evaluation data not found: {DATA} (the shared data sets are not checked in)")
    full = load_dataset(DATA)
    queries = tuple(q for q in full.queries if q.id in SLICE)
    users = {q.user_id for q in queries}
    sliced = Dataset(
        name="longmemeval-dev slice",
        description="",
        memories=tuple(m for m in full.memories if m.user_id in users),
        queries=queries,
    )
    result = await run_conversation_eval(
        sliced, config, ConversationEvalOptions(), embedder=embedder
    )
    document = as_json(result)
    (tmp_path / "slice.json").write_text(json.dumps(document))
    shown = format_text(result)
    assert document["questions"] == len(SLICE)
    assert document["evidence.lost"] == 0.0, shown
    assert document["evidence.hit@10"] >= document["baseline.raw_turns.hit@10"] - 1 / 3 - 1e-9, (
        shown
    )
    assert document["block.tokens.mean"] <= 600, shown
    assert document["turns.no_memory.share"] <= 0.10, shown
