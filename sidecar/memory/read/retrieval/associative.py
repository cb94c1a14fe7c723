"""Associative multi-hop expansion through embedding neighbours.

From the best ``seeds`` results, walk to each node's ``beam_width`` nearest
neighbours whose cosine to it is at least ``min_cosine``, up to ``hop_limit``
hops, never revisiting a memory and never visiting more than ``max_visits``. A
memory reached at hop ``h`` from node ``u`` scores ``score(u) * cos(u, v) *
hop_decay`` (so ``hop_decay ** h`` overall); the final score is
``max(direct, associative)``. Neighbours owned by the seed's owner get
``same_scope_bonus`` when the beam is chosen (same scope preferred). Everything
is deterministic: ties break by corpus index.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sidecar.config import AssociativeConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.retrieval.signals import Scores
from sidecar.memory.records.vectors import top_indices


def expand_associative(
    corpus: Corpus,
    scores: Scores,
    via: dict[int, str],
    config: AssociativeConfig,
    evidence: npt.NDArray[np.bool_] | None = None,
) -> tuple[Scores, dict[int, str]]:
    """(final scores, via); seeds are the best results with evidence (or links)."""
    if not config.enabled or corpus.size == 0:
        return scores, via
    final = scores.copy()
    via = dict(via)
    seeds = top_indices(scores, config.seeds, evidence)
    visited: set[int] = set(seeds)
    frontier = [(seed, float(scores[seed]), corpus.records[seed].user_id) for seed in seeds]
    visits = len(seeds)
    for _hop in range(config.hop_limit):
        following: list[tuple[int, float, str]] = []
        for node, node_score, owner in frontier:
            if visits >= config.max_visits:
                break
            similar = corpus.vector_scores(corpus.vector_rows([node])[0])
            preference = similar.copy()
            same_owner = np.fromiter(
                (r.user_id == owner for r in corpus.records), dtype=bool, count=corpus.size
            )
            preference[same_owner] += config.same_scope_bonus
            preference[similar < config.min_cosine] = -np.inf
            for index in sorted(visited):
                preference[index] = -np.inf
            for other in top_indices(preference, config.beam_width, np.isfinite(preference)):
                if visits >= config.max_visits:
                    break
                visited.add(other)
                visits += 1
                reached = node_score * float(similar[other]) * config.hop_decay
                following.append((other, reached, owner))
                final[other] = max(final[other], np.float32(reached))
                via.setdefault(other, "associative")
        frontier = following
        if not frontier:
            break
    return final, via
