"""Rewriting without an LLM, and scoring any rewrite.

:func:`resolve_heuristic` substitutes person pronouns by the most recent person
name of the context, "it"/"that"/"the issue" by the most recent noun phrase or
non-person name, and appends the context's latest entities where nothing can be
substituted. :func:`rewrite_confidence` scores a rewrite 0..1 (references resolved,
new words grounded in the context, a plausible length).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.memory.language.ambiguity import (
    DEMONSTRATIVES,
    DETERMINERS,
    ELLIPSIS_STARTS,
    GENERIC_NOUNS,
    MOTION_VERBS,
    NP_STOP,
    PERSON_POSSESSIVE,
    PERSON_PRONOUNS,
    PLACE_PREPOSITIONS,
    PLACE_WORDS,
    REPLACEABLE,
    STOP,
    THING_PRONOUNS,
    History,
    Token,
    demonstrative,
    detect,
    expletive_it,
    has_antecedent,
    is_name,
    tokenize,
    word_tokens,
)
from sidecar.memory.language.text import tokens as content_tokens


@dataclass(frozen=True, slots=True)
class Entity:
    text: str
    person: bool


def _name_is_place(tokens: Sequence[Token], start: int, span: Sequence[Token]) -> bool:
    if any(t.base in PLACE_WORDS for t in span):
        return True
    if len(span) == 1 and len(span[0].text) > 1 and span[0].text.isupper():
        return True  # an acronym: "LGBTQ"
    prev = tokens[start - 1].base if start > 0 else ""
    if prev in PLACE_PREPOSITIONS:
        return True
    before = tokens[start - 2].base if start > 1 else ""
    return prev == "to" and before in MOTION_VERBS


def message_entities(text: str, *, from_assistant: bool = False) -> list[Entity]:
    """Names and noun phrases of one message, in order of appearance."""
    tokens = tokenize(text)
    found: list[tuple[int, Entity]] = []
    i = 0
    while i < len(tokens):
        if is_name(tokens, i):
            j = i + 1
            while j < len(tokens) and tokens[j].word and tokens[j].capitalised:
                if tokens[j].base in STOP or tokens[j - 1].suffix:
                    break
                j += 1
            span = tokens[i:j]
            words = [t.text for t in span]
            words[-1] = words[-1].split("'")[0].split("’")[0]
            person = not _name_is_place(tokens, i, span)
            found.append((i, Entity(" ".join(words), person)))
            i = j
            continue
        if tokens[i].base in DETERMINERS and tokens[i].word:
            j = i + 1
            while j < len(tokens) and j - i <= 4 and tokens[j].word:
                if tokens[j].base in NP_STOP or (j > i + 1 and tokens[j - 1].suffix):
                    break
                if j > i + 1 and is_name(tokens, j):
                    break  # "my brother Tom": the name is an entity of its own
                if j > i + 1 and tokens[j].base.endswith("ed"):
                    break  # a verb: "my new bike arrived"
                j += 1
            if j > i + 1:
                det = tokens[i].base
                det = {"a": "the", "an": "the", "your": "my" if from_assistant else "your"}.get(
                    det, det
                )
                if det == "your":
                    det = "the"
                phrase = " ".join(t.text for t in tokens[i + 1 : j])
                found.append((i, Entity(f"{det} {phrase}", False)))
                i = j
                continue
        i += 1
    return [entity for _, entity in found]


def context_entities(history: History) -> list[Entity]:
    """Every entity of the context, oldest first (the last is the most recent)."""
    out: list[Entity] = []
    for role, text in history:
        out.extend(message_entities(text, from_assistant=role == "assistant"))
    return out


def _latest(entities: Sequence[Entity], *, person: bool) -> Entity | None:
    """The most recently mentioned entity of the kind."""
    for entity in reversed(entities):
        if entity.person == person:
            return entity
    return None


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def resolve_heuristic(query: str, history: History) -> str:
    """``query`` with its references replaced from ``history`` (unchanged when
    nothing could be resolved). Person pronouns -> the latest person name;
    "it"/"that"/"the issue"... -> the latest noun phrase or non-person name;
    ellipsis ("And John?") -> the previous user question about John; temporal or
    bare follow-ups -> the latest entities appended."""
    entities = context_entities(history)
    ambiguity = detect(query)
    if not ambiguity.ambiguous or not history:
        return query
    person = _latest(entities, person=True)
    thing = _latest(entities, person=False)
    tokens = tokenize(query)
    edits: list[tuple[int, int, str]] = []
    replaced = False
    clause_end = {i for i in range(len(tokens)) if i + 1 >= len(tokens)}
    clause_end |= {i for i in range(len(tokens) - 1) if not tokens[i + 1].word}
    words = word_tokens(tokens)
    word_index = [i for i, t in enumerate(tokens) if t.word]
    consumed: set[int] = set()
    lowered = [w.base for w in words]
    for phrase in REPLACEABLE:
        n = len(phrase)
        for start in range(len(lowered) - n + 1):
            if tuple(lowered[start : start + n]) == phrase and thing is not None:
                first, last = words[start], words[start + n - 1]
                edits.append((first.start, last.end, thing.text))
                consumed.update(range(start, start + n))
                replaced = True
    for k, token in enumerate(words):
        if k in consumed:
            continue
        i = word_index[k]
        base = token.base
        replacement: str | None = None
        end = token.end
        if base in PERSON_PRONOUNS and person is not None:
            if has_antecedent(tokens, i, person=True):
                continue
            nxt = words[k + 1] if k + 1 < len(words) else None
            possessive = base in PERSON_POSSESSIVE or (
                base == "her"
                and nxt is not None
                and i not in clause_end
                and nxt.base not in STOP
                and nxt.base not in PERSON_PRONOUNS
            )
            replacement = _possessive(person.text) if possessive else person.text
            replacement += token.suffix if token.suffix and not possessive else ""
        elif base in THING_PRONOUNS and thing is not None:
            if expletive_it(words, k) or has_antecedent(tokens, i, person=False):
                continue
            replacement = _possessive(thing.text) if base == "its" else thing.text
            replacement += token.suffix if token.suffix else ""
        elif base in DEMONSTRATIVES and thing is not None:
            if demonstrative(words, k, i in clause_end) != "demonstrative":
                continue
            replacement = thing.text
            if k + 1 < len(words) and words[k + 1].base in GENERIC_NOUNS:
                end = words[k + 1].end
                consumed.add(k + 1)
        if replacement is not None:
            edits.append((token.start, end, replacement))
            replaced = True
    text = query
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    if replaced:
        return _capitalise_first(text)
    if "ellipsis" in ambiguity.kinds:
        expanded = _expand_ellipsis(query, history)
        if expanded is not None:
            return expanded
    extra = [
        e.text for e in (person, thing) if e is not None and e.text.lower() not in query.lower()
    ]
    if not extra:
        return query
    return f"{query.rstrip()} ({', '.join(extra)})"


def _capitalise_first(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _expand_ellipsis(query: str, history: History) -> str | None:
    """'And John?' after 'Where does Maria live?' -> 'Where does John live?'."""
    words = word_tokens(tokenize(query))
    lowered = [w.base for w in words]
    rest_start = 0
    for start in ELLIPSIS_STARTS:
        if tuple(lowered[: len(start)]) == start:
            rest_start = len(start)
            break
    if rest_start >= len(words) or lowered[:2] == ["what", "else"]:
        return None
    rest = query[words[rest_start].start :].strip().rstrip("?.!").strip()
    previous = next((text for role, text in reversed(history) if role == "user"), None)
    if previous is None or not rest:
        return None
    entities = message_entities(previous)
    rest_is_name = words[rest_start].capitalised
    target = _latest(entities, person=True) if rest_is_name else _latest(entities, person=False)
    if target is None or target.text not in previous:
        return f"{previous.strip()} {rest}"
    return previous.strip().replace(target.text, rest, 1)


def _word_count(text: str) -> int:
    return len(word_tokens(tokenize(text)))


_CLITIC = re.compile(r"['’](?:s|ll|re|ve|d|m)\b", re.IGNORECASE)


def _content(text: str) -> set[str]:
    """Stemmed content words, clitics dropped ("Caroline's" -> "caroline")."""
    return set(content_tokens(_CLITIC.sub("", text)))


def rewrite_confidence(original: str, rewritten: str, context: str) -> float:
    """How much to trust ``rewritten`` as a standalone form of ``original`` (0..1);
    the formula is in the module docstring."""
    if not rewritten.strip() or " ".join(rewritten.split()) == " ".join(original.split()):
        return 0.0
    before = detect(original)
    new_words = _content(rewritten) - _content(original)
    context_words = _content(context)
    grounded = len(new_words & context_words) / len(new_words) if new_words else 0.0
    if before.references:
        left = len(detect(rewritten).references)
        resolved = 1.0 - min(1.0, left / len(before.references))
    else:
        resolved = 1.0 if new_words & context_words else 0.0
    n0, n1 = _word_count(original), _word_count(rewritten)
    low, high = max(1, n0 // 2), 3 * n0 + 10
    if low <= n1 <= high:
        length = 1.0
    elif 1 <= n1 <= 2 * high:
        length = 0.3
    else:
        length = 0.0
    return round(0.4 * resolved + 0.4 * grounded + 0.2 * length, 4)
