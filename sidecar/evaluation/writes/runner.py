"""``sidecar eval-writes``: every turn of a write dataset through the production write
path, then scores from what is stored and what the request path injects.

The turns go through the same components a sidecar runs: the durable write queue and
its journal, extraction (the configured LLM, or the heuristics), the dedup judge, the
write gateway and the store. The run waits for the queue to drain, scores the store
(:mod:`sidecar.evaluation.writes.measure`), runs the consolidation job for every
user and scores again. Contradiction and multi-user questions are answered by
:class:`~sidecar.memory.read.pipeline.RequestPipeline`, the request path itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sidecar.config import SidecarConfig
from sidecar.errors import InvalidInput
from sidecar.evaluation.ingest import (
    describe_llm,
    eval_embedder,
    with_llm_url,
    write_path_environment,
)
from sidecar.evaluation.writes.dataset import WriteDataset
from sidecar.evaluation.writes.measure import Snapshot, WriteScores, score
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.sanitize import clean_turn
from sidecar.memory.read.pipeline import MemoryRequest
from sidecar.memory.records.records import NodeType, Scope
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.runtime.components import Components

#: The time of the first turn (epoch ms); later turns follow a minute apart.
FIRST_TURN_MS = 1_790_000_000_000
TURN_GAP_MS = 60_000
#: What the assistant answered (extraction reads the user's words).
ASSISTANT_TEXT = "Got it, thanks for telling me."


@dataclass(frozen=True, slots=True)
class WriteEvalOptions:
    llm_url: str | None = None
    #: Seconds to wait for the queue to write every turn.
    drain_timeout_s: float = 600.0
    consolidate: bool = True


@dataclass(slots=True)
class WriteEvalResult:
    dataset: str
    turns: int
    llm: str
    #: Before consolidation, then after it (``None`` when it did not run).
    before: WriteScores
    after: WriteScores | None
    dead_letters: int
    seconds: float
    #: LLM tokens (prompt + completion) per turn; None without an LLM.
    llm_tokens_per_turn: float | None
    #: Turns that left no memory (greetings, thanks, chit-chat, a moment's mood).
    turns_no_memory: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> WriteScores:
        return self.after if self.after is not None else self.before


async def run_write_eval(
    dataset: WriteDataset,
    config: SidecarConfig,
    options: WriteEvalOptions,
    *,
    embedder: Embedder | None = None,
) -> WriteEvalResult:
    """Write every turn of ``dataset`` through a fresh store and score the outcome."""
    if not dataset.turns():
        raise InvalidInput("the write-eval dataset has no turns")
    started = time.perf_counter()
    config = with_llm_url(config, options.llm_url)
    async with (
        eval_embedder(config, embedder) as embedder,
        write_path_environment(config, embedder, "eval-writes-") as (config, env),
    ):
        return await _run(dataset, config, options, env.components, started)


async def _run(
    dataset: WriteDataset,
    config: SidecarConfig,
    options: WriteEvalOptions,
    components: Components,
    started: float,
) -> WriteEvalResult:
    llm = components.llm
    queue = components.write.queue
    await queue.start()
    try:
        turns = dataset.turns()
        max_chars = config.defaults.extraction.max_turn_chars
        for index, (user, text) in enumerate(turns):
            turn = Turn(
                user_id=user,
                user_text=text,
                assistant_text=ASSISTANT_TEXT,
                created_at=FIRST_TURN_MS + index * TURN_GAP_MS,
                request_id=f"eval-{index}",
            )
            await queue.submit(clean_turn(turn, max_chars))
        if not await queue.wait_idle(options.drain_timeout_s):
            raise InvalidInput(f"the write queue did not drain in {options.drain_timeout_s:.0f} s")
        counts = await queue.journal.counts()
        before = await _score(dataset, config, components)
        after: WriteScores | None = None
        if options.consolidate:
            for user in sorted(dataset.users()):
                await components.write.consolidator.consolidate(user)
            after = await _score(dataset, config, components)
    finally:
        await queue.close()
    tokens = components.metrics.llm_token_total() if llm.configured else None
    return WriteEvalResult(
        dataset=dataset.name,
        turns=len(turns),
        llm=describe_llm(config, components),
        before=before,
        after=after,
        dead_letters=counts.dead,
        seconds=time.perf_counter() - started,
        llm_tokens_per_turn=None if tokens is None else tokens / len(turns),
        turns_no_memory=int(components.metrics.value("memory_sidecar_turns_without_memory_total")),
    )


async def _score(
    dataset: WriteDataset, config: SidecarConfig, components: Components
) -> WriteScores:
    """What the store holds for every user, and what the request path injects for the
    dataset's questions, scored."""
    users = sorted(dataset.users())
    rows = {}
    for user in users:
        rows[user] = await components.store.scan(
            build_filter(owner=user, node_type=NodeType.MEMORY, status=None)
        )
        await components.read.memory.cache.corpus(Scope(user))  # no cold fallback below
    profile = config.defaults
    injected: dict[tuple[str, str], list[str]] = {}
    questions = [(c.user_id, c.query) for c in dataset.contradictions]
    questions += [(u.user_id, u.turn) for u in dataset.multi_user]
    for user, question in questions:
        asked = MemoryRequest(text=question, history=(), scope=Scope(user), profile=profile)
        found = await components.read.pipeline.run(asked)
        injected[(user, question)] = [h.record.id for h in found.block.hits]
    snapshot = Snapshot(rows=rows, injected=injected)
    return await score(dataset, snapshot, components.embedder)
