"""The user's attributes, each declared once: the rules that recognise it, whether
it accumulates, its aliases and compatible values, whether it is weekly, what a
question calls it, and examples (:mod:`.life`, :mod:`.person`).

:data:`REGISTRY` is what every reader goes through: the slot finder
(:mod:`sidecar.memory.language.slots`), supersession (compatible values, weekly
attributes), the embedding text (the words a question uses), the docs table
(``docs/attributes.md``, :func:`table`) and the tests (each declaration's
examples). Adding an attribute is one declaration, with its examples, in one of
those modules and in the tuple it ends with.
"""

from __future__ import annotations

from sidecar.memory.language.attributes.life import LIFE
from sidecar.memory.language.attributes.model import Attribute, Example, Registry
from sidecar.memory.language.attributes.person import PERSON

REGISTRY = Registry.of((*LIFE, *PERSON))

__all__ = ["REGISTRY", "Attribute", "Example", "Registry", "table"]


def table() -> str:
    """The attributes as a Markdown table (``docs/attributes.md``)."""
    rows = [
        "| attribute | values | a question calls it | example | near miss |",
        "|---|---|---|---|---|",
    ]
    for attribute in sorted(REGISTRY.attributes.values(), key=lambda a: a.name):
        setting = next((e for e in attribute.examples if e.slot is not None), None)
        miss = next((e for e in attribute.examples if e.slot is None), None)
        rows.append(
            f"| {attribute.name} | {attribute.values}{', weekly' if attribute.weekly else ''} "
            f"| {attribute.words or '—'} "
            f"| {setting.text if setting else ''} → `{setting.slot if setting else ''}` = "
            f"`{setting.value if setting else ''}` | {miss.text if miss else ''} |"
        )
    return "\n".join(rows) + "\n"
