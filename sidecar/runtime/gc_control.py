"""The cyclic garbage collector: how long it holds the process, and keeping the
memories this process caches out of its full collections.

A collection runs on whichever thread allocated past the threshold and holds the GIL
throughout, so every request in flight waits for it. A full (generation 2)
collection walks every tracked object the process keeps — with a warm corpus cache,
mostly its records — so its pause grows with the memories cached (hundreds of
milliseconds for a large cache), and under load one comes every few tens of seconds
(whatever outlives the young collections fills the old generation: new cache rows,
the objects of requests in flight; figures in docs/design/gc.md).

:class:`GCControl` times each collection from the interpreter's callbacks
(``memory_sidecar_gc_pause_seconds{generation}``) and counts what each freed
(``memory_sidecar_gc_collected_objects_total``: reference cycles). Where the
process is a sidecar's own (:meth:`GCControl.freeze_survivors`, called by ``serve``
and a writer process, never in a host process such as the tests'), it also
freezes (:func:`gc.freeze`) what survived a full collection, at most every
``server.gc_freeze_interval_s``: those objects — the cached corpora, mostly —
leave every later collection, which then walks only what was allocated since.
Frozen objects are still freed by reference counting when dropped (a replaced cache
row is); only a reference cycle that was alive when frozen and dies later is not
(each gRPC call holds a few while in flight). Every ``server.gc_thaw_interval_s`` all
of it is unfrozen, so the next full collection — one long pause — frees those
cycles before it is frozen again: what can be held back is bounded.
``memory_sidecar_gc_frozen_objects`` shows how much is frozen.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from sidecar.config import ServerConfig


class GCControl:
    """Observes every collection while started; freezes survivors (one per process)."""

    def __init__(
        self,
        pauses: Histogram,
        collected: Counter,
        frozen: Gauge,
        config: ServerConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._clock = clock
        self._frozen = frozen
        self._started: float | None = None
        self._pauses = {g: pauses.labels(generation=str(g)) for g in range(3)}
        self._collected = {g: collected.labels(generation=str(g)) for g in range(3)}
        self._frozen_at = float("-inf")
        self._thawed_at = clock()
        self._freezing = False

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        # Runs inside the collection, with no other one able to start: keep it short.
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info.get("generation")
        if self._started is not None and generation in self._pauses:
            self._pauses[generation].observe(time.perf_counter() - self._started)
            self._collected[generation].inc(int(info.get("collected", 0)))
        self._started = None
        if generation == 2:
            self._after_full_collection()

    def _after_full_collection(self) -> None:
        interval = self._config.gc_freeze_interval_s
        if not self._freezing or interval <= 0:
            return
        now = self._clock()
        thaw = self._config.gc_thaw_interval_s
        if thaw > 0 and now - self._thawed_at >= thaw:
            # The next full collection walks everything once more and frees the
            # cycles frozen while alive; what survives it is frozen again.
            gc.unfreeze()
            self._thawed_at = now
            self._frozen_at = float("-inf")
        elif now - self._frozen_at >= interval:
            # Unreachable cycles were just freed: what is tracked now is alive.
            gc.freeze()
            self._frozen_at = now
        self._frozen.set(gc.get_freeze_count())

    def freeze_survivors(self) -> None:
        """From now on, freeze what survives full collections (the process is ours:
        every object in it is this sidecar's to keep or drop)."""
        self._freezing = True
        self._frozen.set(gc.get_freeze_count())  # e.g. the start-up objects

    def start(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        self._frozen.set(gc.get_freeze_count())

    def stop(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
