"""Named topics as retrieval evidence: members of a relevant topic rise together.

A *named topic* is a category whose name came with its memories (the extraction
LLM's ``topic``, an import's label; ``source="topic"``, see
:mod:`sidecar.memory.records.categories`). Its leaves (the topic itself, or the
subcategories ``evolve`` split it into) are groups of memories their writer said
belong together — evidence that clusters made up by KMeans are not (as evidence they
lower recall; docs/design/named-topics.md), so only named topics take part.

For one query, over base scores ``s`` and the evidence gate:

    category(c) = mean of the ``evidence`` best s[m], m in c
    opened      = the ``max_topics`` best categories with a member in the gate
    s'[m]       = max(s[m], alpha * s[m] + (1 - alpha) * category(c))   (m in opened c)

and members of opened categories are admitted on their category's evidence (at most
``max_members`` per category, its best: a big topic ``evolve`` has not split yet
does not flood the results). Only the
scope user's own categories and the corpus' records are used (nothing outside the
scope), ties break by category order: deterministic. A corpus without named topics
is left exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sidecar.config import TopicConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.retrieval.signals import Scores
from sidecar.memory.records.categories import is_topic, leaves_under

Indices = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class TopicGroups:
    """Corpus indices of the members of each leaf under one of the user's topics."""

    groups: tuple[Indices, ...]

    @classmethod
    def of(cls, corpus: Corpus, user_id: str) -> TopicGroups:
        mine = [c for c in corpus.categories if c.user_id == user_id]
        if not any(is_topic(c) for c in mine):
            return cls(())
        ids = {c.id for c in mine}
        children: dict[str, list[str]] = {}
        for category in mine:
            if category.parent_id in ids and category.parent_id != category.id:
                children.setdefault(category.parent_id, []).append(category.id)
        leaves: dict[str, None] = {}  # ordered, each leaf once
        for root in sorted(c.id for c in mine if is_topic(c)):
            leaves.update(dict.fromkeys(leaves_under(root, children) or [root]))
        slot = {cid: i for i, cid in enumerate(leaves)}
        members: list[list[int]] = [[] for _ in leaves]
        for index, record in enumerate(corpus.records):
            i = slot.get(record.category_id)
            if i is not None and record.user_id == user_id:
                members[i].append(index)
        return cls(tuple(np.asarray(m, dtype=np.int64) for m in members if m))


def expand_topics(
    scores: Scores, gate: Mask, topics: TopicGroups, config: TopicConfig
) -> tuple[Scores, Mask, dict[int, float]]:
    """(scores, gate, raised): see the module docstring; ``raised`` maps each member
    whose score rose to its category's score."""
    if not topics.groups or not config.enabled:
        return scores, gate, {}
    evidence = config.evidence
    ranked: list[tuple[float, int]] = []
    for position, members in enumerate(topics.groups):
        if not gate[members].any():
            continue
        values = scores[members]
        best = np.sort(values)[::-1][:evidence] if len(values) > evidence else values
        ranked.append((float(best.mean()), position))
    ranked.sort(key=lambda item: (-item[0], item[1]))
    if not ranked:
        return scores, gate, {}
    out = scores.copy()
    admitted = gate.copy()
    raised: dict[int, float] = {}
    alpha = config.alpha
    for category, position in ranked[: config.max_topics]:
        members = topics.groups[position]
        if len(members) > config.max_members:  # a big topic lifts its best members only
            best_first = np.lexsort((members, -scores[members]))
            members = members[best_first[: config.max_members]]
        propagated = (alpha * scores[members] + (1 - alpha) * category).astype(np.float32)
        higher = propagated > out[members]
        out[members] = np.where(higher, propagated, out[members])
        admitted[members] = True
        for index in members[higher]:
            raised[int(index)] = category
    return out, admitted, raised
