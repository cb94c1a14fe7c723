"""When a new fact replaces an old one without a slot to say so
(:func:`replaces`): the same statement with the other polarity; what the user says
they stopped ("quit vaping", "cut out coffee") or gave up a kind of ("caffeine");
one thing of a kind for another ("switched my account to Monzo"); and, on shared
words, a cue that something took another's place ("switched", "left", "is now"),
or a cue that something began where the two facts say the same with another
value. A wish or plan on either side is neither (:mod:`~sidecar.memory.language.intent`).

Read by the rule judge (:mod:`sidecar.memory.write.turns.dedup`); the shapes it
compares are :mod:`sidecar.memory.language.facts`'.
"""

from __future__ import annotations

from sidecar.memory.language.facts import (
    KINDS,
    FactShape,
    base_of,
    same_stem,
    word_bases,
    word_features,
    years_of,
)
from sidecar.memory.language.slot_words import KINDS_OF, PRODUCT_KINDS
from sidecar.memory.language.text import stem

#: Words of a change cue, left out when two facts' shared words are compared.
_CUE_WORDS = frozenset(
    {"now", "new", "nowaday", "anymore", "longer", "switch", "chang", "moved@past", "day",
     "swap@past", "trad@past", "replac@past", "upgrad@past", "instead", "go"}
)  # fmt: skip


#: Words two facts share that say nothing of what they are about: "User is looking
#: for some new music" does not replace "User is looking for coffee recipes".
_LIGHT = frozenset(
    """look think try want plan need like love enjoy get got go have make use consider
    interest start keep feel find see know hope wonder help recent really actual also
    lot thing way well lately other found""".split()
)


def _telling(words: frozenset[str]) -> set[str]:
    """``words`` less the cue words and the light ones: what they say a fact is about."""
    return {w for w in words - _CUE_WORDS if base_of(w) not in _LIGHT}


def replaces(new: FactShape, old: FactShape) -> bool:
    """Without a slot: ``new`` is the same statement as ``old`` with the other
    polarity, or says, with a cue that something took another's place ("switched",
    "no longer", "is now", "instead", ...), another value of what ``old`` says —
    they share a content word besides the cue (the same verb or noun: "drives",
    "number") and differ in a name, number or content word on both sides. A wish or
    a request on either side ("User is looking for ...", "would love to ...") is no
    value that was replaced, nor a replacement: over a long conversation, one shared
    word between such facts is a topic, not a change."""
    if new.slot is not None and new.slot == old.slot:
        return False
    if new.negated != old.negated and _same_content(new, old):
        return True  # "User does not drink coffee (anymore)" after "User drinks coffee"
    if new.stopped and not old.negated and _covered(new.stopped, old.signature):
        return True  # "User quit vaping" after "User vapes all day"
    if new.stopped and not old.negated and _kind_covers(new.stopped, old.signature):
        return True  # "User gave up caffeine" after "User drinks four espressos a day"
    if new.change and not new.negated and not old.negated and _swapped(new, old):
        return True  # "User switched to Monzo" after "User banks with Barclays"
    if not new.change or new.wish or old.wish:
        return False
    if new.negated != old.negated or years_of(new) != years_of(old):
        return False
    shared = _telling(new.signature & old.signature)
    if not shared or shared <= new.entities:
        return False  # nothing in common, or only a name: "now Luna is jealous" / "Luna's bed"
    if not new.replacing and not _one_value_for_another(new, old):
        return False  # "since March", "a new ...": something began, and ended nothing said
    return bool(new.signature - old.signature) and bool(old.signature - new.signature - _CUE_WORDS)


#: Words that say when, not what: left out when two facts' own words are counted.
_TIME_WORDS = frozenset(
    {"since", "ago", "week", "month", "year", "day", "last", "recent", "late", "until"}
).union(*KINDS)
#: A fact with a cue that something began replaces one that says the same with
#: another value: at most this many words of its own on the old side (the value
#: that ends: "Notion", "Dr. Patel on Elm Street") and on the new side.
_OLD_OWN, _NEW_OWN = 3, 3


def _one_value_for_another(new: FactShape, old: FactShape) -> bool:
    """``new`` says what ``old`` says with another value ("User has been using Obsidian
    for User's notes since January" / "User uses Notion for all User's notes"; "User
    found a new dentist, Dr. Nguyen" / "User's dentist is Dr. Patel"): few words of
    its own on either side, when and cue words aside. Two facts of a long chat that
    share a topic word say much else besides."""

    def own(a: FactShape, b: FactShape) -> set[str]:
        found = _telling(a.signature - b.signature - _TIME_WORDS)
        return {w for w in found if not (len(w) == 4 and w.isdigit())}

    old_own, new_own = own(old, new), own(new, old)
    return 0 < len(old_own) <= _OLD_OWN and 0 < len(new_own) <= _NEW_OWN


#: :data:`KINDS_OF` by stems: (the kind's words, its members' words).
_KINDS_OF = tuple(
    (frozenset(stem(w) for w in kind.split()), frozenset(stem(w) for w in members.split()))
    for kind, members in KINDS_OF.items()
)


#: :data:`PRODUCT_KINDS` by stems: (kind name, the kind's words, its names).
PRODUCT_STEMS = tuple(
    (
        kind,
        frozenset(stem(w) for w in words.split()),
        frozenset(stem(w) for w in names.split()),
    )
    for kind, (words, names) in PRODUCT_KINDS.items()
)


def product_kind(text: str) -> str | None:
    """The kind of thing a fact names one of (a bank, a phone), if any: read from its
    words alone, without the rest of a shape."""
    bases = word_bases(word_features(text))
    return next((kind for kind, _, names in PRODUCT_STEMS if bases & names), None)


def _swapped(new: FactShape, old: FactShape) -> bool:
    """With a change cue, ``new`` names one thing of a kind (Monzo) and ``old`` the
    kind (a bank) or another of its names (Barclays), not the new one: one for the
    other. About someone else in either, it is not the user's swap."""
    new_bases, old_bases = word_bases(new.signature), word_bases(old.signature)
    for kind, words, names in PRODUCT_STEMS:
        own = frozenset(kind.split())  # "password manager" is no one's manager
        if (new.roles - own) or (old.roles - own):
            continue
        chosen = new_bases & names
        if chosen and (old_bases & (names | words)) and not (old_bases & chosen):
            return True
    return False


def _kind_covers(stopped: frozenset[str], signature: frozenset[str]) -> bool:
    """``stopped`` names a kind of thing (caffeine, alcohol, meat) and ``signature``
    one of its members (espresso, lager, steak)."""
    words, bases = word_bases(stopped), word_bases(signature)
    return any(kind <= words and bases & members for kind, members in _KINDS_OF)


def _covered(words: frozenset[str], signature: frozenset[str]) -> bool:
    """Every word of ``words`` has a word of ``signature`` of the same stem (one
    a prefix of the other: "vap" / "vape")."""
    bases = word_bases(signature)
    return all(any(same_stem(w, b) for b in bases) for w in word_bases(words))


def _same_content(a: FactShape, b: FactShape) -> bool:
    """The same content words (a change cue aside), names and numbers."""
    return a.signature - _CUE_WORDS == b.signature - _CUE_WORDS and a.entities == b.entities
