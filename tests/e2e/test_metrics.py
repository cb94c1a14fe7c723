"""After chat requests through the real Envoy, the sidecar's /metrics has the key
series with non-zero values: request-path phases, injected memories, retrieval by
strategy, the write queue, extraction outcomes, dedup decisions, store latency —
and the failure series (fail-open events, store errors) are exported too."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import openai
import pytest

from e2e.stack import Stack, http_get, running_stack

pytestmark = pytest.mark.e2e

SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$"
)


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus exposition text by sample name: (labels, value) pairs."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        found.setdefault(match["name"], []).append((labels, float(match["value"])))
    return found


def total(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(
        value
        for have, value in found.get(name, [])
        if all(have.get(key) == wanted for key, wanted in labels.items())
    )


def ask(stack: Stack, user: str, text: str) -> None:
    client = openai.OpenAI(
        base_url=stack.base_url,
        api_key="unused",
        default_headers={"x-user-id": user},
        max_retries=0,
        timeout=30,
    )
    client.chat.completions.create(model="mock-llm", messages=[{"role": "user", "content": text}])


def test_metrics_after_requests_through_envoy(tmp_path: Path) -> None:
    user = f"metrics-{uuid.uuid4().hex[:6]}"
    # Snapshots readied after writes whatever the user's size (this one holds a few).
    readied = {"cache": {"warm_min_rows": 0, "warm_after_ms": 50}}
    with running_stack(tmp_path, config_overrides=readied) as stack:
        ask(stack, user, "I live in Berlin and I have two cats.")
        deadline = time.monotonic() + 30
        while stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "written"}) < 1:
            assert time.monotonic() < deadline, "the turn was not written"
            time.sleep(0.1)
        # The written turn's snapshot is readied before the next request reads it.
        while stack.sidecar_metric("memory_sidecar_corpus_warmings_total", {"outcome": "done"}) < 1:
            assert time.monotonic() < deadline, "the user's snapshot was not readied"
            time.sleep(0.1)
        ask(stack, user, "Where do I live?")  # cold corpus: store-side search
        ask(stack, user, "How many cats do I have?")  # the corpus is cached by now
        status, body = http_get(f"{stack.sidecar_admin_url}/metrics")
    assert status == 200
    text = body.decode()
    found = samples(text)

    for phase in ("request_headers", "request_body", "response_headers", "response_body"):
        assert total(found, "memory_sidecar_phase_seconds_count", phase=phase) >= 3, phase
    assert total(found, "memory_sidecar_streams_total") >= 3
    assert total(found, "memory_sidecar_requests_total", outcome="retrieved") >= 3
    assert total(found, "memory_sidecar_injected_memories_count") >= 3
    assert total(found, "memory_sidecar_injected_memories_sum") >= 1  # memories were injected
    assert total(found, "memory_sidecar_retrieval_seconds_count") >= 3
    assert total(found, "memory_sidecar_retrieval_seconds_count", strategy="default") >= 1
    assert total(found, "memory_sidecar_embed_seconds_count") >= 3
    assert total(found, "memory_sidecar_turns_total", outcome="accepted") >= 3
    assert total(found, "memory_sidecar_turns_total", outcome="written") >= 1
    assert "memory_sidecar_write_queue_depth" in found
    assert total(found, "memory_sidecar_journal_seconds_count", operation="append") >= 3
    assert total(found, "memory_sidecar_extractions_total", extractor="llm", outcome="ok") >= 1
    assert total(found, "memory_sidecar_facts_total") >= 1  # dedup decisions
    assert any(
        labels["decision"].startswith("add") for labels, _ in found["memory_sidecar_facts_total"]
    )
    assert total(found, "memory_sidecar_llm_calls_total", task="extract") >= 1
    assert total(found, "memory_sidecar_store_seconds_count", operation="upsert") >= 1
    assert total(found, "memory_sidecar_corpus_cache_lookups_total") >= 1
    assert total(found, "memory_sidecar_event_loop_lag_seconds_count") >= 1  # sampled
    # The garbage collector is observed, and `serve` froze its start-up objects.
    assert total(found, "memory_sidecar_gc_pause_seconds_count", generation="0") >= 1
    assert total(found, "memory_sidecar_gc_frozen_objects") > 0
    # Failure series are exported (zero samples until something fails).
    for family in (
        "memory_sidecar_fail_open",
        "memory_sidecar_fail_closed",
        "memory_sidecar_store_errors",
        "memory_sidecar_processor_errors",
        "memory_sidecar_passthrough",
        "memory_sidecar_write_queue_dead_letters",
    ):
        assert f"# HELP {family}" in text, family
    # No user id or memory text in any label.
    assert user not in text
    assert "Berlin" not in text
