"""Folding deleted memories out of the layers snapshots share, off the request path.

The snapshot after a deletion is made without the deleted row at once
(:meth:`Corpus.updated <sidecar.memory.corpus.corpus.Corpus.updated>` with
``compact=False``): it is never scored or returned. Its vector and postings stay in
the vector buffer and BM25 base that snapshot shares with the ones before it until
:meth:`Corpus.compacted <sidecar.memory.corpus.corpus.Corpus.compacted>` copies
the live rows into layers of their own, which costs every vector and posting once:
tens of milliseconds for a large user, paid before by the request after the
deletion. :class:`Compactor` runs it in a worker thread as soon as that snapshot is
made (the NumPy copies release the interpreter lock) and hands the result back on
the event loop, where the corpus cache swaps it in. The snapshot compacted is
immutable; what the worker builds is its own until handed back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from sidecar.memory.corpus.corpus import Corpus
from sidecar.metrics import Metrics

#: A cached snapshot's key (the cache units it is made of).
Key = tuple[str, ...]
#: Told, on the event loop, a key's snapshot and its compacted equal.
Done = Callable[[Key, Corpus, Corpus], None]


class Compactor:
    """At most one compaction per key at a time; vectors of ``dim``."""

    def __init__(self, dim: int, metrics: Metrics) -> None:
        self._dim = dim
        self._metrics = metrics
        self._running: dict[Key, asyncio.Future[Corpus]] = {}

    def soon(self, key: Key, corpus: Corpus, done: Done) -> None:
        """Compact ``corpus`` (``key``'s snapshot) in a worker thread, then tell
        ``done``; at once where no event loop runs. A key already being compacted
        is left to that run (``done`` then finds the newer snapshot and asks
        again)."""
        if key in self._running:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            done(key, corpus, self._compacted(corpus))
            return
        future = loop.run_in_executor(None, self._compacted, corpus)
        self._running[key] = future
        future.add_done_callback(lambda f: self._finished(key, corpus, f, done))

    def _compacted(self, corpus: Corpus) -> Corpus:
        return corpus.compacted(self._dim)

    def _finished(
        self, key: Key, corpus: Corpus, future: asyncio.Future[Corpus], done: Done
    ) -> None:
        self._running.pop(key, None)
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            # The snapshot stays correct (the deleted row is out of it); the next
            # build from all rows folds the layers.
            self._metrics.corpus_compactions.labels(outcome="error").inc()
            return
        done(key, corpus, future.result())

    async def settled(self) -> None:
        """Wait for the compactions running now and those they ask for."""
        while self._running:
            with contextlib.suppress(Exception):
                await next(iter(self._running.values()))
            await asyncio.sleep(0)  # the done callbacks run (they may ask again)
