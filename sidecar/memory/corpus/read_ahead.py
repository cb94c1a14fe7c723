"""Reading memories as they enter the corpus cache, not in the request that first
builds a snapshot of them.

A snapshot reads each memory once (:mod:`~sidecar.memory.corpus.features`): its
BM25 term ids and the per-memory values the retrieval stages read (who said it,
whom it is about, whether it tells a time).
Read lazily, all of it fell on the first request that built a snapshot of a
user after the user's rows were loaded: tokenising a long conversation turn and
running its cue patterns costs about a tenth of a millisecond, a second or more
for a large user, on the event loop. :class:`ReadAhead` reads them when rows
enter the cache: a load (in slices, other requests running between) or a write
(the few rows written).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from sidecar.memory.corpus.features import FeatureMemo, Reader
from sidecar.memory.corpus.rows import memo_term_ids
from sidecar.memory.records.records import MemoryRecord, NodeType

#: How long a load reads before letting other requests run (seconds).
SLICE_S = 0.005


class ReadAhead:
    """Reads into ``memo`` what every snapshot of these rows reads: term ids, and
    each of ``readers`` (memo name and reader, as the retrieval stages name and read
    them)."""

    def __init__(self, memo: FeatureMemo, readers: Sequence[tuple[str, Reader]]):
        self._memo = memo
        self._readers = tuple(readers)

    def read(self, rows: Sequence[MemoryRecord]) -> None:
        """Read these rows now (a write's few)."""
        for row in rows:
            self._read(row)

    async def read_sliced(self, rows: Sequence[MemoryRecord], wanted: Callable[[], bool]) -> None:
        """Read these rows a slice at a time, yielding to other tasks between
        slices; stop when ``wanted()`` turns false (the rows were invalidated: a
        forgotten user's text must not come back into the memo)."""
        started = time.perf_counter()
        for row in rows:
            if time.perf_counter() - started > SLICE_S:
                await asyncio.sleep(0)
                if not wanted():
                    return
                started = time.perf_counter()
            self._read(row)

    def _read(self, row: MemoryRecord) -> None:
        if row.node_type != NodeType.MEMORY:
            return
        memo = self._memo
        features = memo.features(row)
        memo_term_ids(features, row, memo.vocabulary)
        for name, read in self._readers:
            features.value(name, row, read)
