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
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sidecar.config import DeepSearchConfig
from sidecar.errors import LLMError, LLMTimeout
from sidecar.llm import ChatModel
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.deep.ranking import (
    TASK,
    Candidate,
    PrimaryConfidence,
    blend,
    build_rank_prompt,
    expand_candidates,
    heuristic_rank,
    parse_ranked,
    primary_confidence,
)
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.records.records import Hit, Scope
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)


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
    """The request path's deep search (owned by the
    :class:`~sidecar.memory.read.pipeline.RequestPipeline`): its rate limiter,
    feedback files and shadow tasks."""

    def __init__(
        self,
        llm: ChatModel | None,
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
