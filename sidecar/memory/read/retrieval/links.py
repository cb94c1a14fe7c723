"""Link expansion: memories reached from strong hits along persisted links.

Links are the ``related_ids`` written at store time (similarity and entity links,
both directions) plus, optionally, the previous/next memory of the same session. From
each of the best direct candidates, links are followed up to ``max_link_depth``
hops; a memory reached at hop ``h`` from referrer ``r`` scores

    hop_decay ** (h - 1) * (blend * score(r) * spread(r) + (1 - blend) * own score)

and keeps ``max(direct, linked)``; ``spread(r)`` is 1, or ``hub_links / degree(r)``
for a referrer with more neighbours than ``hub_links`` (a hub: linked to many by
what they all share, its lift is split among them). Along a bridge link (a fact about the user and
one about what it names) a memory with evidence of its own may instead score
``own + support * score(r)`` (:func:`_support`). :func:`limit_link_share` then
keeps memories that rank only through a link from taking more than ``max_share``
of the top-k. A long transcript line (``long_lines``: an assistant's answer) is
neither a referrer nor reached: linked to much, it lifted, or rose over, the lines
that answer.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import numpy.typing as npt

from sidecar.config import LinkConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.features import Reader
from sidecar.memory.language.entities import names_user
from sidecar.memory.read.retrieval.conversation import long_transcript_lines
from sidecar.memory.read.retrieval.signals import Scores
from sidecar.memory.records.records import MemoryRecord
from sidecar.memory.records.vectors import top_indices


def adjacency(corpus: Corpus, session_neighbors: bool) -> Adjacency:
    """Every memory's neighbours, each once: its links, plus the previous/next memory
    of its session when asked. One table per corpus snapshot, its rows made when
    first read."""
    return corpus.derived(
        ("link-adjacency", session_neighbors),
        lambda: Adjacency(corpus, session_neighbors),
        structural=True,
    )


class Adjacency:
    """Neighbour rows of a snapshot's memories (never the memory itself), each made
    the first time a walk reads it: a request reads a few dozen rows, and making
    every row for each new snapshot cost about 2 µs a memory."""

    __slots__ = ("_links", "_next", "_prev", "_rows")

    def __init__(self, corpus: Corpus, session_neighbors: bool) -> None:
        self._links = corpus.links
        self._prev = corpus.session_prev if session_neighbors else None
        self._next = corpus.session_next
        self._rows: dict[int, tuple[int, ...]] = {}

    def __getitem__(self, index: int) -> tuple[int, ...]:
        row = self._rows.get(index)
        if row is None:
            row = linked = self._links[index]
            if self._prev is not None:
                around = (int(self._prev[index]), int(self._next[index]))
                extra = tuple(j for j in around if j >= 0 and j not in linked)
                row = linked + extra if extra else linked
            self._rows[index] = row
        return row


def prepare_links(corpus: Corpus, config: LinkConfig) -> None:
    """Make what :func:`expand_links` reads of ``corpus`` whatever the question
    (see :meth:`PipelineRetriever.prepare`); its rows are made as walks read them."""
    if _walks(corpus, config):
        long_transcript_lines(corpus, config.long_lines)
        adjacency(corpus, config.session_neighbors)


def _walks(corpus: Corpus, config: LinkConfig) -> bool:
    """Whether links are followed in ``corpus`` with these settings."""
    return config.enabled and config.max_link_depth > 0 and corpus.size > 0


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

    The walk (per referrer, a memory counts at the first hop that reaches it, the
    referrer itself never) only collects (memory, referrer's share, decay) triples
    over the corpus' cached adjacency; the scores are computed in one vectorised
    step, in the scores' dtype exactly as the formula reads (a per-link loop over
    NumPy scalars is slow; for the few dozen referrers of a request, plain lists
    collect faster than array operations)."""
    if not _walks(corpus, config):
        return direct, {}
    long = long_transcript_lines(corpus, config.long_lines)  # None: every link as before
    referrers = top_indices(direct, pool, evidence)
    if long is not None:
        referrers = [r for r in referrers if not long[r]]
    if not referrers:
        return direct, {}
    neighbours = adjacency(corpus, config.session_neighbors)
    scores = direct[referrers].tolist()
    walk = _one_hop if config.max_link_depth == 1 else _walk
    reached, shares, decays = walk(neighbours, referrers, scores, config)
    if long is not None and reached:
        keep = [i for i, r in enumerate(reached) if not long[r]]
        reached = [reached[i] for i in keep]
        shares = [shares[i] for i in keep]
        decays = [decays[i] for i in keep]
    if not reached:
        return direct, {}
    dtype = direct.dtype
    index = np.asarray(reached, dtype=np.intp)
    own = dtype.type(1 - config.blend) * direct[index]
    linked = np.asarray(decays, dtype=dtype) * (np.asarray(shares, dtype=dtype) + own)
    final = direct.copy()
    np.maximum.at(final, index, linked)
    if config.support > 0:
        _support(final, direct, corpus, referrers, scores, config.support, evidence, long)
    return final, dict.fromkeys(reached, "link")


Walk = tuple[list[int], list[float], list[float]]  # reached, shares, decays


def _one_hop(
    neighbours: Adjacency,
    referrers: list[int],
    scores: list[float],
    config: LinkConfig,
) -> Walk:
    """The default depth: every neighbour of every referrer (adjacency rows hold each
    neighbour once and never the row itself)."""
    rows = [neighbours[r] for r in referrers]
    reached = list(chain.from_iterable(rows))
    blend = config.blend
    hub = config.hub_links
    shares = list(
        chain.from_iterable(
            [_share(blend, v, len(r), hub)] * len(r) for v, r in zip(scores, rows, strict=True)
        )
    )
    return reached, shares, [1.0] * len(reached)


def _share(blend: float, score: float, degree: int, hub_links: int) -> float:
    """``blend * score``, split among a hub's ``degree`` neighbours past ``hub_links``."""
    if hub_links and degree > hub_links:
        return blend * score * (hub_links / degree)
    return blend * score


def _walk(
    neighbours: Adjacency,
    referrers: list[int],
    scores: list[float],
    config: LinkConfig,
) -> Walk:
    reached: list[int] = []
    shares: list[float] = []  # blend * score(referrer), per reached memory
    decays: list[float] = []
    for referrer, score in zip(referrers, scores, strict=True):
        share = _share(config.blend, score, len(neighbours[referrer]), config.hub_links)
        frontier = [referrer]
        seen = {referrer}
        for hop in range(1, config.max_link_depth + 1):
            following: list[int] = []
            for node in frontier:
                for other in neighbours[node]:
                    if other not in seen:
                        seen.add(other)
                        following.append(other)
            if not following:
                break
            reached.extend(following)
            shares.extend([share] * len(following))
            decays.extend([config.hop_decay ** (hop - 1)] * len(following))
            frontier = following
    return reached, shares, decays


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


def _support(
    final: Scores,
    direct: Scores,
    corpus: Corpus,
    referrers: list[int],
    scores: list[float],
    support: float,
    evidence: npt.NDArray[np.bool_] | None,
    long: npt.NDArray[np.bool_] | None = None,
) -> None:
    """Mutual support along bridge links: persisted links that join a fact about the
    user ("User's father is Piotr.") and one about someone or something else
    ("Piotr retired from teaching maths."; the write path names the user "User").
    Such a memory linked to a referrer also scores its own score plus ``support``
    times the referrer's, when that is more, so the bridge and the fact about what
    it names rise together above look-alikes nothing links to. Only memories with
    evidence of their own take support: two linked memories that are each off the
    question do not rise on each other. Only the referrers' links are read (no pass
    over the corpus)."""

    def about_user(index: int) -> bool:  # read once per memory (the memo), not per query
        return bool(corpus.read(NAMES_USER, index, _names_user))

    reached: list[int] = []
    shares: list[float] = []
    for referrer, score in zip(referrers, scores, strict=True):
        mine = about_user(referrer)
        for other in corpus.links[referrer]:
            if long is not None and long[other]:
                continue
            if (evidence is None or evidence[other]) and about_user(other) != mine:
                reached.append(other)
                shares.append(support * score)
    if not reached:
        return
    index = np.asarray(reached, dtype=np.intp)
    np.maximum.at(final, index, direct[index] + np.asarray(shares, dtype=direct.dtype))


#: The memo's name for whether a memory speaks of the user.
NAMES_USER = "names-user"


def _names_user(record: MemoryRecord) -> bool:
    return names_user(record.content)


#: What the link stage reads of a memory, whichever memories a question reaches
#: (memo name, reader): read as memories enter the corpus cache
#: (:mod:`~sidecar.memory.corpus.read_ahead`), not by the first question that walks
#: to them.
READ_AHEAD: tuple[tuple[str, Reader], ...] = ((NAMES_USER, _names_user),)
