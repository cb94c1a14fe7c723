"""What one question found, and the figures over many (docs/eval-conversations.md).

* ``evidence.hit@10`` / ``evidence.mrr``: a ranked memory counts when its provenance
  names one of the question's evidence turns; the reciprocal rank of the first.
* ``evidence.injected``: such a memory is in the block the model would see.
* ``evidence.lost``: no active memory was made from any evidence turn.
* ``answer.in_block``: the normalised reference answer is contained in the block's
  normalised text, over ``answer.eligible`` questions (answers of at most 5 words).
* ``block.tokens``: the block's size, at 4 characters per token.
* ``stranger.*``: the question asked again as the next replayed user (by id), whose
  memories hold none of its evidence: the share that gets a block at all, and its
  lines and tokens — what the evidence gate keeps out of a prompt it cannot help.
"""

from __future__ import annotations

import math
import re
import statistics
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sidecar.evaluation.dataset import EvalQuery

HIT_K = 10
#: Answers longer than this many words are not looked for in the block.
MAX_ANSWER_WORDS = 5
_NOT_WORD = re.compile(r"[^\w]+")


@dataclass(slots=True)
class QuestionOutcome:
    query: EvalQuery
    #: Rank of the first memory made from an evidence turn (None: not ranked).
    rank: int | None
    injected: bool
    lost: bool
    answer_eligible: bool
    answer_in_block: bool
    block_tokens: int
    #: The same question over the raw turns (None: not found, or no baseline run).
    baseline_rank: int | None = None
    #: The lines and tokens of the block the question gets asked as another user,
    #: whose memories hold none of its evidence (None: no other user was replayed).
    stranger_lines: int | None = None
    stranger_tokens: int | None = None


def normalised(text: str) -> str:
    """Casefolded words separated by single spaces (punctuation dropped)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NOT_WORD.sub(" ", folded).split())


def eligible_answer(answer: str) -> bool:
    words = normalised(answer).split()
    return 0 < len(words) <= MAX_ANSWER_WORDS


def answer_in(answer: str, block: str) -> bool:
    wanted = normalised(answer)
    return bool(wanted) and f" {wanted} " in f" {normalised(block)} "


def _hit(rank: int | None) -> float:
    return 1.0 if rank is not None and rank <= HIT_K else 0.0


def _reciprocal(rank: int | None) -> float:
    return 1.0 / rank if rank is not None else 0.0


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _p95(values: Sequence[int]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)])


def figures(outcomes: Sequence[QuestionOutcome], *, baseline: bool) -> dict[str, Any]:
    """The question figures over ``outcomes`` (the keys of the JSON document)."""
    eligible = [o for o in outcomes if o.answer_eligible]
    tokens = [o.block_tokens for o in outcomes]
    out: dict[str, Any] = {
        "questions": len(outcomes),
        "evidence.hit@10": _mean([_hit(o.rank) for o in outcomes]),
        "evidence.mrr": _mean([_reciprocal(o.rank) for o in outcomes]),
        "evidence.injected": _mean([1.0 if o.injected else 0.0 for o in outcomes]),
        "evidence.lost": _mean([1.0 if o.lost else 0.0 for o in outcomes]),
        "answer.in_block": _mean([1.0 if o.answer_in_block else 0.0 for o in eligible]),
        "answer.eligible": len(eligible),
        "block.tokens.mean": statistics.fmean(tokens) if tokens else 0.0,
        "block.tokens.p95": _p95(tokens),
    }
    strangers = [o for o in outcomes if o.stranger_lines is not None]
    out["stranger.questions"] = len(strangers)
    out["stranger.with_block"] = _mean([1.0 if o.stranger_lines else 0.0 for o in strangers])
    out["stranger.lines.mean"] = _mean([float(o.stranger_lines or 0) for o in strangers])
    out["stranger.tokens.mean"] = _mean([float(o.stranger_tokens or 0) for o in strangers])
    if baseline:
        out["baseline.raw_turns.hit@10"] = _mean([_hit(o.baseline_rank) for o in outcomes])
        out["baseline.raw_turns.mrr"] = _mean([_reciprocal(o.baseline_rank) for o in outcomes])
    return out


def by_category(outcomes: Sequence[QuestionOutcome], *, baseline: bool) -> dict[str, Any]:
    groups: dict[str, list[QuestionOutcome]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.query.category or "uncategorised", []).append(outcome)
    return {name: figures(group, baseline=baseline) for name, group in sorted(groups.items())}
