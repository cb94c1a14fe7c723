"""The mock LLM's answer to the sidecar's fact-extraction prompt (``extract`` task).

Input: the last user message holds the turn (``Turn time:`` / ``User:`` /
``Assistant:``). Rules, deterministic and deliberately simple: only the user's own
words count; the text is split into sentences; questions, requests, greetings,
thanks and fillers are dropped; "always/never ..." and "I want you to ..." become
constraints, habits and routines procedural facts, and any other sentence in the
first person a semantic fact, rewritten in the third person (``I live`` -> ``User
lives``). Answer: ``{"facts": [{"text", "type", "importance"}]}``. Like the other
task answers (:mod:`e2e.mock_judge`, :mod:`e2e.mock_search`) it needs nothing of
the HTTP service, so it can be tested and reused on its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from e2e.mock_protocol import flatten_content, request_messages
from sidecar.memory.language.entities import named_subject

# ---------------------------------------------------------------------------
# The "extract" task: rule-based fact extraction from the user's turn
# ---------------------------------------------------------------------------


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_TURN_USER_RE: Final = re.compile(r"^User:[ \t]?(?P<user>.*?)(?=^Assistant:|\Z)", re.M | re.S)

_APOSTROPHES: Final = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})
_SENTENCE_SPLIT_RE: Final = re.compile(r"(?<=[.!?])\s+|\n+")
_TOKEN_RE: Final = re.compile(r"\w+(?:'\w+)*|\s+|[^\w\s]")

# Openers stripped from the start of a sentence whether or not punctuation follows.
_OPENER_RE: Final = re.compile(
    r"^(?:hi|hello|hey|hiya|howdy|greetings|good (?:morning|afternoon|evening|day)|oh|btw"
    r"|by the way|also|and|fyi|anyway|well|from now on)(?:\s+there)?\b[\s,!.:;-]*",
    re.I,
)
# Interjections stripped only when punctuation follows ("No, I ...", "Thanks! ...").
_INTERJECTION_RE: Final = re.compile(
    r"^(?:ok|okay|sure|yes|yeah|yep|no|nope|cool|great|nice|so|alright|right|thanks"
    r"|thank you|perfect|wow)\s*[,!.:;-]+\s*",
    re.I,
)
_THANKS_RE: Final = re.compile(
    r"^(?:thanks|thank you|thx|ty|cheers|bye|goodbye|good night|see you)\b", re.I
)
_FILLERS: Final = frozenset(
    {
        "me too",
        "me neither",
        "never mind",
        "nevermind",
        "same here",
        "i see",
        "i know",
        "i think so",
        "i guess",
        "i guess so",
        "i agree",
        "i understand",
        "i don't know",
        "i do not know",
        "i'm not sure",
        "i am not sure",
        "i hope so",
        "i'm fine",
        "i am fine",
        "i'm good",
        "i'm ok",
        "i'm okay",
        "i'm back",
        "i'm here",
    }
)
# First words that make a sentence a request or question rather than a statement.
_REQUEST_STARTS: Final = _word_set(
    "can could would will should shall may might do does did don't is are am was were "
    "please pls help tell show give let remind find write explain send make get list "
    "describe summarize summarise translate suggest recommend check look search create "
    "generate call what what's whats why who which how how's"
)
_FIRST_PERSON: Final = _word_set(
    "i i'm i've i'd i'll my me mine myself we we're we've we'd we'll us our ours ourselves"
)
_CONSTRAINT_IMPERATIVE_RE: Final = re.compile(
    r"^(?:please\s*,?\s+)?(?P<adv>always|never|(?:don't|do not) ever)\s+(?P<rest>\S.*)$",
    re.I | re.S,
)
_CONSTRAINT_YOU_RE: Final = re.compile(
    r"^you\s+(?:should|must|have to|need to)\s+(?P<adv>always|never)\s+(?P<rest>\S.*)$",
    re.I | re.S,
)
_CONSTRAINT_WANT_RE: Final = re.compile(
    r"^(?:i\s+(?:want|need|would like|prefer)|i'd\s+(?:like|prefer))"
    r"\s+(?:you|the assistant)\s+to\b",
    re.I,
)
_PROCEDURAL_RE: Final = re.compile(
    r"\b(?:i|we)\s+(?:usually|always|typically|normally|generally|tend to|prefer to)\b"
    r"|\b(?:my|our)\s+(?:usual\s+|daily\s+|typical\s+|preferred\s+)?"
    r"(?:routine|workflow|process|method|approach|habit)s?\b",
    re.I,
)

# Pronoun rewrites applied anywhere in a sentence.  A value ending in a verb
# ("User is") already carries the conjugation, so the next word is left alone.
_PRONOUNS: Final = MappingProxyType(
    {
        "i'm": "User is",
        "i've": "User has",
        "i'd": "User would",
        "i'll": "User will",
        "my": "User's",
        "mine": "User's",
        "me": "User",
        "myself": "themselves",
        "we": "User and family",
        "we're": "User and family are",
        "we've": "User and family have",
        "we'd": "User and family would",
        "we'll": "User and family will",
        "us": "User and family",
        "our": "User's",
        "ours": "User's",
        "ourselves": "themselves",
        "you": "the assistant",
        "you're": "the assistant is",
        "you've": "the assistant has",
        "you'll": "the assistant will",
        "you'd": "the assistant would",
        "your": "the assistant's",
        "yours": "the assistant's",
        "yourself": "itself",
    }
)
# Adverbs that may sit between "I" and its verb ("I really love ...").
_ADVERBS: Final = _word_set(
    "really usually always never often sometimes also still just recently currently "
    "mostly generally typically normally rarely actually only even already definitely "
    "totally absolutely truly honestly seriously kinda finally now too"
)
_VERB_SPECIAL: Final = MappingProxyType(
    {
        "am": "is",
        "are": "is",
        "be": "is",
        "have": "has",
        "don't": "does not",
        "can't": "cannot",
        "won't": "will not",
        "haven't": "has not",
        "didn't": "did not",
        "wasn't": "was not",
        "couldn't": "could not",
        "wouldn't": "would not",
        "shouldn't": "should not",
        "mustn't": "must not",
        "ain't": "is not",
        "amn't": "is not",
    }
)
# Verbs that keep their form after a third-person subject: modals and common
# irregular past tenses (regular "-ed" past tenses are detected by suffix).
_VERB_UNCHANGED: Final = _word_set(
    "can cannot could will would shall should may might must ought was were did had went "
    "got made said saw took came knew thought found gave told became left felt brought "
    "began kept held wrote stood heard meant met ran paid sat spoke led grew lost fell "
    "sent built understood drew broke spent rose drove bought wore chose ate drank flew "
    "forgot sold taught caught fought slept swam sang won quit hurt put set cut shut lent "
    "used not"
)


def _third_person_verb(word: str) -> str:
    low = word.lower()
    if low in _VERB_SPECIAL:
        return _VERB_SPECIAL[low]
    if low in _VERB_UNCHANGED or low.endswith("ed") or "'" in low or not low.isalpha():
        return word
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return word + "es"
    if len(low) > 1 and low.endswith("y") and low[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def third_person(sentence: str) -> str:
    """Rewrite first-person words as facts about "User" (``I live`` -> ``User lives``)."""
    out: list[str] = []
    conjugate_next = False
    previous = ""
    for token in _TOKEN_RE.findall(sentence):
        if token.isspace():
            out.append(token)
            continue
        if not (token[0].isalnum() or token[0] == "_"):
            out.append(token)
            conjugate_next = False
            previous = ""
            continue
        low = token.lower()
        if low == "i":
            out.append("User")
            # "My wife and I have ..." keeps its plural verb.
            conjugate_next = previous not in ("and", "or")
        elif low in _PRONOUNS:
            out.append(_PRONOUNS[low])
        elif conjugate_next and low in _ADVERBS:
            out.append(token)
        elif conjugate_next:
            out.append(_third_person_verb(token))
            conjugate_next = False
        else:
            out.append(token)
        previous = low
    text = "".join(out).strip()
    return text[:1].upper() + text[1:]


def _strip_openers(sentence: str) -> str:
    previous = None
    while previous != sentence:
        previous = sentence
        sentence = _OPENER_RE.sub("", sentence, count=1)
        sentence = _INTERJECTION_RE.sub("", sentence, count=1).strip()
    return sentence


def _words(sentence: str) -> list[str]:
    return [t.lower() for t in _TOKEN_RE.findall(sentence) if t[0].isalnum()]


def _fact(text: str, kind: str) -> dict[str, Any]:
    text = text.rstrip(" .!;:,") + "."
    return {"text": text, "type": kind, "importance": 0.8 if kind == "constraint" else 0.5}


def _sentence_fact(raw: str) -> dict[str, Any] | None:
    sentence = raw.translate(_APOSTROPHES).strip()
    if not sentence or sentence.endswith("?"):
        return None
    sentence = _strip_openers(sentence)
    sentence = sentence.rstrip(" .!;:,-").strip()
    if not sentence or _THANKS_RE.match(sentence):
        return None
    words = _words(sentence)
    if not words or " ".join(words) in _FILLERS:
        return None

    match = _CONSTRAINT_IMPERATIVE_RE.match(sentence) or _CONSTRAINT_YOU_RE.match(sentence)
    if match is not None:
        adverb = "always" if match["adv"].lower() == "always" else "never"
        rest = third_person(match["rest"])
        rest = rest[:1].lower() + rest[1:] if not rest.startswith("User") else rest
        return _fact(f"User wants the assistant to {adverb} {rest}", "constraint")
    if _CONSTRAINT_WANT_RE.match(sentence):
        return _fact(third_person(sentence), "constraint")

    if words[0] in _REQUEST_STARTS:
        return None
    if not _FIRST_PERSON.intersection(words):
        # News about someone or something the user names, under their name (the
        # sidecar keeps it only when another fact says who they are to the user).
        if named_subject(sentence) is not None:
            return _fact(sentence + ".", "semantic")
        return None
    kind = "procedural" if _PROCEDURAL_RE.search(sentence) else "semantic"
    return _fact(third_person(sentence), kind)


def extract_facts(user_text: str) -> list[dict[str, Any]]:
    """Deterministic, rule-based facts about the user from the user's own words.

    Each fact is ``{"text": str, "type": "semantic"|"procedural"|"constraint",
    "importance": float}``; identical facts are dropped, order is kept.
    """
    facts: list[dict[str, Any]] = []
    seen: set[str] = set()
    for raw in _SENTENCE_SPLIT_RE.split(user_text.translate(_APOSTROPHES)):
        fact = _sentence_fact(raw)
        if fact is not None and fact["text"] not in seen:
            seen.add(fact["text"])
            facts.append(fact)
    return facts


def parse_extract_turn(text: str) -> str | None:
    """The user text of an extract prompt (``Turn time:`` / ``User:`` / ``Assistant:``).

    Returns ``None`` when there is no ``User:`` line.  The user text runs from
    ``User:`` to the first following line that starts with ``Assistant:``.
    """
    match = _TURN_USER_RE.search(text)
    if match is None:
        return None
    return match["user"].strip()


def handle_extract(body: Mapping[str, Any]) -> str:
    """Task ``extract``: ``{"facts": [...]}`` from the last user message's turn."""
    user_messages = [m for m in request_messages(body) if m.get("role") == "user"]
    turn = flatten_content(user_messages[-1].get("content")) if user_messages else ""
    user_text = parse_extract_turn(turn)
    facts = extract_facts(user_text) if user_text else []
    return json.dumps({"facts": facts}, ensure_ascii=False)
