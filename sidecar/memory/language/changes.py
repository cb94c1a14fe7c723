"""How a fact tells a change: cues that a value of the user's ended or was replaced
("moved", "switched", "left", "sold", "now" ...), the ones that move or leave a
*thing* instead ("left User's headphones at the gym"), an ending that names what
ends ("cancelled User's PureGym membership"), and the attributes whose events a
fact tells (each declaration's ``events``: "the movers came" is a move).

Read by the write path's placement (:mod:`sidecar.memory.write.turns.placement`),
which decides what a change supersedes, and by the embedding text
(:mod:`sidecar.memory.language.embedding_text`), which names the attribute a change
is of so the question about it finds the new value.
"""

from __future__ import annotations

import re
from functools import lru_cache

from sidecar.memory.language.attributes import REGISTRY
from sidecar.memory.language.facts import shape
from sidecar.memory.language.intent import now_tells_change
from sidecar.memory.language.text import tokens

#: What tells that a value ended or was replaced: a move, a switch, leaving, selling,
#: an end ("no longer", "anymore", "instead"), or "now" set against what was. Not
#: "new", "started" or "finally": "User is looking for some new music" changes
#: nothing that was.
_CHANGE = re.compile(
    r"\b(?:moved|relocat\w+|emigrat\w+|switched|swapped|transferr?(?:ed|ing)|left|quit|"
    r"sold|traded|handed\s+in|resigned|closed\s+on|signed\s+(?:with|for)|laid\s+off|"
    r"let\s+go|dropped|ditched|got\s+rid\s+of|cancell?ed|retired|written\s+off|"
    r"last\s+day|packed\s+up|no\s+longer|anymore|any\s+more|instead|gave\s+up|given\s+up|"
    r"replaced|movers|ended|now)\b",
    re.IGNORECASE,
)
#: Cues that move or leave a *thing*, not one of the user's values: "left User's
#: headphones at the gym", "left a review", "moved desks to the third floor". A cue
#: inside one of these tells no change.
_NOT_A_CHANGE = re.compile(
    r"\b(?:left|forgot|dropped)\s+(?:User['’]s|the|a|an|some|his|her|their)\s+(?:[\w-]+\s+)?"
    r"(?:headphones|earbuds|keys?|phone|wallet|purse|bag|backpack|umbrella|charger|laptop|"
    r"jacket|coat|hat|scarf|gloves|bottle|glasses|sunglasses|card|book|notebook|lunch|"
    r"towel|lights?|door|window|oven|stove|car|bike|stuff|things)\b"
    r"|\bleft\s+(?:a|an|some|User['’]s)\s+(?:[\w-]+\s+)?(?:reviews?|comments?|tips?|messages?|"
    r"notes?|voicemails?|ratings?|feedback)\b"
    r"|\b(?:moved|swapped|switched)\s+(?:User['’]s\s+|the\s+|our\s+|some\s+)?"
    r"(?:desks?|seats?|tables?|rooms?|floors?|furniture|sofa|couch|beds?|boxes|stuff|"
    r"things|appointments?|meetings?|calls?|flights?|shifts?|tyres|tires|plans?|"
    r"money|funds|files?|photos?|emails?)\b",
    re.IGNORECASE,
)
#: An ending that names what ends just after it ("left Amazon", "sold the corolla",
#: "cancelled User's PureGym membership", "last day at Barclays") ...
_ENDS_NEXT = re.compile(
    r"\b(?:left|quit|sold|dropped|ditched|got\s+rid\s+of|cancell?ed|retired\s+from|"
    r"gave\s+up|given\s+up|traded\s+in|handed\s+in\s+User['’]s\s+notice\s+(?:at|to)|"
    r"laid\s+off\s+(?:from|by)|let\s+go\s+(?:from|by)|last\s+day\s+(?:at|with)|stopped|"
    r"no\s+longer|moved\s+(?:out\s+of|away\s+from|from)|transferr?ed\s+from|"
    r"switched\s+from|finished\s+(?:at|with))\b",
    re.IGNORECASE,
)
#: ... or just before it ("the lease in camden ended", "the leaf got written off").
_ENDS_BEFORE = re.compile(r"\b(?:ended|written\s+off|ran\s+out|is\s+over)\b", re.IGNORECASE)
#: "ended up" after an ending cue: where the user landed, not what ended.
_UP = re.compile(r"\s+up\b", re.IGNORECASE)
#: How far (in words) an ending reaches for what it names.
_REACH = 5
#: Words too common in facts to name a value ("User works at ...", "job").
_GENERIC = frozenset({"work", "job", "live", "home", "user", "go", "get", "use", "make"})


def _outside_things(cues: re.Pattern[str], text: str) -> list[re.Match[str]]:
    """The matches of ``cues`` in ``text`` outside the spans that move or leave a
    thing (``_NOT_A_CHANGE``)."""
    things = [m.span() for m in _NOT_A_CHANGE.finditer(text)]
    return [
        m for m in cues.finditer(text) if not any(start <= m.start() < end for start, end in things)
    ]


def changes(text: str) -> bool:
    """Whether ``text`` tells that a value of the user's ended or was replaced (see
    ``_CHANGE``), or that something stopped ("no longer drinks coffee"). "Now" counts
    where it sets what is against what was, not as a stretch of time ("for six weeks
    now") or a reason ("now that it's warm"); "ended up" ends nothing."""
    cues = [
        m
        for m in _outside_things(_CHANGE, text)
        if (m.group(0).lower() != "now" or now_tells_change(text, m.start()))
        and not (m.group(0).lower() == "ended" and _UP.match(text, m.end()))
    ]
    return bool(cues) or bool(shape(text).stopped)


def _akin(a: str, b: str) -> bool:
    """One word is the other, or its stem ("nurs"/"nurse", "teach"/"teacher")."""
    if a == b:
        return True
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    return len(short) >= 4 and long.startswith(short)


def names_ending(text: str, old: str) -> bool:
    """Whether the change ``text`` names ``old``'s value as what ends: an ending
    ("left", "sold", "cancelled", "last day at" ...; "... ended") within a few words
    of a word of ``old`` that is not its verb ("User is a nurse." / "User left nursing";
    "User trains at PureGym" / "cancelled User's PureGym membership")."""
    before = shape(old)
    own = {w for w in tokens(old) if w not in _GENERIC and w != before.predicate}
    if not own:
        return False
    reached: list[str] = []
    for match in _outside_things(_ENDS_NEXT, text):
        reached += tokens(text[match.end() :])[:_REACH]
    for match in _ENDS_BEFORE.finditer(text):
        reached += tokens(text[: match.start()])[-_REACH:]
    return any(_akin(word, mine) for word in reached for mine in own)


def people_of(text: str) -> frozenset[str]:
    """The people of the user's a fact speaks of ("User's sister", "User's brother's
    city"): not a role the user holds ("User is a primary school teacher")."""
    return frozenset(
        role
        for role in shape(text).roles
        if re.search(rf"\bUser['’]s\s+(?:[a-z]+\s+)?{role}", text)
    )


@lru_cache(maxsize=1)
def _events() -> tuple[re.Pattern[str], dict[str, str]]:
    """Every attribute's events as one pattern (a named group each: one scan of a
    text, as this is read on every corpus build), and each group's attribute."""
    groups = {f"a{i}": a.name for i, a in enumerate(REGISTRY.attributes.values()) if a.events}
    attributes = {a.name: a for a in REGISTRY.attributes.values()}
    pattern = "|".join(
        f"(?P<{group}>{'|'.join(f'(?:{e})' for e in attributes[name].events)})"
        for group, name in groups.items()
    )
    return re.compile(pattern, re.IGNORECASE), groups


def told(text: str) -> tuple[str, ...]:
    """The attributes whose events ``text`` tells (``Attribute.events``), in
    declaration order."""
    pattern, groups = _events()
    found = {groups[m.lastgroup] for m in pattern.finditer(text) if m.lastgroup}
    return tuple(name for name in groups.values() if name in found)
