"""Ambiguity-gated query rewriting: follow-up questions made searchable.

"When did she go there?" finds nothing in a memory store: the words that matter
("Caroline", "the support group") are in the conversation, not in the question.
The request already carries that conversation, so the rewriter resolves the
references from it — but only when the query needs it:

1. :func:`detect` flags pronouns (he/she/it/they...), demonstratives used as
   pronouns ("is that true?", "that one"; not "this week", "the book that I read"),
   temporal references to the conversation ("earlier", "last time", "the other
   day", "again", "before" at the end of a clause, "that weekend"), implicit
   references ("the issue", "the same", "what he said", "you mentioned"),
   ellipsis ("And Berlin?", "what about her sister?") and very short queries. A
   3rd-person pronoun with an antecedent earlier in the query itself ("What did
   Caroline say about her mom?") is not ambiguous. Every other query takes the
   **fast path**: searched as is, no LLM call, no cache lookup.
2. An ambiguous query is rewritten from the request's last messages by the LLM
   (``[memory-sidecar:rewrite v1]``, temperature 0, JSON ``{"query": "..."}``) or,
   without one, by the **heuristic resolver** (:func:`resolve_heuristic`): person
   pronouns become the most recent person name of the context, "it"/"that"/"the
   issue" the most recent noun phrase or non-person name, and what cannot be
   substituted (temporal references, bare "what else?") gets the context's latest
   entities appended.
3. :func:`rewrite_confidence` scores the rewrite (0..1)::

       resolved = 1 - (references left, by detect() on the rewrite) / (references
                  in the original)          [no references: 1 if grounded words]
       grounded = share of the rewrite's new content words found in the context
       length   = 1 when the rewrite has between n/2 and 3n + 10 words (n: the
                  original's), 0.3 up to twice that, else 0
       confidence = 0.4 * resolved + 0.4 * grounded + 0.2 * length

   An unchanged rewrite scores 0. Below ``rewrite.min_confidence`` the original
   is searched (reason ``low_confidence``).

Results are cached (bounded LRU with a TTL, keyed by a hash of user, query,
context and settings); the LLM call has its own budget (``rewrite.timeout_ms``),
after which — or on any LLM error — the heuristic answers (``fallback:
heuristic``) or the original is searched. Nothing here logs or returns query text
outside :class:`RewriteResult`; headers carry the reason and confidence only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sidecar.config import RewriteConfig
from sidecar.errors import LLMError, LLMTimeout
from sidecar.llm import ChatMessage, ChatModel, task_tag
from sidecar.memory.language.ambiguity import History, detect
from sidecar.memory.language.resolver import resolve_heuristic, rewrite_confidence
from sidecar.memory.read.ttl_cache import TtlCache, digest_key
from sidecar.memory.records.records import Hit
from sidecar.metrics import Metrics

TASK = "rewrite"
PROMPT_VERSION = 1

REASONS = ("fast_path", "llm", "heuristic", "low_confidence", "timeout", "error", "cache")


@dataclass(frozen=True, slots=True)
class RewriteResult:
    """The decision for one query; ``query`` is what is searched. Only ``reason``,
    ``confidence`` and ``fallback`` may leave the process (headers, metrics)."""

    original: str = field(repr=False)
    query: str = field(repr=False)
    reason: str
    confidence: float = 1.0
    kinds: tuple[str, ...] = ()
    #: "heuristic" when the heuristic answered for a failed or slow LLM.
    fallback: str = ""
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return self.query != self.original

    def header_value(self) -> str:
        value = f"{self.reason};confidence={self.confidence:.2f}"
        if self.fallback:
            value += f";fallback={self.fallback}"
        return value


SYSTEM_PROMPT = (
    f"{task_tag(TASK, PROMPT_VERSION)} You turn the user's latest chat message into a "
    "standalone search query for their long-term memory. Replace pronouns (he, she, it, "
    "they, his, her...), demonstratives (this, that) and vague references (the issue, the "
    "same, last time, earlier) with the people, things and times they refer to in the "
    "conversation. Keep the user's words otherwise. Do not answer the question and do not "
    "add anything the conversation does not say. If nothing needs resolving, return the "
    'message unchanged. Answer with JSON only: {"query": "<the standalone query>"}'
)


def clip_history(history: History, config: RewriteConfig) -> list[tuple[str, str]]:
    """The last ``history_messages`` messages, each cut to ``max_message_chars``."""
    if config.history_messages <= 0:
        return []
    kept = list(history)[-config.history_messages :]
    return [
        (role, " ".join(text.split())[: config.max_message_chars].strip()) for role, text in kept
    ]


def build_messages(query: str, history: History) -> list[ChatMessage]:
    lines = [f"{role}: {text}" for role, text in history]
    user = "CONVERSATION:\n" + "\n".join(lines) + f"\nLATEST: {' '.join(query.split())}"
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


def parse_rewrite(value: object) -> str | None:
    """The query of a tolerant ``{"query": ...}`` answer (a bare string is accepted)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, dict):
        found = next(
            (value[k] for k in ("query", "rewritten", "rewrite", "standalone") if k in value),
            None,
        )
        if not isinstance(found, str):
            return None
        text = found
    elif isinstance(value, list) and value:
        return parse_rewrite(value[0])
    else:
        return None
    text = " ".join(text.split()).strip().strip('"').strip()
    return text or None


@dataclass(frozen=True, slots=True)
class _Cached:
    query: str = field(repr=False)
    confidence: float
    kinds: tuple[str, ...]


#: Rewrite results by :func:`cache_key` (a digest: no text is kept as a key).
RewriteCache = TtlCache[_Cached]


def cache_key(user_id: str, query: str, history: History, config: RewriteConfig, llm: bool) -> str:
    turns = (part for role, text in history for part in (role, text))
    return digest_key(user_id, query, str(llm), config.fallback, str(config.min_confidence), *turns)


class QueryRewriter:
    """Owned by the :class:`~sidecar.memory.read.service.MemoryService`; one per process."""

    def __init__(
        self,
        llm: ChatModel | None,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._llm = llm
        self._metrics = metrics
        self.cache = RewriteCache(clock)

    def forget(self, user_id: str) -> int:
        """Drop every cached rewrite of ``user_id``'s queries; how many."""
        return self.cache.drop_owner(digest_key(user_id))

    def _uses_llm(self, config: RewriteConfig) -> bool:
        return config.use_llm and self._llm is not None and self._llm.configured

    async def rewrite(
        self, query: str, history: History, user_id: str, config: RewriteConfig
    ) -> RewriteResult:
        """Decide and (when needed) rewrite; never raises for LLM trouble."""
        started = time.perf_counter()
        result = await self._decide(query, history, user_id, config)
        seconds = time.perf_counter() - started
        self._metrics.rewrites.labels(reason=result.reason).inc()
        self._metrics.rewrite_seconds.labels(reason=result.reason).observe(seconds)
        return RewriteResult(
            result.original,
            result.query,
            result.reason,
            result.confidence,
            result.kinds,
            result.fallback,
            seconds,
        )

    async def _decide(
        self, query: str, history: History, user_id: str, config: RewriteConfig
    ) -> RewriteResult:
        if not config.enabled:
            return RewriteResult(query, query, "disabled")
        ambiguity = detect(query)
        if not ambiguity.ambiguous:
            return RewriteResult(query, query, "fast_path")
        kinds = ambiguity.kinds
        context = clip_history(history, config)
        if not context:
            # Nothing to resolve from: no LLM call can help.
            return RewriteResult(query, query, "low_confidence", 0.0, kinds)
        uses_llm = self._uses_llm(config)
        key = cache_key(user_id, query, context, config, uses_llm)
        cached = self.cache.get(key) if config.cache_ttl_s > 0 else None
        if cached is not None:
            return RewriteResult(query, cached.query, "cache", cached.confidence, cached.kinds)
        context_text = "\n".join(text for _, text in context)
        if uses_llm:
            result = await self._with_llm(query, context, context_text, kinds, config)
        else:
            result = self._heuristic(query, context, context_text, kinds, config)
        if result.reason in ("llm", "heuristic", "low_confidence") and config.cache_ttl_s > 0:
            self.cache.put(
                key,
                _Cached(result.query, result.confidence, kinds),
                ttl_s=config.cache_ttl_s,
                max_entries=config.cache_max_entries,
                owner=digest_key(user_id),
            )
        return result

    def _heuristic(
        self,
        query: str,
        context: History,
        context_text: str,
        kinds: tuple[str, ...],
        config: RewriteConfig,
        *,
        failure: str = "",
    ) -> RewriteResult:
        rewritten = resolve_heuristic(query, context)
        confidence = rewrite_confidence(query, rewritten, context_text)
        if confidence >= config.min_confidence:
            if failure:
                return RewriteResult(query, rewritten, failure, confidence, kinds, "heuristic")
            return RewriteResult(query, rewritten, "heuristic", confidence, kinds)
        return RewriteResult(query, query, failure or "low_confidence", confidence, kinds)

    async def _with_llm(
        self,
        query: str,
        context: History,
        context_text: str,
        kinds: tuple[str, ...],
        config: RewriteConfig,
    ) -> RewriteResult:
        assert self._llm is not None
        budget = config.timeout_ms / 1000
        try:
            answer = await asyncio.wait_for(
                self._llm.chat_json(
                    TASK,
                    build_messages(query, context),
                    max_tokens=config.max_tokens,
                    temperature=0.0,
                    timeout_s=budget,
                ),
                timeout=budget,
            )
        except (TimeoutError, LLMTimeout):
            return self._failed(query, context, context_text, kinds, config, "timeout")
        except LLMError:
            return self._failed(query, context, context_text, kinds, config, "error")
        rewritten = parse_rewrite(answer)
        if rewritten is None:
            return self._failed(query, context, context_text, kinds, config, "error")
        confidence = rewrite_confidence(query, rewritten, context_text)
        if confidence >= config.min_confidence:
            return RewriteResult(query, rewritten, "llm", confidence, kinds)
        # The LLM's rewrite is not trusted: the heuristic may still do better.
        fallback = self._heuristic(query, context, context_text, kinds, config)
        if fallback.changed and fallback.confidence > confidence:
            return fallback
        return RewriteResult(query, query, "low_confidence", confidence, kinds)

    def _failed(
        self,
        query: str,
        context: History,
        context_text: str,
        kinds: tuple[str, ...],
        config: RewriteConfig,
        reason: str,
    ) -> RewriteResult:
        if config.fallback == "heuristic":
            return self._heuristic(query, context, context_text, kinds, config, failure=reason)
        return RewriteResult(query, query, reason, 0.0, kinds)


def fuse_rewrite_hits(rewritten: Sequence[Hit], original: Sequence[Hit], limit: int) -> list[Hit]:
    """``rewrite.search: both``: the two rankings fused by weighted reciprocal ranks
    (rewrite 2, original 1, k = 60); a memory in both keeps the rewrite's hit."""
    scores: dict[str, float] = {}
    hits: dict[str, Hit] = {}
    for weight, ranking in ((2.0, rewritten), (1.0, original)):
        for rank, hit in enumerate(ranking, start=1):
            key = hit.record.id
            scores[key] = scores.get(key, 0.0) + weight / (60 + rank)
            hits.setdefault(key, hit)
    order = sorted(scores, key=lambda key: -scores[key])
    return [hits[key] for key in order[:limit]]
