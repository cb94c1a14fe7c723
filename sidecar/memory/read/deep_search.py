"""Deep search: a second, slower look when primary retrieval looks weak.

**When.** After primary retrieval, :func:`primary_confidence` scores the results
with absolute signals only (fused scores are relative to the corpus)::

    e(hit)     = 0.5 * clip((cosine - 0.2) / 0.5, 0, 1) + 0.5 * lexical
    confidence = 0.6 * e(rank 1)
               + 0.25 * clip((e(rank 1) - e(rank 2)) / 0.25, 0, 1)
               + 0.15 * (top-k results with e >= 0.4) / top_k

(``lexical`` is BM25 as a share of the query's best possible score; no results
-> 0). Below ``deep_search.threshold`` the query escalates, unless the session
(``x-session-id``, else the user) has used its ``rate_limit`` escalations in the
rolling window.

**What.** :func:`expand_candidates` pools, from the scope's own corpus only, the
primary top ``primary_k`` and — round-robin from the best primary hit down — their
session neighbours (``session_hops`` back and forth), their linked memories, then
members of the top hits' categories, capped at ``max_candidates``. Every
candidate is checked against the scope again (:func:`in_scope`).

**How.** The LLM reads the pool (``[memory-sidecar:rank v1]``, candidates with
short ids ``c1..cN``, each cut to ``candidate_chars``; as many as fit in
``max_tokens`` at 4 characters per token plus ``answer_tokens_per_candidate`` for
the answer) and answers ``{"ranked": [{"id", "score", "reason"}]}``. Without an
LLM (or with ``use_llm`` off) the pool is re-ranked without one: every candidate
scores ``max(e(own), 0.5 * e(best session/link neighbour))`` — an answer turn
right after a matching question surfaces — and the metrics say
``method="heuristic"``.

**Blend.** On one 0..1 scale: a primary hit scores its evidence raised to the best
evidence below it (an upper envelope: the primary order is kept), a ranked
candidate its rank score; a memory in both keeps the higher; best first. So a
candidate the ranker scores above the primary hits' evidence moves ahead of them.
Constraint memories the ranking found always make the top-k. On timeout or error
the primary results stand.

Every escalation appends a feedback record to ``feedback_path`` (JSONL, rotated
beyond ``feedback_max_bytes``): memory ids, a SHA-256 of the query (the text
only with ``logging.debug_content``), what was new, mode, method and timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from sidecar.config import DeepSearchConfig
from sidecar.errors import LLMError, LLMTimeout
from sidecar.llm import ChatMessage, LLMClient, task_tag
from sidecar.memory.model.records import Hit, MemoryRecord, MemoryType, Scope, Visibility
from sidecar.memory.read.corpus import Corpus
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.signals import cosine_scores, lexical_scores
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

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


# -- confidence ------------------------------------------------------------------------


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


# -- candidates ------------------------------------------------------------------------


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


# -- ranking ---------------------------------------------------------------------------


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
        text = " ".join(corpus.records[candidate.index].content.split())
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


# -- bounds: rate limit and feedback ----------------------------------------------------


class RateLimiter:
    """At most ``limit`` events per key in a rolling window; at most ``max_keys``
    keys tracked (least recently seen dropped)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._events: OrderedDict[str, deque[float]] = OrderedDict()
        self._clock = clock

    def __len__(self) -> int:
        return len(self._events)

    def allow(self, key: str, limit: int, window_s: float, max_keys: int) -> bool:
        now = self._clock()
        events = self._events.get(key)
        if events is None:
            events = deque()
            self._events[key] = events
        self._events.move_to_end(key)
        while events and events[0] <= now - window_s:
            events.popleft()
        allowed = len(events) < limit
        if allowed:
            events.append(now)
        while len(self._events) > max_keys:
            self._events.popitem(last=False)
        return allowed


class FeedbackLog:
    """Append-only JSONL on one background thread; rotated to ``<path>.1``."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path = Path(path)
        self._max_bytes = max_bytes
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deep-feedback")

    def record(self, entry: Mapping[str, Any]) -> None:
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n"
        self._executor.submit(self._append, line)

    def _append(self, line: str) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                if self.path.stat().st_size + len(line) > self._max_bytes:
                    os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line)
        except OSError as exc:
            log.warning("deep search feedback not written: %s", type(exc).__name__)

    def flush(self) -> None:
        self._executor.submit(lambda: None).result()

    def close(self) -> None:
        self._executor.shutdown(wait=True)


# -- the searcher ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeepResult:
    """One deep search: the blended hits and what happened."""

    hits: list[Hit] = field(repr=False)
    method: str  # llm | heuristic
    outcome: str  # ok | timeout | error | no_candidates | budget
    confidence: PrimaryConfidence
    candidates: int = 0
    dropped: int = 0
    new_ids: tuple[str, ...] = ()
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class DeepReport:
    """What the request path did about deep search (for the debug header)."""

    decision: str  # confident | escalate | rate_limited | cold | shadow
    confidence: float
    outcome: str = ""
    method: str = ""
    new: int = 0

    def header_value(self) -> str:
        value = f"{self.decision};confidence={self.confidence:.2f}"
        if self.outcome:
            value += f";outcome={self.outcome};method={self.method};new={self.new}"
        return value


def query_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class DeepSearcher:
    """Owned by the :class:`~sidecar.memory.read.service.MemoryService`."""

    def __init__(
        self,
        llm: LLMClient | None,
        metrics: Metrics,
        *,
        debug_content: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._llm = llm
        self._metrics = metrics
        self._debug_content = debug_content
        self.limiter = RateLimiter(clock)
        self._feedback: dict[str, FeedbackLog] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def uses_llm(self, config: DeepSearchConfig) -> bool:
        return config.use_llm and self._llm is not None and self._llm.configured

    # -- decision ------------------------------------------------------------------

    def decide(
        self,
        hits: Sequence[Hit],
        config: DeepSearchConfig,
        top_k: int,
        key: str | None,
    ) -> tuple[str, PrimaryConfidence]:
        """``confident``, ``escalate`` or ``rate_limited`` (the caller counts the
        final decision with :meth:`count_decision`)."""
        confidence = primary_confidence(hits, top_k)
        if confidence.value >= config.threshold:
            decision = "confident"
        elif key is not None and not self.limiter.allow(
            key, config.rate_limit, config.rate_window_s, config.rate_max_keys
        ):
            decision = "rate_limited"
        else:
            decision = "escalate"
        return decision, confidence

    def count_decision(self, mode: str, decision: str) -> None:
        self._metrics.deep_decisions.labels(mode=mode, decision=decision).inc()

    # -- the search ----------------------------------------------------------------

    async def run(
        self,
        query: Query,
        primary: Sequence[Hit],
        corpus: Corpus,
        scope: Scope,
        config: DeepSearchConfig,
        top_k: int,
        *,
        mode: str,
        profile: str = "",
        confidence: PrimaryConfidence | None = None,
    ) -> DeepResult:
        """Expand, rank and blend within ``config.timeout_ms``; the primary results
        stand on timeout or error. Counts metrics and writes the feedback record."""
        started = time.perf_counter()
        confidence = confidence or primary_confidence(primary, top_k)
        method = "llm" if self.uses_llm(config) else "heuristic"
        budget = config.timeout_ms / 1000
        timings: dict[str, float] = {}
        candidates: list[Candidate] = []
        dropped = 0
        try:
            async with asyncio.timeout(budget):
                candidates = expand_candidates(primary, corpus, scope, config)
                timings["expand_ms"] = (time.perf_counter() - started) * 1000
                if not candidates:
                    ranked: dict[int, float] = {}
                    outcome = "no_candidates"
                elif method == "llm":
                    ranked, dropped, outcome = await self._llm_rank(
                        query, candidates, corpus, config, budget, started
                    )
                else:
                    ranked, outcome = heuristic_rank(query, candidates, corpus), "ok"
        except TimeoutError:
            ranked, outcome = {}, "timeout"
        timings["total_ms"] = (time.perf_counter() - started) * 1000
        hits = blend(primary, ranked, corpus, top_k) if outcome == "ok" else list(primary)
        before = {h.record.id for h in primary[:top_k]}
        new_ids = tuple(h.record.id for h in hits[:top_k] if h.record.id not in before)
        seconds = time.perf_counter() - started
        self._metrics.deep_runs.labels(mode=mode, method=method, outcome=outcome).inc()
        self._metrics.deep_seconds.labels(method=method).observe(seconds)
        if new_ids:
            self._metrics.deep_new.labels(mode=mode).inc(len(new_ids))
        if dropped:
            self._metrics.deep_dropped.inc(dropped)
        result = DeepResult(
            hits, method, outcome, confidence, len(candidates), dropped, new_ids, seconds
        )
        self._write_feedback(query.text, primary, result, config, mode, profile, top_k, timings)
        return result

    async def _llm_rank(
        self,
        query: Query,
        candidates: Sequence[Candidate],
        corpus: Corpus,
        config: DeepSearchConfig,
        budget: float,
        started: float,
    ) -> tuple[dict[int, float], int, str]:
        assert self._llm is not None
        prompt = build_rank_prompt(query.text, candidates, corpus, config)
        if not prompt.ids:
            return {}, prompt.dropped, "budget"
        remaining = max(0.001, budget - (time.perf_counter() - started))
        try:
            answer = await self._llm.chat_json(
                TASK,
                prompt.messages,
                max_tokens=prompt.answer_tokens,
                temperature=0.0,
                timeout_s=remaining,
            )
        except LLMTimeout:
            return {}, prompt.dropped, "timeout"
        except LLMError:
            return {}, prompt.dropped, "error"
        return parse_ranked(answer, prompt.ids), prompt.dropped, "ok"

    def _write_feedback(
        self,
        text: str,
        primary: Sequence[Hit],
        result: DeepResult,
        config: DeepSearchConfig,
        mode: str,
        profile: str,
        top_k: int,
        timings: Mapping[str, float],
    ) -> None:
        if not config.feedback_path:
            return
        sink = self._feedback.get(config.feedback_path)
        if sink is None:
            sink = FeedbackLog(config.feedback_path, config.feedback_max_bytes)
            self._feedback[config.feedback_path] = sink
        entry: dict[str, Any] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "profile": profile,
            "mode": mode,
            "method": result.method,
            "outcome": result.outcome,
            "query_sha256": query_hash(text),
            "confidence": result.confidence.as_dict(),
            "primary_ids": [h.record.id for h in primary[:top_k]],
            "deep_ids": [h.record.id for h in result.hits[:top_k]],
            "new_ids": list(result.new_ids),
            "candidates": result.candidates,
            "dropped": result.dropped,
            "timings_ms": {k: round(v, 3) for k, v in timings.items()},
        }
        if self._debug_content:
            entry["query"] = text
        sink.record(entry)

    # -- background (shadow mode) ----------------------------------------------------

    def background(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("shadow deep search failed: %s", type(task.exception()).__name__)

    async def drain(self) -> None:
        """Wait for background searches and pending feedback (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for sink in self._feedback.values():
            await asyncio.to_thread(sink.flush)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for sink in self._feedback.values():
            await asyncio.to_thread(sink.close)
        self._feedback.clear()
