"""Deduplication and updates: what to do with a new fact given what the user has.

Decisions (:class:`Decision`):

* ``NOOP``      the fact is already known (near-identical, or a paraphrase);
* ``UPDATE``    it is known, but the new wording is richer: the memory's text is
                replaced (and re-embedded), its id and history kept;
* ``SUPERSEDE`` it contradicts a memory (same slot, another value): the old one is
                kept, marked superseded by the new one, and leaves retrieval;
* ``ADD``       it is new.

Near-identical facts (cosine >= ``duplicate_threshold`` or the same content
tokens) never reach the LLM. In the gray zone the LLM judge decides when one is
configured; otherwise a conservative rule decides — a paraphrase needs high
similarity and no new names or numbers; a contradiction needs the same slot
(predicate) with a different name/number; anything unclear is ADDed, because a
duplicate is cheaper to clean up than a lost fact.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sidecar.config import ExtractionConfig
from sidecar.errors import LLMError
from sidecar.llm import ChatMessage, ChatModel, task_tag
from sidecar.memory.model.text import tokens
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


#: Predicate groups: two facts about the same slot use a word from the same group.
SLOTS: tuple[frozenset[str], ...] = tuple(
    frozenset(tokens(" ".join(words)))
    for words in (
        ("live", "lives", "living", "moved", "move", "reside", "relocated", "based", "home",
         "stay", "resident", "apartment", "city"),
        ("work", "works", "job", "employed", "profession", "career", "occupation", "role"),
        ("name", "named", "called"),
        ("age", "old", "born", "birthday"),
        ("married", "wife", "husband", "partner", "spouse", "girlfriend", "boyfriend"),
        ("favourite", "favorite", "prefer", "prefers", "preferred"),
        ("study", "studies", "studying", "major", "degree", "university", "school"),
    )
)  # fmt: skip

_ENTITY = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][\w'-]+|\d[\d.,:/-]*)")


def entities(text: str) -> frozenset[str]:
    """Names and numbers in ``text`` (capitalised words not starting the text,
    numbers); "User" is not an entity."""
    found = {m.group(1).strip(".,").casefold() for m in _ENTITY.finditer(text)}
    return frozenset(found - {"user", "user's", "i"})


def _slots(words: set[str]) -> set[int]:
    return {i for i, slot in enumerate(SLOTS) if words & slot}


def rule_judgement(
    fact: str, candidates: Sequence[Candidate], config: ExtractionConfig
) -> Judgement:
    """The conservative non-LLM decision (see the module docstring)."""
    new_tokens = set(tokens(fact))
    new_entities = entities(fact)
    for candidate in candidates:  # best first
        old_tokens = set(tokens(candidate.text))
        old_entities = entities(candidate.text)
        same_words = new_tokens == old_tokens and bool(new_tokens)
        if candidate.cosine >= config.duplicate_threshold or same_words:
            richer = new_tokens > old_tokens or new_entities > old_entities
            if richer:
                return Judgement(Decision.UPDATE, candidate.id, fact)
            return Judgement(Decision.NOOP, candidate.id)
        # A paraphrase: no new names/numbers, and either the names agree or at most
        # one new content word ("suffers", "severely"; predicate words such as
        # "resides" for "lives" and shared word stems such as allergy/allergic
        # do not count).
        novel = _prefixes(new_tokens - _slot_words(new_tokens)) - _prefixes(old_tokens)
        if (
            candidate.cosine >= config.paraphrase_threshold
            and new_entities <= old_entities
            and (bool(old_entities) or len(novel) <= 1)
        ):
            return Judgement(Decision.NOOP, candidate.id)
        if (
            candidate.cosine >= config.contradiction_threshold
            and new_entities
            and old_entities
            and not (new_entities & old_entities)
            and _slots(new_tokens) & _slots(old_tokens)
        ):
            return Judgement(Decision.SUPERSEDE, candidate.id)
    return Judgement(Decision.ADD)


def _prefixes(words: set[str], length: int = 5) -> set[str]:
    return {w[:length] for w in words}


def _slot_words(words: set[str]) -> set[str]:
    return {w for slot in SLOTS for w in slot if w in words}


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
        shortlist = [c for c in candidates if c.cosine >= config.contradiction_threshold]
        if not shortlist:
            return self._count(Judgement(Decision.ADD, by="exact"))
        rule = rule_judgement(fact, shortlist, config)
        best = shortlist[0]
        clear = best.cosine >= config.duplicate_threshold or rule.decision == Decision.NOOP
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
        return self._count(judged if judged is not None else rule)

    def _count(self, judgement: Judgement) -> Judgement:
        self._metrics.facts.labels(decision=f"{judgement.decision}_{judgement.by}").inc()
        return judgement
