"""Readying the snapshots requests will read, off the request path.

A write (this process's, a peer's through the relay, another replica's through the
refresh) or a unit's load changes what a scope's next request reads. Made at that
request, the new snapshot would cost it the update
(:meth:`Corpus.updated <sidecar.memory.corpus.corpus.Corpus.updated>`) and all that
the ranking reads of every memory whatever the question — the conversation context,
the cue columns, the link table — which is several warm requests' worth. The
:class:`Warmer` makes both once the scope has been quiet for ``cache.warm_after_ms``
(a turn's several writes make one snapshot), on the event loop, where the request
would have made them, one step at a time with the loop free between steps; it stops
when the scope changes again meanwhile (the change asks for a new run). What depends
on a question's words (its terms' joined postings, the link rows a walk reads) is
still made when asked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Iterator

from sidecar.config import CacheConfig
from sidecar.memory.corpus.compaction import Key
from sidecar.memory.corpus.corpus import Corpus
from sidecar.metrics import Metrics

#: What a scope's next request will read of a snapshot, made a step at a time: the
#: snapshot and the scope's user.
Prepare = Callable[[Corpus, str], Iterator[None]]
#: The key's snapshot as its units are now, with its user (made if need be); None
#: when a unit is missing, stale or loading (its load asks again).
Ready = Callable[[Key], tuple[Corpus, str] | None]
#: The key's snapshot served now, made of units as they are (None: none, or the
#: units changed since it was made).
Served = Callable[[Key], Corpus | None]
#: The keys of the snapshots made of any of these units.
Holding = Callable[[Collection[str]], list[Key]]
#: How many memories the key's cached units hold (None: one is not cached).
Rows = Callable[[Key], int | None]


class Warmer:
    """One run per key at a time, ``cache.warm_after_ms`` after the key's last change,
    for keys of ``cache.warm_min_rows`` memories or more."""

    def __init__(
        self,
        prepare: Prepare,
        config: CacheConfig,
        metrics: Metrics,
        *,
        ready: Ready,
        served: Served,
        holding: Holding,
        rows: Rows,
    ) -> None:
        self._prepare = prepare
        self._delay_s = config.warm_after_ms / 1000
        self._min_rows = config.warm_min_rows
        self._max_wanted = config.max_scopes
        self._metrics = metrics
        self._ready = ready
        self._served = served
        self._holding = holding
        self._rows = rows
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._running: dict[Key, asyncio.Task[None]] = {}
        #: Keys a request found a unit of missing: readied once all are cached.
        self._wanted: dict[Key, None] = {}

    def changed(self, *unit_keys: str) -> None:
        """These units changed or loaded: ready the snapshots made of them, and
        those wanted of them once all their units are cached."""
        for keys in self._holding(unit_keys):
            self.soon(keys)
        for keys in [k for k in self._wanted if any(key in unit_keys for key in k)]:
            if self._rows(keys) is not None:
                del self._wanted[keys]
                self.soon(keys)

    def wanted(self, keys: Key) -> None:
        """A request found a unit of ``keys`` missing (it is loading)."""
        self._wanted[keys] = None
        while len(self._wanted) > self._max_wanted:
            del self._wanted[next(iter(self._wanted))]

    def soon(self, key: Key) -> None:
        """Ready ``key``'s snapshot after the delay (a change to it before then moves
        the time on; a run under way stops at its next step)."""
        if (self._rows(key) or 0) < self._min_rows:
            return  # a small scope's first question costs little more than the next
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop: nothing serves requests to ready a snapshot for
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_later(self._delay_s, self._start, key)

    def _start(self, key: Key) -> None:
        self._timers.pop(key, None)
        running = self._running.pop(key, None)
        if running is not None:
            running.cancel()
        task = asyncio.get_running_loop().create_task(self._warm(key))
        self._running[key] = task
        task.add_done_callback(lambda done: self._finished(key, done))

    def _finished(self, key: Key, task: asyncio.Task[None]) -> None:
        if self._running.get(key) is task:
            del self._running[key]
        if not task.cancelled() and task.exception() is not None:
            self._metrics.corpus_warmings.labels(outcome="error").inc()

    async def _warm(self, key: Key) -> None:
        ready = self._ready(key)
        if ready is None:
            self._metrics.corpus_warmings.labels(outcome="skipped").inc()
            return
        corpus, user_id = ready
        for _ in self._steps(corpus, user_id):
            await asyncio.sleep(0)  # requests waiting on the loop go first
            if self._served(key) is not corpus:
                self._metrics.corpus_warmings.labels(outcome="superseded").inc()
                return
        self._metrics.corpus_warmings.labels(outcome="done").inc()

    def _steps(self, corpus: Corpus, user_id: str) -> Iterator[None]:
        # The BM25 table first: the first questions scan instead of waiting on it,
        # an update made from the snapshot would sort it at the request.
        corpus.bm25.build_table()
        yield
        yield from self._prepare(corpus, user_id)

    async def settled(self) -> None:
        """Wait for the runs due or under way (tests, evaluations, shutdown)."""
        while self._timers or self._running:
            if self._running:
                await asyncio.wait(list(self._running.values()))
            else:
                await asyncio.sleep(self._delay_s / 2 or 0.001)

    async def close(self) -> None:
        """Cancel every run due or under way."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        running, self._running = list(self._running.values()), {}
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
