"""The snapshots the corpus cache serves, one per scope, made from its units.

A scope's snapshot (:class:`~sidecar.memory.corpus.corpus.Corpus`) is kept with
the versions of the units it was made of. When a unit changed, the next snapshot
is made from the previous one and the rows its log says changed
(:meth:`Corpus.updated`), else from all rows; a deletion's fold of the layers
shared with the previous snapshot runs after the request
(:mod:`~sidecar.memory.corpus.compaction`). Access counts patch the snapshots in
place (:meth:`Corpus.with_access`); forgetting a user drops the snapshots made of
their rows at once (they hold the memories' text).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping

from sidecar.memory.corpus.compaction import Compactor, Key
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.features import FeatureMemo
from sidecar.memory.corpus.units import Unit, scope_changes
from sidecar.memory.records.records import MemoryRecord
from sidecar.metrics import Metrics


class Snapshots:
    """At most ``max_scopes`` snapshots (the least recently used go), vectors of
    ``dim``, memories read through ``memo``."""

    def __init__(
        self,
        dim: int,
        memo: FeatureMemo,
        max_scopes: int,
        metrics: Metrics,
        *,
        on_swapped: Callable[[Key], object] | None = None,
    ) -> None:
        self._dim = dim
        #: Told of a key whose served snapshot was swapped for its compacted equal.
        self._on_swapped = on_swapped
        self._memo = memo
        self._max_scopes = max_scopes
        self._metrics = metrics
        self._corpora: OrderedDict[Key, tuple[tuple[int, ...], Corpus]] = OrderedDict()
        #: Folds a deletion out of the layers a snapshot shares, after the request.
        self._compactor = Compactor(dim, metrics)

    def merged(self, keys: Key, units: list[Unit]) -> Corpus:
        """The snapshot of the scope made of ``units`` (by ``keys``) as they are."""
        versions = tuple(u.seq for u in units)
        cached = self._corpora.get(keys)
        if cached is not None and cached[0] == versions:
            self._corpora.move_to_end(keys)
            return cached[1]
        changes = scope_changes(units, cached[0]) if cached is not None else None
        if cached is not None and changes is not None:
            # A deletion's fold of the shared layers waits for the compactor.
            corpus = Corpus.updated(cached[1], changes, self._dim, memo=self._memo, compact=False)
        else:
            rows = [row for unit in units for row in unit.rows]
            corpus = Corpus.build(rows, self._dim, cached[1] if cached else None, memo=self._memo)
        self._corpora[keys] = (versions, corpus)
        while len(self._corpora) > self._max_scopes:
            self._corpora.popitem(last=False)
        if corpus.holds_deleted:
            self._compactor.soon(keys, corpus, self._compacted)
        return corpus

    def _compacted(self, keys: Key, before: Corpus, after: Corpus) -> None:
        """Serve ``after`` (``before`` compacted) where ``before`` is still served;
        a newer snapshot made from it holds the deleted rows too: compacted next."""
        cached = self._corpora.get(keys)
        if cached is None:
            return
        if cached[1] is before:
            self._corpora[keys] = (cached[0], after)
            self._metrics.corpus_compactions.labels(outcome="swapped").inc()
            if self._on_swapped is not None:
                self._on_swapped(keys)
        elif cached[1].holds_deleted:
            self._metrics.corpus_compactions.labels(outcome="stale").inc()
            self._compactor.soon(keys, cached[1], self._compacted)

    def served(self, keys: Key, units: list[Unit | None]) -> Corpus | None:
        """The snapshot of ``keys`` made of ``units`` as they are, if one is held
        (not made: see :meth:`merged`)."""
        cached = self._corpora.get(keys)
        if cached is None or any(unit is None for unit in units):
            return None
        current = cached[0] == tuple(unit.seq for unit in units if unit is not None)
        return cached[1] if current else None

    def holding(self, unit_keys: Collection[str]) -> list[Key]:
        """The keys of the snapshots made of any of ``unit_keys``."""
        return [keys for keys in self._corpora if any(key in unit_keys for key in keys)]

    async def compactions(self) -> None:
        """Wait until no deleted memory is left in the served snapshots' layers."""
        await self._compactor.settled()

    def patched(
        self,
        before: dict[str, int],
        rows: dict[str, MemoryRecord],
        units: Mapping[str, Unit],
    ) -> None:
        """Carry the snapshots that were current before an access update (their
        units at the seqs in ``before``, or unchanged) over to the units' new seqs,
        with ``rows`` (new versions by id, counts changed only) in place."""
        for keys, (versions, corpus) in list(self._corpora.items()):
            if not any(key in before for key in keys):
                continue
            held = [units.get(key) for key in keys]
            current = all(
                unit is not None and version == before.get(key, unit.seq)
                for key, unit, version in zip(keys, held, versions, strict=True)
            )
            if not current:
                continue  # stale anyway: rebuilt at its next use
            changed = {
                index: rows[memory_id]
                for memory_id in rows
                if (index := corpus.index_of.get(memory_id)) is not None
            }
            seqs = tuple(unit.seq for unit in held if unit is not None)
            self._corpora[keys] = (seqs, corpus.with_access(changed) if changed else corpus)

    def drop(self, unit_key: str) -> None:
        """Drop the snapshots made of the unit ``unit_key`` (a forgotten user's:
        they hold the memories' text until the next request would replace them)."""
        for keys in [keys for keys in self._corpora if unit_key in keys]:
            del self._corpora[keys]
