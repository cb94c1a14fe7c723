"""``sidecar eval-conversations``: real conversations through the write path, their
questions through the request path, scored by what the model would see.

Per user, every turn (a user message and the reply that followed it) goes through
the components a sidecar runs — the durable write queue and its journal, extraction
(the configured LLM, or the heuristics), the dedup judge, supersession, the write
gateway, the store — at the conversation's own time; then the consolidation job runs
for every user. Every question is then asked through
:class:`~sidecar.memory.read.pipeline.RequestPipeline` (rewrite, retrieval, the block
within the profile's budget) at its own date. A memory answers a question when it was
made from one of the question's evidence turns: its provenance says so, nothing else.

In the same run the same questions are asked over the raw turns loaded as memories
(the baseline: what keeping nothing but the turns would find).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from sidecar.config import SidecarConfig
from sidecar.errors import InvalidInput
from sidecar.evaluation.conversations.replay import Conversations, conversations
from sidecar.evaluation.conversations.scoring import QuestionOutcome, answer_in, eligible_answer
from sidecar.evaluation.dataset import Dataset, EvalQuery
from sidecar.evaluation.ingest import (
    describe_llm,
    eval_embedder,
    eval_environment,
    ingest,
    with_llm_url,
    write_path_environment,
)
from sidecar.evaluation.off_topic import users_after
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.sanitize import clean_turn
from sidecar.memory.read.block import CHARS_PER_TOKEN
from sidecar.memory.read.pipeline import MemoryRequest, RequestOutcome
from sidecar.memory.records.records import MemoryRecord, NodeType, Scope, Status
from sidecar.memory.store.filters import build_filter
from sidecar.runtime.components import Components

log = logging.getLogger(__name__)

#: Turns handed to the write queue before waiting for it to drain (well within the
#: journal's bound, so no turn is shed).
SUBMIT_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class ConversationEvalOptions:
    llm_url: str | None = None
    #: Ask only the first N questions (and replay only their users).
    limit_questions: int | None = None
    #: Seconds to wait for the queue to write every turn.
    drain_timeout_s: float = 3600.0
    consolidate: bool = True
    #: Also ask over the raw turns (the figure to beat).
    baseline: bool = True


@dataclass(slots=True)
class ConversationEvalResult:
    dataset: str
    llm: str
    questions: list[QuestionOutcome]
    user_turns: int
    #: User turns that left no memory at all (any status).
    turns_no_memory: int
    active_memories: int
    write_seconds: float
    seconds: float
    dead_letters: int
    orphan_replies: int
    #: LLM tokens (prompt + completion) per turn; None without an LLM.
    llm_tokens_per_turn: float | None
    baseline: bool = True
    extra: dict[str, object] = field(default_factory=dict)


def selected(dataset: Dataset, limit: int | None) -> tuple[list[EvalQuery], set[str]]:
    """The questions asked and the users replayed for them."""
    queries = list(dataset.queries[:limit] if limit is not None else dataset.queries)
    if not queries:
        raise InvalidInput("the dataset has no questions to ask")
    return queries, {q.user_id for q in queries}


async def run_conversation_eval(
    dataset: Dataset,
    config: SidecarConfig,
    options: ConversationEvalOptions,
    *,
    embedder: Embedder | None = None,
) -> ConversationEvalResult:
    """Replay ``dataset``'s conversations, ask its questions, score both (and the raw
    turns' baseline)."""
    started = time.perf_counter()
    queries, users = selected(dataset, options.limit_questions)
    talks = conversations(dataset, users)
    if not talks.turns:
        raise InvalidInput("the dataset's conversations have no user turns")
    config = with_llm_url(config, options.llm_url)
    async with eval_embedder(config, embedder) as embedder:
        async with write_path_environment(config, embedder, "eval-conversations-") as (
            written,
            env,
        ):
            result = await _replay_and_ask(written, options, env.components, talks, queries)
        if options.baseline:
            subset = Dataset(
                name=dataset.name,
                description=dataset.description,
                memories=tuple(m for m in dataset.memories if m.user_id in users),
                queries=tuple(queries),
            )
            async with eval_environment(config, embedder) as env:
                await ingest(subset, env)
                for outcome in result.questions:
                    asked = await _ask(config, env.components, outcome.query)
                    outcome.baseline_rank = _rank(asked, _one_of(outcome.query.relevant_ids))
        result.baseline = options.baseline
    result.dataset = dataset.name
    result.seconds = time.perf_counter() - started
    return result


async def _replay_and_ask(
    config: SidecarConfig,
    options: ConversationEvalOptions,
    components: Components,
    talks: Conversations,
    queries: Sequence[EvalQuery],
) -> ConversationEvalResult:
    llm = components.llm
    queue = components.write.queue
    max_chars = config.defaults.extraction.max_turn_chars
    await queue.start()
    try:
        written = time.perf_counter()
        for start in range(0, len(talks.turns), SUBMIT_CHUNK):
            # In chunks the journal holds: a turn it sheds would be a memory lost.
            for replayed in talks.turns[start : start + SUBMIT_CHUNK]:
                if not await queue.submit(clean_turn(replayed.turn, max_chars)):
                    raise InvalidInput("the write queue refused a turn (see the log)")
            if not await queue.wait_idle(options.drain_timeout_s):
                raise InvalidInput(
                    f"the write queue did not drain in {options.drain_timeout_s:.0f} s"
                )
        write_seconds = time.perf_counter() - written
        counts = await queue.journal.counts()
        users = sorted({t.turn.user_id for t in talks.turns})
        if options.consolidate:
            for user in users:
                await components.write.consolidator.consolidate(user)
    finally:
        await queue.close()
    rows: dict[str, list[MemoryRecord]] = {}
    for user in users:
        rows[user] = await components.store.scan(
            build_filter(owner=user, node_type=NodeType.MEMORY, status=None)
        )
    said = {o.turn for user_rows in rows.values() for r in user_rows for o in r.origins}
    active = {
        user: [r for r in user_rows if r.status == Status.ACTIVE]
        for user, user_rows in rows.items()
    }
    outcomes = []
    for query in queries:
        evidence = set(query.relevant_ids)
        stranger = next(users_after(users, query.user_id), None)
        elsewhere = None
        if stranger is not None:
            moved = replace(query, user_id=stranger, group_ids=())
            elsewhere = (await _ask(config, components, moved)).block

        def made_from_evidence(record: MemoryRecord, evidence: set[str] = evidence) -> bool:
            return any(evidence.intersection(o.refs) for o in record.origins)

        asked = await _ask(config, components, query)
        block = asked.block
        eligible = eligible_answer(query.answer)
        outcomes.append(
            QuestionOutcome(
                query=query,
                rank=_rank(asked, made_from_evidence),
                injected=any(made_from_evidence(h.record) for h in block.hits),
                lost=not any(made_from_evidence(r) for r in active.get(query.user_id, [])),
                answer_eligible=eligible,
                answer_in_block=eligible and answer_in(query.answer, block.text),
                block_tokens=_tokens(block.text),
                stranger_lines=None if elsewhere is None else len(elsewhere.hits),
                stranger_tokens=None if elsewhere is None else _tokens(elsewhere.text),
            )
        )
    tokens = components.metrics.llm_token_total() if llm.configured else None
    turns = talks.user_turns
    return ConversationEvalResult(
        dataset="",
        llm=describe_llm(config, components),
        questions=outcomes,
        user_turns=turns,
        turns_no_memory=sum(1 for t in talks.turns if t.turn.turn_id not in said),
        active_memories=sum(len(v) for v in active.values()),
        write_seconds=write_seconds,
        seconds=0.0,
        dead_letters=counts.dead,
        orphan_replies=talks.orphan_replies,
        llm_tokens_per_turn=None if tokens is None else tokens / turns,
    )


async def _ask(config: SidecarConfig, components: Components, query: EvalQuery) -> RequestOutcome:
    """``query`` through the request path at its own date (no conversation before it)."""
    scope = Scope(query.user_id, query.group_ids)
    await components.read.memory.cache.corpus(scope)  # loaded: no cold fallback
    request = MemoryRequest(
        text=query.query,
        history=(),
        scope=scope,
        profile=config.defaults,
        at_ms=query.asked_at,
    )
    return await components.read.pipeline.run(request)


def _tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _one_of(ids: Sequence[str]) -> Callable[[MemoryRecord], bool]:
    wanted = frozenset(ids)
    return lambda record: record.id in wanted


def _rank(asked: RequestOutcome, relevant: Callable[[MemoryRecord], bool]) -> int | None:
    """The 1-based rank of the first ranked memory ``relevant`` accepts (None: none)."""
    for position, hit in enumerate(asked.hits, start=1):
        if relevant(hit.record):
            return position
    return None
