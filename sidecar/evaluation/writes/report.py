"""The write evaluation's table and JSON document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar.evaluation.writes.measure import WriteScores
from sidecar.evaluation.writes.runner import WriteEvalResult

#: The targets of the write path (no LLM configured), checked in the table.
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("contradiction.correct", ">=", 13 / 15),
    ("contradiction.old_injected", "<=", 1),
    ("near_miss.merged", "<=", 1 / 20),
    ("negation.flipped", "<=", 0),
    ("multi_user.leaks", "<=", 0),
    ("paraphrase.memories_per_fact.median", "<=", 4),
    ("paraphrase.memories_per_fact.max", "<=", 8),
    ("junk.share", "<=", 0.05),
)


def _rows(scores: WriteScores) -> dict[str, tuple[float, str]]:
    """Every headline score: its value (for the targets) and how it reads."""
    c, n = len(scores.contradiction_correct), scores.contradictions
    merged, pairs = len(scores.near_miss_merged), scores.near_misses
    facts = len(scores.memories_per_fact)
    return {
        "paraphrase.memories_per_fact.median": (
            scores.per_fact_median,
            f"{scores.per_fact_median:g}",
        ),
        "paraphrase.memories_per_fact.max": (scores.per_fact_max, str(scores.per_fact_max)),
        "paraphrase.facts_stored_once": (scores.stored_once, f"{scores.stored_once} / {facts}"),
        "near_miss.merged": (merged / pairs if pairs else 0.0, f"{merged} / {pairs}"),
        "contradiction.correct": (c / n if n else 1.0, f"{c} / {n}"),
        "contradiction.old_injected": (
            len(scores.contradiction_old_injected),
            f"{len(scores.contradiction_old_injected)} / {n}",
        ),
        "multi_user.leaks": (len(scores.leaks), str(len(scores.leaks))),
        "junk.share": (
            scores.junk_share,
            f"{scores.junk_share:.1%} ({len(scores.junk)} of {scores.active})",
        ),
        "negation.flipped": (len(scores.flipped), str(len(scores.flipped))),
    }


def _met(value: float, op: str, bound: float) -> bool:
    return value >= bound - 1e-9 if op == ">=" else value <= bound + 1e-9


def format_text(result: WriteEvalResult) -> str:
    """The scores before and after consolidation, with the targets."""
    before = _rows(result.before)
    after = _rows(result.after) if result.after is not None else None
    targets = {name: (op, bound) for name, op, bound in TARGETS}
    header = ["score", "before consolidation", "after consolidation", "target"]
    table: list[list[str]] = []
    for name, (value, shown) in before.items():
        final_value, final_shown = after[name] if after is not None else (value, shown)
        target = ""
        if name in targets:
            op, bound = targets[name]
            mark = "met" if _met(final_value, op, bound) else "NOT MET"
            limit = f"{bound:.0%}" if name == "junk.share" else f"{bound:g}"
            if name in ("contradiction.correct", "near_miss.merged"):
                limit = {"contradiction.correct": "13/15", "near_miss.merged": "1/20"}[name]
            target = f"{op} {limit}: {mark}"
        table.append([name, shown, final_shown if after is not None else "-", target])
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
    lines = [
        f"dataset {result.dataset}: {result.turns} turns through the write queue, {result.llm}",
        f"dead letters {result.dead_letters}; {result.seconds:.1f} s; "
        f"turns that left no memory {result.turns_no_memory} of {result.turns}",
    ]
    if result.llm_tokens_per_turn is not None:
        lines.append(f"LLM tokens per turn: {result.llm_tokens_per_turn:.1f}")
    lines.append("")
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in table
    )
    return "\n".join(lines)


def to_json(result: WriteEvalResult) -> dict[str, Any]:
    """Every number (final scores at the top level, under the documented keys)."""
    final = result.final.as_json()
    document: dict[str, Any] = {
        "dataset": result.dataset,
        "turns": result.turns,
        "llm": result.llm,
        "llm_tokens_per_turn": result.llm_tokens_per_turn,
        "dead_letters": result.dead_letters,
        "turns.no_memory": result.turns_no_memory,
        "seconds": round(result.seconds, 3),
        **final,
        "before_consolidation": result.before.as_json(),
    }
    return document


def write_json(result: WriteEvalResult, path: str | Path) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(to_json(result), indent=2) + "\n", encoding="utf-8")
