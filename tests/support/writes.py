"""A write gateway over a test's own store and cache."""

from __future__ import annotations

from sidecar.config import StoreConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.store.protocol import Store
from sidecar.memory.write.rows.gateway import StoredObserver, WriteGateway
from sidecar.memory.write.rows.locks import KeyedLocks


def gateway(
    store: Store,
    cache: CorpusCache,
    *,
    locks: KeyedLocks | None = None,
    on_stored: tuple[StoredObserver, ...] = (),
) -> WriteGateway:
    """The write path's gateway over ``store`` and ``cache``, with the default
    content cap."""
    return WriteGateway(
        store,
        cache,
        max_content_chars=StoreConfig().max_content_chars,
        locks=locks,
        on_stored=on_stored,
    )
