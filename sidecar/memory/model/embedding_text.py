"""The text a memory's vector is computed from: its content, and for a fact that sets
one of the user's own attributes (:mod:`sidecar.memory.model.slots`), the
attribute's name in the words questions use ("User is officially a Perth local now"
is embedded with "where User lives: home town, city").

A small sentence encoder scores a question such as "What city do I live in?" low
against a statement that never says "live" or "city"; naming the attribute lets the
question find the fact that answers it. The stored content is never changed: only
the vector carries the name. Every place that embeds a memory's content (the write
path, the admin API, imports, re-embedding after a model change) goes through
:func:`embedding_text`, so one memory always gets one vector.
"""

from __future__ import annotations

from sidecar.memory.model.facts import product_kind, slot_of

#: What each attribute is, as a question about it would put it.
ATTRIBUTE_WORDS: dict[str, str] = {
    "residence": "where User lives: home town, city",
    "employer": "where User works: employer, company, job",
    "occupation": "User's job: work, occupation",
    "workplace": "where User works from: home or office",
    "bedtime": "when User goes to bed: bedtime",
    "name": "what to call User: name",
    "diet": "what User eats: diet",
    "alcohol": "whether User drinks alcohol",
    "smoking": "whether User smokes",
    "vaping": "whether User vapes",
    "phone": "User's phone number",
    "email": "User's email address",
    "birthday": "User's birthday",
    "age": "how old User is: age",
    "weight": "how much User weighs: weight",
    "height": "how tall User is: height",
    "car": "the car User drives",
    "team": "the team User supports",
    "native language": "User's native language",
    "language": "languages User speaks",
    "allergy": "what User is allergic to: allergies",
    "hobby": "User's hobbies and sports",
    "pets": "User's pets",
    "relationship": "User's relationship: partner, dating, single or married",
}


def attribute_words(slot: str | None) -> str | None:
    """The words for one of the user's own attributes (``None`` for someone else's:
    "sister:residence")."""
    if slot is None or (":" in slot and not slot.startswith("favorite:")):
        return None
    if slot.startswith("favorite:"):
        return f"User's favourite {slot.split(':', 1)[1]}"
    return ATTRIBUTE_WORDS.get(slot, f"User's {slot}")


def embedding_text(content: str) -> str:
    """``content``, with its attribute's words when it sets one of the user's own,
    or the kind of thing it names one of ("Monzo": the user's bank)."""
    words = attribute_words(slot_of(content))
    if words is None:
        kind = product_kind(content)
        words = f"User's {kind}" if kind else None
    return f"{content} ({words})" if words else content
