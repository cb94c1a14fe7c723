"""Subject-attribute slots: which attribute of the user (or of someone or something of
the user's) a fact sets, and to what value.

A fact is written about "User" (the extractor's form): "User lives in Phoenix",
"User's sister works at Siemens", "User's dog is called Biscuit". The subject is
"User" or "User's <owner>" (sister, dog, partner, ...); the attribute is the first
declared rule that reads the fact (:mod:`sidecar.memory.language.attributes`, every
attribute declared once, rules in priority order; the table is
``docs/attributes.md``); the value is the phrase the rule names, cut at punctuation
or a function word, and written the way the attribute declares.

A negated fact keeps its slot with the value negated ("User no longer lives in
Minneapolis": residence = "not minneapolis"); yes/no attributes fold the polarity
into the value. A single-valued slot set to another value is a contradiction; an
accumulating one is not. Anything no declaration covers has no slot, and the write
path treats it by its words alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.memory.language.attributes import REGISTRY
from sidecar.memory.language.lexicon import NEGATORS, STOPPED, negation
from sidecar.memory.language.slot_words import THINGS, VALUE_STOP
from sidecar.memory.language.text import STOPWORDS

_NEGATION = negation(*NEGATORS, *STOPPED, after=r"-free\b")


@dataclass(frozen=True, slots=True)
class Slot:
    """The attribute a fact sets (``owner:attribute`` for someone or something of the
    user's), its value, and whether the user may hold several values at once."""

    name: str
    value: str
    accumulates: bool = False


_ARTICLES = frozenset({"a", "an", "the", "user's", "users", "my", "his", "her", "their"})
_KEEP_INSIDE = frozenset({"of", "de", "la", "le", "del", "von", "van", "and"})


def _clean_value(raw: str) -> str:
    words = [w for w in raw.replace("’", "'").lower().split() if w]
    while words and words[0] in _ARTICLES:
        words.pop(0)
    kept: list[str] = []
    for word in words:
        if (word in STOPWORDS and not (kept and word in _KEEP_INSIDE)) or word in VALUE_STOP:
            break
        kept.append(word.rstrip("'"))
    while kept and kept[-1] in _KEEP_INSIDE:
        kept.pop()
    return " ".join(kept)


#: Words read as an owner ("User's <owner> ...") that are none.
_VERB_OWNERS = frozenset({"are", "is", "was", "were", "has", "had"})
_OWN_ATTRIBUTES = frozenset({"diet", "job", "work", "life", "home", "routine"})


def compatible(slot: str, a: str | None, b: str | None) -> bool:
    """Whether two different values of ``slot`` can hold at once (one is a looser
    statement of the other)."""
    return REGISTRY.compatible(slot, a, b)


def find_slot(text: str) -> Slot | None:
    """The slot ``text`` sets, if a rule covers it (the first rule that matches, in
    priority order). Dates are read in the form
    :func:`~sidecar.memory.language.dates.canonical_dates` writes them;
    :func:`~sidecar.memory.language.facts.shape` and
    :func:`~sidecar.memory.language.facts.slot_of` pass text in that form."""
    for rule, declared in REGISTRY.rules:
        match = rule.pattern.search(text)
        if match is None:
            continue
        if rule.loose:
            return Slot(declared.name, rule.fixed or match.group(0).lower())
        negated = bool(_NEGATION.search(match.group(0)))
        owner = (match.groupdict().get("owner") or "").lower()
        if owner in _VERB_OWNERS:
            continue  # "User's are called ...": an extraction slip, not an owner
        if owner in _OWN_ATTRIBUTES:
            owner = ""  # "User's diet is vegan": the user's own diet
        attribute = declared.name
        thing = match.groupdict().get("thing")
        if thing:
            thing = " ".join(thing.lower().split())
            thing = THINGS.get(thing, thing)
            attribute = thing if attribute == "attribute" else f"{attribute}:{thing}"
        name = f"{owner}:{attribute}" if owner else attribute
        if rule.flag is not None:
            return Slot(name, rule.flag[1] if negated else rule.flag[0])
        # How the value is written is the attribute's: a thing named by the generic
        # rule ("User's height is ...") is written as that attribute's values are.
        written = REGISTRY.get(attribute)
        raw = " ".join(match.group("value").lower().split())
        aliases = written.aliases if written is not None else {}
        value: str | None = aliases.get(raw) or _clean_value(match.group("value"))
        if written is not None and written.normalise is not None:
            value = written.normalise(value or "", match.group("value"))
            if value is None:
                continue
        one_at_a_time = written.one_per_owner if written is not None else None
        if one_at_a_time is not None and owner and owner.split()[-1] not in one_at_a_time:
            return Slot(name, value or "", accumulates=True)  # two daughters, two sisters
        if not value:
            continue
        return Slot(name, f"not {value}" if negated else value, declared.accumulates)
    return None
