"""Scores of a write evaluation, from a snapshot of the store and of what the request
path injected (see docs/write-eval.md for every definition).

* ``paraphrase.memories_per_fact``: a paraphrase group's active memories — the
  user's memories that are not junk and whose nearest canonical fact is the group's;
  ``facts_stored_once`` counts groups with exactly one.
* ``near_miss.merged``: pairs where one side's distinguishing content is carried by
  no active memory of the user any more (:func:`~.scoring.covers`).
* ``contradiction.correct``: the current fact is injected for the question, the old
  one is not, and the old one is in the store as superseded;
  ``contradiction.old_injected`` counts the old fact injected.
* ``multi_user.leaks``: memories injected for a user that another user owns, and a
  user's memories that carry another user's names or numbers.
* ``junk.share``: active memories that carry no durable fact about the user
  (:func:`~.scoring.fragment`, or, for paraphrase users, nothing of any labelled
  fact), over all active memories.
* ``negation.flipped``: memories whose polarity differs from the most similar thing
  the user said.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sidecar.evaluation.writes.dataset import WriteDataset
from sidecar.evaluation.writes.scoring import (
    covers,
    distinguishing,
    features,
    fragment,
    matches,
    negative,
    sentences,
)
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import MemoryRecord, Status

#: A paraphrase user's memory belongs to a labelled fact at this cosine ...
ATTRIBUTION_COSINE = 0.4
#: ... or when it carries this share of the fact's content words.
ATTRIBUTION_SHARE = 0.5
#: Sources this close in cosine to the most similar are told apart by shared words.
NEAR_TIE = 0.05
_NAME_OR_NUMBER = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z'’-]+|\d[\d.,:/-]*\d|\d)\b")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every memory row of the dataset's users (any status), and the memory ids the
    request path injected per (user, question)."""

    rows: Mapping[str, Sequence[MemoryRecord]]
    injected: Mapping[tuple[str, str], Sequence[str]]


@dataclass(slots=True)
class WriteScores:
    memories_per_fact: dict[str, int]
    near_miss_merged: list[int]
    near_misses: int
    contradiction_correct: list[int]
    contradiction_old_injected: list[int]
    contradictions: int
    leaks: list[str]
    junk: list[str]
    active: int
    flipped: list[str]
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def per_fact_median(self) -> float:
        counts = list(self.memories_per_fact.values())
        return float(statistics.median(counts)) if counts else 0.0

    @property
    def per_fact_max(self) -> int:
        return max(self.memories_per_fact.values(), default=0)

    @property
    def stored_once(self) -> int:
        return sum(1 for n in self.memories_per_fact.values() if n == 1)

    @property
    def junk_share(self) -> float:
        return len(self.junk) / self.active if self.active else 0.0

    def as_json(self) -> dict[str, Any]:
        """The scores under the documented keys."""
        return {
            "paraphrase": {
                "memories_per_fact": {"median": self.per_fact_median, "max": self.per_fact_max},
                "facts_stored_once": self.stored_once,
                "facts": len(self.memories_per_fact),
                "per_fact": dict(sorted(self.memories_per_fact.items())),
            },
            "near_miss": {"merged": len(self.near_miss_merged), "pairs": self.near_misses},
            "contradiction": {
                "correct": len(self.contradiction_correct),
                "old_injected": len(self.contradiction_old_injected),
                "total": self.contradictions,
            },
            "multi_user": {"leaks": len(self.leaks)},
            "junk": {"share": round(self.junk_share, 4), "memories": len(self.junk)},
            "negation": {"flipped": len(self.flipped)},
            "active_memories": self.active,
            "details": self.details,
        }


def _active(rows: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    return [r for r in rows if r.status == Status.ACTIVE]


async def _cosines(embedder: Embedder, left: list[str], right: list[str]) -> np.ndarray[Any, Any]:
    if not left or not right:
        return np.zeros((len(left), len(right)), dtype=np.float32)
    vectors = await embedder.embed(left + right)
    return np.asarray(vectors[: len(left)] @ vectors[len(left) :].T)


def _overlap(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


async def score(dataset: WriteDataset, snapshot: Snapshot, embedder: Embedder) -> WriteScores:
    junk: list[str] = []
    active_total = 0
    per_fact: dict[str, int] = {}
    # Paraphrase users: attribute each memory to the nearest canonical fact.
    groups_by_user: dict[str, list[Any]] = {}
    for group in dataset.paraphrase_groups:
        groups_by_user.setdefault(group.user_id, []).append(group)
        per_fact[group.fact_id] = 0
    for user, groups in groups_by_user.items():
        memories = _active(snapshot.rows.get(user, ()))
        canon = [g.canonical for g in groups]
        sims = await _cosines(embedder, [m.content for m in memories], canon)
        for i, memory in enumerate(memories):
            best = int(np.argmax(sims[i])) if len(canon) else 0
            wanted = features(canon[best])
            share = len(features(memory.content) & wanted) / max(1, len(wanted))
            attributed = sims[i][best] >= ATTRIBUTION_COSINE or share >= ATTRIBUTION_SHARE
            if fragment(memory.content) or not attributed:
                junk.append(f"{user}: {memory.content}")
            else:
                per_fact[groups[best].fact_id] += 1
    for user, section in dataset.users().items():
        memories = _active(snapshot.rows.get(user, ()))
        active_total += len(memories)
        if section != "paraphrase_groups":
            junk.extend(f"{user}: {m.content}" for m in memories if fragment(m.content))

    merged: list[int] = []
    for index, pair in enumerate(dataset.distinct_near_misses):
        memories = _active(snapshot.rows.get(pair.user_id, ()))
        only_a, only_b = distinguishing(pair.a, pair.b)
        kept_a = not only_a or any(covers(m.content, only_a) for m in memories)
        kept_b = not only_b or any(covers(m.content, only_b) for m in memories)
        if not (kept_a and kept_b):
            merged.append(index)

    by_id = {r.id: r for rows in snapshot.rows.values() for r in rows}
    correct: list[int] = []
    old_injected: list[int] = []
    for index, case in enumerate(dataset.contradictions):
        rows = snapshot.rows.get(case.user_id, ())

        def old(text: str, case: Any = case) -> bool:
            return matches(text, case.expect_superseded) and not matches(text, case.expect_current)

        shown = [by_id[i] for i in snapshot.injected.get((case.user_id, case.query), ())]
        current_shown = any(matches(r.content, case.expect_current) for r in shown)
        old_shown = any(old(r.content) for r in shown)
        in_history = any(r.status == Status.SUPERSEDED and old(r.content) for r in rows)
        if old_shown:
            old_injected.append(index)
        if current_shown and not old_shown and in_history:
            correct.append(index)

    leaks: list[str] = []
    pairs: dict[str, list[Any]] = {}
    for entry in dataset.multi_user:
        pairs.setdefault(entry.pair_id, []).append(entry)
    for entries in pairs.values():
        for entry in entries:
            shown_ids = snapshot.injected.get((entry.user_id, entry.turn), ())
            leaks.extend(
                f"{entry.pair_id}: {mid} injected for {entry.user_id}"
                for mid in shown_ids
                if mid in by_id and by_id[mid].user_id != entry.user_id
            )
            own = set(_NAME_OR_NUMBER.findall(entry.turn))
            theirs = {
                name
                for other in entries
                if other.user_id != entry.user_id
                for name in _NAME_OR_NUMBER.findall(other.turn)
            } - own
            for memory in snapshot.rows.get(entry.user_id, ()):
                if any(matches(memory.content, [name]) for name in theirs):
                    leaks.append(f"{entry.pair_id}: {entry.user_id} holds another user's fact")

    flipped: list[str] = []
    said: dict[str, list[str]] = {}
    for user, text in dataset.turns():
        said.setdefault(user, []).extend([text, *sentences(text)])
    for user, rows in snapshot.rows.items():
        memories = [r for r in rows if r.status in (Status.ACTIVE, Status.SUPERSEDED)]
        spoken = said.get(user, [])
        sims = await _cosines(embedder, [m.content for m in memories], spoken)
        for i, memory in enumerate(memories):
            if not spoken:
                continue
            # The most similar thing said; among near ties, the one sharing most words.
            mine = features(memory.content)
            top = float(np.max(sims[i]))
            close = [j for j in range(len(spoken)) if sims[i][j] >= top - NEAR_TIE]
            best = max(close, key=lambda j: (_overlap(mine, features(spoken[j])), sims[i][j]))
            source = spoken[best]
            if negative(memory.content) != negative(source):
                flipped.append(f"{user}: {memory.content!r} from {source!r}")

    return WriteScores(
        memories_per_fact=per_fact,
        near_miss_merged=merged,
        near_misses=len(dataset.distinct_near_misses),
        contradiction_correct=correct,
        contradiction_old_injected=old_injected,
        contradictions=len(dataset.contradictions),
        leaks=leaks,
        junk=junk,
        active=active_total,
        flipped=flipped,
        details={
            "near_miss_merged": [
                {"a": dataset.distinct_near_misses[i].a, "b": dataset.distinct_near_misses[i].b}
                for i in merged
            ],
            "contradiction_wrong": [
                dataset.contradictions[i].query
                for i in range(len(dataset.contradictions))
                if i not in correct
            ],
            "junk": junk,
            "flipped": flipped,
            "leaks": leaks,
        },
    )
