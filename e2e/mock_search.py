"""The mock LLM's answers to the sidecar's search-time prompts: ``rewrite`` and ``rank``.

``rewrite`` (the last user message)::

    CONVERSATION:
    user: <text>
    assistant: <text>
    LATEST: <query>

Rule, deliberately simple and independent of the sidecar's own heuristic: the
person is the last capitalised word of the conversation that is not a common
word and does not follow in/at/to/from; the thing is the last "the/a/an/my ..."
phrase (up to three words, stopping at a common word). he/she/him/they/them and
object "her" become the person, his/their/possessive "her" the person's, it the
thing, its the thing's. Answer: ``{"query": "..."}``.

``rank``::

    QUERY: <query>
    CANDIDATES:
    [c1] <text>
    [c2] <text>

Every candidate sharing a content word with the query is listed, scored by the
share of the query's content words it contains (light stemming), best first (ties
in candidate order): ``{"ranked": [{"id", "score", "reason"}]}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*")
_CANDIDATE = re.compile(r"^\[(c\d+)\]\s?(.*)$")
_COMMON = frozenset(
    """a about after again all also am an and any are as at be been before but by can
    could did do does for from had has have he her here hers him his how i if in into
    is it its just me my no not now of on or our she so some than that the their them
    then there these they this those to too up was we were what when where which who
    why will with would you your yes hi hey hello thanks sure ok okay well let lets
    tell remind do remember know think said say talked told mentioned one chats chat
    conversation conversations question want ask like""".split()
)
_PLACE_BEFORE = frozenset({"in", "at", "to", "from", "near"})
_DETERMINERS = frozenset({"the", "a", "an", "my"})
_PERSON = frozenset({"he", "she", "him", "they", "them", "himself", "herself"})
_POSSESSIVE = frozenset({"his", "their", "theirs", "hers"})
_NOT_NOUN_AFTER_HER = frozenset(
    {"about", "to", "for", "with", "and", "or", "at", "in", "on", "again", "yet", "too"}
)


def _user_text(body: Mapping[str, Any]) -> str:
    messages = [m for m in body.get("messages", []) if isinstance(m, Mapping)]
    users = [m for m in messages if m.get("role") == "user"]
    content = users[-1].get("content", "") if users else ""
    return content if isinstance(content, str) else ""


def parse_rewrite_prompt(text: str) -> tuple[list[str], str]:
    """(conversation texts, latest query)."""
    lines: list[str] = []
    latest = ""
    in_conversation = False
    for line in text.splitlines():
        if line.startswith("CONVERSATION:"):
            in_conversation = True
        elif line.startswith("LATEST:"):
            latest = line[len("LATEST:") :].strip()
            in_conversation = False
        elif in_conversation:
            _, _, said = line.partition(": ")
            lines.append(said)
    return lines, latest


def _last_person(lines: list[str]) -> str | None:
    found: str | None = None
    for line in lines:
        words = _WORD.findall(line)
        for i, word in enumerate(words):
            bare = re.split(r"['’]", word)[0]
            if not bare[:1].isupper() or bare.lower() in _COMMON or bare.isupper():
                continue
            if i > 0 and words[i - 1].lower() in _PLACE_BEFORE:
                continue
            found = bare
    return found


def _last_thing(lines: list[str]) -> str | None:
    found: str | None = None
    for line in lines:
        words = _WORD.findall(line)
        for i, word in enumerate(words):
            if word.lower() not in _DETERMINERS:
                continue
            phrase = []
            for following in words[i + 1 : i + 4]:
                if following.lower() in _COMMON:
                    break
                phrase.append(following)
            if phrase:
                determiner = "the" if word.lower() in ("a", "an") else word.lower()
                found = f"{determiner} {' '.join(phrase)}"
    return found


def rewrite(lines: list[str], latest: str) -> str:
    person = _last_person(lines)
    thing = _last_thing(lines)
    words = latest.split(" ")
    out: list[str] = []
    for i, raw in enumerate(words):
        core = raw.rstrip("?.!,;:")
        tail = raw[len(core) :]
        lower = core.lower()
        nxt = words[i + 1].rstrip("?.!,;:").lower() if i + 1 < len(words) else ""
        replacement = None
        if person is not None:
            if lower in _PERSON or (lower == "her" and (tail or not nxt)):
                replacement = person
            elif lower in _POSSESSIVE or (lower == "her" and nxt not in _NOT_NOUN_AFTER_HER):
                replacement = f"{person}'s"
        if thing is not None and replacement is None:
            if lower == "it":
                replacement = thing
            elif lower == "its":
                replacement = f"{thing}'s"
        if replacement is not None and i == 0:
            replacement = replacement[:1].upper() + replacement[1:]
        out.append(replacement + tail if replacement is not None else raw)
    return " ".join(out)


def handle_rewrite(body: Mapping[str, Any]) -> str:
    lines, latest = parse_rewrite_prompt(_user_text(body))
    return json.dumps({"query": rewrite(lines, latest)}, ensure_ascii=False)


def _content_words(text: str) -> set[str]:
    out = set()
    for word in _WORD.findall(text.lower()):
        word = re.split(r"['’]", word)[0]
        if word in _COMMON or len(word) < 3:
            continue
        for suffix in ("ing", "ed", "es", "s"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                break
        out.add(word)
    return out


def parse_rank_prompt(text: str) -> tuple[str, list[tuple[str, str]]]:
    query = ""
    candidates: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line.startswith("QUERY:"):
            query = line[len("QUERY:") :].strip()
            continue
        match = _CANDIDATE.match(line)
        if match:
            candidates.append((match.group(1), match.group(2)))
    return query, candidates


def rank(query: str, candidates: list[tuple[str, str]]) -> list[dict[str, Any]]:
    wanted = _content_words(query)
    scored = []
    for position, (candidate_id, text) in enumerate(candidates):
        shared = wanted & _content_words(text)
        if shared and wanted:
            score = round(len(shared) / len(wanted), 3)
            scored.append((-score, position, candidate_id, len(shared)))
    scored.sort()
    return [
        {"id": cid, "score": -neg, "reason": f"overlap {n}/{len(wanted)}"}
        for neg, _, cid, n in scored
    ]


def handle_rank(body: Mapping[str, Any]) -> str:
    query, candidates = parse_rank_prompt(_user_text(body))
    return json.dumps({"ranked": rank(query, candidates)}, ensure_ascii=False)
