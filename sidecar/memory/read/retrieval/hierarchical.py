"""``hierarchical``: category search, then best-first drill-down.

Phase 1 (broad) scores the scope owner's category nodes by cosine and the
corpus' memories by the hybrid fused signal, both kept from the relaxed
``hierarchy.broad_threshold`` on (memories also on lexical evidence). To share one
scale, a category's relevance is its cosine min-max scaled like the memories'
cosine (``(cos - min) / (max - min)`` over the corpus, clipped to 0..1).

Phase 2 seeds a priority queue with the ``broad_categories`` best categories and
pops the best entry each round. Popping a category pushes its subcategories and
its member memories with the propagated score

    alpha * own relevance + (1 - alpha) * popped category's score;

popping a memory gives it ``max(direct score, propagated score)``: memories that
phase 1 found keep at least their own score, memories in relevant categories rise.
It stops when the top-k set has not changed for ``convergence_rounds`` memory pops
(pops of categories, and of memories already in the top-k, only open the frontier
and are not counted), after ``max_rounds`` pops, or when the queue is empty.
:class:`DrillStats` says which; every hit carries ``rounds``, ``opened`` and
``stop_<reason>`` in its signals.

The evidence gate (:func:`evidence_mask`) applies to every returned memory. Only
the corpus' records and the scope user's own categories are used, so nothing
outside the scope can be reached. Ties break by corpus index: deterministic.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sidecar.config import RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.retrieval.base import Query, SearchSpace, Stage
from sidecar.memory.read.retrieval.per_corpus import PerCorpus
from sidecar.memory.read.retrieval.signals import (
    Scores,
    Signals,
    compute_signals,
    evidence_mask,
    fuse,
    minmax,
)
from sidecar.memory.records.records import Hit

_CATEGORY, _MEMORY = 0, 1
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class DrillStats:
    """How the drill-down ran: ``stop`` is ``converged``, ``max_rounds``,
    ``exhausted`` (queue empty) or ``no_categories`` (nothing to drill into)."""

    rounds: int
    stop: str
    seeds: int
    opened: int
    raised: int

    def signals(self) -> dict[str, float]:
        return {
            "rounds": float(self.rounds),
            "opened": float(self.opened),
            f"stop_{self.stop}": 1.0,
        }


@dataclass(frozen=True, slots=True)
class CategoryTree:
    """The scope user's categories (corpus category indices) and their contents."""

    usable: tuple[int, ...]
    children: dict[int, tuple[int, ...]]
    members: dict[int, tuple[int, ...]]

    @classmethod
    def of(cls, corpus: Corpus, user_id: str) -> CategoryTree:
        usable = [i for i, c in enumerate(corpus.categories) if c.user_id == user_id]
        index = {corpus.categories[i].id: i for i in usable}
        children: dict[int, list[int]] = {}
        for i in usable:
            parent = index.get(corpus.categories[i].parent_id)
            if parent is not None and parent != i:
                children.setdefault(parent, []).append(i)
        members: dict[int, list[int]] = {}
        for j, record in enumerate(corpus.records):
            home = index.get(record.category_id)
            if home is not None and record.user_id == user_id:
                members.setdefault(home, []).append(j)
        return cls(
            tuple(usable),
            {k: tuple(v) for k, v in children.items()},
            {k: tuple(v) for k, v in members.items()},
        )


def subtree_evidence(tree: CategoryTree, size: int, scores: Scores, gate: Mask) -> Scores:
    """Per category (corpus category index): the best gated member score in its
    subtree (0 where none): evidence that flows up from the memories."""
    out = np.zeros(size, dtype=np.float32)
    done: set[int] = set()
    for root in tree.usable:
        stack: list[tuple[int, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in done:
                continue
            if not expanded:
                stack.append((node, True))
                stack.extend((c, False) for c in tree.children.get(node, ()) if c not in done)
                continue
            done.add(node)
            members = [m for m in tree.members.get(node, ()) if gate[m]]
            best = max((float(scores[m]) for m in members), default=0.0)
            for child in tree.children.get(node, ()):
                best = max(best, float(out[child]))
            out[node] = best
    return out


class _TopK:
    """The current best ``k`` (score, index), best first; ties by index."""

    def __init__(self, k: int, scores: dict[int, float]) -> None:
        self._k = k
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]
        self._entries = [(-score, index) for index, score in ranked]
        self._members = {index for _, index in self._entries}

    def __contains__(self, index: int) -> bool:
        return index in self._members

    def offer(self, index: int, old: float, score: float) -> bool:
        """Record ``index``'s raised score (``old`` before); True when the top-k *set*
        changed."""
        entry = (-score, index)
        if index in self._members:
            self._entries.remove((-old, index))
            bisect.insort(self._entries, entry)
            return False
        if len(self._entries) >= self._k:
            if entry >= self._entries[-1]:
                return False
            self._members.discard(self._entries.pop()[1])
        bisect.insort(self._entries, entry)
        self._members.add(index)
        return True


class HierarchicalRetriever:
    name = "hierarchical"

    def __init__(self) -> None:
        self._trees = PerCorpus(CategoryTree.of)

    def search(
        self, query: Query, corpus: Corpus, config: RetrievalConfig, top_k: int, user_id: str
    ) -> tuple[list[Hit], DrillStats]:
        if corpus.size == 0:
            return [], DrillStats(0, "no_categories", 0, 0, 0)
        hier, hybrid = config.hierarchy, config.hybrid
        signals = compute_signals(query, corpus, hybrid)
        fused = fuse(signals, hybrid)
        relevance: Scores = fused if hybrid.fusion == "weighted" else minmax(fused)
        gate = evidence_mask(signals, config)
        broad = (signals.cosine >= hier.broad_threshold) | (
            signals.lexical >= config.lexical_threshold
        )
        results = {int(i): float(relevance[i]) for i in np.flatnonzero(broad & gate)}

        tree = self._trees.get(corpus, user_id)
        category_cosine, category_relevance = _category_relevance(query, corpus, signals)
        if hier.member_evidence and len(category_relevance):
            evidence = subtree_evidence(tree, len(category_relevance), relevance, gate)
            category_relevance = np.maximum(category_relevance, evidence)
        seeds = sorted(
            (i for i in tree.usable if category_cosine[i] >= hier.broad_threshold),
            key=lambda i: (-float(category_relevance[i]), i),
        )[: hier.broad_categories]
        if not seeds:
            stats = DrillStats(0, "no_categories", 0, 0, 0)
            return self._hits(corpus, results, {}, signals, relevance, top_k, stats), stats

        heap: list[tuple[float, int, int]] = [
            (-float(category_relevance[i]), _CATEGORY, i) for i in seeds
        ]
        heapq.heapify(heap)
        top = _TopK(top_k, results)
        raised: dict[int, float] = {}
        opened: set[int] = set()
        rounds = stable = 0
        stop = "exhausted"
        alpha = hier.alpha
        while heap:
            if rounds >= hier.max_rounds:
                stop = "max_rounds"
                break
            negative, kind, index = heapq.heappop(heap)
            score = -negative
            if kind == _CATEGORY:
                if index in opened:
                    continue
                rounds += 1
                opened.add(index)
                for child in tree.children.get(index, ()):
                    if child not in opened:
                        own = float(category_relevance[child])
                        heapq.heappush(heap, (-(alpha * own + (1 - alpha) * score), kind, child))
                for member in tree.members.get(index, ()):
                    if gate[member]:
                        own = float(relevance[member])
                        propagated = alpha * own + (1 - alpha) * score
                        heapq.heappush(heap, (-propagated, _MEMORY, member))
                        raised.setdefault(member, score)
                continue
            rounds += 1
            already = index in top
            old = results.get(index, -np.inf)
            if score <= old:
                raised.pop(index, None)
                changed = False
            else:
                results[index] = score
                changed = top.offer(index, old, score)
            if changed:
                stable = 0
            elif not already:
                stable += 1
                if stable >= hier.convergence_rounds:
                    stop = "converged"
                    break
        raised = {i: p for i, p in raised.items() if results.get(i, -np.inf) > relevance[i]}
        stats = DrillStats(rounds, stop, len(seeds), len(opened), len(raised))
        return self._hits(corpus, results, raised, signals, relevance, top_k, stats), stats

    @staticmethod
    def _hits(
        corpus: Corpus,
        results: dict[int, float],
        raised: dict[int, float],
        signals: Signals,
        relevance: Scores,
        top_k: int,
        stats: DrillStats,
    ) -> list[Hit]:
        order = sorted(results, key=lambda i: (-results[i], i))[:top_k]
        extra = stats.signals()
        hits = []
        for index, own in zip(order, signals.rows(order), strict=True):
            evidence = {
                **own,
                Stage.FUSED: round(float(relevance[index]), 6),
                **extra,
            }
            if index in raised:
                evidence["category"] = round(raised[index], 6)
            via = "category" if index in raised else "direct"
            hits.append(Hit(corpus.records[index], results[index], evidence, via))
        return hits

    async def retrieve(self, query: Query, space: SearchSpace, top_k: int) -> list[Hit]:
        hits, _ = self.search(query, space.corpus, space.config, top_k, space.scope.user_id)
        return hits


def _category_relevance(query: Query, corpus: Corpus, signals: Signals) -> tuple[Scores, Scores]:
    """(cosine, relevance) of every category: relevance is the cosine on the
    memories' min-max cosine scale (0..1)."""
    if not corpus.categories:
        empty = np.zeros(0, dtype=np.float32)
        return empty, empty
    cosine: Scores = np.asarray(
        corpus.category_vectors @ query.vector.astype(np.float32), dtype=np.float32
    )
    low, high = float(signals.cosine.min()), float(signals.cosine.max())
    if high <= low:
        return cosine, np.zeros(len(corpus.categories), dtype=np.float32)
    scaled: Scores = np.clip((cosine - low) / (high - low), 0.0, 1.0).astype(np.float32)
    return cosine, scaled
