"""When a query needs rewriting: :func:`detect` flags the references a query makes to a
conversation it does not carry (pronouns, demonstratives used as pronouns, temporal
and implicit references, ellipsis, very short queries). Every other query takes the
rewriter's fast path. Also the tokenizer and vocabulary the heuristic resolver
(:mod:`sidecar.memory.language.resolver`) shares.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.memory.language.lexicon import CALENDAR_WORDS

#: (role, text) of an earlier chat message, oldest first.
History = Sequence[tuple[str, str]]

PERSON_SUBJECT = frozenset({"he", "she", "they"})
PERSON_OBJECT = frozenset({"him", "them", "himself", "herself", "themselves"})
PERSON_POSSESSIVE = frozenset({"his", "their", "theirs", "hers"})
#: "her" is object or possessive, decided by the next word.
PERSON_PRONOUNS = PERSON_SUBJECT | PERSON_OBJECT | PERSON_POSSESSIVE | {"her"}
THING_PRONOUNS = frozenset({"it", "its", "itself"})
DEMONSTRATIVES = frozenset({"this", "that", "these", "those"})
_NEAR = frozenset({"this", "these"})

#: "this week" is now (clear); "that week" points into the conversation (temporal).
TIME_NOUNS = frozenset(
    """week weekend weekends morning afternoon evening night day days year years month
    months summer winter spring fall autumn season semester quarter moment time times
    decade trip""".split()
)
#: Nouns too vague to make a demonstrative self-contained: "that one", "this issue".
GENERIC_NOUNS = frozenset(
    """thing things stuff one ones issue issues problem problems place places person
    people guy guys girl idea ideas topic topics situation matter case story question
    part""".split()
)
#: Nouns about the conversation itself, never what a reference points to.
_CHAT_NOUNS = frozenset(
    """chat chats conversation conversations message messages question questions answer
    answers talk talks""".split()
)
#: Words after which "this"/"that" stands alone as a pronoun: "that is", "that was".
PRONOUN_FOLLOWERS = frozenset(
    """is was are were 's does did do will would can could should has had have happened
    means meant mean sounds sounded seems seemed again too also""".split()
)
#: Words before a "that" that introduces a clause: "I think that ...".
CLAUSE_INTRODUCERS = frozenset(
    """think thought know knew say said says believe believed mean means meant hope
    hoped sure so such than given except mentioned told realize realized feel felt
    notice noticed show showed guess suppose heard read remember remembered wish glad
    sad happy true fact possible likely seems seemed claim claimed explain explained
    now way""".split()
)
AUXILIARIES = frozenset(
    """is was are were does did do will would can could should has had have""".split()
)
#: (phrase, kind): matched on lower-cased word sequences.
PHRASES: tuple[tuple[tuple[str, ...], str], ...] = tuple(
    (tuple(phrase.split()), kind)
    for phrase, kind in (
        ("last time", "temporal"),
        ("the other day", "temporal"),
        ("the other night", "temporal"),
        ("earlier", "temporal"),
        ("previously", "temporal"),
        ("again", "temporal"),
        ("as before", "temporal"),
        ("like before", "temporal"),
        ("the issue", "implicit"),
        ("the problem", "implicit"),
        ("the same", "implicit"),
        ("same thing", "implicit"),
        ("the thing", "implicit"),
        ("the one", "implicit"),
        ("the other one", "implicit"),
        ("the rest", "implicit"),
        ("the latter", "implicit"),
        ("the former", "implicit"),
        ("what he said", "implicit"),
        ("what she said", "implicit"),
        ("what they said", "implicit"),
        ("you mentioned", "implicit"),
        ("you said", "implicit"),
        ("we discussed", "implicit"),
        ("we talked about", "implicit"),
        ("i mentioned", "implicit"),
        ("i told you", "implicit"),
        ("as i said", "implicit"),
        ("tell me more", "implicit"),
        ("more details", "implicit"),
    )
)
#: The phrases that start with each word (a query is scanned once, not per phrase).
_PHRASES_BY_FIRST: dict[str, tuple[tuple[str, ...], ...]] = {
    first: tuple(p for p, _ in PHRASES if p[0] == first) for first in {p[0] for p, _ in PHRASES}
}
#: Implicit phrases the heuristic replaces with the latest noun phrase.
REPLACEABLE = frozenset(
    {
        ("the", "issue"),
        ("the", "problem"),
        ("the", "same"),
        ("same", "thing"),
        ("the", "thing"),
        ("the", "one"),
        ("the", "other", "one"),
    }
)
ELLIPSIS_STARTS: tuple[tuple[str, ...], ...] = (
    ("what", "about"),
    ("how", "about"),
    ("what", "else"),
    ("and",),
    ("also",),
    ("or",),
)
#: Fewer words than this is a "short" query.
SHORT_WORDS = 3

STOP = frozenset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having here how i if in into is just me more most
    that
    my myself no nor not now of off on once only or other our ours out over own same
    should so some such than the then there these this those through to too under until
    up very was we were what when where which while who whom why will with would you
    your yours yourself yourselves let lets please tell remind show give list find
    remember know think want need like get got go going went say said see saw look yes
    ok okay sure hi hey hello thanks thank great good nice cool well oh wow awesome
    sorry alright right anyway also still maybe perhaps actually really just today
    yesterday tomorrow tonight recently ago last next first later earlier soon always
    never sometimes usually often since though although however besides user assistant
    sounds looks seems one""".split()
) | frozenset(CALENDAR_WORDS)
#: Imperatives that start sentences ("Talk to Ana"): never names there.
_INITIAL_VERBS = frozenset(
    """talk ask call check send buy book write read meet try make take bring help keep
    start stop turn pick put set use visit play run open close add move pay plan note
    describe explain summarize summarise compare search look""".split()
)
PLACE_PREPOSITIONS = frozenset(
    """in at from near into around across through visiting visited visit toward towards
    outside inside""".split()
)
MOTION_VERBS = frozenset(
    """moved move moving went go going goes flew fly travelled traveled travel trip drove
    drive relocated relocate been came come back headed returned return""".split()
)
PLACE_WORDS = frozenset(
    """street road avenue city town park lake river mountain museum university college
    school hospital cafe café club group inc ltd company church center centre hotel
    restaurant beach island bay county state""".split()
)
DETERMINERS = frozenset({"the", "a", "an", "my", "our", "your"})
NP_STOP = STOP | PERSON_PRONOUNS | THING_PRONOUNS | GENERIC_NOUNS | TIME_NOUNS | _CHAT_NOUNS

_TOKEN = re.compile(r"[^\W_]+(?:['’][^\W_]+)?|[^\w\s]")
_SENTENCE_END = frozenset({".", "!", "?", ";", ":", "\n"})


@dataclass(frozen=True, slots=True)
class Token:
    text: str
    start: int
    end: int
    #: Lower-cased word without a clitic ("she's" -> "she"); punctuation as is.
    base: str
    #: The clitic ("'s", "'ll"...) or "".
    suffix: str
    sentence_start: bool

    @property
    def word(self) -> bool:
        return self.text[0].isalnum()

    @property
    def capitalised(self) -> bool:
        return self.text[0].isupper()


def tokenize(text: str) -> list[Token]:
    out: list[Token] = []
    start_next = True
    for match in _TOKEN.finditer(text):
        raw = match.group()
        normal = raw.replace("’", "'")
        base, apostrophe, rest = normal.partition("'")
        suffix = f"'{rest.lower()}" if apostrophe else ""
        gap = text[out[-1].end : match.start()] if out else ""
        is_start = start_next or "\n" in gap
        out.append(Token(raw, match.start(), match.end(), base.lower(), suffix, is_start))
        start_next = raw in _SENTENCE_END
    return out


def word_tokens(tokens: Sequence[Token]) -> list[Token]:
    return [t for t in tokens if t.word]


def is_name(tokens: Sequence[Token], i: int) -> bool:
    """A capitalised word that is probably a name (sentence-initial ones only when
    they are not common words)."""
    token = tokens[i]
    if not token.word or not token.capitalised or token.base in STOP:
        return False
    if token.sentence_start and token.base in _INITIAL_VERBS:
        return False
    if token.base in PERSON_PRONOUNS or token.base in THING_PRONOUNS or token.base == "i":
        return False
    return not token.base.isdigit()


@dataclass(frozen=True, slots=True)
class Ambiguity:
    """What makes a query depend on its conversation. ``references`` are the words
    a good rewrite replaces (pronouns, demonstratives, implicit phrases)."""

    kinds: tuple[str, ...] = ()
    references: tuple[str, ...] = ()

    @property
    def ambiguous(self) -> bool:
        return bool(self.kinds)


def has_antecedent(tokens: Sequence[Token], index: int, *, person: bool) -> bool:
    """Whether something before ``tokens[index]`` in the query can be what it refers
    to: a name (for person pronouns), a name or a determiner + noun (for "it")."""
    for j in range(index):
        if is_name(tokens, j):
            return True
        if not person and tokens[j].base in DETERMINERS and j + 1 < index:
            following = tokens[j + 1]
            if following.word and following.base not in NP_STOP:
                return True
    return False


_EXPLETIVE_AFTER_IT = frozenset(
    """raining snowing sunny cold hot warm late early windy dark possible true ok okay
    fine worth""".split()
)


def expletive_it(words: Sequence[Token], k: int) -> bool:
    """'is it raining', 'it's late', 'what time is it', 'how is it going'."""
    nxt = words[k + 1].base if k + 1 < len(words) else ""
    after = words[k + 2].base if k + 2 < len(words) else ""
    if words[k].suffix == "'s" and nxt in _EXPLETIVE_AFTER_IT:
        return True
    if nxt in ("is", "was") and after in _EXPLETIVE_AFTER_IT:
        return True
    if nxt in _EXPLETIVE_AFTER_IT or nxt == "going":
        return True
    before = [w.base for w in words[max(0, k - 2) : k]]
    return before == ["time", "is"]


def detect(text: str) -> Ambiguity:
    """The reasons ``text`` cannot be searched on its own (empty: it can)."""
    tokens = tokenize(text)
    kinds: list[str] = []
    refs: list[str] = []

    def add(kind: str, ref: str | None = None) -> None:
        if kind not in kinds:
            kinds.append(kind)
        if ref is not None:
            refs.append(ref)

    # Demonstratives need to know whether punctuation follows them.
    clause_end = {i for i, t in enumerate(tokens) if i + 1 >= len(tokens)}
    clause_end |= {i for i, t in enumerate(tokens[:-1]) if not tokens[i + 1].word}
    words = word_tokens(tokens)
    word_index = [i for i, t in enumerate(tokens) if t.word]
    for k, token in enumerate(words):
        i = word_index[k]
        base = token.base
        if base in PERSON_PRONOUNS:
            if not has_antecedent(tokens, i, person=True):
                add("pronoun", base)
        elif base in THING_PRONOUNS:
            if not expletive_it(words, k) and not has_antecedent(tokens, i, person=False):
                add("pronoun", base)
        elif base in DEMONSTRATIVES:
            kind = demonstrative(words, k, i in clause_end)
            if kind is not None:
                add(kind, base if kind == "demonstrative" else None)
        elif base == "before" and (i in clause_end or k + 1 == len(words)):
            add("temporal")
    lowered = [w.base for w in words]
    present = {
        phrase
        for start, word in enumerate(lowered)
        for phrase in _PHRASES_BY_FIRST.get(word, ())
        if tuple(lowered[start : start + len(phrase)]) == phrase
    }
    for phrase, kind in PHRASES:  # in PHRASES order, as the reasons are listed
        if phrase in present:
            add(kind, " ".join(phrase) if kind == "implicit" else None)
    if any(tuple(lowered[: len(opening)]) == opening for opening in ELLIPSIS_STARTS):
        add("ellipsis")
    if len(words) < SHORT_WORDS:
        add("short")
    return Ambiguity(tuple(kinds), tuple(refs))


def demonstrative(words: Sequence[Token], k: int, clause_end: bool) -> str | None:
    token = words[k]
    if clause_end or k + 1 >= len(words):
        return "demonstrative"
    nxt = words[k + 1]
    prev = words[k - 1] if k > 0 else None
    if nxt.base in TIME_NOUNS:
        return None if token.base in _NEAR else "temporal"
    if nxt.base in GENERIC_NOUNS:
        return "demonstrative"
    if token.base == "that" and prev is not None:
        if prev.base in CLAUSE_INTRODUCERS:
            return "demonstrative" if nxt.base in PRONOUN_FOLLOWERS else None
        if prev.base not in STOP:
            return None  # a relative clause: "the book that was on the table"
    if nxt.base in PRONOUN_FOLLOWERS:
        return "demonstrative"
    if prev is not None and prev.base in AUXILIARIES and prev.sentence_start:
        return "demonstrative"  # "Is that true?", "Was this before?"
    return None  # a determiner with a specific noun: "that restaurant"
