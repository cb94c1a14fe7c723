"""The non-LLM fact extractor: first-person statements rewritten about "User".

It is the fallback when no extraction LLM is configured or the LLM fails, so it is
deliberately conservative: it keeps declarative first-person sentences, drops
questions and requests, and marks its facts with lower confidence.
"""

from __future__ import annotations

import re

from sidecar.memory.model.records import MemoryType
from sidecar.memory.model.turns import Fact

HEURISTIC_CONFIDENCE = 0.6

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|me|mine|myself|we|our|us)\b", re.I)
_REQUEST_START = re.compile(
    r"^(can|could|would|will|please|tell|help|what|why|how|when|where|who|which|do|does|"
    r"did|is|are|should|let's|lets|show|give|write|explain|find)\b",
    re.I,
)
_CONSTRAINT = re.compile(
    r"^(?:please\s+)?(always|never|don't ever|do not ever)\b|"
    r"\b(i want you to|i need you to|i'd like you to)\b",
    re.I,
)
_GREETING = re.compile(
    r"^(hi|hello|hey|thanks|thank you|ok|okay|great|cool|sure|yes|no)\b[\s,!.]*", re.I
)
_PROCEDURAL = re.compile(
    r"\bi (usually|always|typically|normally|generally|tend to|prefer to)\b", re.I
)

_IRREGULAR = {
    "am": "is",
    "'m": "is",
    "have": "has",
    "'ve": "has",
    "do": "does",
    "go": "goes",
    "was": "was",
    "can": "can",
    "could": "could",
    "will": "will",
    "would": "would",
    "should": "should",
    "must": "must",
    "might": "might",
    "may": "may",
    "'d": "would",
    "'ll": "will",
}
_NEGATIONS = {"don't": "does not", "do not": "does not", "can't": "cannot", "won't": "will not"}
#: Adverbs between "I" and its verb: "I usually go" -> "User usually goes".
_ADVERBS = frozenset(
    {
        "usually", "always", "often", "sometimes", "never", "really", "also", "just",
        "still", "typically", "normally", "generally", "mostly", "rarely", "actually",
        "recently", "currently", "now", "already", "finally", "even", "only", "mainly",
    }
)  # fmt: skip
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})


def _third_person(verb: str) -> str:
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower.endswith("ed") or not lower.isalpha():
        return verb
    if re.search(r"(s|sh|ch|x|z|o)$", lower):
        return verb + "es"
    if re.search(r"[^aeiou]y$", lower):
        return verb[:-1] + "ies"
    return verb + "s"


def _conjugate_after_i(match: re.Match[str]) -> str:
    words = match.group(1).split()
    out: list[str] = []
    for i, word in enumerate(words):
        if word.lower() in _ADVERBS and i < len(words) - 1:
            out.append(word)
            continue
        out.append(_third_person(word))
        out.extend(words[i + 1 :])
        break
    return "User " + " ".join(out)


def _first_person_body(sentence: str) -> str:
    """The pronoun rewrites without capitalisation or a final full stop."""
    text = sentence.translate(_APOSTROPHES).strip().rstrip(".!")
    for neg, repl in _NEGATIONS.items():
        text = re.sub(rf"\bI {neg}\b", f"User {repl}", text, flags=re.I)
    text = re.sub(r"\bI'm\b|\bI am\b", "User is", text, flags=re.I)
    text = re.sub(r"\bI've\b", "User has", text, flags=re.I)
    text = re.sub(r"\bI'd\b", "User would", text, flags=re.I)
    text = re.sub(r"\bI'll\b", "User will", text, flags=re.I)
    adverbs = "|".join(sorted(_ADVERBS))
    text = re.sub(rf"\bI ((?:(?:{adverbs}) )*[\w']+)", _conjugate_after_i, text, flags=re.I)
    text = re.sub(r"\b(my|mine)\b", "User's", text, flags=re.I)
    text = re.sub(r"\bmyself\b", "themselves", text, flags=re.I)
    text = re.sub(r"\bme\b", "User", text, flags=re.I)
    text = re.sub(r"\bwe\b", "User and others", text, flags=re.I)
    return re.sub(r"\bour\b", "User's", text, flags=re.I)


def rewrite_first_person(sentence: str) -> str:
    """``I live in Berlin`` -> ``User lives in Berlin.`` (best effort)."""
    text = _first_person_body(sentence)
    return text[:1].upper() + text[1:] + "."


def extract_heuristic(user_text: str, *, max_facts: int) -> list[Fact]:
    """Facts from the user's own words, in order, without duplicates."""
    facts: list[Fact] = []
    seen: set[str] = set()
    for raw in _SENTENCE.split(user_text.translate(_APOSTROPHES)):
        sentence = _GREETING.sub("", raw.strip()).strip()
        if len(sentence) < 6 or sentence.endswith("?"):
            continue
        if _CONSTRAINT.search(sentence):
            body = re.sub(r"^(please\s+)", "", sentence.rstrip(".!"), flags=re.I)
            body = re.sub(r"^i(?: want| need|'d like) you to\s+", "", body, flags=re.I)
            body = _first_person_body(body)
            text = f"User wants the assistant to {body[:1].lower()}{body[1:]}."
            fact = Fact(text, MemoryType.CONSTRAINT, 0.8, HEURISTIC_CONFIDENCE, "heuristic")
        elif _FIRST_PERSON.search(sentence) and not _REQUEST_START.match(sentence):
            kind = MemoryType.PROCEDURAL if _PROCEDURAL.search(sentence) else MemoryType.SEMANTIC
            text = rewrite_first_person(sentence)
            fact = Fact(text, kind, 0.5, HEURISTIC_CONFIDENCE, "heuristic")
        else:
            continue
        key = fact.text.casefold()
        if key not in seen:
            seen.add(key)
            facts.append(fact)
        if len(facts) >= max_facts:
            break
    return facts
