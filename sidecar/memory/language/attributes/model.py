"""What an attribute's declaration holds (:class:`Attribute`), and the registry that
every reader of attributes goes through (:class:`Registry`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sidecar.memory.language.attributes.rules import Rule

#: How a value is written: ``(cleaned value, the value as matched)`` -> the value, or
#: None when the match names no value of the attribute after all.
Normalise = Callable[[str, str], str | None]


@dataclass(frozen=True, slots=True)
class Example:
    """A fact, and the slot and value it sets (``slot=None``: it sets none of this
    attribute — a near miss)."""

    text: str
    slot: str | None
    value: str | None = None


@dataclass(frozen=True, slots=True)
class Attribute:
    """One attribute of the user (or of someone or something of the user's), declared
    once: the slot finder, the supersession rules, the embedding text, the docs
    table and the tests all read this."""

    name: str
    #: The rules that recognise it (see :mod:`.rules`), each with its priority.
    rules: tuple[Rule, ...]
    #: What a question about it calls it: added to a fact's embedding text so
    #: "Where do I live?" finds "User is officially a Perth local now". "" : the
    #: attribute's name.
    words: str = ""
    #: The user may hold several values at once (languages, pets); otherwise a
    #: newer value of it supersedes the older.
    accumulates: bool = False
    #: Owners that are one at a time ("wife", "dog"): for another owner ("sister")
    #: the attribute accumulates (two sisters have two names). None: no such rule.
    one_per_owner: frozenset[str] | None = None
    #: Values that mean the same (``"from home"`` -> ``"remote"``).
    aliases: Mapping[str, str] = field(default_factory=dict)
    #: How a value is written (digits of a phone number, a measure's unit).
    normalise: Normalise | None = None
    #: Groups of values that can hold at once when one of them is in ``looser``:
    #: "no meat" is a looser statement of "vegan", not a change.
    compatible: tuple[frozenset[str], ...] = ()
    looser: frozenset[str] = frozenset()
    #: Values that differ by day of the week ("from home on Mondays", "in the office
    #: Tuesdays") are parts of one week, never a change.
    weekly: bool = False
    #: What the values are, for the docs table.
    values: str = "single"
    #: Facts that set it, and near misses that must not (the docs table and the
    #: tests are made from these).
    examples: tuple[Example, ...] = ()
    #: The questions that ask for it, about "the user": a fact no rule places is
    #: placed by how near it is to them (the write path's embedding match, with a
    #: minimum and a margin; :mod:`sidecar.memory.write.turns.placement`), so a change
    #: told as an event ("relocated to a flat in Bristol") still supersedes.
    questions: tuple[str, ...] = ()
    #: Patterns that tell a change of it as an event ("the movers came", "closed on a
    #: house", "handed in User's notice"): a fact with one is near the attribute where
    #: its questions alone leave it below the placer's bar — a second voice beside them.
    events: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Registry:
    """Every declared attribute, by name, and every rule in priority order."""

    attributes: Mapping[str, Attribute]
    #: ``(rule, its attribute)``, lowest priority first.
    rules: tuple[tuple[Rule, Attribute], ...]

    @classmethod
    def of(cls, declared: Iterable[Attribute]) -> Registry:
        attributes: dict[str, Attribute] = {}
        for attribute in declared:
            if attribute.name in attributes:
                raise ValueError(f"attribute {attribute.name!r} is declared twice")
            attributes[attribute.name] = attribute
        pairs = [(rule, a) for a in attributes.values() for rule in a.rules]
        priorities = [rule.priority for rule, _ in pairs]
        if len(set(priorities)) != len(priorities):
            taken = sorted(p for p in set(priorities) if priorities.count(p) > 1)
            raise ValueError(f"rule priorities used twice: {taken}")
        pairs.sort(key=lambda pair: pair[0].priority)
        return cls(MappingProxyType(attributes), tuple(pairs))

    def get(self, name: str) -> Attribute | None:
        return self.attributes.get(name)

    def weekly(self, slot: str | None) -> bool:
        """Whether ``slot`` (the user's own attribute) takes values per weekday."""
        found = self.attributes.get(slot or "")
        return found is not None and found.weekly

    def compatible(self, slot: str, a: str | None, b: str | None) -> bool:
        """Whether two different values of ``slot`` can hold at once (one is a looser
        statement of the other, e.g. "no meat" of "vegan")."""
        found = self.attributes.get(slot.rsplit(":", 1)[-1])
        if found is None:
            return False
        looser = found.looser
        return any(
            a in group and b in group and (a in looser or b in looser) for group in found.compatible
        )
