"""Clustering, naming and summaries for the category tree: pure and deterministic.

* :func:`split_clusters` — KMeans on (unit) embeddings with ``k`` chosen by cosine
  silhouette in ``2..max_children``; clusters below ``min_size`` are merged into
  their nearest sibling and near-identical ones (centroid cosine at least
  ``merge_threshold``) into each other. Fixed ``random_state``; the caller passes
  rows in a fixed order (sorted ids), so the same input gives the same clusters.
* :func:`distinctive_terms` — class-based TF-IDF (c-TF-IDF): a term weighs
  ``tf(t, c) * log(1 + A / f(t))``, with ``tf`` the share of the class's term
  occurrences (each member counts a term once), ``f(t)`` the term's occurrences
  over all classes and ``A`` the average occurrences per class. The caller adds
  the owner's other memories as a background class, so words common to everything
  the owner says ("caroline", "think") never name a category.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from sidecar.memory.language.text import STOPWORDS, normalize, stem
from sidecar.memory.records.vectors import Matrix, centroid

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_KMEANS_INITS = 4
_SEED = 0


def split_clusters(
    vectors: Matrix,
    *,
    max_children: int,
    min_size: int,
    merge_threshold: float,
    target_size: int,
) -> list[list[int]]:
    """Row indices of ``vectors`` grouped into clusters (each sorted; clusters ordered
    by their first index). One cluster means "do not split".

    ``k`` runs from ``ceil(n / target_size)`` (enough clusters to get below the split
    size in one step: a flat tree, not a chain of two-way splits) to
    ``max_children``, and at most ``n / min_size``; the best cosine silhouette wins.
    """
    n = len(vectors)
    distinct = int(np.unique(vectors, axis=0).shape[0]) if n else 0
    upper = min(max_children, n // max(min_size, 1), distinct)
    if upper < 2:
        return [list(range(n))]
    lower = min(max(2, math.ceil(n / max(target_size, 1))), upper)
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.metrics import silhouette_score
    from threadpoolctl import threadpool_limits

    best_score = -math.inf
    best: npt.NDArray[np.int64] | None = None
    data = np.asarray(vectors, dtype=np.float64)
    # One OpenMP thread: on a few hundred rows KMeans spends more time starting
    # threads than computing, and the result cannot depend on the machine's core count.
    with threadpool_limits(limits=1, user_api="openmp"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for k in range(lower, upper + 1):
            model = KMeans(n_clusters=k, random_state=_SEED, n_init=_KMEANS_INITS)
            labels = model.fit_predict(data)
            if np.unique(labels).size < 2:
                continue
            if lower == upper:  # a single candidate: no O(n^2) silhouette to choose it
                best = labels
                break
            score = float(silhouette_score(data, labels, metric="cosine"))
            if score > best_score + 1e-9:
                best_score, best = score, labels
    if best is None:
        return [list(range(n))]
    groups = [np.flatnonzero(best == label).tolist() for label in np.unique(best)]
    return merge_groups(vectors, groups, min_size=min_size, merge_threshold=merge_threshold)


def merge_groups(
    vectors: Matrix, groups: Iterable[Sequence[int]], *, min_size: int, merge_threshold: float
) -> list[list[int]]:
    """Merge the smallest group below ``min_size`` into its nearest sibling, then the
    most similar pair at or above ``merge_threshold``, until neither applies."""
    work = sorted((sorted(int(i) for i in g) for g in groups if len(g)), key=lambda g: g[0])
    while len(work) > 1:
        centres = np.stack([centroid(vectors[g]) for g in work])
        similar = centres @ centres.T
        np.fill_diagonal(similar, -np.inf)
        small = [i for i, g in enumerate(work) if len(g) < min_size]
        if small:
            i = min(small, key=lambda s: (len(work[s]), work[s][0]))
            j = int(np.argmax(similar[i]))  # first maximum: deterministic
        else:
            flat = int(np.argmax(similar))
            i, j = divmod(flat, len(work))
            if similar[i, j] < merge_threshold:
                break
        keep, drop = min(i, j), max(i, j)
        work[keep] = sorted(work[keep] + work[drop])
        del work[drop]
        work.sort(key=lambda g: g[0])
    return work


def words(text: str) -> list[tuple[str, str]]:
    """(stem, surface word) for the content words of ``text`` usable in names:
    at least three characters, with a letter, not a stop word."""
    out = []
    for word in _WORD.findall(normalize(text)):
        if word in STOPWORDS or len(word) < 3 or not any(c.isalpha() for c in word):
            continue
        out.append((stem(word), word))
    return out


def distinctive_terms(
    counts: Sequence[Counter[str]], sizes: Sequence[int], limit: int, *, named: int | None = None
) -> list[list[str]]:
    """The ``limit`` most distinctive terms of each of the first ``named`` classes
    (default: all). ``counts[i]`` counts, per term, the documents of class ``i`` that
    contain it; ``sizes[i]`` is the class's number of documents. Terms shared by two
    or more of a class's documents come first."""
    overall: Counter[str] = Counter()
    for count in counts:
        overall.update(count)
    average = sum(sum(c.values()) for c in counts) / max(len(counts), 1)
    out: list[list[str]] = []
    for index in range(len(counts) if named is None else named):
        count = counts[index]
        total = sum(count.values()) or 1
        multi = sizes[index] > 1
        weights = {
            term: n / total * math.log(1 + average / overall[term]) for term, n in count.items()
        }
        ranked = sorted(count, key=lambda t: (multi and count[t] < 2, -weights[t], t))
        out.append(ranked[:limit])
    return out


def surface_forms(texts: Iterable[str]) -> dict[str, str]:
    """stem -> its most frequent surface word (ties: alphabetical)."""
    seen: dict[str, Counter[str]] = {}
    for text in texts:
        for term, word in words(text):
            seen.setdefault(term, Counter())[word] += 1
    return {
        term: min(forms.items(), key=lambda item: (-item[1], item[0]))[0]
        for term, forms in seen.items()
    }
