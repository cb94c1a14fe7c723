"""What a fact says, read by rules from its text: the write path's notion of "the same
fact", "a different fact" and "a newer value of the same thing".

A :class:`FactShape` holds

* ``negated``: the fact is negated ("does not", "never", "no longer", "quit", "-free");
* ``signature``: its content words — stems, with a past form marked as such
  ("visited" and "visiting" differ, "lives" and "living" do not) — and numbers;
* ``entities``: names (capitalised words), numbers, e-mail addresses and phone
  numbers;
* ``slot`` and ``value`` (see :mod:`sidecar.memory.language.slots`): the attribute of
  the user the fact sets, and its value, where the fact has one ("User lives in
  Phoenix" -> ``residence`` = ``phoenix``); ``accumulates`` when the user may hold
  several values at once (allergies, languages, hobbies);
* ``change``: a change cue ("moved", "switched", "now", "new", "anymore", "quit",
  "started", "used to"); ``replacing`` when the cue says something took another's
  place, not only that something began; ``wish`` when the fact is a request or a
  wish rather than a state (:mod:`sidecar.memory.language.intent`).

:func:`equivalent` says two facts state the same thing (the same slot and value and
polarity, or the same content, entities and polarity); :func:`differs` says they can
never be one fact (another entity, number or polarity). Both are conservative:
anything unclear is neither, and the write path keeps both facts. Whether one fact
replaces another without a slot is :mod:`sidecar.memory.language.replacement`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from sidecar.memory.language.attributes import REGISTRY
from sidecar.memory.language.dates import canonical_dates
from sidecar.memory.language.intent import replacing, wish
from sidecar.memory.language.lexicon import (
    ACQUAINTANCES,
    EMAIL_PATTERN,
    FAMILY,
    IRREGULAR_PAST,
    MONTHS,
    NEGATORS,
    NOTHING_WORDS,
    PARENTS,
    PARTNERS,
    STOPPED,
    WEEKDAYS,
    WORD,
    negation,
)
from sidecar.memory.language.slots import compatible, find_slot
from sidecar.memory.language.text import STOPWORDS, normalize, stem

_NUMBER = re.compile(r"\d[\d.,:/-]*\d|\d")
_PHONE = re.compile(r"(?:\+|\b)\d[\d ()./-]{5,}\d\b")
_CAPITALISED = re.compile(r"\b[A-Z][\w'’-]*")

_FILLER = STOPWORDS | {
    "user", "users", "s", "t", "also", "really", "just", "very", "actually", "pretty",
    "quite", "still", "currently", "now", "lol", "haha",
}  # fmt: skip
_NEGATION = negation(*NEGATORS, *NOTHING_WORDS, *STOPPED, "avoids?", "free")
_CHANGE = re.compile(
    r"\b(?:moved|moving|relocated|switched|switching|changed|new|now|nowadays|anymore|"
    r"any\s+more|no\s+longer|quit|quitting|started|starting|used\s+to|became|left|"
    r"joined|finally|these\s+days|since|swapped|swapping|traded|replaced|upgraded|"
    r"from\s+now\s+on|go-to|instead|no\s+more)\b",
    re.IGNORECASE,
)
#: Capitalised words that are not names.
_NOT_NAMES = frozenset(
    """User I I'm I've I'd I'll The A An My We Our It This That These Those He She They
    And But Or So If When Then There Here""".split()
) | frozenset(day.title() for day in WEEKDAYS)


#: "quit vaping", "stopped doing yoga", "no longer drinks coffee": what the user stopped.
_STOPPED = re.compile(
    r"\b(?:quit|quitted|stopped|gave\s+up|given\s+up|kicked|no\s+longer|no\s+more|sold|"
    r"cut\s+out|"
    r"got\s+rid\s+of|traded\s+in|ditched|dropped\s+out\s+of|moved\s+out\s+of|"
    r"moved\s+away\s+from)\s+"
    r"(?:the\s+|User['’]s\s+|doing\s+|going\s+to\s+)?(?P<what>[^,.;:!?]+)|"
    r"\b(?:(?:does|do|did)\s+not|(?:does|do|did)n['’]t)\s+(?P<before>[^,.;:!?]+?)\s+"
    r"(?:any\s?more|any\s+longer)\b|"
    r"(?:^|[,;]\s*|\bUser\s+is\s+)not\s+(?P<doing>[a-z]+ing\s+[^,.;:!?]+?)\s+"
    r"(?:any\s?more|any\s+longer)\b|"
    r"\b(?:is|are|was|were)\s+not\s+(?:in|with|at|on|part\s+of|a\s+member\s+of|into)\s+"
    r"(?P<inside>[^,.;:!?]+?)\s+(?:any\s?more|any\s+longer)\b",
    re.IGNORECASE,
)
_ADVERB = re.compile(r"[a-z]{3,}ly$")
_DETERMINERS = frozenset({"the", "a", "an", "any", "my", "user's", "his", "her", "their"})
#: Verbs of having before what was stopped ("does not have a dog anymore").
_POSSESSING = frozenset({"have", "has", "own", "owns", "keep", "keeps"})


_USER_VERB = re.compile(r"\bUser\s+(?P<rest>(?:[a-z]+\s+){0,4}[a-z]+)")
_AUXILIARIES = frozenset(
    """has have had been does do did will would can could should may might must also
    still really just now actually usually always often never not no longer even
    currently recently finally mostly pretty much already cannot can't won't""".split()
)
_COPULAS = frozenset({"is", "was", "are", "were", "be", "being", "gets", "got", "feels"})
#: The days of the week (as stems).
_WEEKDAYS = frozenset(stem(w) for w in (*WEEKDAYS, "weekday", "weekend"))
#: Words of one kind: two facts with different ones are two facts.
KINDS = (
    _WEEKDAYS,
    *(
        frozenset(stem(w) for w in words.split())
        for words in (
            " ".join(MONTHS).lower(),
            "spring summer autumn winter",
            "left right",
            "morning afternoon evening night",
        )
    ),
)
#: People other than the user a fact can be about: another one is another fact.
_ROLES = frozenset((*PARENTS, *PARTNERS, *FAMILY, *ACQUAINTANCES))


@dataclass(frozen=True, slots=True)
class FactShape:
    negated: bool
    signature: frozenset[str]
    entities: frozenset[str]
    slot: str | None = None
    value: str | None = None
    accumulates: bool = False
    change: bool = False
    #: The content words of what the fact says the user stopped doing ("quit vaping").
    stopped: frozenset[str] = frozenset()
    #: The verb the user is the subject of ("User also coaches" -> coach), when it is
    #: not a copula or an auxiliary.
    predicate: str | None = None
    #: Words for people other than the user the fact is about (sister, neighbour).
    roles: frozenset[str] = frozenset()
    #: A cue that something took another's place ("switched", "is now", "instead").
    replacing: bool = False
    #: A request, wish or consideration ("looking for", "would love"), not a state.
    wish: bool = False


def _feature(word: str) -> str | None:
    base = word.split("'")[0].split("’")[0]
    if not base or base in _FILLER:
        return None
    if base.isdigit():
        return base
    past = base in IRREGULAR_PAST or (
        base.endswith("ed") and not base.endswith("eed") and len(base) > 4
    )
    root = stem(base)
    if base.endswith(("ing", "ed")) and len(root) >= 4 and root[-1] == root[-2] not in "lsz":
        root = root[:-1]  # running -> run, swapped -> swap (not called, kissed)
    return root + ("@past" if past else "")


def _entities(text: str) -> frozenset[str]:
    found: set[str] = set()
    found.update(e.lower() for e in EMAIL_PATTERN.findall(text))
    found.update(re.sub(r"\D", "", p) for p in _PHONE.findall(text))
    found.update(n.replace(",", "") for n in _NUMBER.findall(EMAIL_PATTERN.sub(" ", text)))
    for match in _CAPITALISED.finditer(text):
        word = match.group(0).rstrip("'’")
        start = match.start()
        sentence_start = start == 0 or text[:start].rstrip().endswith((".", "!", "?", ":"))
        if word in _NOT_NAMES or word.split("'")[0] in _NOT_NAMES or sentence_start:
            continue
        found.add(normalize(word.split("'")[0].split("’")[0]))
    return frozenset(found)


def _words(text: str) -> list[str]:
    return [w.replace("’", "'") for w in WORD.findall(normalize(text))]


def _signature(words: list[str]) -> frozenset[str]:
    return frozenset(f for f in (_feature(w) for w in words) if f is not None)


def word_features(text: str) -> frozenset[str]:
    """The content words of ``text`` as a signature has them (no other reading)."""
    return _signature(_words(text))


def base_of(feature: str) -> str:
    """A feature without its tense mark ("got@past": "got")."""
    return feature.split("@", 1)[0]


def word_bases(features: frozenset[str]) -> frozenset[str]:
    """Features without their tense mark ("switch@past" -> "switch")."""
    return frozenset(base_of(f) for f in features)


@lru_cache(maxsize=8192)
def shape(text: str) -> FactShape:
    """The shape of one fact's text (cached: a memory's text is read many times).
    Dates are read in one form first ("nov 14" and "14/11" are "November 14")."""
    text = canonical_dates(text)
    words = _words(text)
    signature = _signature(words)
    slot = find_slot(text)
    stopped = _stopped(text)
    return FactShape(
        negated=bool(_NEGATION.search(text)),
        signature=signature,
        entities=_entities(text),
        slot=slot.name if slot is not None else None,
        value=slot.value if slot is not None else None,
        accumulates=slot.accumulates if slot is not None else False,
        change=bool(_CHANGE.search(text)),
        stopped=stopped,
        predicate=_predicate(text),
        roles=frozenset(w.split("'")[0] for w in words if w.split("'")[0] in _ROLES),
        replacing=replacing(text),
        wish=wish(text),
    )


def _predicate(text: str) -> str | None:
    match = _USER_VERB.search(text)
    if match is None:
        return None
    words = match.group("rest").lower().split()
    for i, word in enumerate(words):
        if word in _AUXILIARIES:
            continue
        if word in _COPULAS:
            following = words[i + 1] if i + 1 < len(words) else ""
            if not (following.endswith("ing") and len(following) > 4):
                return None  # "User is a nurse": no verb of the user's
            word = following  # "User is running"
        if not word.isalpha():
            return None
        return (_feature(word) or "").split("@")[0] or None
    return None


def _stopped(text: str) -> frozenset[str]:
    """The object of a "quit / stopped / no longer / not ... anymore / not in ...
    anymore": its words up to the first function word, number or adverb ("quit
    vaping 40 days ago" -> vap, "is not in a band anymore" -> band)."""
    match = _STOPPED.search(text)
    if match is None:
        return frozenset()
    words: list[str] = []
    what = (
        match.group("what")
        or match.group("before")
        or match.group("inside")
        or match.group("doing")
    )
    words_read = WORD.findall(what.lower())
    while words_read and words_read[0] in _POSSESSING:
        words_read.pop(0)  # "does not have a dog anymore": the dog
    for word in words_read:
        if word in _DETERMINERS:
            continue
        if word in STOPWORDS or word[0].isdigit() or _ADVERB.match(word) or word == "user":
            break
        words.append(word)
    return frozenset(f for f in (_feature(w) for w in words) if f is not None)


@lru_cache(maxsize=1 << 17)
def slot_of(text: str) -> str | None:
    """The slot ``text`` sets: :func:`shape`'s, cached apart and for many more texts
    (the write path asks it of every memory of a user that could hold a new fact's
    slot; a shape is far larger than a slot name)."""
    found = find_slot(canonical_dates(text))
    return found.name if found is not None else None


def same_value(a: str | None, b: str | None) -> bool:
    """Two values of one slot name the same thing: equal, or one names a part of the
    other ("bucks" / "milwaukee bucks"), with the same polarity."""
    if a is None or b is None:
        return a == b
    if a.startswith("not ") != b.startswith("not "):
        return False
    wa, wb = {stem(w) for w in a.split()}, {stem(w) for w in b.split()}
    return wa <= wb or wb <= wa


def equivalent(a: FactShape, b: FactShape) -> bool:
    """``a`` and ``b`` state the same fact (a slot's value carries its polarity)."""
    if a.slot is not None and a.slot == b.slot and a.value is not None:
        return same_value(a.value, b.value)
    return a.negated == b.negated and a.signature == b.signature and a.entities == b.entities


def differs(a: FactShape, b: FactShape) -> bool:
    """``a`` and ``b`` can never be one fact: another polarity, another entity or
    number, another value of one slot, or content words that one has and the other
    lacks (in both directions)."""
    if a.negated != b.negated or a.entities != b.entities:
        return True
    if a.slot is not None and a.slot == b.slot and not same_value(a.value, b.value):
        return True
    return bool(a.signature - b.signature) and bool(b.signature - a.signature)


def richer(new: FactShape, old: FactShape) -> bool:
    """``new`` says everything ``old`` says and more (same polarity, a superset of
    its content words and entities)."""
    return (
        new.negated == old.negated
        and new.signature > old.signature
        and new.entities >= old.entities
    )


def conflicts(new: FactShape, old: FactShape) -> bool:
    """``new`` sets the same single-valued slot as ``old`` to another value (or the
    same value with the other polarity): ``old`` is no longer true."""
    if new.slot is None or new.slot != old.slot or new.accumulates:
        return False
    if years_of(new) and years_of(old) and years_of(new) != years_of(old):
        return False  # events of other years ("married in 2015", "engaged in 2014")
    if REGISTRY.weekly(new.slot) and _days(new) != _days(old):
        return False  # parts of one week ("from home on Mondays", "in the office Tuesdays")
    return not same_value(new.value, old.value) and not compatible(new.slot, new.value, old.value)


def same_stem(a: str, b: str) -> bool:
    return len(min(a, b, key=len)) >= 3 and (a.startswith(b) or b.startswith(a))


def _days(fact: FactShape) -> frozenset[str]:
    """The days of the week a fact names (as stems)."""
    return fact.signature & _WEEKDAYS


def years_of(fact: FactShape) -> frozenset[str]:
    return frozenset(
        e for e in fact.entities if len(e) == 4 and e.isdigit() and e[:2] in ("19", "20")
    )


def contrasts(a: FactShape, b: FactShape) -> bool:
    """``a`` and ``b`` are a near miss, never one fact however similar: another
    polarity, subject or slot value; names or numbers on both sides that the other
    lacks; or one or two content words swapped for others (dog / cat, left knee /
    right ankle, visited / visiting, Tuesday / Thursday)."""
    if equivalent(a, b):
        return False
    if (
        a.slot is not None
        and b.slot is not None
        and (
            a.slot != b.slot
            or not (same_value(a.value, b.value) or compatible(a.slot, a.value, b.value))
        )
    ):
        return True
    if (a.entities - b.entities) and (b.entities - a.entities):
        return True
    if (a.roles - b.roles) and (b.roles - a.roles):
        return True  # about another person (nephew / niece)
    for kind in KINDS:  # another day, month, season or side
        ka, kb = a.signature & kind, b.signature & kind
        if ka and kb and not (ka <= kb or kb <= ka):
            return True
    shared = (a.signature & b.signature) | (a.entities & b.entities)
    if shared and a.negated != b.negated:
        return True  # the same thing, one side negated
    if (
        a.predicate is not None
        and b.predicate is not None
        and shared - {a.predicate, b.predicate}
        and not same_stem(a.predicate, b.predicate)
    ):
        return True  # another verb of the same thing (love / hate horror)
    if 2 * len(shared) >= min(len(a.signature), len(b.signature)) and a.roles != b.roles:
        return True  # mostly the same words about another person
    only_a, only_b = a.signature - b.signature, b.signature - a.signature
    return 1 <= len(only_a) <= 2 and 1 <= len(only_b) <= 2


def restates(rich: FactShape, other: FactShape, max_novelty: float) -> bool:
    """``other`` says little that ``rich`` does not: it shares a name or number or two
    content words with it, at most ``max_novelty`` of its content words are new, and
    the two are no near miss (:func:`contrasts`)."""
    if not other.signature or contrasts(rich, other):
        return False
    verbs = {rich.predicate, other.predicate}
    if not (rich.entities & other.entities or (rich.signature & other.signature) - verbs):
        return False  # nothing in common but the verb (listens to jazz / to lo-fi)
    return len(other.signature - rich.signature) / len(other.signature) <= max_novelty
