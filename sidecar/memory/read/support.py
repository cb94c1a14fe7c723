"""Every injected line has evidence of its own, or a named bridge to one that has.

Link, session-neighbour and associative expansion find memories on their
referrer's evidence: "User is vegetarian." linked to "User lives in Porto." through
their session ranks for "Where do I live?" with a cosine of 0.06. Ranking them is
useful (a bridge lifts the fact it names); injecting them costs tokens and misleads
the model. So a memory that reached the ranking only through a link
(``Hit.via`` other than ``direct``: no evidence of its own above the gate) is
injected only as a **named bridge** — it names someone or something (a proper name)
that a memory found on its own evidence names too ("User's father is Piotr." found,
"Piotr retired from teaching maths." linked) — and its ``via`` then says so
(``bridge: Piotr``), for the explanation. Otherwise it may rank, and is withheld.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from sidecar.config import RetrievalConfig
from sidecar.memory.language.entities import names
from sidecar.memory.read.block import distinct_hits
from sidecar.memory.read.retrieval.signals import evident
from sidecar.memory.records.records import Hit

DIRECT = "direct"
BRIDGE = "bridge: "


def found_on_its_own(hit: Hit) -> bool:
    """The hit had evidence of its own (it was not admitted on a referrer's)."""
    return hit.via == DIRECT or hit.via.startswith(BRIDGE)


def bridge_name(hit: Hit, found: Sequence[Hit]) -> str | None:
    """A proper name ``hit`` shares with one of ``found`` (memories with evidence of
    their own), if any (the first in ``hit``'s text order)."""
    own = names(hit.record.content)
    if not own:
        return None
    theirs = {name for other in found for name in names(other.record.content)}
    shared = sorted(own & theirs, key=hit.record.content.find)
    return shared[0] if shared else None


def with_support(hits: Sequence[Hit], withheld: list[Hit], top_k: int) -> Iterator[Hit]:
    """``hits`` (ranked) less the linked memories without a named bridge to a
    memory found on its own evidence that is sure to be injected beside it
    (appended to ``withheld``); a bridged one carries its bridge in ``via``.

    The memories sure to be injected are those found on their own among the first
    ``top_k`` distinct hits: withholding a linked one only lets more in below. A
    bridge to a memory ranked past them could name a line the model never sees."""
    found = [hit for hit in distinct_hits(hits, top_k) if found_on_its_own(hit)]
    for hit in hits:
        if found_on_its_own(hit):
            yield hit
            continue
        name = bridge_name(hit, found)
        if name is None:
            withheld.append(hit)
        else:
            yield replace(hit, via=f"{BRIDGE}{name}")


def unsupported(hits: Iterable[Hit], config: RetrievalConfig) -> int:
    """How many of ``hits`` (a block's lines) have neither evidence of their own — the
    evidence gate of ``config`` on their cosine and lexical share — nor a name in
    common with a line that has: what ``sidecar eval`` reports, from the signals
    alone (not from ``via``)."""
    lines = list(hits)

    def own(hit: Hit) -> bool:
        signals = hit.signals
        return evident(signals.get("cosine", -1.0), signals.get("lexical", 0.0), config)

    supported = [hit for hit in lines if own(hit)]
    named = {name for hit in supported for name in names(hit.record.content)}
    return sum(1 for hit in lines if not own(hit) and not (names(hit.record.content) & named))
