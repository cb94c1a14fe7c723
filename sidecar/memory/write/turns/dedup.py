"""What counts as the same fact: what a new fact is judged against
(:class:`TurnRows`: the owner's memories and this turn's rows, less those about
another subject) and the judgement (:class:`DedupJudge`: add / update / supersede /
no-op).

Decisions (:class:`Decision`):

* ``NOOP``      the fact is already known: the same slot and value, or the same
                content words, names, numbers and polarity; the writer keeps the
                dropped wording as a ``merged`` row of the memory's history;
* ``UPDATE``    it is known, but the new wording says more: the memory's text is
                replaced (and re-embedded), its id kept;
* ``SUPERSEDE`` it replaces a memory (the same single-valued slot with another
                value, whatever their similarity): the old one is kept, marked
                superseded by the new one, and leaves retrieval;
* ``ADD``       it is new.

Facts are compared by their shapes (:mod:`sidecar.memory.language.facts`): two facts
that differ in a content word, a name, a number or polarity (dog / cat, left /
right, visited / visiting) are never one. A memory that sets the fact's slot is a
candidate whatever its similarity. The same words, names, numbers and polarity
never reach the LLM; the rest does when an LLM judge is configured (the rule is the
fallback, and the LLM may not merge facts with another name, number or polarity);
without one the rule decides, and anything unclear is added, because a duplicate
is cheaper to clean up (:mod:`sidecar.memory.write.upkeep.consolidation`) than a lost
fact.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from sidecar.config import ExtractionConfig
from sidecar.errors import LLMError
from sidecar.llm import ChatMessage, ChatModel, task_tag
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.language.entities import is_user_fact, mentions, named_subject
from sidecar.memory.language.facts import (
    FactShape,
    conflicts,
    contrasts,
    differs,
    equivalent,
    richer,
    same_value,
    shape,
    slot_of,
)
from sidecar.memory.language.replacement import replaces
from sidecar.memory.language.said import QUOTED
from sidecar.memory.records.records import MemoryRecord, Status, Visibility, memory_id
from sidecar.memory.records.vectors import top_indices
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

JUDGE_VERSION = 1


class Decision(StrEnum):
    ADD = "add"
    UPDATE = "update"
    SUPERSEDE = "supersede"
    NOOP = "noop"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A stored memory the new fact is compared with."""

    id: str
    text: str
    cosine: float


@dataclass(frozen=True, slots=True)
class Judgement:
    decision: Decision
    target: str | None = None  # the candidate id for UPDATE / SUPERSEDE / NOOP
    text: str | None = None  # UPDATE: the merged wording
    by: str = "rule"  # rule | llm | exact


#: A fact with a change cue is compared with memories at least this similar: the
#: value it replaces often shares little wording with it.
CHANGE_FLOOR = 0.35
#: Cue words of a replacement within an accumulating slot ("took up swimming instead").
_REPLACES = re.compile(r"\b(?:instead|anymore|any\s+more|no\s+longer|replaced)\b", re.I)


def rule_judgement(
    fact: str, candidates: Sequence[Candidate], config: ExtractionConfig
) -> Judgement:
    """The conservative non-LLM decision (see the module docstring).

    1. A candidate that sets the same slot (whatever its similarity): the same
       value and polarity is the same fact (NOOP, or UPDATE when the new wording
       says more); another value of a single-valued slot, or a replacement cue in an
       accumulating one, supersedes it.
    2. Otherwise by words: the same content words, names, numbers and polarity is
       the same fact; a candidate that differs in any of them is never merged;
       above ``paraphrase_threshold`` the wording that says more wins (UPDATE, or
       NOOP when the stored one already says it).
    3. Anything else is added: a duplicate is cheaper to clean up (consolidation
       does) than a lost fact.
    """
    new = shape(fact)
    if new.slot is not None:
        same = [c for c in candidates if shape(c.text).slot == new.slot]
        for candidate in same:
            old = shape(candidate.text)
            if equivalent(new, old):
                if richer(new, old):
                    return Judgement(Decision.UPDATE, candidate.id, fact)
                # The same attribute with the same value: clear without a judge.
                return Judgement(Decision.NOOP, candidate.id, by="exact")
        target = _superseded(new, fact, same)
        if target is not None:
            # Another value of the same attribute: clear without a judge.
            return Judgement(Decision.SUPERSEDE, target.id, by="exact")
    for candidate in candidates:  # best first
        old = shape(candidate.text)
        if candidate.cosine >= CHANGE_FLOOR and replaces(new, old):
            return Judgement(Decision.SUPERSEDE, candidate.id)
        if candidate.cosine < config.contradiction_threshold:
            continue
        if equivalent(new, old):
            return Judgement(Decision.NOOP, candidate.id, by="exact")
        if differs(new, old) or candidate.cosine < config.paraphrase_threshold:
            continue
        if richer(new, old):
            return Judgement(Decision.UPDATE, candidate.id, fact)
        if richer(old, new) or candidate.cosine >= config.duplicate_threshold:
            return Judgement(Decision.NOOP, candidate.id)
    return Judgement(Decision.ADD)


def _superseded(new: FactShape, fact: str, same: Sequence[Candidate]) -> Candidate | None:
    """The same-slot candidate ``fact`` replaces: the best one with another value of a
    single-valued slot; in an accumulating slot, the value it says the user no longer
    has ("User no longer plays the guitar"), or the best one after a replacement cue
    ("took up swimming instead")."""
    if not same:
        return None
    if not new.accumulates:
        return same[0] if conflicts(new, shape(same[0].text)) else None
    value = new.value or ""
    if value.startswith("not "):
        dropped = value.removeprefix("not ")
        return next((c for c in same if same_value(shape(c.text).value, dropped)), None)
    return same[0] if _REPLACES.search(fact) else None


def relevant(
    fact: str, candidates: Sequence[Candidate], config: ExtractionConfig
) -> list[Candidate]:
    """The candidates worth judging: similar enough, or setting the same slot."""
    new = shape(fact)
    changes = new.change or bool(new.stopped)
    floor = min(CHANGE_FLOOR, config.contradiction_threshold) if changes else None
    return [
        c
        for c in candidates
        if c.cosine >= config.contradiction_threshold
        or (new.slot is not None and shape(c.text).slot == new.slot)
        or (floor is not None and c.cosine >= floor)
    ]


def _evidence(new: FactShape, fact: str, old: FactShape) -> bool:
    """Something in the words says ``new`` replaces ``old``: another value of the same
    single-valued slot (or a value dropped from an accumulating one), a change cue,
    something stopped, or the other polarity. Two facts about different people or
    attributes never replace each other."""
    if (new.roles - old.roles) and (old.roles - new.roles):
        return False  # the aunt's home does not replace the uncle's
    if new.slot is not None and old.slot is not None and new.slot != old.slot:
        return False
    if new.slot is not None and new.slot == old.slot:
        return conflicts(new, old) or (
            new.accumulates and bool(_REPLACES.search(fact) or new.negated != old.negated)
        )
    return new.change or bool(new.stopped) or new.negated != old.negated


def guarded(judgement: Judgement, fact: str, candidates: Sequence[Candidate]) -> Judgement:
    """The LLM's decision, except that two facts with another name, number or polarity,
    or a near miss (:func:`~sidecar.memory.language.facts.contrasts`: cashews / kiwi,
    aunt / uncle), are never one (a NOOP or UPDATE into such a memory becomes an
    ADD), and that a SUPERSEDE needs evidence in the words (:func:`_evidence`; without
    it the fact is added: a duplicate is cheaper than a lost fact)."""
    if judgement.target is None:
        return judgement
    target = next((c for c in candidates if c.id == judgement.target), None)
    if target is None:
        return judgement
    new, old = shape(fact), shape(target.text)
    if judgement.decision == Decision.SUPERSEDE:
        return judgement if _evidence(new, fact, old) else Judgement(Decision.ADD, by=judgement.by)
    if judgement.decision != Decision.NOOP and judgement.decision != Decision.UPDATE:
        return judgement
    if (
        new.negated != old.negated
        or not (new.entities <= old.entities or old.entities <= new.entities)
        or contrasts(new, old)
    ):
        return Judgement(Decision.ADD, by=judgement.by)
    return judgement


JUDGE_PROMPT = (
    task_tag("dedup", JUDGE_VERSION)
    + """
You keep a user's long-term memory free of duplicates and stale facts. Compare the
NEW fact with the EXISTING memories and answer with JSON only:
{"decision": "ADD" | "UPDATE" | "SUPERSEDE" | "NOOP", "target": "<existing id or null>",
 "text": "<for UPDATE: one sentence combining both, else null>"}

NOOP: the new fact says nothing the target does not already say.
UPDATE: same fact, but the new one adds detail; give the combined sentence.
SUPERSEDE: the new fact contradicts or replaces the target (e.g. moved, changed job).
ADD: anything else."""
)


def render_judge_input(fact: str, candidates: Sequence[Candidate]) -> str:
    lines = [f"NEW: {fact}", "EXISTING:"]
    lines.extend(f"- id={c.id}: {c.text}" for c in candidates)
    return "\n".join(lines)


def parse_judgement(value: Any, candidates: Sequence[Candidate]) -> Judgement | None:
    if not isinstance(value, Mapping):
        return None
    try:
        decision = Decision(str(value.get("decision", "")).strip().lower())
    except ValueError:
        return None
    known = {c.id for c in candidates}
    target = value.get("target")
    target = target if isinstance(target, str) and target in known else None
    text = value.get("text")
    text = " ".join(text.split()) if isinstance(text, str) and text.strip() else None
    if decision in (Decision.UPDATE, Decision.SUPERSEDE) and target is None:
        return None
    if decision == Decision.UPDATE and text is None:
        return None
    return Judgement(decision, target, text, "llm")


class DedupJudge:
    def __init__(self, llm: ChatModel, metrics: Metrics) -> None:
        self._llm = llm
        self._metrics = metrics

    async def judge(
        self, fact: str, candidates: Sequence[Candidate], config: ExtractionConfig
    ) -> Judgement:
        """Exact and clear cases by rule; the gray zone by the LLM when configured."""
        shortlist = relevant(fact, candidates, config)
        if not shortlist:
            return self._count(Judgement(Decision.ADD, by="exact"))
        rule = rule_judgement(fact, shortlist, config)
        clear = rule.by == "exact"  # the same words, names, numbers and polarity
        if clear or not (config.use_llm and self._llm.configured):
            return self._count(rule)
        messages: list[ChatMessage] = [
            {"role": "system", "content": JUDGE_PROMPT},
            {"role": "user", "content": render_judge_input(fact, shortlist[:5])},
        ]
        try:
            value = await self._llm.chat_json("dedup", messages, max_tokens=200)
        except LLMError as exc:
            log.warning("dedup judge failed (%s); using the rule", type(exc).__name__)
            return self._count(rule)
        judged = parse_judgement(value, shortlist)
        return self._count(guarded(judged, fact, shortlist) if judged is not None else rule)

    def _count(self, judgement: Judgement) -> Judgement:
        self._metrics.facts.labels(decision=f"{judgement.decision}_{judgement.by}").inc()
        return judgement


class TurnRows:
    """The rows one turn writes, over the owner's corpus snapshot: dedup candidates
    come from both (a row this turn changed replaces its stored version), so facts
    of one turn are judged against each other exactly as if each had been stored
    before the next was judged."""

    def __init__(self, corpus: Corpus, owner: str) -> None:
        self._corpus = corpus
        self._owner = owner
        # The owner's private rows: a turn never changes (merges into, supersedes) a
        # memory shared with others, which only a token allowed to share may edit.
        # A quote ('User said: "…"') is never judged against: no fact replaces one.
        self._mine = np.asarray(
            [
                r.user_id == owner and r.visibility == Visibility.USER and r.source not in QUOTED
                for r in corpus.records
            ],
            dtype=bool,
        )
        self._rows: dict[str, MemoryRecord] = {}  # id -> latest version, in write order

    def get(self, memory_id: str) -> MemoryRecord | None:
        found = self._rows.get(memory_id)
        if found is not None:
            return found
        index = self._corpus.index_of.get(memory_id)
        return self._corpus.records[index] if index is not None else None

    def stored_vector(self, memory_id: str, text: str) -> npt.NDArray[np.float32] | None:
        """The vector of the snapshot's active memory ``memory_id`` when it says
        ``text`` (None otherwise)."""
        index = self._corpus.index_of.get(memory_id)
        if index is None or not self._mine[index]:
            return None
        record = self._corpus.records[index]
        if record.status != Status.ACTIVE or record.content != text:
            return None
        vector: npt.NDArray[np.float32] = self._corpus.vector_rows([index])[0]
        return vector

    def put(self, rows: list[MemoryRecord]) -> None:
        for row in rows:
            self._rows[row.id] = row
            index = self._corpus.index_of.get(row.id)
            if index is not None:
                self._mine[index] = False  # the turn's version replaces the snapshot's

    def rows(self) -> list[MemoryRecord]:
        return list(self._rows.values())

    def same_quote(self, text: str) -> Judgement:
        """How a quote is judged: the same quote of the owner's, still active, is said
        again (NOOP: it gains this turn); anything else is added."""
        existing = self.get(memory_id(self._owner, text))  # the id is the owner's and text's
        if existing is not None and existing.status == Status.ACTIVE:
            return Judgement(Decision.NOOP, existing.id, by="exact")
        return Judgement(Decision.ADD)

    def candidates_for(
        self, text: str, about: str, vector: npt.NDArray[np.float32], limit: int
    ) -> list[Candidate]:
        """What a new fact (``text``, about ``about`` when it is someone else's) is
        judged against: :meth:`candidates`, less those about another subject — a
        fact about someone else restates or replaces only facts about them, and a
        fact about the user never one about someone else."""
        candidates = self.candidates(vector, limit, shape(text).slot)
        if about:
            return [c for c in candidates if not is_user_fact(c.text) and mentions(c.text, about)]
        if is_user_fact(text):
            return [c for c in candidates if is_user_fact(c.text) or named_subject(c.text) is None]
        return candidates

    def candidates(
        self, vector: npt.NDArray[np.float32], limit: int, slot: str | None = None
    ) -> list[Candidate]:
        """The owner's active memories most similar to ``vector`` (best first; ties
        by position: the snapshot in corpus order, then this turn's rows), then those
        that set ``slot`` whatever their similarity."""
        extra = [
            r
            for r in self._rows.values()
            if r.status == Status.ACTIVE
            and r.embedding is not None
            and r.user_id == self._owner
            and r.source not in QUOTED
        ]
        records = [*self._corpus.records, *extra]
        if not records:
            return []
        parts = [self._corpus.vector_scores(vector)] if self._corpus.size else []
        if extra:
            parts.append(np.asarray([r.embedding for r in extra], dtype=np.float32) @ vector)
        similarity = np.concatenate(parts)
        mask = np.concatenate([self._mine, np.ones(len(extra), dtype=bool)])
        chosen = list(top_indices(similarity, limit, mask))
        if slot is not None:
            taken = set(chosen)
            same = [
                int(i)
                for i in np.flatnonzero(mask)
                if int(i) not in taken and slot_of(records[int(i)].content) == slot
            ]
            chosen.extend(sorted(same, key=lambda i: (-similarity[i], i)))
        return [Candidate(records[i].id, records[i].content, float(similarity[i])) for i in chosen]
