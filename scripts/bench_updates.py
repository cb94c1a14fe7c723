#!/usr/bin/env python
"""What a user's next query costs after their memories change (issue S, item 3).

One user at each size (default 250, 10k and 50k memories), in sessions, with the
lengths of real conversation turns: the turns of ``longmemeval-dev.json`` (user
and assistant, in session order; ``--dataset``, default ``../shared/data/``), cycled
to the size; where the file is absent, a documented synthetic mix (a user line of
40-400 characters, an assistant answer of 400-3,000; 12 turns a session). Vectors:
the first ``--embed`` distinct texts are embedded with the configured model, the
rest reuse one of those vectors with a little noise (the cost of a query does not
depend on what the vectors say, and embedding 50k long turns would take longer than
everything measured here).

Measured per size, for ``default`` (the request path's strategy) through the same
code the request path runs (:class:`~sidecar.memory.corpus.corpus.Corpus` and the
retrievers), the store left out (its reads are the same for every strategy):

* ``first_load_ms``: a new snapshot of memories the process has never read, and
  its first query: every memory tokenised and read (a process start);
* ``cold_ms``: a new snapshot, no index of it built, and its first query, its
  memories read before (each memory is read once, when written or first loaded:
  :mod:`sidecar.memory.corpus.features`) — a user's first request after the
  corpus was evicted or reloaded;
* ``warm_ms``: a query on a snapshot already queried (every index built);
* ``after_update_ms``: a snapshot made from the warm one after an update — one
  fact superseded by a new one, one memory deleted, or a consolidation pass (five
  memories merged into five others) — from the rows that changed, as the corpus
  cache makes it (:meth:`Corpus.updated`), and its first query: what
  the next request after a write costs (reported together and per kind). The
  written rows are read into the memo first, as the cache reads them when it
  applies the write (:mod:`sidecar.memory.corpus.read_ahead`), outside the time;
  a deletion's fold of the layers shared with the snapshot before runs after the
  request, in the cache's compactor (:mod:`sidecar.memory.corpus.compaction`):
  ``delete_compaction_ms``;
* ``hybrid_warm_ms``: ``hybrid`` warm, the floor;
* ``cold_readied_ms`` and ``after_update_readied_ms``: the same snapshots readied
  before their first query, as the corpus cache readies a scope's snapshot after
  a load or a write (:mod:`sidecar.memory.corpus.warming`; the readying is not
  timed): what the request costs when it comes ``cache.warm_after_ms`` or more
  after the change.

Before the sizes, ``memory_kb``: the Python memory the corpus cache spends per
memory (``--memory-sample`` memories, tracemalloc): the records loaded from store
rows, what the memo reads ahead of them, and a snapshot of them once asked —
what sizes ``cache.max_rows``.

What a size has loaded is frozen out of the garbage collector before it is
measured, as a sidecar process freezes what survives a full collection
(:mod:`sidecar.runtime.gc_control`): else a full collection walking the memo's
objects lands in whichever snapshot build triggers it.

    .venv/bin/python -m scripts.bench_updates --json out/bench_updates.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from scripts.benchlib import REPO, percentile, write_report
from sidecar.config import RetrievalConfig, SidecarConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.features import FeatureMemo
from sidecar.memory.corpus.read_ahead import ReadAhead
from sidecar.memory.embedding.factory import build_embedder
from sidecar.memory.read.retrieval import registry
from sidecar.memory.read.retrieval.base import Query, Retriever, SearchSpace
from sidecar.memory.read.retrieval.registry import build_retrievers, memory_readers
from sidecar.memory.records.records import MemoryRecord, Scope, Status, as_vector
from sidecar.memory.store.protocol import Store
from sidecar.memory.store.schema import record_to_row, row_to_record

USER = "bench-updates"
DATASET = REPO.parent / "shared" / "data" / "longmemeval-dev.json"
#: Turns of one synthetic session (where the dataset is absent).
SYNTHETIC_SESSION = 12
QUESTIONS = (
    "What did I say about my job last month?",
    "Where do I live now?",
    "Which restaurant did you recommend for the anniversary?",
    "How many hours did I spend on the project?",
    "What was the name of the book I mentioned?",
    "When did I start learning the guitar?",
    "What did we decide about the trip to Japan?",
    "Which car did I buy?",
)
Matrix = npt.NDArray[np.float32]


def turns(dataset: Path | None) -> tuple[list[tuple[str, str]], str]:
    """(session, text) of every turn in order, and where they came from."""
    if dataset is not None and dataset.exists():
        from sidecar.evaluation.dataset import load_dataset

        data = load_dataset(dataset)
        return [(m.session_id or m.user_id, m.content) for m in data.memories], str(dataset)
    rng = random.Random(5)
    words = "the a we my it plan trip book work home car dinner music run code call".split()
    out = []
    for i in range(2_000):
        length = rng.randint(40, 400) if i % 2 == 0 else rng.randint(400, 3_000)
        text = " ".join(rng.choice(words) for _ in range(length // 5))
        out.append(
            (f"s{i // SYNTHETIC_SESSION}", ("user: " if i % 2 == 0 else "assistant: ") + text)
        )
    return out, "synthetic (no dataset)"


def rows(
    size: int, source: list[tuple[str, str]], vectors: Matrix, rng: np.random.Generator
) -> list[MemoryRecord]:
    """``size`` memories of one user, cycling ``source`` (a cycle's sessions are new
    sessions), each with a unit vector near its text's."""
    out = []
    start = 1_700_000_000_000
    for i in range(size):
        cycle, j = divmod(i, len(source))
        session, text = source[j]
        base = vectors[j % len(vectors)]
        vector = base + rng.normal(0.0, 0.02, base.shape).astype(np.float32)
        vector /= np.linalg.norm(vector)
        out.append(
            MemoryRecord(
                id=f"m{i:06d}",
                user_id=USER,
                content=text if cycle == 0 else f"{text} ({cycle})",
                embedding=as_vector(vector),
                session_id=f"{session}/{cycle}",
                created_at=start + i * 60_000,
                updated_at=start + i * 60_000,
            )
        )
    return out


def superseded(memories: list[MemoryRecord], rng: random.Random) -> list[MemoryRecord]:
    """One fact replaced by a new one (the old row leaves the snapshot)."""
    i = rng.randrange(len(memories))
    old = memories[i]
    new = old.with_changes(
        id=f"{old.id}-new",
        content=f"{old.content} (updated)",
        created_at=memories[-1].created_at + 60_000,
        updated_at=memories[-1].created_at + 60_000,
    )
    return [*memories[:i], *memories[i + 1 :], new]


def deleted(memories: list[MemoryRecord], rng: random.Random) -> list[MemoryRecord]:
    i = rng.randrange(len(memories))
    return [*memories[:i], *memories[i + 1 :]]


def consolidated(memories: list[MemoryRecord], rng: random.Random) -> list[MemoryRecord]:
    """Five memories merged into five others (their text and excerpt grow)."""
    picked = rng.sample(range(len(memories)), min(10, len(memories)))
    gone, kept = set(picked[:5]), picked[5:]
    out = list(memories)
    for keep, drop in zip(kept, picked[:5], strict=False):
        out[keep] = out[keep].with_changes(
            excerpt=f"{out[keep].excerpt}\n{out[drop].content}"[:2_000],
            updated_at=out[keep].updated_at + 1,
        )
    return [r for i, r in enumerate(out) if i not in gone and r.status == Status.ACTIVE]


UPDATES: dict[str, Callable[[list[MemoryRecord], random.Random], list[MemoryRecord]]] = {
    "supersede": superseded,
    "delete": deleted,
    "consolidate": consolidated,
}


class Bench:
    def __init__(self, retrievers: dict[str, Retriever], queries: list[Query], dim: int) -> None:
        self.retrievers = retrievers
        self.queries = queries
        self.dim = dim
        self.config = RetrievalConfig()
        # A checkout before snapshots were readied has no preparer (before/after runs).
        preparer = getattr(registry, "preparer", None)
        self.prepare = preparer(retrievers, self.config) if preparer is not None else None

    def readied(self, corpus: Corpus) -> Corpus:
        """``corpus`` readied for its first query, as the corpus cache readies it."""
        build_table = getattr(corpus.bm25, "build_table", None)  # None: an older checkout
        if build_table is not None:
            build_table()
        if self.prepare is not None:
            for _ in self.prepare(corpus, USER):
                pass
        return corpus

    async def ask(self, corpus: Corpus, query: Query, strategy: str = "default") -> None:
        config = self.config.model_copy(update={"strategy": strategy})
        # In-corpus strategies never read the store.
        space = SearchSpace(Scope(USER), corpus, cast(Store, None), config)
        await self.retrievers[strategy].retrieve(query, space, config.top_k)

    async def built_and_asked(
        self,
        memories: list[MemoryRecord],
        query: Query,
        previous: Corpus | None,
        memo: FeatureMemo,
    ) -> tuple[float, Corpus]:
        started = time.perf_counter()
        corpus = Corpus.build(memories, self.dim, previous, memo=memo)
        await self.ask(corpus, query)
        return (time.perf_counter() - started) * 1000, corpus

    async def measure(self, memories: list[MemoryRecord], reps: int, warm_queries: int) -> Any:
        rng = random.Random(len(memories))
        settled()
        first = []
        for i in range(max(1, reps // 3)):
            ms, corpus = await self.built_and_asked(
                memories, self.queries[i % len(self.queries)], None, FeatureMemo(len(memories))
            )
            first.append(ms)
        memo = FeatureMemo(2 * len(memories))
        # Every memory read once, as the corpus cache reads rows as they enter it: a
        # load's, and a write's when the write is applied (before the next request).
        ahead = ReadAhead(memo, memory_readers())
        ahead.read(memories)
        settled()
        cold = []
        for i in range(reps):
            ms, corpus = await self.built_and_asked(
                memories, self.queries[i % len(self.queries)], None, memo
            )
            cold.append(ms)
        cold_readied = []
        for i in range(reps if self.prepare is not None else 0):
            fresh = self.readied(Corpus.build(memories, self.dim, None, memo=memo))
            started = time.perf_counter()
            await self.ask(fresh, self.queries[i % len(self.queries)])
            cold_readied.append((time.perf_counter() - started) * 1000)
        warm: list[float] = []
        hybrid: list[float] = []
        await self.ask(corpus, self.queries[0], "hybrid")
        settled()
        for i in range(warm_queries):
            query = self.queries[i % len(self.queries)]
            for strategy, into in (("default", warm), ("hybrid", hybrid)):
                started = time.perf_counter()
                await self.ask(corpus, query, strategy)
                into.append((time.perf_counter() - started) * 1000)
        after: dict[str, list[float]] = {kind: [] for kind in UPDATES}
        compactions: list[float] = []
        readied: list[float] = []
        for i in range(reps):
            for kind, update in UPDATES.items():
                changed = update(memories, rng)
                changes = changes_between(memories, changed, LEFT_AS[kind])
                ahead.read(
                    [r for r in changes.values() if r is not None and r.status == Status.ACTIVE]
                )
                query = self.queries[(i + 1) % len(self.queries)]
                started = time.perf_counter()
                if COMPACTS:  # as the corpus cache: a deletion's fold after the request
                    updated = Corpus.updated(corpus, changes, self.dim, memo=memo, compact=False)
                elif BY_CHANGES:
                    updated = Corpus.updated(corpus, changes, self.dim, memo=memo)
                else:  # a checkout before Corpus.updated (before/after figures)
                    updated = Corpus.build(changed, self.dim, corpus, memo=memo)
                await self.ask(updated, query)
                after[kind].append((time.perf_counter() - started) * 1000)
                if COMPACTS and updated.holds_deleted:
                    started = time.perf_counter()
                    updated.compacted(self.dim)
                    compactions.append((time.perf_counter() - started) * 1000)
                if self.prepare is not None:
                    again = Corpus.updated(corpus, changes, self.dim, memo=memo, compact=False)
                    self.readied(again)
                    started = time.perf_counter()
                    await self.ask(again, query)
                    readied.append((time.perf_counter() - started) * 1000)
        every = [ms for values in after.values() for ms in values]
        return {
            "memories": len(memories),
            "first_load_ms": summary(first),
            "cold_ms": summary(cold),
            "warm_ms": summary(warm),
            "after_update_ms": summary(every),
            "after_update_by_kind_ms": {kind: summary(v) for kind, v in after.items()},
            "hybrid_warm_ms": summary(hybrid),
            # A deletion's fold of the shared layers, in a worker thread after the
            # request (the corpus cache's compactor), not in the figures above.
            "delete_compaction_ms": summary(compactions) if compactions else None,
            # Readied before their first query, off the request path (not timed).
            "cold_readied_ms": summary(cold_readied) if cold_readied else None,
            "after_update_readied_ms": summary(readied) if readied else None,
            "mean_chars": round(statistics.mean(len(r.content) for r in memories)),
        }


#: Whether this checkout makes a snapshot from the changed rows (the script also
#: runs against older checkouts, which build it from all rows, for before/after).
BY_CHANGES = hasattr(Corpus, "updated")
#: Whether it folds a deletion out of the shared layers after the request.
COMPACTS = hasattr(Corpus, "compacted")


#: The status a row leaves the corpus with, per update (as the write path stores
#: it: a delete writes a tombstone, which the next snapshot keeps nothing of).
LEFT_AS = {"supersede": Status.SUPERSEDED, "delete": Status.DELETED, "consolidate": Status.MERGED}


def changes_between(
    old: list[MemoryRecord], new: list[MemoryRecord], left: Status = Status.SUPERSEDED
) -> dict[str, MemoryRecord | None]:
    """What the corpus cache's log holds after an update from ``old`` to ``new``:
    each changed id's row, a row gone with status ``left``."""
    before = {r.id: r for r in old}
    after = {r.id: r for r in new}
    out: dict[str, MemoryRecord | None] = {
        k: r.with_changes(status=left) for k, r in before.items() if k not in after
    }
    out.update({k: r for k, r in after.items() if before.get(k) is not r})
    return out


async def memory_per_memory(bench: Bench, memories: list[MemoryRecord]) -> dict[str, float]:
    """KB of Python memory per memory the corpus cache holds (tracemalloc): the
    records, loaded from store rows as the Milvus client returns them (a fresh list
    of floats per vector); what the memo reads ahead of them; and a snapshot of them,
    asked every question. Sizes ``cache.max_rows``."""
    stored = [record_to_row(m) for m in memories]
    vectors = [np.asarray(row.pop("embedding"), dtype=np.float32) for row in stored]
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        records = [
            row_to_record(dict(row, embedding=vector.tolist()))
            for row, vector in zip(stored, vectors, strict=True)
        ]
        loaded = tracemalloc.get_traced_memory()[0]
        memo = FeatureMemo(2 * len(records))
        ReadAhead(memo, memory_readers()).read(records)
        read = tracemalloc.get_traced_memory()[0]
        corpus = Corpus.build(records, bench.dim, memo=memo)
        for query in bench.queries:
            await bench.ask(corpus, query)
        built = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    per = 1024 * len(records)
    return {
        "memories": len(records),
        "records": round((loaded - start) / per, 2),
        "memo": round((read - loaded) / per, 2),
        "snapshot": round((built - read) / per, 2),
        "total": round((built - start) / per, 2),
    }


def settled() -> None:
    """Freeze what is alive, as a sidecar process does after a full collection."""
    gc.collect()
    gc.freeze()


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    config = SidecarConfig()
    source, origin = turns(args.dataset)
    embedder = build_embedder(config.embedding)
    try:
        distinct = list(dict.fromkeys(text for _, text in source))[: args.embed]
        print(f"embedding {len(distinct)} texts ...", flush=True)
        vectors = np.asarray(await embedder.embed(distinct), dtype=np.float32)
        index = {text: i for i, text in enumerate(distinct)}
        # Each turn's own vector where it was embedded, else one of the pool's.
        by_turn = np.stack(
            [vectors[index.get(text, j % len(distinct))] for j, (_, text) in enumerate(source)]
        )
        asked = np.asarray(await embedder.embed(list(QUESTIONS)), dtype=np.float32)
    finally:
        await embedder.close()
    queries = [Query(q, v) for q, v in zip(QUESTIONS, asked, strict=True)]
    bench = Bench(build_retrievers(), queries, vectors.shape[1])
    rng = np.random.default_rng(3)
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "turns": origin,
        "sizes": {},
    }
    if args.memory_sample:
        sample = rows(args.memory_sample, source, by_turn, rng)
        report["memory_kb"] = kb = await memory_per_memory(bench, sample)
        print(
            f"memory per memory ({kb['memories']} in the cache): records {kb['records']:.1f} KB,"
            f" memo {kb['memo']:.1f} KB, an asked snapshot {kb['snapshot']:.1f} KB,"
            f" total {kb['total']:.1f} KB",
            flush=True,
        )
    for size in args.sizes:
        memories = rows(size, source, by_turn, rng)
        reps = args.reps if size <= 10_000 else max(3, args.reps // 3)
        result = await bench.measure(memories, reps, args.warm)
        report["sizes"][str(size)] = result
        print(
            f"{size:>6} memories: first load p50 {result['first_load_ms']['p50']:8.1f} ms, "
            f"cold p50 {result['cold_ms']['p50']:8.1f} ms, "
            f"warm p50 {result['warm_ms']['p50']:6.2f} ms, after an update p50 "
            f"{result['after_update_ms']['p50']:8.1f} ms "
            f"({result['after_update_ms']['p50'] / max(result['warm_ms']['p50'], 1e-9):.1f}x "
            f"warm); hybrid warm p50 {result['hybrid_warm_ms']['p50']:.2f} ms",
            flush=True,
        )
        if result["after_update_readied_ms"] is not None:
            print(
                f"{'':>6} readied first: cold p50 {result['cold_readied_ms']['p50']:6.2f} ms, "
                f"after an update p50 {result['after_update_readied_ms']['p50']:6.2f} ms",
                flush=True,
            )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", default="250,10000,50000")
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--embed", type=int, default=2_000, help="distinct texts embedded")
    parser.add_argument("--reps", type=int, default=9, help="cold and after-update samples")
    parser.add_argument("--warm", type=int, default=100, help="warm queries")
    parser.add_argument(
        "--memory-sample", type=int, default=2_000, help="memories measured for memory (0: off)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    report = asyncio.run(run(args))
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
