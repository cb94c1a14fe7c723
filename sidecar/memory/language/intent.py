"""Two readings of a fact that decide whether its words may end another fact.

* :func:`wish`: the fact tells what the user is looking for, thinking of, interested
  in, would love, wants, needs or will do — a request, a wish, a consideration, a
  plan. A wish is
  neither a state that a later fact makes false nor a change that ends one: "User is
  looking for some book recommendations" stays true when the user later starts a
  book club, and "User is thinking of learning the saxophone now" ends no trumpet.
* :func:`replacing`: the fact tells that something took the place of what was
  ("switched", "moved", "left", "instead", "no longer", "used to", "User's new
  routine", "is now a ..."), not only that something began or is new ("started",
  "since March", "a new pair", "finally", "for six weeks now", "now that it's warm").

Read by :func:`sidecar.memory.language.replacement.replaces`, whose word-overlap rule
would otherwise supersede, across a long conversation, every earlier fact that shares
one content word with a later one; and by retrieval's cues, with :func:`asks_past`:
"What did I buy?" is not answered by "User is looking to buy …".
"""

from __future__ import annotations

import re

#: Words that say one value took another's place.
_REPLACING = re.compile(
    r"\b(?:moved|relocated|switched|switching|changed|nowadays|anymore|any\s+more|"
    r"no\s+longer|quit|quitting|used\s+to|became|left|these\s+days|swapped|swapping|"
    r"traded|replaced|upgraded|from\s+now\s+on|go-to|instead|no\s+more)\b"
    # a new value of something the user has: "User's new routine is ..."
    r"|\bUser['’]s\s+new\s+[a-z]+(?:\s+[a-z]+)?\s+(?:is|are|was|were)\b",
    re.IGNORECASE,
)
_NOW = re.compile(r"\bnow\b", re.IGNORECASE)
#: Words before "now" that make it no change: "for now", "right now", "by now", and a
#: stretch of time ("for six weeks now", "a while now").
_NOT_CHANGE_BEFORE = frozenset(
    """for right just by until till up about as from even
    second seconds minute minutes hour hours day days week weeks month months year
    years while ages time""".split()
)
#: What after "now" makes it no change: "now that ...", "now and then".
_NOT_CHANGE_AFTER = re.compile(r"^\s*(?:that\b|and\s+then\b)", re.IGNORECASE)

#: The user's wish, request or consideration, at the head of a fact ("User is
#: actually really interested in ...", "Since it rains, User would love ...").
_WISH = re.compile(
    r"^(?:[^,;.]{0,60},\s*)?User\s+"
    r"(?:(?:is|was|has\s+been|had\s+been|'s|’s)\s+)?"
    r"(?:(?:also|actually|really|still|just|currently|now|definitely|seriously|"
    r"kind\s+of|sort\s+of|always|particularly|especially|even|totally|mainly|mostly)\s+)*"
    r"(?:looking\s+(?:for|to|into|at)|thinking|considering|planning|hoping|wondering|"
    r"trying\s+to\s+(?:find|decide|figure|get|plan|choose|pick|learn)|interested|curious|"
    r"keen|eager|open\s+to|in\s+the\s+mood|on\s+the\s+hunt|"
    r"(?:would|'d|’d)\s+(?:love|like|really\s+like|prefer)|wants?|needs?|wish(?:es)?|"
    r"wonders?|hopes?|plans?\s+to|intends?\s+to|"
    # a plan: "User will check out ...", "User thinks User will ...", "is going to"
    r"(?:thinks\s+User\s+)?(?:will|'ll|’ll|might|may|going\s+to|gonna)\b(?!\s+have\s+been))\b",
    re.IGNORECASE,
)


def replacing(text: str) -> bool:
    """Whether ``text`` tells that something took the place of what was (see the
    module docstring)."""
    if _REPLACING.search(text):
        return True
    return any(now_tells_change(text, match.start()) for match in _NOW.finditer(text))


def now_tells_change(text: str, start: int) -> bool:
    """Whether the "now" at ``start`` in ``text`` sets what is against what was ("is
    now a product manager", "Korean now"), not a stretch of time or a reason ("for six
    weeks now", "now that it's warm", "right now", "for now")."""
    before = text[:start].split()
    word_before = before[-1].strip(",;:()").lower() if before else ""
    after = text[start + len("now") :]
    return word_before not in _NOT_CHANGE_BEFORE and not _NOT_CHANGE_AFTER.match(after)


def wish(text: str) -> bool:
    """Whether ``text`` (a fact about "User") tells a wish, request or consideration
    of the user's rather than a state (see the module docstring)."""
    return _WISH.search(text) is not None


#: Irregular past forms a question about what the user did uses ("what did I ...",
#: "the airline I flew with", "how long was I ..."), besides any "-ed" form.
_PAST_FORMS = (
    "went|got|bought|saw|met|made|took|had|did|spent|flew|flied|ran|ate|wrote|read|"
    "gave|sent|told|said|won|lost|wore|began|left|paid|sold|found|kept|brought|built|"
    "caught|felt|heard|held|chose|drove|rode|sang|swam|threw|became|came|sat|slept|"
    "taught|thought|put|set|cut|hit|let|quit|gone|gotten|seen|taken|done|eaten|"
    "written|given|flown|been|worn|ridden|driven|chosen"
)
_ASKS_PAST = re.compile(
    r"\b(?:did|was|were|had)\s+(?:I|we)\b"
    rf"|\b(?:have|has)\s+(?:I|we)\s+(?:\w{{2,}}(?<!e)ed|{_PAST_FORMS})\b"
    rf"|\b(?:I|we)\s+(?:(?:just|recently|also|once|first|last|finally|actually)\s+)?"
    rf"(?:\w{{2,}}(?<!e)ed|{_PAST_FORMS})\b",
    re.IGNORECASE,
)


#: A question about a wish itself ("What did I say I wanted to buy?", "Which trip
#: was I planning?") is answered by one.
_ASKS_WISH = re.compile(
    r"\b(?:want(?:ed|s)?|plann?(?:ed|ing)?|hop(?:e|ed|ing)|wish(?:ed)?|thinking|considering|"
    r"looking\s+(?:for|to|into)|interested|would\s+(?:like|love)|intend(?:ed)?|wonder(?:ed)?)\b",
    re.IGNORECASE,
)


def asks_past(question: str) -> bool:
    """Whether ``question`` asks about something the user did or was ("When did I
    ...", "How long was I in Japan?", "the feed I purchased", "How many weddings
    have I attended?"): answered by what happened, not by a wish. A question that
    asks about a wish ("What did I say I wanted ...") is not."""
    return _ASKS_PAST.search(question) is not None and _ASKS_WISH.search(question) is None
