"""Deep search's pure parts: the primary results' confidence from absolute signals,
the candidate pool from the scope's own corpus, the ranking prompt and its parser,
the re-rank without an LLM, and the blend of primary and ranked results (the
formulas are in :mod:`sidecar.memory.read.deep.search`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sidecar.config import DeepSearchConfig
from sidecar.llm import ChatMessage, task_tag
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.quoting import quote
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.signals import cosine_scores, lexical_scores
from sidecar.memory.records.records import Hit, MemoryRecord, MemoryType, Scope, Visibility

TASK = "rank"
PROMPT_VERSION = 1
CHARS_PER_TOKEN = 4

COSINE_FLOOR = 0.2
COSINE_SPAN = 0.5
#: Results with at least this evidence count as convincing (the confidence's count).
STRONG_EVIDENCE = 0.4
#: A neighbour's evidence carried over by the non-LLM re-rank.
NEIGHBOUR_DECAY = 0.5

SYSTEM_PROMPT = (
    f"{task_tag(TASK, PROMPT_VERSION)} You rank stored memories by how useful each is "
    "for answering the user's query. Read every candidate. Answer with JSON only: "
    '{"ranked": [{"id": "<candidate id>", "score": <0.0-1.0>, "reason": "<a few words>"}]} '
    "listing the relevant candidates, best first; leave irrelevant ones out."
)


def evidence(signals: Mapping[str, float], score: float = 0.0) -> float:
    """Absolute evidence of one hit, 0..1 (see the module docstring). Hits without
    signals (store-side fallbacks) count their score as cosine."""
    cosine = signals.get("cosine", score if not signals else 0.0)
    lexical = signals.get("lexical", 0.0)
    dense = min(1.0, max(0.0, (cosine - COSINE_FLOOR) / COSINE_SPAN))
    return 0.5 * dense + 0.5 * min(1.0, max(0.0, lexical))


@dataclass(frozen=True, slots=True)
class PrimaryConfidence:
    value: float
    top: float
    gap: float
    count: int

    def as_dict(self) -> dict[str, float]:
        return {
            "value": round(self.value, 4),
            "top": round(self.top, 4),
            "gap": round(self.gap, 4),
            "count": self.count,
        }


def primary_confidence(hits: Sequence[Hit], top_k: int) -> PrimaryConfidence:
    """How sure the primary results look (0..1); see the module docstring."""
    if not hits:
        return PrimaryConfidence(0.0, 0.0, 0.0, 0)
    scores = sorted((evidence(h.signals, h.score) for h in hits[:top_k]), reverse=True)
    top = scores[0]
    gap = top - scores[1] if len(scores) > 1 else top
    count = sum(1 for score in scores if score >= STRONG_EVIDENCE)
    value = 0.6 * top + 0.25 * min(1.0, max(0.0, gap / 0.25)) + 0.15 * (count / max(1, top_k))
    return PrimaryConfidence(value, top, gap, count)


def in_scope(record: MemoryRecord, scope: Scope) -> bool:
    """The visibility rule (filters.scope_expression), checked once more here."""
    if record.user_id == scope.user_id or record.visibility == Visibility.PUBLIC:
        return True
    return (
        bool(record.group_id)
        and record.group_id in scope.group_ids
        and (record.visibility == Visibility.GROUP)
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    index: int
    source: str  # primary | session | link | category


def expand_candidates(
    primary: Sequence[Hit], corpus: Corpus, scope: Scope, config: DeepSearchConfig
) -> list[Candidate]:
    """The pool to rank, best sources first, at most ``max_candidates``."""
    limit = config.max_candidates
    chosen: dict[int, Candidate] = {}

    def add(index: int, source: str) -> None:
        if (
            len(chosen) < limit
            and index >= 0
            and index not in chosen
            and in_scope(corpus.records[index], scope)
        ):
            chosen[index] = Candidate(index, source)

    seeds = [
        corpus.index_of[h.record.id]
        for h in primary[: config.primary_k]
        if h.record.id in corpus.index_of
    ]
    for index in seeds:
        add(index, "primary")
    for index in seeds:
        before = after = index
        for _ in range(config.session_hops):
            before = int(corpus.session_prev[before]) if before >= 0 else -1
            after = int(corpus.session_next[after]) if after >= 0 else -1
            add(before, "session")
            add(after, "session")
        for linked in corpus.links[index]:
            add(linked, "link")
    if config.category_members:
        categories: list[str] = []
        for index in seeds[:3]:
            category = corpus.records[index].category_id
            if category and category not in categories:
                categories.append(category)
        for category in categories:
            members = [i for i, r in enumerate(corpus.records) if r.category_id == category]
            for index in members[: config.category_members * 4]:
                if sum(1 for c in chosen.values() if c.source == "category") >= (
                    config.category_members * len(categories)
                ):
                    break
                add(index, "category")
    return list(chosen.values())


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class RankPrompt:
    messages: list[ChatMessage]
    #: Short id -> corpus index, for the candidates that fit.
    ids: dict[str, int]
    dropped: int
    answer_tokens: int


def build_rank_prompt(
    query: str, candidates: Sequence[Candidate], corpus: Corpus, config: DeepSearchConfig
) -> RankPrompt:
    """The rank prompt with as many candidates as the token budget allows."""
    head = f"QUERY: {' '.join(query.split())}\nCANDIDATES:\n"
    used = estimate_tokens(SYSTEM_PROMPT) + estimate_tokens(head)
    lines: list[str] = []
    ids: dict[str, int] = {}
    dropped = 0
    for candidate in candidates:
        short = f"c{len(ids) + 1}"
        text = quote(corpus.records[candidate.index].content)
        line = f"[{short}] {text[: config.candidate_chars]}\n"
        cost = estimate_tokens(line) + config.answer_tokens_per_candidate
        if used + cost > config.max_tokens:
            dropped += 1
            continue
        used += cost
        lines.append(line)
        ids[short] = candidate.index
    messages: list[ChatMessage] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": head + "".join(lines)},
    ]
    return RankPrompt(messages, ids, dropped, config.answer_tokens_per_candidate * len(ids))


def parse_ranked(value: object, ids: Mapping[str, int]) -> dict[int, float]:
    """Corpus index -> score (0..1) from a tolerant rank answer; unknown ids ignored."""
    items: object = value.get("ranked", value.get("results")) if isinstance(value, dict) else value
    if not isinstance(items, list):
        return {}
    out: dict[int, float] = {}
    for position, item in enumerate(items):
        if isinstance(item, dict):
            raw_id, raw_score = item.get("id"), item.get("score")
        else:
            raw_id, raw_score = item, None
        key = str(raw_id).strip().strip("[]").strip().lower() if raw_id is not None else ""
        if key.isdigit():
            key = f"c{key}"
        index = ids.get(key)
        if index is None:
            continue
        try:
            score = float(raw_score) if raw_score is not None else 1.0 - position / len(items)
        except (TypeError, ValueError):
            score = 1.0 - position / len(items)
        if math.isnan(score):
            continue
        score = min(1.0, max(0.0, score))
        out[index] = max(score, out.get(index, 0.0))
    return out


def own_evidence(query: Query, corpus: Corpus) -> np.ndarray[Any, np.dtype[np.float32]]:
    """e() of every corpus memory for ``query`` (vectorised)."""
    cosine = cosine_scores(query, corpus)
    _, lexical = lexical_scores(query, corpus)
    dense = np.clip((cosine - COSINE_FLOOR) / COSINE_SPAN, 0.0, 1.0)
    return np.asarray(0.5 * dense + 0.5 * np.clip(lexical, 0.0, 1.0), dtype=np.float32)


def heuristic_rank(
    query: Query, candidates: Sequence[Candidate], corpus: Corpus
) -> dict[int, float]:
    """The non-LLM re-rank: own evidence, or a neighbour's carried over."""
    if corpus.size == 0:
        return {}
    own = own_evidence(query, corpus)
    scores: dict[int, float] = {}
    for candidate in candidates:
        index = candidate.index
        neighbours = [int(corpus.session_prev[index]), int(corpus.session_next[index])]
        neighbours.extend(corpus.links[index])
        carried = max((float(own[j]) for j in neighbours if j >= 0), default=0.0)
        scores[index] = max(float(own[index]), NEIGHBOUR_DECAY * carried)
    return scores


def primary_scores(primary: Sequence[Hit]) -> list[float]:
    """Each primary hit's blend score: its evidence, raised to the best evidence
    below it (an upper envelope), so the primary order is kept."""
    scores = [evidence(h.signals, h.score) for h in primary]
    for i in range(len(scores) - 2, -1, -1):
        scores[i] = max(scores[i], scores[i + 1])
    return scores


def blend(
    primary: Sequence[Hit],
    ranked: Mapping[int, float],
    corpus: Corpus,
    top_k: int,
) -> list[Hit]:
    """Primary hits and ranked candidates on one 0..1 scale, best first: a primary
    hit scores :func:`primary_scores`, a ranked candidate its rank score; a memory
    in both keeps the higher. Ranked constraints always make the top-k."""
    entries: dict[str, tuple[float, int, Hit]] = {}
    for rank, (hit, score) in enumerate(zip(primary, primary_scores(primary), strict=True)):
        entries[hit.record.id] = (score, rank, hit)
    offset = len(primary)
    order = sorted(ranked.items(), key=lambda item: (-item[1], item[0]))
    for rank, (index, score) in enumerate(order):
        record = corpus.records[index]
        found = entries.get(record.id)
        if found is None:
            deep = Hit(record, score, {"deep": round(score, 6)}, "deep")
            entries[record.id] = (score, offset + rank, deep)
        elif score > found[0]:
            entries[record.id] = (score, found[1], found[2])
    merged = sorted(entries.values(), key=lambda e: (-e[0], e[1]))
    hits = [Hit(h.record, round(s, 6), h.signals, h.via) for s, _, h in merged]
    ranked_ids = {corpus.records[i].id for i in ranked}
    forced = {
        h.record.id
        for h in hits
        if h.record.memory_type == MemoryType.CONSTRAINT and h.record.id in ranked_ids
    }
    if not forced or forced <= {h.record.id for h in hits[:top_k]}:
        return hits
    keep = set(sorted(forced, key=[h.record.id for h in hits].index)[:top_k])
    for hit in hits:
        if len(keep) >= top_k:
            break
        keep.add(hit.record.id)
    return [h for h in hits if h.record.id in keep] + [h for h in hits if h.record.id not in keep]
