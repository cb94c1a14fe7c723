"""Stored facts never say "you" (:func:`name_the_assistant`).

A fact is read later, in another conversation, by a model that is not "you" to
anyone: "User likes it when you use bullet points." must say who uses them. Where
the words speak to the assistant — what it does, says or should do ("when you use",
"wants you to", "the recipe you mentioned", "your summaries") — it is named: "the
assistant uses", "the assistant's summaries". A generic "you" ("you never know until
you try") becomes "one", the filler "you know" goes, a request to the assistant
("…, and was wondering if you could recommend hotels") is cut off the fact it follows,
and a bare reply to it ("User appreciates your help") is no fact at all — nor is a
reaction to what it said that names nothing of the user's own ("User will definitely
check them out.", "User loves these ideas.", :func:`is_reaction`). Quoted words
and names ("Someone Like You") are left as they are: only a lower-case "you" outside
quotes is read (or one that opens the fact).
"""

from __future__ import annotations

import re

from sidecar.memory.language.heuristics import ADVERBS, third_person
from sidecar.memory.language.text import STOPWORDS

#: "you" and its forms, as a word (lower case: "Someone Like You" is a name).
_YOU = re.compile(r"(?<![\w'’])(?:you(?:['’](?:re|ve|ll|d))?|your|yours|yourself)(?![\w'’])")
_OPENING_YOU = re.compile(r"^You\b")
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”")
#: A request to the assistant after the fact it follows ("…, and User was wondering
#: if you could …"), or the whole fact.
_REQUEST = re.compile(
    r"[,;]?\s*(?:\b(?:and|so|but)\s+)?(?:User\s+)?(?:(?:was|is|am)\s+)?"
    r"(?:(?:just|also|really)\s+)?(?:wondering\s+(?:if|whether)|would\s+(?:love|like|"
    r"appreciate)\s+it\s+if|would\s+be\s+(?:great|grateful)\s+if|hop(?:es|ing)\s+(?:that\s+)?)"
    r"\s+you\b.*$",
    re.IGNORECASE | re.DOTALL,
)
#: A reply to the assistant, not a fact about the user.
_REPLY = re.compile(
    r"^(?:User\s+(?:is\s+(?:so\s+|really\s+|very\s+|just\s+)?(?:glad|happy|grateful|"
    r"thankful)\s+(?:that\s+|for\s+)?(?:you|your)\b|(?:really\s+|truly\s+)?"
    r"(?:appreciates|thanks)\s+(?:you|your|it|that|the|all)\b|agrees\s+with\s+you\b|"
    r"thinks\s+you(?:['’]re|\s+are)\s+right\b)|Thank\s+you\b)",
    re.IGNORECASE,
)
#: "you guys", "you all": the one spoken to, as one word.
_PLURAL = re.compile(r"\b(you)\s+(?:guys|all|two|folks|people)\b")
_FILLER = re.compile(r",\s*you\s+(?:know|see)\s*,|^\s*you\s+(?:know|see)\s*,\s*", re.IGNORECASE)
#: What the assistant does in a conversation, after a subject "you" (past forms: what
#: it did in an earlier one).
_ACTS = frozenset(
    """use uses write answer reply respond format call remind suggest recommend mention
    tell told help give explain list keep include add avoid stop start speak talk
    address ask send show make correct check cite say said summarize summarise translate
    mentioned suggested recommended listed gave provided shared described wrote sent
    explained answered replied asked called reminded corrected helped showed
    did do does are were be""".split()
)
#: Verbs whose object "you" is the one spoken to ("wants you to", "told you").
_ADDRESSING = frozenset(
    """tell told ask asked want wants wanted need needs needed let lets remind reminded
    thank thanks thanked give gave show showed sent send call called""".split()
)
#: Nouns of what the assistant gives ("your summaries", "your tone").
_GIVES = re.compile(
    r"^(?:answers?|repl(?:y|ies)|responses?|summar(?:y|ies)|tone|style|suggestions?|"
    r"advice|help|tips|explanations?|format(?:ting)?|messages?|recommendations?|lists?|"
    r"code|writing|assistance|questions?|feedback|input)$",
    re.IGNORECASE,
)
#: Words after which a "you" opens a clause (its subject).
_CLAUSE = frozenset(
    """that when whenever if until unless because so and but or as while how what why
    where before after once since rather than thinks finds feels believes says knows
    reckons guesses bets think find feel believe say know""".split()
)
_AUXILIARIES = frozenset(
    """can can't cannot could couldn't will won't would wouldn't should shouldn't must
    might may did didn't""".split()
)
_DETERMINERS = frozenset("a an the my your this that these those some such".split())
_FORMS = {
    "are": "is", "were": "was", "have": "has", "do": "does", "don't": "doesn't",
    "don’t": "doesn’t", "aren't": "isn't", "weren't": "wasn't", "haven't": "hasn't",
}  # fmt: skip
_CONTRACTED = {"re": "is", "ve": "has", "ll": "will", "d": "would"}
_WORD = re.compile(r"[\w'’-]+|[^\w\s]")


#: The words of a reaction to the assistant's answer: what it gave ("tips", "the
#: options"), taking it ("will definitely check them out", "keep that in mind") and
#: judging it ("sounds great", "makes sense"). A fact with no other word than these
#: and function words says nothing about the user (:func:`is_reaction`).
_REACTION_WORDS = frozenset(
    """user user's i i'm i'll i've i'd me my we also let sure it's that's don't
    think thinks thought idea ideas great good nice cool awesome amazing perfect
    wonderful fantastic helpful useful interesting definitely really certainly surely
    absolutely totally probably maybe try trying tried check checking checked give
    giving go going look looking forward appreciate appreciates appreciated thanks
    thank thankful grateful help helps helping helped tip tips rec recs recommendation
    recommendations suggestion suggestions advice info information sound sounds
    sounded seem seems like likes love loves agree agrees agreed right okay ok stop
    now again get gets got lot lots bit keep mind note noted reply response responses
    answer answers question questions ask asking wondering wonder happy glad
    excited fun lovely start know knows knew see sees saw make makes made sense
    detailed detail details point points option options stuff thing things way ways
    list lists input feedback clarification explanation assistant assistant's
    apologize apologizes apology confusion mention mentioned suggest suggested
    recommend recommended provide provided share shared""".split()
)
_WORDS = re.compile(r"[^\W\d_][\w'’-]*|\d")


def is_reaction(fact: str) -> bool:
    """Whether ``fact`` only reacts to what the assistant said ("User will definitely
    check them out.", "User loves these tips.", "Let User try that again."): every
    word is a function word or a word of taking or judging an answer, and no number."""
    words = _WORDS.findall(fact)
    for word in words:
        low = word.lower().replace("’", "'")
        if low not in STOPWORDS and low not in _REACTION_WORDS:
            return False
    return bool(words)  # no word at all: no reaction, an invalid fact


def name_the_assistant(fact: str) -> str | None:
    """``fact`` with no "you" in it (see the module docstring); None when what is left
    is no fact about the user (a request, a reply or a reaction to the assistant)."""
    if not _QUOTED.search(fact) and is_reaction(fact):
        return None
    if not (_YOU.search(_QUOTED.sub("", fact)) or _OPENING_YOU.match(fact)):
        return fact
    if _REPLY.match(fact):
        return None
    request = _REQUEST.search(fact)
    if request is not None:
        fact = fact[: request.start()].rstrip(" ,;:-") + "."
        if len(re.findall(r"[A-Za-z]+", fact)) < 3:
            return None
    fact = _FILLER.sub(lambda m: "," if m.group(0).startswith(",") else "", fact)
    fact = _PLURAL.sub(r"\1", fact)
    if not (_YOU.search(_QUOTED.sub("", fact)) or _OPENING_YOU.match(fact)):
        return fact
    return _rewritten(fact)


def _rewritten(fact: str) -> str:
    """Every "you" outside quotes named: the assistant when any of them speaks to it,
    else "one"."""
    pieces: list[str] = []
    at = 0
    for quote in _QUOTED.finditer(fact):
        pieces.append(fact[at : quote.start()])
        pieces.append(quote.group(0))
        at = quote.end()
    pieces.append(fact[at:])
    plain = [p for i, p in enumerate(pieces) if i % 2 == 0]
    addressed = any(_speaks_to_assistant(_WORD.findall(p)) for p in plain)
    who = (
        ("the assistant", "the assistant's", "itself") if addressed else ("one", "one's", "oneself")
    )
    out = [_named(p, who) if i % 2 == 0 else p for i, p in enumerate(pieces)]
    text = "".join(out)
    return text[:1].upper() + text[1:]


def _is_you(word: str) -> bool:
    return word.lower() == "you" or bool(re.fullmatch(r"[Yy]ou['’](?:re|ve|ll|d)", word))


def _speaks_to_assistant(words: list[str]) -> bool:
    for i, word in enumerate(words):
        lower = word.lower()
        if lower in ("your", "yours"):
            if i + 1 < len(words) and _GIVES.match(words[i + 1]):
                return True
            continue
        if not _is_you(word):
            continue
        if lower.startswith(("you're", "you’re")):
            return True
        if i > 0 and words[i - 1].lower() in _ADDRESSING:
            return True
        verb = _verb_after(words, i)
        if verb is not None and verb.lower() in _ACTS:
            return True
    return False


def _verb_after(words: list[str], i: int) -> str | None:
    """The first word after ``words[i]`` that is not an adverb or an auxiliary."""
    following = words[i + 1 :]
    for j, word in enumerate(following):
        lower = word.lower()
        if lower in ADVERBS or lower in ("not", "n't"):
            continue
        if lower in _AUXILIARIES and not (
            j + 1 < len(following) and following[j + 1].lower() in _DETERMINERS
        ):
            continue  # "you can't beat": the verb is next; "you did a great job": this one
        return word if word[:1].isalpha() else None
    return None


def _named(text: str, who: tuple[str, str, str]) -> str:
    """``text`` with every "you" form replaced by ``who`` (subject, possessive,
    reflexive), the verb after a subject "you" made third person."""
    subject, possessive, reflexive = who
    words = re.split(r"(\s+)", text)
    out: list[str] = []
    conjugate = False
    previous = ""
    for word in words:
        if not word or word.isspace():
            out.append(word)
            continue
        core = re.match(r"^([\w'’-]*)(.*)$", word, re.DOTALL)
        assert core is not None  # the pattern matches any string
        body, tail = core.group(1), core.group(2)
        lower = body.lower()
        if conjugate and body:
            if lower in ADVERBS or lower in ("not",):
                out.append(word)
                previous = lower
                continue
            out.append(_FORMS.get(lower, third_person(body) if body.isalpha() else body) + tail)
            conjugate = False
            previous = lower
            continue
        conjugate = False
        if lower in ("your", "yours"):
            out.append(possessive + tail)
        elif lower in ("yourself", "yourselves"):
            out.append(reflexive + tail)
        elif re.fullmatch(r"you['’](?:re|ve|ll|d)", lower):
            out.append(f"{subject} {_CONTRACTED[lower[4:]]}{tail}")
        elif lower == "you":
            out.append(subject + tail)
            opens = not previous or previous in _CLAUSE or previous.endswith((",", ";"))
            conjugate = opens and not tail
        else:
            out.append(word)
        previous = (body + tail).lower()
    return "".join(out)
