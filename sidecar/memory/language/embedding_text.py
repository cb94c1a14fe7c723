"""The text a memory's vector is computed from: its content, and for a fact that sets
one of the user's own attributes, the attribute's name in the words questions use
(each declaration's ``words``, :mod:`sidecar.memory.language.attributes`): "User is
officially a Perth local now" is embedded with "where User lives: home town, city",
and so is a move told as an event ("The movers came on Friday, User and others are
Hamburg people now": the attribute's ``events``).

A small sentence encoder scores a question such as "What city do I live in?" low
against a statement that never says "live" or "city"; naming the attribute lets the
question find the fact that answers it. The stored content is never changed: only
the vector carries the name. Every place that embeds a memory's content (the write
path, the admin API, imports, re-embedding after a model change) goes through
:func:`embedding_text`, so one memory always gets one vector.
"""

from __future__ import annotations

from sidecar.memory.language.attributes import REGISTRY
from sidecar.memory.language.changes import changes, people_of, told
from sidecar.memory.language.entities import names_user
from sidecar.memory.language.facts import slot_of
from sidecar.memory.language.replacement import product_kind


def attribute_words(slot: str | None) -> str | None:
    """The words for one of the user's own attributes (``None`` for someone else's:
    "sister:residence")."""
    if slot is None or (":" in slot and not slot.startswith("favorite:")):
        return None
    if slot.startswith("favorite:"):
        return f"User's favourite {slot.split(':', 1)[1]}"
    declared = REGISTRY.get(slot)
    return declared.words if declared is not None and declared.words else f"User's {slot}"


#: Longer than this, a memory is a turn kept whole, not a fact (read on every corpus
#: build: a long text is not searched for cues).
_FACT_CHARS = 400


def changed_words(content: str) -> str | None:
    """The words of the attributes a change of the user's own tells by its events
    ("User handed in User's notice at Deloitte, starting at KPMG": where User works),
    for a fact no slot rule places; None for a fact that tells no change, or one of
    someone else's ("User's sister got laid off")."""
    if len(content) > _FACT_CHARS or "User" not in content:
        return None  # a turn kept whole is no fact about "User"
    attributes = told(content)
    if not attributes or not changes(content):
        return None  # most facts tell no change
    if not names_user(content) or people_of(content):
        return None
    words = [attribute_words(name) for name in attributes]
    return "; ".join(w for w in words if w) or None


def embedding_text(content: str) -> str:
    """``content``, with its attribute's words when it sets one of the user's own
    (by a slot rule, or as a change told as an event), or the kind of thing it names
    one of ("Monzo": the user's bank)."""
    words = attribute_words(slot_of(content)) or changed_words(content)
    if words is None:
        kind = product_kind(content)
        words = f"User's {kind}" if kind else None
    return f"{content} ({words})" if words else content
