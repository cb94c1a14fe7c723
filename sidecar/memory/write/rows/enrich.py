"""Enrichment shared by the write path and ``sidecar eval``'s ingestion.

For a batch of new memories of one owner (already embedded) it fills in

* ``abstract`` (L0): the first sentence, at most ``abstract_chars``;
* ``overview`` (L1): the content, at most ``overview_chars``;
* ``related_ids``: links to the owner's most similar memories (new or stored) at
  cosine >= ``link_threshold``, at most ``max_links``, and to at most
  ``max_entity_links`` memories that name the same entity (the most similar first;
  :mod:`sidecar.memory.language.entities`), in both directions — the stored memories
  that gain a back-link are returned for upsert too;
* ``category_id`` / ``parent_id`` through the :class:`Categorizer`, when one is set.

Links are only made between memories of the same owner: a user's memory never
points into another user's (or a group's) memories.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from sidecar.config import EnrichmentConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.language.entities import mentions, names
from sidecar.memory.records.records import MemoryRecord, NodeType, Scope
from sidecar.memory.store.schema import MAX_RELATED

_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


class Categorizer(Protocol):
    """Files memories under categories (see ``sidecar.memory.write.tree.hierarchy``)."""

    async def assign(
        self,
        owner: str,
        records: Sequence[MemoryRecord],
        topics: Mapping[str, str] | None = None,
    ) -> list[MemoryRecord]:
        """``records`` with category ids set, plus any category nodes to upsert;
        ``topics`` names the topic of some records (memory id -> name)."""
        ...


def abstract_of(text: str, limit: int) -> str:
    first = _SENTENCE_END.split(text.strip(), maxsplit=1)[0]
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


def overview_of(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class Enricher:
    def __init__(
        self,
        cache: CorpusCache,
        config: EnrichmentConfig,
        categorizer: Categorizer | None = None,
    ) -> None:
        self._cache = cache
        self._config = config
        self._categorizer = categorizer

    def set_categorizer(self, categorizer: Categorizer | None) -> None:
        self._categorizer = categorizer

    async def enrich(
        self,
        owner: str,
        new: Sequence[MemoryRecord],
        topics: Mapping[str, str] | None = None,
    ) -> list[MemoryRecord]:
        """The rows to upsert: ``new`` enriched, then existing rows with new back-links.
        ``topics`` (memory id -> topic name) goes to the categorizer."""
        if not new:
            return []
        config = self._config
        corpus = await self._cache.corpus(Scope(owner))
        mine = [i for i, r in enumerate(corpus.records) if r.user_id == owner]
        new_ids = {r.id for r in new}
        existing = [corpus.records[i] for i in mine if corpus.records[i].id not in new_ids]
        existing_vectors = corpus.vector_rows(
            [i for i in mine if corpus.records[i].id not in new_ids]
        )
        new_vectors = np.asarray([r.embedding for r in new], dtype=np.float32)

        links: dict[str, set[str]] = {r.id: set(r.related_ids) for r in new}
        back: dict[str, set[str]] = {}
        if config.max_links > 0:
            self._link(new, new_vectors, new, new_vectors, links, None)
            if existing:
                self._link(new, new_vectors, existing, existing_vectors, links, back)
        if config.max_entity_links > 0:
            self._link_entities(new, new_vectors, existing, existing_vectors, links, back)

        enriched = [
            r.with_changes(
                abstract=r.abstract or abstract_of(r.content, config.abstract_chars),
                overview=r.overview or overview_of(r.content, config.overview_chars),
                related_ids=tuple(sorted(links[r.id]))[:MAX_RELATED],
            )
            for r in new
        ]
        updated = []
        by_id = {r.id: r for r in existing}
        for other_id, added in sorted(back.items()):
            record = by_id[other_id]
            merged = tuple(sorted(set(record.related_ids) | added))[:MAX_RELATED]
            if merged != record.related_ids and record.node_type == NodeType.MEMORY:
                updated.append(record.with_changes(related_ids=merged))
        if self._categorizer is not None:
            enriched = await self._categorizer.assign(owner, enriched, topics)
        return enriched + updated

    def _link(
        self,
        sources: Sequence[MemoryRecord],
        source_vectors: np.ndarray,
        targets: Sequence[MemoryRecord],
        target_vectors: np.ndarray,
        links: dict[str, set[str]],
        back: dict[str, set[str]] | None,
    ) -> None:
        similarity = source_vectors @ target_vectors.T
        for s, record in enumerate(sources):
            row = similarity[s]
            order = np.lexsort((np.arange(row.size), -row))
            count = 0
            for t in order:
                if row[t] < self._config.link_threshold or count >= self._config.max_links:
                    break
                target = targets[t]
                if target.id == record.id:
                    continue
                links[record.id].add(target.id)
                if back is None:
                    links.setdefault(target.id, set()).add(record.id)
                else:
                    back.setdefault(target.id, set()).add(record.id)
                count += 1

    def _link_entities(
        self,
        new: Sequence[MemoryRecord],
        new_vectors: np.ndarray,
        existing: Sequence[MemoryRecord],
        existing_vectors: np.ndarray,
        links: dict[str, set[str]],
        back: dict[str, set[str]],
    ) -> None:
        """Link each new memory to at most ``max_entity_links`` of the owner's
        memories (new or stored) that name one of its entities, the most similar
        first. Stored memories are found by substring search (in C) per name, each
        hit checked as a whole word (:func:`mentions`)."""
        config = self._config
        named = [names(r.content) for r in new]
        wanted = sorted(set().union(*named))
        if not wanted:
            return
        population = len(new) + len(existing)
        most = max(config.entity_min_holders, int(config.entity_max_share * population))
        holders: dict[str, list[int]] = {}  # name -> positions in new + existing
        for name in wanted:
            found = [i for i, found_names in enumerate(named) if name in found_names]
            found.extend(
                len(new) + j for j, record in enumerate(existing) if mentions(record.content, name)
            )
            if 1 < len(found) <= most:
                holders[name] = found
        if not holders:
            return
        vectors = np.concatenate([new_vectors, existing_vectors]) if existing else new_vectors
        records = [*new, *existing]
        for i, record in enumerate(new):
            others = sorted(
                {j for name in named[i] for j in holders.get(name, ()) if j != i},
            )
            if not others:
                continue
            similarity = vectors[others] @ new_vectors[i]
            order = np.lexsort((np.asarray(others), -similarity))
            for k in order[: config.max_entity_links]:
                other = records[others[k]]
                links[record.id].add(other.id)
                if others[k] < len(new):
                    links.setdefault(other.id, set()).add(record.id)
                else:
                    back.setdefault(other.id, set()).add(record.id)
