"""Ambiguity-gated query rewriting: follow-up questions made searchable.

"When did she go there?" finds nothing in a memory store: the words that matter
("Caroline", "the support group") are in the conversation, not in the question.
The request already carries that conversation, so the rewriter resolves the
references from it — but only when the query needs it:

1. :func:`detect` flags pronouns (he/she/it/they...), demonstratives used as
   pronouns ("is that true?", "that one"; not "this week", "the book that I read"),
   temporal references to the conversation ("earlier", "last time", "the other
   day", "again", "before" at the end of a clause, "that weekend"), implicit
   references ("the issue", "the same", "what he said", "you mentioned"),
   ellipsis ("And Berlin?", "what about her sister?") and very short queries. A
   3rd-person pronoun with an antecedent earlier in the query itself ("What did
   Caroline say about her mom?") is not ambiguous. Every other query takes the
   **fast path**: searched as is, no LLM call, no cache lookup.
2. An ambiguous query is rewritten from the request's last messages by the LLM
   (``[memory-sidecar:rewrite v1]``, temperature 0, JSON ``{"query": "..."}``) or,
   without one, by the **heuristic resolver** (:func:`resolve_heuristic`): person
   pronouns become the most recent person name of the context, "it"/"that"/"the
   issue" the most recent noun phrase or non-person name, and what cannot be
   substituted (temporal references, bare "what else?") gets the context's latest
   entities appended.
3. :func:`rewrite_confidence` scores the rewrite (0..1)::

       resolved = 1 - (references left, by detect() on the rewrite) / (references
                  in the original)          [no references: 1 if grounded words]
       grounded = share of the rewrite's new content words found in the context
       length   = 1 when the rewrite has between n/2 and 3n + 10 words (n: the
                  original's), 0.3 up to twice that, else 0
       confidence = 0.4 * resolved + 0.4 * grounded + 0.2 * length

   An unchanged rewrite scores 0. Below ``rewrite.min_confidence`` the original
   is searched (reason ``low_confidence``).

Results are cached (bounded LRU with a TTL, keyed by a hash of user, query,
context and settings); the LLM call has its own budget (``rewrite.timeout_ms``),
after which — or on any LLM error — the heuristic answers (``fallback:
heuristic``) or the original is searched. Nothing here logs or returns query text
outside :class:`RewriteResult`; headers carry the reason and confidence only.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sidecar.config import RewriteConfig
from sidecar.errors import LLMError, LLMTimeout
from sidecar.llm import ChatMessage, LLMClient, task_tag
from sidecar.memory.model.records import Hit
from sidecar.memory.model.text import tokens as content_tokens
from sidecar.memory.read.ttl_cache import TtlCache, digest_key
from sidecar.metrics import Metrics

TASK = "rewrite"
PROMPT_VERSION = 1

#: (role, text) of an earlier chat message, oldest first.
History = Sequence[tuple[str, str]]

REASONS = ("fast_path", "llm", "heuristic", "low_confidence", "timeout", "error", "cache")

# -- vocabulary ------------------------------------------------------------------------

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
_REPLACEABLE = frozenset(
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

_STOP = frozenset(
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
    monday tuesday wednesday thursday friday saturday sunday january february march april
    may june july august september october november december sounds looks seems one""".split()
)
#: Imperatives that start sentences ("Talk to Ana"): never names there.
_INITIAL_VERBS = frozenset(
    """talk ask call check send buy book write read meet try make take bring help keep
    start stop turn pick put set use visit play run open close add move pay plan note
    describe explain summarize summarise compare search look""".split()
)
_PLACE_PREPOSITIONS = frozenset(
    """in at from near into around across through visiting visited visit toward towards
    outside inside""".split()
)
_MOTION_VERBS = frozenset(
    """moved move moving went go going goes flew fly travelled traveled travel trip drove
    drive relocated relocate been came come back headed returned return""".split()
)
_PLACE_WORDS = frozenset(
    """street road avenue city town park lake river mountain museum university college
    school hospital cafe café club group inc ltd company church center centre hotel
    restaurant beach island bay county state""".split()
)
_DETERMINERS = frozenset({"the", "a", "an", "my", "our", "your"})
_NP_STOP = _STOP | PERSON_PRONOUNS | THING_PRONOUNS | GENERIC_NOUNS | TIME_NOUNS | _CHAT_NOUNS

_TOKEN = re.compile(r"[^\W_]+(?:['’][^\W_]+)?|[^\w\s]")
_SENTENCE_END = frozenset({".", "!", "?", ";", ":", "\n"})


# -- tokens ----------------------------------------------------------------------------


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


def _words(tokens: Sequence[Token]) -> list[Token]:
    return [t for t in tokens if t.word]


def _is_name(tokens: Sequence[Token], i: int) -> bool:
    """A capitalised word that is probably a name (sentence-initial ones only when
    they are not common words)."""
    token = tokens[i]
    if not token.word or not token.capitalised or token.base in _STOP:
        return False
    if token.sentence_start and token.base in _INITIAL_VERBS:
        return False
    if token.base in PERSON_PRONOUNS or token.base in THING_PRONOUNS or token.base == "i":
        return False
    return not token.base.isdigit()


# -- detection -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ambiguity:
    """What makes a query depend on its conversation. ``references`` are the words
    a good rewrite replaces (pronouns, demonstratives, implicit phrases)."""

    kinds: tuple[str, ...] = ()
    references: tuple[str, ...] = ()

    @property
    def ambiguous(self) -> bool:
        return bool(self.kinds)


def _has_antecedent(tokens: Sequence[Token], index: int, *, person: bool) -> bool:
    """Whether something before ``tokens[index]`` in the query can be what it refers
    to: a name (for person pronouns), a name or a determiner + noun (for "it")."""
    for j in range(index):
        if _is_name(tokens, j):
            return True
        if not person and tokens[j].base in _DETERMINERS and j + 1 < index:
            following = tokens[j + 1]
            if following.word and following.base not in _NP_STOP:
                return True
    return False


_EXPLETIVE_AFTER_IT = frozenset(
    """raining snowing sunny cold hot warm late early windy dark possible true ok okay
    fine worth""".split()
)


def _expletive_it(words: Sequence[Token], k: int) -> bool:
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
    words = _words(tokens)
    word_index = [i for i, t in enumerate(tokens) if t.word]
    for k, token in enumerate(words):
        i = word_index[k]
        base = token.base
        if base in PERSON_PRONOUNS:
            if not _has_antecedent(tokens, i, person=True):
                add("pronoun", base)
        elif base in THING_PRONOUNS:
            if not _expletive_it(words, k) and not _has_antecedent(tokens, i, person=False):
                add("pronoun", base)
        elif base in DEMONSTRATIVES:
            kind = _demonstrative(words, k, i in clause_end)
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


def _demonstrative(words: Sequence[Token], k: int, clause_end: bool) -> str | None:
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
        if prev.base not in _STOP:
            return None  # a relative clause: "the book that was on the table"
    if nxt.base in PRONOUN_FOLLOWERS:
        return "demonstrative"
    if prev is not None and prev.base in AUXILIARIES and prev.sentence_start:
        return "demonstrative"  # "Is that true?", "Was this before?"
    return None  # a determiner with a specific noun: "that restaurant"


# -- context entities ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entity:
    text: str
    person: bool


def _name_is_place(tokens: Sequence[Token], start: int, span: Sequence[Token]) -> bool:
    if any(t.base in _PLACE_WORDS for t in span):
        return True
    if len(span) == 1 and len(span[0].text) > 1 and span[0].text.isupper():
        return True  # an acronym: "LGBTQ"
    prev = tokens[start - 1].base if start > 0 else ""
    if prev in _PLACE_PREPOSITIONS:
        return True
    before = tokens[start - 2].base if start > 1 else ""
    return prev == "to" and before in _MOTION_VERBS


def message_entities(text: str, *, from_assistant: bool = False) -> list[Entity]:
    """Names and noun phrases of one message, in order of appearance."""
    tokens = tokenize(text)
    found: list[tuple[int, Entity]] = []
    i = 0
    while i < len(tokens):
        if _is_name(tokens, i):
            j = i + 1
            while j < len(tokens) and tokens[j].word and tokens[j].capitalised:
                if tokens[j].base in _STOP or tokens[j - 1].suffix:
                    break
                j += 1
            span = tokens[i:j]
            words = [t.text for t in span]
            words[-1] = words[-1].split("'")[0].split("’")[0]
            person = not _name_is_place(tokens, i, span)
            found.append((i, Entity(" ".join(words), person)))
            i = j
            continue
        if tokens[i].base in _DETERMINERS and tokens[i].word:
            j = i + 1
            while j < len(tokens) and j - i <= 4 and tokens[j].word:
                if tokens[j].base in _NP_STOP or (j > i + 1 and tokens[j - 1].suffix):
                    break
                if j > i + 1 and _is_name(tokens, j):
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


# -- heuristic resolver ----------------------------------------------------------------


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
    words = _words(tokens)
    word_index = [i for i, t in enumerate(tokens) if t.word]
    consumed: set[int] = set()
    lowered = [w.base for w in words]
    for phrase in _REPLACEABLE:
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
            if _has_antecedent(tokens, i, person=True):
                continue
            nxt = words[k + 1] if k + 1 < len(words) else None
            possessive = base in PERSON_POSSESSIVE or (
                base == "her"
                and nxt is not None
                and i not in clause_end
                and nxt.base not in _STOP
                and nxt.base not in PERSON_PRONOUNS
            )
            replacement = _possessive(person.text) if possessive else person.text
            replacement += token.suffix if token.suffix and not possessive else ""
        elif base in THING_PRONOUNS and thing is not None:
            if _expletive_it(words, k) or _has_antecedent(tokens, i, person=False):
                continue
            replacement = _possessive(thing.text) if base == "its" else thing.text
            replacement += token.suffix if token.suffix else ""
        elif base in DEMONSTRATIVES and thing is not None:
            if _demonstrative(words, k, i in clause_end) != "demonstrative":
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
    words = _words(tokenize(query))
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


# -- confidence ------------------------------------------------------------------------


def _word_count(text: str) -> int:
    return len(_words(tokenize(text)))


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


# -- the rewriter ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RewriteResult:
    """The decision for one query; ``query`` is what is searched. Only ``reason``,
    ``confidence`` and ``fallback`` may leave the process (headers, metrics)."""

    original: str = field(repr=False)
    query: str = field(repr=False)
    reason: str
    confidence: float = 1.0
    kinds: tuple[str, ...] = ()
    #: "heuristic" when the heuristic answered for a failed or slow LLM.
    fallback: str = ""
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return self.query != self.original

    def header_value(self) -> str:
        value = f"{self.reason};confidence={self.confidence:.2f}"
        if self.fallback:
            value += f";fallback={self.fallback}"
        return value


SYSTEM_PROMPT = (
    f"{task_tag(TASK, PROMPT_VERSION)} You turn the user's latest chat message into a "
    "standalone search query for their long-term memory. Replace pronouns (he, she, it, "
    "they, his, her...), demonstratives (this, that) and vague references (the issue, the "
    "same, last time, earlier) with the people, things and times they refer to in the "
    "conversation. Keep the user's words otherwise. Do not answer the question and do not "
    "add anything the conversation does not say. If nothing needs resolving, return the "
    'message unchanged. Answer with JSON only: {"query": "<the standalone query>"}'
)


def clip_history(history: History, config: RewriteConfig) -> list[tuple[str, str]]:
    """The last ``history_messages`` messages, each cut to ``max_message_chars``."""
    if config.history_messages <= 0:
        return []
    kept = list(history)[-config.history_messages :]
    return [
        (role, " ".join(text.split())[: config.max_message_chars].strip()) for role, text in kept
    ]


def build_messages(query: str, history: History) -> list[ChatMessage]:
    lines = [f"{role}: {text}" for role, text in history]
    user = "CONVERSATION:\n" + "\n".join(lines) + f"\nLATEST: {' '.join(query.split())}"
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]


def parse_rewrite(value: object) -> str | None:
    """The query of a tolerant ``{"query": ...}`` answer (a bare string is accepted)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, dict):
        found = next(
            (value[k] for k in ("query", "rewritten", "rewrite", "standalone") if k in value),
            None,
        )
        if not isinstance(found, str):
            return None
        text = found
    elif isinstance(value, list) and value:
        return parse_rewrite(value[0])
    else:
        return None
    text = " ".join(text.split()).strip().strip('"').strip()
    return text or None


@dataclass(frozen=True, slots=True)
class _Cached:
    query: str = field(repr=False)
    confidence: float
    kinds: tuple[str, ...]


#: Rewrite results by :func:`cache_key` (a digest: no text is kept as a key).
RewriteCache = TtlCache[_Cached]


def cache_key(user_id: str, query: str, history: History, config: RewriteConfig, llm: bool) -> str:
    turns = (part for role, text in history for part in (role, text))
    return digest_key(user_id, query, str(llm), config.fallback, str(config.min_confidence), *turns)


class QueryRewriter:
    """Owned by the :class:`~sidecar.memory.read.service.MemoryService`; one per process."""

    def __init__(
        self,
        llm: LLMClient | None,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._llm = llm
        self._metrics = metrics
        self.cache = RewriteCache(clock)

    def forget(self, user_id: str) -> int:
        """Drop every cached rewrite of ``user_id``'s queries; how many."""
        return self.cache.drop_owner(digest_key(user_id))

    def _uses_llm(self, config: RewriteConfig) -> bool:
        return config.use_llm and self._llm is not None and self._llm.configured

    async def rewrite(
        self, query: str, history: History, user_id: str, config: RewriteConfig
    ) -> RewriteResult:
        """Decide and (when needed) rewrite; never raises for LLM trouble."""
        started = time.perf_counter()
        result = await self._decide(query, history, user_id, config)
        seconds = time.perf_counter() - started
        self._metrics.rewrites.labels(reason=result.reason).inc()
        self._metrics.rewrite_seconds.labels(reason=result.reason).observe(seconds)
        return RewriteResult(
            result.original,
            result.query,
            result.reason,
            result.confidence,
            result.kinds,
            result.fallback,
            seconds,
        )

    async def _decide(
        self, query: str, history: History, user_id: str, config: RewriteConfig
    ) -> RewriteResult:
        if not config.enabled:
            return RewriteResult(query, query, "disabled")
        ambiguity = detect(query)
        if not ambiguity.ambiguous:
            return RewriteResult(query, query, "fast_path")
        kinds = ambiguity.kinds
        context = clip_history(history, config)
        if not context:
            # Nothing to resolve from: no LLM call can help.
            return RewriteResult(query, query, "low_confidence", 0.0, kinds)
        uses_llm = self._uses_llm(config)
        key = cache_key(user_id, query, context, config, uses_llm)
        cached = self.cache.get(key) if config.cache_ttl_s > 0 else None
        if cached is not None:
            return RewriteResult(query, cached.query, "cache", cached.confidence, cached.kinds)
        context_text = "\n".join(text for _, text in context)
        if uses_llm:
            result = await self._with_llm(query, context, context_text, kinds, config)
        else:
            result = self._heuristic(query, context, context_text, kinds, config)
        if result.reason in ("llm", "heuristic", "low_confidence") and config.cache_ttl_s > 0:
            self.cache.put(
                key,
                _Cached(result.query, result.confidence, kinds),
                ttl_s=config.cache_ttl_s,
                max_entries=config.cache_max_entries,
                owner=digest_key(user_id),
            )
        return result

    def _heuristic(
        self,
        query: str,
        context: History,
        context_text: str,
        kinds: tuple[str, ...],
        config: RewriteConfig,
        *,
        failure: str = "",
    ) -> RewriteResult:
        rewritten = resolve_heuristic(query, context)
        confidence = rewrite_confidence(query, rewritten, context_text)
        if confidence >= config.min_confidence:
            if failure:
                return RewriteResult(query, rewritten, failure, confidence, kinds, "heuristic")
            return RewriteResult(query, rewritten, "heuristic", confidence, kinds)
        return RewriteResult(query, query, failure or "low_confidence", confidence, kinds)

    async def _with_llm(
        self,
        query: str,
        context: History,
        context_text: str,
        kinds: tuple[str, ...],
        config: RewriteConfig,
    ) -> RewriteResult:
        assert self._llm is not None
        budget = config.timeout_ms / 1000
        try:
            answer = await asyncio.wait_for(
                self._llm.chat_json(
                    TASK,
                    build_messages(query, context),
                    max_tokens=config.max_tokens,
                    temperature=0.0,
                    timeout_s=budget,
                ),
                timeout=budget,
            )
        except (TimeoutError, LLMTimeout):
            return self._failed(query, context, context_text, kinds, config, "timeout")
        except LLMError:
            return self._failed(query, context, context_text, kinds, config, "error")
        rewritten = parse_rewrite(answer)
        if rewritten is None:
            return self._failed(query, context, context_text, kinds, config, "error")
        confidence = rewrite_confidence(query, rewritten, context_text)
        if confidence >= config.min_confidence:
            return RewriteResult(query, rewritten, "llm", confidence, kinds)
        # The LLM's rewrite is not trusted: the heuristic may still do better.
        fallback = self._heuristic(query, context, context_text, kinds, config)
        if fallback.changed and fallback.confidence > confidence:
            return fallback
        return RewriteResult(query, query, "low_confidence", confidence, kinds)

    def _failed(
        self,
        query: str,
        context: History,
        context_text: str,
        kinds: tuple[str, ...],
        config: RewriteConfig,
        reason: str,
    ) -> RewriteResult:
        if config.fallback == "heuristic":
            return self._heuristic(query, context, context_text, kinds, config, failure=reason)
        return RewriteResult(query, query, reason, 0.0, kinds)


def fuse_rewrite_hits(rewritten: Sequence[Hit], original: Sequence[Hit], limit: int) -> list[Hit]:
    """``rewrite.search: both``: the two rankings fused by weighted reciprocal ranks
    (rewrite 2, original 1, k = 60); a memory in both keeps the rewrite's hit."""
    scores: dict[str, float] = {}
    hits: dict[str, Hit] = {}
    for weight, ranking in ((2.0, rewritten), (1.0, original)):
        for rank, hit in enumerate(ranking, start=1):
            key = hit.record.id
            scores[key] = scores.get(key, 0.0) + weight / (60 + rank)
            hits.setdefault(key, hit)
    order = sorted(scores, key=lambda key: -scores[key])
    return [hits[key] for key in order[:limit]]
