"""Per-route policy (:class:`Profile`) and its request-path stages beside
retrieval: who is asking (``identity``), follow-up rewriting (``rewrite``) and
deep search (``deep_search``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from sidecar.config.base import _header_name, _Model, _on_off
from sidecar.config.experimental import RewriteExperiments
from sidecar.config.retrieval import InjectionConfig, RetrievalConfig
from sidecar.config.write import ExtractionConfig


class IdentityConfig(_Model):
    """Who is asking: trusted headers set by the gateway, never by the client."""

    #: Header carrying the user id, set by the gateway from its authentication.
    user_header: str = "x-user-id"
    #: Comma-separated group ids.
    groups_header: str = "x-user-groups"
    #: Also accept the body's ``user`` / ``metadata.user_id`` when no header is set.
    #: Only for routes whose clients are trusted: a body is client-controlled.
    allow_body_user: bool = False
    #: Most group ids taken from the groups header: the first ones listed; the
    #: rest are left out and counted (``identity_groups_dropped_total``).
    max_groups: int = Field(default=32, ge=0, le=256)
    #: Optional conversation/session id (used to group memories by session).
    session_header: str = "x-session-id"

    _check_headers = field_validator("user_header", "groups_header", "session_header")(_header_name)


class RewriteConfig(RewriteExperiments):
    """Ambiguity-gated rewriting of follow-up queries (``sidecar.memory.read.rewrite.rewriter``).

    A query without pronouns, demonstratives, temporal or implicit references that
    is not very short takes the fast path: searched as is, no LLM call. An
    ambiguous one is rewritten from the request's last ``history_messages``
    messages by the configured LLM (``[memory-sidecar:rewrite v1]``) — or, with no
    LLM configured or ``use_llm`` off, by the heuristic resolver (references
    replaced by the most recent matching names and noun phrases of the context).
    A rewrite scoring below ``min_confidence`` is discarded (the original is
    searched). On by default: without an LLM it costs microseconds.
    """

    enabled: bool = True
    #: Ask the configured LLM (when there is one); off: the heuristic resolver only.
    use_llm: bool = True
    #: Messages before the latest user message given to the rewriter.
    history_messages: int = Field(default=6, ge=0, le=50)
    #: Characters kept of each of those messages (their beginning).
    max_message_chars: int = Field(default=500, ge=20, le=20_000)
    #: Budget of the LLM rewrite (on the request path, before retrieval's own
    #: ``retrieval.timeout_ms``). Past it, or on an LLM error, ``fallback`` applies.
    timeout_ms: int = Field(default=300, ge=1, le=60_000)
    #: ``heuristic``: the heuristic resolver answers instead (kept only when its
    #: confidence is enough); ``original``: the original query is searched.
    fallback: Literal["heuristic", "original"] = "heuristic"
    #: Confidence 0..1 (references resolved, new words grounded in the context,
    #: sane length; see ``rewrite_confidence``) below which a rewrite is discarded.
    min_confidence: float = Field(default=0.65, ge=0, le=1)
    #: Most tokens of the LLM's answer.
    max_tokens: int = Field(default=96, ge=16, le=2048)
    #: Rewrites are cached per user, query and context for this long (0 = never).
    cache_ttl_s: float = Field(default=300.0, ge=0)
    #: Most cached rewrites (least recently used evicted).
    cache_max_entries: int = Field(default=4096, ge=1, le=1_000_000)


class DeepSearchConfig(_Model):
    """Escalation when primary retrieval looks weak (``sidecar.memory.read.deep.search``).

    Confidence of the primary results (absolute signals only, 0..1)::

        e(hit)     = 0.5 * clip((cosine - 0.2) / 0.5, 0, 1) + 0.5 * lexical
        confidence = 0.6 * e(rank 1)
                   + 0.25 * clip((e(rank 1) - e(rank 2)) / 0.25, 0, 1)
                   + 0.15 * (top-k results with e >= 0.4) / top_k

    Below ``threshold`` the candidate pool (the primary top ``primary_k``, their
    session neighbours, linked memories and members of their categories, capped at
    ``max_candidates``, all from the scope's own corpus) is ranked by the LLM
    (``[memory-sidecar:rank v1]``) — or, without one, by a non-LLM re-rank (absolute
    evidence with neighbour propagation; counted as ``method="heuristic"``) — and
    blended with the primary results.

    ``on`` changes the injected memories and adds up to ``timeout_ms`` to the
    request, only when escalation triggers: the request path then takes at most
    ``rewrite.timeout_ms + retrieval.timeout_ms + deep_search.timeout_ms``, which
    must stay below ``envoy.message_timeout_ms`` (checked). ``shadow`` runs in the
    background, changes nothing and records what it would have changed.
    """

    mode: Literal["off", "shadow", "on"] = "off"
    _mode_switch = field_validator("mode", mode="before")(_on_off)
    #: Escalate when the primary confidence is below this.
    threshold: float = Field(default=0.3, ge=0, le=1)
    #: Rank with the configured LLM (when there is one); off: the non-LLM re-rank.
    use_llm: bool = True
    #: Primary results read into the candidate pool (searched again at this depth).
    primary_k: int = Field(default=20, ge=1, le=1000)
    #: Candidate pool size, at most.
    max_candidates: int = Field(default=50, ge=1, le=1000)
    #: Session neighbours (previous/next) followed from each primary result.
    session_hops: int = Field(default=1, ge=0, le=10)
    #: Members taken from each category of the top results.
    category_members: int = Field(default=5, ge=0, le=100)
    #: Token budget of one rank call (prompt estimated at 4 characters per token,
    #: plus ``answer_tokens_per_candidate`` per candidate); candidates that do not
    #: fit are dropped (counted).
    max_tokens: int = Field(default=8192, ge=256, le=1_000_000)
    answer_tokens_per_candidate: int = Field(default=24, ge=4, le=1000)
    #: Characters of each candidate's text shown to the ranker.
    candidate_chars: int = Field(default=400, ge=40, le=10_000)
    #: Budget of one deep search; on expiry the primary results stand.
    timeout_ms: int = Field(default=10_000, ge=1, le=600_000)
    #: Escalations per session (``x-session-id``, else the user) per rolling window.
    rate_limit: int = Field(default=5, ge=1, le=100_000)
    rate_window_s: float = Field(default=60.0, gt=0)
    #: Sessions tracked by the rate limiter at most (least recently seen dropped).
    rate_max_keys: int = Field(default=10_000, ge=1, le=10_000_000)
    #: JSONL feedback record of every escalation ('' = none): memory ids, a query
    #: hash, timings; the query text only with ``logging.debug_content``.
    feedback_path: str = "./data/deep_search_feedback.jsonl"
    #: The feedback file is rotated (to ``<path>.1``) beyond this size.
    feedback_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)


class Profile(_Model):
    """Per-route policy. Envoy names the profile per route; see ServerConfig."""

    #: Request paths (exact, query string ignored) the memory logic applies to.
    paths: tuple[str, ...] = ("/v1/chat/completions",)
    #: Request paths of the OpenAI Responses API (``input`` items, typed stream
    #: events) the memory logic applies to, the same way. Any other path passes
    #: through, counted (``memory_sidecar_passthrough_total{reason="other_path"}``).
    responses_paths: tuple[str, ...] = ("/v1/responses",)
    identity: IdentityConfig = IdentityConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    injection: InjectionConfig = InjectionConfig()
    extraction: ExtractionConfig = ExtractionConfig()
    rewrite: RewriteConfig = RewriteConfig()
    deep_search: DeepSearchConfig = DeepSearchConfig()
    #: On an internal error: True -> the request goes on unchanged; False -> 503.
    fail_open: bool = True
    #: Most bytes of response body collected for extraction.
    max_response_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)

    @field_validator("paths", "responses_paths")
    @classmethod
    def _check_paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            if not path.startswith("/"):
                raise ValueError(f"paths must start with '/': {path!r}")
        return value


def request_budget_ms(profile: Profile) -> int:
    """The longest the request-body phase may take for ``profile``: rewrite, then
    retrieval, then (``deep_search.mode: on``, only when escalation triggers) deep
    search, each with its own budget."""
    budget = profile.retrieval.timeout_ms
    if profile.rewrite.enabled:
        budget += profile.rewrite.timeout_ms
    if profile.deep_search.mode == "on":
        budget += profile.deep_search.timeout_ms
    return budget
