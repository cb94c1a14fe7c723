"""Prometheus metrics, owned by one :class:`Metrics` object built at start-up.

Each instance has its own registry, so tests and several in-process servers never
share counters. Labels never carry user ids or content.
"""

from __future__ import annotations

import logging

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

log = logging.getLogger(__name__)

_FAST_BUCKETS = (0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.012, 0.016, 0.025, 0.05, 0.1, 0.25)
_SLOW_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """Every metric the sidecar exports (names prefixed ``memory_sidecar_``)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        reg = self.registry
        p = "memory_sidecar_"
        self.streams = Counter(p + "streams", "ext_proc streams opened", registry=reg)
        self.requests = Counter(
            p + "requests",
            "Chat requests seen, by profile and outcome",
            ["profile", "outcome"],
            registry=reg,
        )
        self.passthrough = Counter(
            p + "passthrough",
            "Requests passed through unchanged, by reason",
            ["reason"],
            registry=reg,
        )
        self.errors = Counter(
            p + "processor_errors",
            "Internal errors turned into pass-through, by phase",
            ["phase"],
            registry=reg,
        )
        self.fail_closed = Counter(
            p + "fail_closed",
            "Requests refused because a fail-closed profile failed",
            registry=reg,
        )
        self.loop_lag = Histogram(
            p + "event_loop_lag_seconds",
            "How much later than due the event loop ran a timer (server.loop_lag_interval_s):"
            " the length of a stall when something held the loop",
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=reg,
        )
        self.gc_pause = Histogram(
            p + "gc_pause_seconds",
            "How long each cyclic garbage collection held the process, by generation"
            " (2: a full collection, which walks every object the process keeps)",
            ["generation"],
            buckets=(0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
            registry=reg,
        )
        self.gc_collected = Counter(
            p + "gc_collected_objects_total",
            "Unreachable objects the cyclic garbage collector freed (reference cycles),"
            " by generation",
            ["generation"],
            registry=reg,
        )
        self.gc_frozen = Gauge(
            p + "gc_frozen_objects",
            "Objects frozen out of garbage collection (server.gc_freeze_interval_s)",
            registry=reg,
        )
        self.phase_seconds = Histogram(
            p + "phase_seconds",
            "Time the sidecar spent per ext_proc phase",
            ["phase"],
            buckets=_FAST_BUCKETS,
            registry=reg,
        )
        self.retrieval_seconds = Histogram(
            p + "retrieval_seconds",
            "Retrieval time by strategy (embedding included)",
            ["strategy"],
            buckets=_FAST_BUCKETS,
            registry=reg,
        )
        self.embed_seconds = Histogram(
            p + "embed_seconds", "Embedding time per call", buckets=_FAST_BUCKETS, registry=reg
        )
        self.injected = Histogram(
            p + "injected_memories",
            "Memories injected per request",
            buckets=(0, 1, 2, 3, 5, 8, 13, 21),
            registry=reg,
        )
        self.queue_depth = Gauge(
            p + "write_queue_depth",
            "Turns accepted and not yet written (pending + in progress, in the journal)",
            registry=reg,
        )
        self.queue_oldest = Gauge(
            p + "write_queue_oldest_seconds",
            "Age of the oldest turn not yet written (0 when none)",
            registry=reg,
        )
        self.dead_letters = Gauge(
            p + "write_queue_dead_letters",
            "Turns given up on, kept in the journal for an operator",
            registry=reg,
        )
        self.journal_seconds = Histogram(
            p + "journal_seconds",
            "Write-journal (SQLite) operation latency, queueing on its thread included",
            ["operation"],
            buckets=_FAST_BUCKETS,
            registry=reg,
        )
        #: outcome: accepted, shed, rejected_shutdown, journal_error (not accepted);
        #: written, retried, dead_letter, requeued (after a crash), skipped_*.
        self.turns = Counter(
            p + "turns", "Completed turns by write outcome", ["outcome"], registry=reg
        )
        self.extractions = Counter(
            p + "extractions",
            "Fact extractions by extractor and outcome",
            ["extractor", "outcome"],
            registry=reg,
        )
        self.facts = Counter(p + "facts", "Extracted facts by decision", ["decision"], registry=reg)
        #: Turns that left no memory: no fact, no statement, no answered request.
        self.turns_without_memory = Counter(
            p + "turns_without_memory",
            "Written turns that left no memory (greetings, thanks, chit-chat)",
            registry=reg,
        )
        #: where: query (the latest user message's text as searched).
        self.repaired_text = Counter(
            p + "repaired_text",
            "Client text with lone surrogates, repaired (U+FFFD) before use",
            ["where"],
            registry=reg,
        )
        self.groups_dropped = Counter(
            p + "identity_groups_dropped",
            "Group ids past identity.max_groups left out of a request's identity",
            registry=reg,
        )
        #: stage: write (an extracted fact not stored), read (a stored memory not
        #: injected): text that tries to instruct the assistant (memory poisoning).
        self.instructions_blocked = Counter(
            p + "instructions_blocked",
            "Texts aimed at the assistant kept out of memory, by stage",
            ["stage"],
            registry=reg,
        )
        #: Memories that ranked only through a link (no evidence of their own, no
        #: name shared with one that has) and were not injected (sidecar/memory/read/support.py).
        self.unsupported_withheld = Counter(
            p + "unsupported_withheld",
            "Linked memories ranked into the top-k but not injected: no evidence of their own",
            registry=reg,
        )
        self.llm_calls = Counter(
            p + "llm_calls", "LLM calls by task and outcome", ["task", "outcome"], registry=reg
        )
        self.consolidated = Counter(
            p + "consolidated_memories",
            "Memories folded into another that states the same fact (consolidation)",
            registry=reg,
        )
        self.llm_tokens = Counter(
            p + "llm_tokens",
            "LLM tokens the server reported using, by task and kind (prompt, completion)",
            ["task", "kind"],
            registry=reg,
        )
        self.llm_seconds = Histogram(
            p + "llm_seconds",
            "LLM call latency by task",
            ["task"],
            buckets=_SLOW_BUCKETS,
            registry=reg,
        )
        self.store_errors = Counter(
            p + "store_errors", "Store operations that failed", ["operation"], registry=reg
        )
        self.store_engine = Gauge(
            p + "store_engine",
            "1 for the store's engine and version, and where BM25 runs (milvus: the "
            "collection has Milvus' BM25 function too; in_process: only the product's own)",
            ["engine", "version", "full_text"],
            registry=reg,
        )
        self.store_seconds = Histogram(
            p + "store_seconds",
            "Store operation latency",
            ["operation"],
            buckets=_FAST_BUCKETS,
            registry=reg,
        )
        self.store_gate_wait_seconds = Histogram(
            p + "store_gate_wait_seconds",
            "Time store calls waited for the milvus-lite gate (reads for an upsert, an"
            " upsert for reads), only when they waited",
            ["mode"],
            buckets=_FAST_BUCKETS,
            registry=reg,
        )
        self.pruned = Counter(
            p + "pruned",
            "Memories given up by retention (the per-user cap), by action",
            ["action"],
            registry=reg,
        )
        self.tombstones_purged = Counter(
            p + "tombstones_purged",
            "Tombstones of deleted memories purged once every cache has seen them",
            registry=reg,
        )
        self.prune_seconds = Histogram(
            p + "prune_seconds",
            "Time per retention check of one user (count, and pruning when over the cap)",
            buckets=_SLOW_BUCKETS,
            registry=reg,
        )
        #: outcome: flushed (memories whose counts were written), dropped (the
        #: pending set was full), gone (no longer active when flushed), failed.
        self.access_updates = Counter(
            p + "access_updates",
            "Retrieval access records by outcome",
            ["outcome"],
            registry=reg,
        )

        self.cache_lookups = Counter(
            p + "corpus_cache_lookups", "Corpus cache unit lookups", ["outcome"], registry=reg
        )
        self.relay_frames = Counter(
            p + "cache_relay_frames",
            "Cache relay frames between the host's processes, by kind (wake, apply,"
            " invalidate, invalidate_user) and outcome (sent, received, dropped: not"
            " connected, malformed)",
            ["kind", "outcome"],
            registry=reg,
        )
        self.relay_stale_rows = Counter(
            p + "cache_relay_stale_rows",
            "Rows of a peer's cache relay frame not applied: this cache had applied a"
            " newer write of them (frames of two peers arrived out of order)",
            registry=reg,
        )
        self.relay_connections = Gauge(
            p + "cache_relay_connections",
            "Processes (other workers, this worker's writer) connected to this"
            " worker's cache relay",
            registry=reg,
        )
        self.corpus_compactions = Counter(
            p + "corpus_compactions",
            "Snapshots whose shared vector buffer and BM25 base were folded after a"
            " deletion, off the request path, by outcome (swapped: the cache serves the"
            " folded one; stale: a newer snapshot came first, compacted in turn;"
            " error: left to the next build from all rows)",
            ["outcome"],
            registry=reg,
        )
        self.corpus_warmings = Counter(
            p + "corpus_warmings",
            "Snapshots made after a write or a load, and what the default profile's"
            " ranking reads of every memory prepared, before the next request, by"
            " outcome (done; superseded: the scope changed meanwhile, readied again;"
            " skipped: a unit missing or loading; error: left to the next request)",
            ["outcome"],
            registry=reg,
        )
        self.cold_fallbacks = Counter(
            p + "cold_corpus_fallbacks",
            "Requests answered by store-side search while the scope's corpus loaded",
            registry=reg,
        )
        self.cache_rows = Gauge(
            p + "corpus_cache_rows", "Memory rows held by the corpus cache", registry=reg
        )
        #: outcome: hit (the model skipped), miss (embedded, then kept).
        #: outcome: hit (ranking skipped), miss (ranked, then kept).
        self.ranking_cache = Counter(
            p + "ranking_cache_lookups",
            "Request-path rankings looked up in the scope's corpus snapshot"
            " (retrieval.ranking_cache_ttl_s), by outcome",
            ["outcome"],
            registry=reg,
        )
        self.query_vector_cache = Counter(
            p + "query_vector_cache_lookups",
            "Request-path query vectors looked up by user and exact text"
            " (embedding.query_cache_entries), by outcome",
            ["outcome"],
            registry=reg,
        )

        #: reason: fast_path, llm, heuristic, low_confidence, timeout, error, cache,
        #: disabled (see sidecar.memory.read.rewrite.rewriter).
        self.rewrites = Counter(
            p + "rewrites", "Query rewrite decisions by reason", ["reason"], registry=reg
        )
        self.rewrite_seconds = Histogram(
            p + "rewrite_seconds",
            "Time spent deciding and rewriting a query, by reason",
            ["reason"],
            buckets=(0.00005, 0.0002, 0.001, *_FAST_BUCKETS[3:], 0.5, 1.0),
            registry=reg,
        )
        #: decision: confident (not escalated), escalate, rate_limited, cold (no
        #: corpus cached yet).
        self.deep_decisions = Counter(
            p + "deep_search_decisions",
            "Deep search escalation decisions, by mode and decision",
            ["mode", "decision"],
            registry=reg,
        )
        #: method: llm, heuristic (no LLM: non-LLM re-rank); outcome: ok, timeout,
        #: error (the primary results stand), no_candidates, budget (nothing fit).
        self.deep_runs = Counter(
            p + "deep_search_runs",
            "Deep searches run, by mode, ranking method and outcome",
            ["mode", "method", "outcome"],
            registry=reg,
        )
        self.deep_new = Counter(
            p + "deep_search_new_memories",
            "Memories deep search put in the top-k that primary retrieval had not",
            ["mode"],
            registry=reg,
        )
        self.deep_dropped = Counter(
            p + "deep_search_dropped_candidates",
            "Candidates left out of a rank call by the token budget",
            registry=reg,
        )
        self.deep_seconds = Histogram(
            p + "deep_search_seconds",
            "Deep search time (expansion and ranking), by method",
            ["method"],
            buckets=_SLOW_BUCKETS,
            registry=reg,
        )

        # -- operations (sidecar.admin) ----------------------------------------------
        #: reason: retrieval_timeout, retrieval_error, internal_error — the request
        #: went upstream without memory because the profile fails open.
        self.fail_open = Counter(
            p + "fail_open",
            "Requests that went on without memory after a failure (fail-open), by reason",
            ["reason"],
            registry=reg,
        )
        self.admin_requests = Counter(
            p + "admin_requests",
            "Admin API requests by operation and HTTP status",
            ["operation", "status"],
            registry=reg,
        )
        self.admin_rows = Counter(
            p + "admin_rows",
            "Rows changed by admin operations (add, update, delete, forget, import, consolidate)",
            ["operation"],
            registry=reg,
        )

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    def llm_token_total(self) -> float:
        """Every LLM token the servers reported, all tasks and kinds together."""
        total = 0.0
        for metric in self.llm_tokens.collect():
            total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
        return total

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 when absent) — for tests and the CLI."""
        found = self.registry.get_sample_value(name, labels or {})
        return 0.0 if found is None else found


def serve_registry(registry: CollectorRegistry, port: int, host: str, what: str) -> bool:
    """``/metrics`` of ``registry`` on ``host:port`` (a thread), for a process without
    the admin listener (the shared encoder, a writer process). A port in use is
    logged, not fatal: the process does its work without it. Whether it serves."""
    try:
        start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        log.warning("%s metrics not served on port %d: %s", what, port, exc)
        return False
    log.info("%s metrics on port %d", what, port)
    return True
