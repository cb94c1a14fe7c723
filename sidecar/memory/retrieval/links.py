"""Link expansion: memories reached from strong hits along persisted links.

Links are the ``related_ids`` written at store time (similarity links, both
directions) plus, optionally, the previous/next memory of the same session. From
each of the best direct candidates, links are followed up to ``max_link_depth``
hops; a memory reached at hop ``h`` from referrer ``r`` scores

    hop_decay ** (h - 1) * (blend * score(r) + (1 - blend) * own score)

and keeps ``max(direct, linked)``. :func:`limit_link_share` then keeps memories
that rank only through a link from taking more than ``max_share`` of the top-k.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sidecar.config import LinkConfig
from sidecar.memory.corpus import Corpus
from sidecar.memory.retrieval.signals import Scores, top_indices


def neighbours(corpus: Corpus, index: int, config: LinkConfig) -> list[int]:
    found = list(corpus.links[index])
    if config.session_neighbors:
        for other in (int(corpus.session_prev[index]), int(corpus.session_next[index])):
            if other >= 0 and other not in found:
                found.append(other)
    return found


def expand_links(
    corpus: Corpus,
    direct: Scores,
    config: LinkConfig,
    pool: int,
    evidence: npt.NDArray[np.bool_] | None = None,
) -> tuple[Scores, dict[int, str]]:
    """(final scores, via) — via marks every memory reached through a link (it is
    admitted on its referrer's evidence). Referrers are the best ``pool`` memories
    with evidence of their own.

    The walk only collects (memory, referrer's share, decay) triples; the scores are
    computed in one vectorised step, in the scores' dtype exactly as the formula
    reads (a per-link loop over NumPy scalars cost a third of a request's retrieval)."""
    if not config.enabled or config.max_link_depth == 0 or corpus.size == 0:
        return direct, {}
    via: dict[int, str] = {}
    reached: list[int] = []
    shares: list[float] = []  # blend * score(referrer)
    decays: list[float] = []
    for referrer in top_indices(direct, pool, evidence):
        share = config.blend * float(direct[referrer])
        frontier = [referrer]
        seen = {referrer}
        for hop in range(1, config.max_link_depth + 1):
            decay = config.hop_decay ** (hop - 1)
            following: list[int] = []
            for node in frontier:
                for other in neighbours(corpus, node, config):
                    if other in seen:
                        continue
                    seen.add(other)
                    following.append(other)
                    reached.append(other)
                    shares.append(share)
                    decays.append(decay)
                    via.setdefault(other, "link")
            frontier = following
    final = direct.copy()
    if reached:
        dtype = direct.dtype
        index = np.asarray(reached, dtype=np.intp)
        own = dtype.type(1 - config.blend) * direct[index]
        linked = np.asarray(decays, dtype=dtype) * (np.asarray(shares, dtype=dtype) + own)
        np.maximum.at(final, index, linked)
    return final, via


def limit_link_share(
    ranked: list[int], direct: Scores, via: dict[int, str], top_k: int, max_share: float
) -> list[int]:
    """``ranked`` reordered so that at most ``max_share * top_k`` of the first
    ``top_k`` are memories outside the direct top-k that came in through a link."""
    if not via:
        return ranked
    direct_top = set(top_indices(direct, top_k))
    allowed = int(max_share * top_k)
    kept: list[int] = []
    deferred: list[int] = []
    used = 0
    for index in ranked:
        if len(kept) >= top_k:
            deferred.append(index)
            continue
        if index in via and index not in direct_top:
            if used >= allowed:
                deferred.append(index)
                continue
            used += 1
        kept.append(index)
    return kept + deferred
