"""The conversation evaluation's table and JSON document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar.evaluation.conversations.runner import ConversationEvalResult
from sidecar.evaluation.conversations.scoring import by_category, figures

#: The figures in the table, in order, with how each reads.
_SHOWN: tuple[tuple[str, str], ...] = (
    ("evidence.hit@10", "{:.3f}"),
    ("evidence.mrr", "{:.3f}"),
    ("evidence.injected", "{:.3f}"),
    ("evidence.lost", "{:.3f}"),
    ("answer.in_block", "{:.3f}"),
    ("block.tokens.mean", "{:.0f}"),
    ("baseline.raw_turns.hit@10", "{:.3f}"),
    ("baseline.raw_turns.mrr", "{:.3f}"),
)


def as_json(result: ConversationEvalResult) -> dict[str, Any]:
    """Every figure: overall, then under ``by_category.<category>``."""
    questions = result.questions
    turns = result.user_turns
    document: dict[str, Any] = {
        "dataset": result.dataset,
        "llm": result.llm,
        **figures(questions, baseline=result.baseline),
        "memories.per_user_turn": result.active_memories / turns if turns else 0.0,
        "turns.user": turns,
        "turns.no_memory": result.turns_no_memory,
        "turns.no_memory.share": result.turns_no_memory / turns if turns else 0.0,
        "turns.orphan_replies": result.orphan_replies,
        "write.turns_per_s": turns / result.write_seconds if result.write_seconds else 0.0,
        "write.dead_letters": result.dead_letters,
        "llm_tokens_per_turn": result.llm_tokens_per_turn,
        "seconds": result.seconds,
        "by_category": by_category(questions, baseline=result.baseline),
        "per_question": [
            {
                "id": o.query.id,
                "category": o.query.category,
                "rank": o.rank,
                "baseline_rank": o.baseline_rank,
                "injected": o.injected,
                "lost": o.lost,
                "answer_in_block": o.answer_in_block if o.answer_eligible else None,
                "block_tokens": o.block_tokens,
                "stranger_lines": o.stranger_lines,
                "stranger_tokens": o.stranger_tokens,
            }
            for o in questions
        ],
        **result.extra,
    }
    return document


def format_text(result: ConversationEvalResult) -> str:
    document = as_json(result)
    columns = [name for name, _ in _SHOWN if name in document]
    header = ["", "n", *columns]
    rows = [["all", str(document["questions"])]]
    rows[0] += [dict(_SHOWN)[c].format(document[c]) for c in columns]
    for name, group in document["by_category"].items():
        rows.append(
            [name, str(group["questions"]), *(dict(_SHOWN)[c].format(group[c]) for c in columns)]
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        f"eval-conversations: {result.dataset} ({result.llm})",
        "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    tokens = document["llm_tokens_per_turn"]
    lines.append(
        f"{document['turns.user']} user turns replayed at {document['write.turns_per_s']:.1f} "
        f"turns/s; {document['turns.no_memory']} left no memory "
        f"({document['turns.no_memory.share']:.1%}); "
        f"{document['memories.per_user_turn']:.2f} active memories per user turn; "
        f"LLM tokens per turn: {'-' if tokens is None else f'{tokens:.0f}'}; "
        f"{document['seconds']:.0f} s in all"
    )
    if document["stranger.questions"]:
        lines.append(
            f"asked of another user: {document['stranger.with_block']:.0%} get a block, "
            f"{document['stranger.lines.mean']:.2f} lines and "
            f"{document['stranger.tokens.mean']:.0f} tokens a question "
            f"({document['stranger.questions']} questions)"
        )
    return "\n".join(lines)


def write_json(result: ConversationEvalResult, path: str | Path) -> None:
    Path(path).write_text(json.dumps(as_json(result), indent=2) + "\n", encoding="utf-8")
