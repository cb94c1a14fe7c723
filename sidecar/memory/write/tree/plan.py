"""Planning one owner's category tree: pure, synchronous and deterministic.

:class:`TreePlanner` takes the owner's active memories and category nodes (a store
snapshot) and works out the tree ``evolve`` should leave behind. Memories live in
leaf categories only; internal categories hold subcategories. Passes, repeated
until nothing changes (at most :data:`MAX_PASSES`):

1. *repair* — memories filed under a missing (superseded, foreign) category are
   filed again; memories sitting in an internal category are routed down to its
   nearest leaf;
2. *re-file general* — members of the "general" inbox move to the nearest topic
   leaf when their cosine to its centroid reaches ``assign_threshold``;
3. *merge* — sibling leaves whose centroids are at least ``merge_threshold``
   similar become one (the larger keeps its id; the other is superseded); two
   named topics are never merged, and a topic always keeps its id;
4. *split* — a leaf with at least ``split_min`` memories is clustered
   (:func:`~sidecar.memory.write.tree.clustering.split_clusters`) into subcategories named by
   their distinctive keywords; "general" splits into new *top-level* categories;
5. *prune* — categories left with no memories and no subcategories are superseded.

Then every category's summary ("Category: <name>. Covers: <keywords>. Examples:
<central members>") and centroid are recomputed from its memories; only rows that
differ from the snapshot are returned, so a second run over its own result
changes nothing. Category ids are ``"c" + sha256(owner, parent id, name)``:
whoever creates a category, it is the same row.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from sidecar.config import HierarchyBuildConfig
from sidecar.memory.records.categories import (
    GENERAL_NAME,
    blank_category,
    category_id,
    differs,
    general_id,
    is_named,
    summary_text,
)
from sidecar.memory.records.embeddings import stacked
from sidecar.memory.records.records import MemoryRecord, NodeType, Status, as_vector, content_hash
from sidecar.memory.records.vectors import Matrix, Vector, centroid
from sidecar.memory.write.rows.enrich import abstract_of
from sidecar.memory.write.tree.clustering import (
    distinctive_terms,
    split_clusters,
    surface_forms,
    words,
)

MAX_PASSES = 8
_ABSTRACT_CHARS = 120


@dataclass(slots=True)
class _Node:
    id: str
    name: str
    parent: str
    members: set[str]
    record: MemoryRecord | None  # the stored row; None for a new category


@dataclass(frozen=True, slots=True)
class TreePlan:
    """What ``evolve`` writes: category rows (new or changed), memory moves
    (memory id -> category id) and categories to supersede."""

    categories: tuple[MemoryRecord, ...]
    #: Ids among ``categories`` whose summary changed (``embedding: summary``).
    needs_embedding: tuple[str, ...]
    moves: dict[str, str]
    superseded: tuple[MemoryRecord, ...]
    created: int
    passes: int
    active: int


class TreePlanner:
    def __init__(
        self,
        owner: str,
        memories: Sequence[MemoryRecord],
        categories: Sequence[MemoryRecord],
        config: HierarchyBuildConfig,
        now: int,
    ) -> None:
        self._owner = owner
        self._config = config
        self._now = now
        mems = sorted(
            (
                m
                for m in memories
                if m.embedding is not None
                and m.user_id == owner
                and m.node_type == NodeType.MEMORY
                and m.status == Status.ACTIVE
            ),
            key=lambda m: m.id,
        )
        self._records = {m.id: m for m in mems}
        self._row = {m.id: i for i, m in enumerate(mems)}
        self._vectors: Matrix = stacked([m.embedding for m in mems if m.embedding is not None])
        self._tokens = {m.id: frozenset(t for t, _ in words(m.content)) for m in mems}
        self._df: Counter[str] = Counter()  # documents per term, over all the memories
        for found in self._tokens.values():
            self._df.update(found)
        self._surface = surface_forms(m.content for m in mems)
        self._original = {
            c.id: c
            for c in sorted(categories, key=lambda c: c.id)
            if c.user_id == owner and c.node_type == NodeType.CATEGORY and c.status == Status.ACTIVE
        }
        self._nodes = {
            c.id: _Node(c.id, c.abstract or GENERAL_NAME, c.parent_id, set(), c)
            for c in self._original.values()
        }
        for node in self._nodes.values():
            if node.parent not in self._nodes or node.parent == node.id:
                node.parent = ""
        self._break_cycles()
        self._home: dict[str, str] = {}
        for m in mems:
            if m.category_id in self._nodes:
                self._nodes[m.category_id].members.add(m.id)
                self._home[m.id] = m.category_id
        self._merged_into: dict[str, str] = {}
        self._created: set[str] = set()

    # -- tree helpers ------------------------------------------------------------

    def _break_cycles(self) -> None:
        for start in sorted(self._nodes):
            seen = {start}
            node = self._nodes[start]
            while node.parent:
                if node.parent in seen:
                    node.parent = ""
                    break
                seen.add(node.parent)
                node = self._nodes[node.parent]

    def _children(self, cid: str) -> list[str]:
        return sorted(n.id for n in self._nodes.values() if n.parent == cid and n.id != cid)

    def _leaves(self) -> list[str]:
        parents = {n.parent for n in self._nodes.values()}
        return [cid for cid in sorted(self._nodes) if cid not in parents]

    def _child_map(self) -> dict[str, list[str]]:
        children: dict[str, list[str]] = {}
        for node in sorted(self._nodes.values(), key=lambda n: n.id):
            if node.parent and node.parent != node.id:
                children.setdefault(node.parent, []).append(node.id)
        return children

    def _descendants(self, cid: str, children: dict[str, list[str]] | None = None) -> list[str]:
        children = self._child_map() if children is None else children
        found: list[str] = []
        stack = [cid]
        while stack:
            node = self._nodes[stack.pop()]
            found.extend(node.members)
            stack.extend(children.get(node.id, ()))
        return sorted(found)

    def _centroid(self, mids: Iterable[str]) -> Vector:
        rows = [self._row[m] for m in mids]
        if not rows:
            return np.zeros(self._vectors.shape[1] if self._vectors.ndim == 2 else 0, np.float32)
        return centroid(self._vectors[rows])

    def _move(self, mid: str, cid: str) -> None:
        old = self._home.get(mid)
        if old is not None and old in self._nodes:
            self._nodes[old].members.discard(mid)
        self._nodes[cid].members.add(mid)
        self._home[mid] = cid

    def _add_node(self, cid: str, name: str, parent: str) -> None:
        if cid in self._nodes:
            return
        record = self._original.get(cid)
        self._nodes[cid] = _Node(cid, record.abstract if record else name, parent, set(), record)
        if record is None:
            self._created.add(cid)

    def _remove(self, cid: str, into: str = "") -> None:
        del self._nodes[cid]
        self._created.discard(cid)
        if into:
            self._merged_into[cid] = into

    def _targets(self) -> tuple[list[str], Matrix]:
        """Topic leaves (not "general") with members, and their centroids."""
        gid = general_id(self._owner)
        ids = [c for c in self._leaves() if c != gid and self._nodes[c].members]
        if not ids:
            return [], np.zeros((0, 0), np.float32)
        return ids, np.stack([self._centroid(self._nodes[c].members) for c in ids])

    def _nearest(self, mid: str, ids: list[str], centres: Matrix) -> str | None:
        if not ids:
            return None
        similar = centres @ self._vectors[self._row[mid]]
        best = int(np.argmax(similar))
        return ids[best] if similar[best] >= self._config.assign_threshold else None

    # -- passes ------------------------------------------------------------------

    def _repair(self) -> bool:
        changed = False
        orphans = [m for m in self._records if self._home.get(m) not in self._nodes]
        if orphans:
            ids, centres = self._targets()
            gid = general_id(self._owner)
            for mid in orphans:
                target = self._nearest(mid, ids, centres)
                if target is None:
                    self._add_node(gid, GENERAL_NAME, "")
                    target = gid
                self._move(mid, target)
            changed = True
        for cid in sorted(self._nodes):
            node = self._nodes[cid]
            if not node.members or not self._children(cid):
                continue
            for mid in sorted(node.members):
                self._move(mid, self._route_down(cid, mid))
            changed = True
        return changed

    def _route_down(self, cid: str, mid: str) -> str:
        vector = self._vectors[self._row[mid]]
        children = self._children(cid)
        while children:
            best, best_score = children[0], -np.inf
            for child in children:  # sorted: ties go to the smallest id
                score = float(self._centroid(self._descendants(child)) @ vector)
                if score > best_score + 1e-9:
                    best, best_score = child, score
            cid = best
            children = self._children(cid)
        return cid

    def _refile_general(self) -> bool:
        gid = general_id(self._owner)
        if gid not in self._nodes or not self._nodes[gid].members:
            return False
        ids, centres = self._targets()
        moved = False
        for mid in sorted(self._nodes[gid].members):
            target = self._nearest(mid, ids, centres)
            if target is not None:
                self._move(mid, target)
                moved = True
        return moved

    def _merge(self) -> bool:
        gid = general_id(self._owner)
        changed = False
        while True:
            groups: dict[str, list[str]] = {}
            for cid in self._leaves():
                if cid != gid and self._nodes[cid].members:
                    groups.setdefault(self._nodes[cid].parent, []).append(cid)
            pair = self._closest_pair(groups)
            if pair is None:
                return changed
            a, b = pair
            # A named topic absorbs a near-identical keyword category (never the
            # other way round); otherwise the larger one keeps its id.
            rank_a = (not self._topic(a), -len(self._nodes[a].members), a)
            rank_b = (not self._topic(b), -len(self._nodes[b].members), b)
            keep, drop = (a, b) if rank_a <= rank_b else (b, a)
            for mid in sorted(self._nodes[drop].members):
                self._move(mid, keep)
            self._remove(drop, into=keep)
            changed = True

    def _topic(self, cid: str) -> bool:
        return is_named(self._nodes[cid].record)

    def _closest_pair(self, groups: dict[str, list[str]]) -> tuple[str, str] | None:
        best: tuple[float, str, str] | None = None
        for parent in sorted(groups):
            ids = groups[parent]
            if len(ids) < 2:
                continue
            centres = np.stack([self._centroid(self._nodes[c].members) for c in ids])
            similar = centres @ centres.T
            for i in range(len(ids)):
                for j in range(i + 1, len(ids)):
                    if self._topic(ids[i]) and self._topic(ids[j]):
                        continue  # two named topics stay two, however similar
                    score = float(similar[i, j])
                    if score >= self._config.merge_threshold and (
                        best is None or score > best[0] + 1e-9
                    ):
                        best = (score, ids[i], ids[j])
        return None if best is None else (best[1], best[2])

    def _split(self) -> bool:
        config = self._config
        gid = general_id(self._owner)
        work = deque(c for c in self._leaves() if len(self._nodes[c].members) >= config.split_min)
        changed = False
        while work:
            cid = work.popleft()
            node = self._nodes.get(cid)
            if node is None or len(node.members) < config.split_min or self._children(cid):
                continue
            mids = sorted(node.members)
            groups = split_clusters(
                self._vectors[[self._row[m] for m in mids]],
                max_children=config.max_children,
                min_size=config.min_size,
                merge_threshold=config.merge_threshold,
                target_size=config.split_min - 1,
            )
            if len(groups) < 2:
                continue
            parent = "" if cid == gid else cid
            members = [[mids[i] for i in group] for group in groups]
            for group, name in zip(members, self._names(members), strict=True):
                child = category_id(self._owner, parent, name)
                self._add_node(child, name, parent)
                for mid in group:
                    self._move(mid, child)
                work.append(child)
            changed = True
        return changed

    def _prune(self) -> bool:
        changed = False
        while True:
            parents = {n.parent for n in self._nodes.values()}
            empty = [
                c for c in sorted(self._nodes) if not self._nodes[c].members and c not in parents
            ]
            if not empty:
                return changed
            for cid in empty:
                self._remove(cid)
            changed = True

    # -- naming and summaries -----------------------------------------------------

    def _terms(self, groups: Sequence[Sequence[str]], limit: int) -> list[list[str]]:
        """c-TF-IDF keywords of each group against its siblings and the owner's other
        memories (one background class)."""
        counts: list[Counter[str]] = []
        for group in groups:
            count: Counter[str] = Counter()
            for mid in group:
                count.update(self._tokens[mid])
            counts.append(count)
        sizes = [len(group) for group in groups]
        background = self._df.copy()
        for count in counts:
            background.subtract(count)
        background = +background  # drop zero counts
        rest = len(self._records) - sum(sizes)
        if rest > 0:
            counts.append(background)
            sizes.append(rest)
        terms = distinctive_terms(counts, sizes, limit, named=len(groups))
        return [[self._surface.get(t, t) for t in found] for found in terms]

    def _names(self, groups: Sequence[Sequence[str]]) -> list[str]:
        wanted = self._config.name_keywords
        names: list[str] = []
        for index, found in enumerate(self._terms(groups, wanted + 3)):
            name = ", ".join(found[:wanted]) or f"topic {index + 1}"
            extra = wanted
            while name in names and extra < len(found):
                extra += 1
                name = ", ".join(found[:extra])
            if name in names:
                name = f"{name} ({index + 1})"
            names.append(name)
        return names

    def _example(self, mid: str) -> str:
        record = self._records[mid]
        return record.abstract or abstract_of(record.content, _ABSTRACT_CHARS)

    # -- the plan ----------------------------------------------------------------

    def plan(self) -> TreePlan:
        passes = 0
        while passes < MAX_PASSES:
            passes += 1
            changed = self._repair()
            changed |= self._refile_general()
            changed |= self._merge()
            changed |= self._split()
            changed |= self._prune()
            if not changed:
                break
        return self._result(passes)

    def _result(self, passes: int) -> TreePlan:
        config = self._config
        rows: list[MemoryRecord] = []
        stale: list[str] = []
        children = self._child_map()
        for cid in sorted(self._nodes):
            node = self._nodes[cid]
            mids = self._descendants(cid, children)
            vector = self._centroid(mids)
            ranked = sorted(mids, key=lambda m: (-float(self._vectors[self._row[m]] @ vector), m))
            keywords = self._terms([mids], config.summary_keywords)[0]
            examples = [self._example(m) for m in ranked[: config.examples]]
            text = summary_text(node.name, keywords, examples)
            digest = content_hash(text)
            old = node.record
            embedding = as_vector(vector)
            if config.embedding == "summary":
                if old is not None and old.content_hash == digest and old.embedding is not None:
                    embedding = old.embedding
                else:
                    stale.append(cid)
            row = (old or blank_category(self._owner, cid, self._now)).with_changes(
                content=text,
                abstract=node.name,
                overview=text,
                parent_id=node.parent,
                status=Status.ACTIVE,
                superseded_by="",
                content_hash=digest,
                embedding=embedding,
            )
            if old is None or differs(old, row):
                rows.append(row.with_changes(updated_at=self._now))
        moves = {
            mid: cid
            for mid, cid in sorted(self._home.items())
            if (self._records[mid].category_id, self._records[mid].parent_id) != (cid, cid)
        }
        superseded = tuple(
            record.with_changes(
                status=Status.SUPERSEDED,
                superseded_by=self._merged_into.get(cid, ""),
                updated_at=self._now,
            )
            for cid, record in self._original.items()
            if cid not in self._nodes
        )
        return TreePlan(
            categories=tuple(rows),
            needs_embedding=tuple(c for c in stale if c in {r.id for r in rows}),
            moves=moves,
            superseded=superseded,
            created=len(self._created),
            passes=passes,
            active=len(self._nodes),
        )
