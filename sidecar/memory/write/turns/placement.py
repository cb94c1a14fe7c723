"""Attributes by the question they answer: a change told as an event supersedes.

The slot rules (:mod:`sidecar.memory.language.slots`) read a state ("User lives in
Bristol"); people tell changes as events — "relocated to a flat in Bristol", "handed
in my notice at Deloitte, starting at KPMG", "traded in the Civic for an e-bike",
"transferred to Imperial" — and a rule per wording does not reach them. The small
embedding model does tell which *question* such a fact answers: each attribute's
declaration carries its questions (``Attribute.questions``), and a fact no rule
places is placed by its cosine to them — the best attribute at least ``min_score``
and ``margin`` ahead of the next ("User left Accenture." is nearest "What is the
user's name?" by 0.03: not placed).

A new fact that changes something ("moved", "switched", "left", "sold", "now" ...;
:func:`changes`) and falls in a single-valued attribute supersedes the owner's
memory of that attribute it is most like (placed by a rule or by its questions);
in an accumulating attribute only one whose words it names as ending ("cancelled
my PureGym membership"). Never another user's memory, never a shared one, never
one about another person ("my brother's city" is not "my city"), and never a wish
on either side ("User is looking for a new flat" is no home, and "User is hoping to
move" moves nothing). The rules stay
the first voice: the judge's own decision stands unless it added the fact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.attributes import REGISTRY, Registry
from sidecar.memory.language.changes import changes, names_ending, people_of, told
from sidecar.memory.language.entities import names_user
from sidecar.memory.language.facts import shape, slot_of
from sidecar.memory.language.text import tokens
from sidecar.memory.records.records import MemoryRecord


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a fact falls: an attribute, or None; and the attributes it is near
    (its two best by their questions, at least ``NEAR`` each)."""

    attribute: str | None
    by: str = ""  # "rule" | "questions"
    near: frozenset[str] = frozenset()


#: An attribute a fact is this near (one of its best two) may be the one it changes,
#: when the memory it would supersede is clearly of that attribute.
NEAR = 0.3


class AttributePlacer:
    """Places facts among the registry's attributes by their questions (embedded once,
    on first use) and finds what a change supersedes."""

    def __init__(self, embedder: Embedder, registry: Registry = REGISTRY) -> None:
        self._embedder = embedder
        self._registry = registry
        asked = [(a.name, q) for a in registry.attributes.values() for q in a.questions]
        self._owners = [name for name, _ in asked]
        self._questions = [q for _, q in asked]
        self._names = sorted(set(self._owners))
        #: Each attribute's question columns, in ``self._names`` order.
        self._columns = [
            [i for i, owner in enumerate(self._owners) if owner == name] for name in self._names
        ]
        self._matrix: npt.NDArray[np.float32] | None = None
        self._lock = asyncio.Lock()

    async def _ready(self) -> npt.NDArray[np.float32]:
        if self._matrix is None:
            async with self._lock:
                if self._matrix is None:
                    vectors = await self._embedder.embed(self._questions)
                    self._matrix = np.asarray(vectors, dtype=np.float32)
        return self._matrix

    def _by_attribute(self, scores: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Per row, each attribute's best question score (columns: ``self._names``)."""
        out = np.full((scores.shape[0], len(self._names)), -1.0, dtype=np.float32)
        for column, mine in enumerate(self._columns):
            out[:, column] = scores[:, mine].max(axis=1)
        return out

    async def place(
        self,
        texts: Sequence[str],
        vectors: npt.NDArray[np.float32],
        *,
        min_score: float,
        margin: float,
    ) -> list[Placement]:
        """Each text's attribute: its rule slot, else the attribute of the questions it
        is nearest — by ``min_score`` at least, ``margin`` ahead of the next."""
        found = [Placement(slot, "rule") if (slot := slot_of(t)) else None for t in texts]
        if not self._questions or all(p is not None for p in found):
            return [p or Placement(None) for p in found]
        matrix = await self._ready()
        per_attribute = self._by_attribute(np.asarray(vectors, dtype=np.float32) @ matrix.T)
        out: list[Placement] = []
        for text, row, placed in zip(texts, per_attribute, found, strict=True):
            order = np.argsort(-row)
            near = frozenset(self._names[int(i)] for i in order[:2] if row[int(i)] >= NEAR)
            near |= frozenset(told(text))
            if placed is not None:
                out.append(Placement(placed.attribute, "rule", near | {placed.attribute or ""}))
                continue
            best = float(row[order[0]])
            second = float(row[order[1]]) if len(order) > 1 else -1.0
            if best >= min_score and best - second >= margin:
                out.append(Placement(self._names[int(order[0])], "questions", near))
            else:
                out.append(Placement(None, "", near))
        return out

    async def superseded(
        self,
        text: str,
        vector: npt.NDArray[np.float32],
        candidates: Sequence[MemoryRecord],
        *,
        min_score: float,
        margin: float,
    ) -> MemoryRecord | None:
        """The memory among ``candidates`` (the owner's private active memories) that the
        change ``text`` supersedes, if any (see the module docstring)."""
        if not changes(text) or shape(text).wish:
            return None  # a wish ("User is hoping to switch ...") changes nothing yet
        # A request or wish is no value a change ends: not placed, not judged.
        candidates = [c for c in candidates if not shape(c.content).wish]
        if not candidates:
            return None
        people = people_of(text)
        near = {"min_score": min_score, "margin": margin}
        [placed] = await self.place([text], np.asarray([vector], dtype=np.float32), **near)
        vectors = np.asarray([c.embedding for c in candidates], dtype=np.float32)
        places = await self.place([c.content for c in candidates], vectors, **near)
        similarity = vectors @ np.asarray(vector, dtype=np.float32)
        ending = set(tokens(text))
        best: tuple[bool, float, MemoryRecord] | None = None
        for candidate, where, cosine in zip(candidates, places, similarity.tolist(), strict=True):
            if not names_user(candidate.content) or people_of(candidate.content) != people:
                continue  # another person's attribute ("Ana just moved to Porto.")
            # The change names the old value as what ends ("left Amazon"), and the old
            # memory holds an attribute; or one of the two is clearly of an attribute
            # and the other at least near it.
            named = names_ending(text, candidate.content) and (
                where.attribute is not None or bool(where.near)
            )
            attribute = self._registry.get(_shared(placed, where) or "")
            if attribute is None and not named:
                continue
            if (
                attribute is not None
                and attribute.accumulates
                and not (named or set(shape(candidate.content).signature) & ending)
            ):
                continue  # an accumulating value ends only where the change names it
            if best is None or (named, cosine) > best[:2]:
                best = (named, cosine, candidate)
        return best[2] if best is not None else None


def _shared(new: Placement, old: Placement) -> str | None:
    """The attribute two facts are of: both placed in it, or one placed in it (by a
    slot rule — a state: "User supports Arsenal." — or clearly by its questions) and
    the other near it."""
    if new.attribute is not None and new.attribute == old.attribute:
        return new.attribute
    if old.attribute is not None and old.attribute in new.near:
        return old.attribute
    if new.attribute is not None and new.attribute in old.near:
        return new.attribute
    return None
