"""Deterministic mock of an OpenAI-compatible LLM server (aiohttp).

It plays two roles in the end-to-end setup:

1. The upstream model server ("vLLM") behind Envoy.  For ordinary requests it
   *echoes* every message it received, so a test can read back exactly what
   the sidecar injected into the system prompt::

       ECHO
       [system] <full system content>
       [user] <content>

2. The LLM the sidecar itself calls for its own tasks.  The sidecar marks those
   prompts with a tag at the very start of the first system message,
   ``[memory-sidecar:<task> v<N>]`` (e.g. ``[memory-sidecar:extract v1]``), and
   the mock answers them with deterministic rules.  Handlers live in a
   registry (:data:`DEFAULT_TASK_HANDLERS`), one function per task name.

Routes::

    POST   /v1/chat/completions   JSON or SSE ("stream": true)
    GET    /v1/models
    GET    /health
    GET    /_mock/requests        recorded chat-completions requests
    DELETE /_mock/requests        clear the record
    GET    /_mock/config          current fault/latency/format knobs
    POST   /_mock/config          partial update of the knobs (JSON object)
    GET    /_mock/stats           counters
    DELETE /_mock/stats           zero the counters
    POST   /_mock/reset           initial config, empty record, zero counters

Run it standalone with ``python -m e2e.mock_llm --port 0``; it prints
``MOCK_LLM_PORT=<port>`` once it is listening and stops on SIGTERM/SIGINT.
In-process, use :func:`start_mock`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import dataclasses
import itertools
import json
import logging
import random
import re
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, Final, Self

from aiohttp import web

from e2e.mock_judge import handle_dedup
from e2e.mock_search import handle_rank, handle_rewrite

__all__ = [
    "DEFAULT_TASK_HANDLERS",
    "PORT_LINE_PREFIX",
    "SERVICE_KEY",
    "TASK_TAG_RE",
    "MockConfig",
    "MockLLM",
    "MockLLMService",
    "TaskHandler",
    "TaskTag",
    "build_app",
    "build_echo",
    "extract_facts",
    "flatten_content",
    "format_task_tag",
    "handle_extract",
    "main",
    "parse_extract_turn",
    "parse_task_tag",
    "split_chunks",
    "start_mock",
    "third_person",
]

log = logging.getLogger("e2e.mock_llm")

PORT_LINE_PREFIX: Final = "MOCK_LLM_PORT="
DEFAULT_MODEL: Final = "mock-llm"
ECHO_HEADER: Final = "ECHO"
GARBAGE_TEXT: Final = "Sure! Here are the results you asked for: {facts: [oops, this is not JSON"

# ---------------------------------------------------------------------------
# Message helpers
# ---------------------------------------------------------------------------


def flatten_content(content: object) -> str:
    """Return the text of a message ``content`` (a string or a list of parts).

    A list of content parts is flattened to its ``{"type": "text"}`` parts,
    joined with newlines; other parts (images, audio) are dropped.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "\n".join(texts)
    return str(content)


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = body.get("messages")
    if not isinstance(raw, list):
        return []
    return [m for m in raw if isinstance(m, Mapping)]


def build_echo(messages: Sequence[Mapping[str, Any]]) -> str:
    """The echo-mode answer: ``ECHO`` then one ``[role] content`` block per message."""
    lines = [ECHO_HEADER]
    for message in messages:
        role = str(message.get("role", "unknown"))
        text = flatten_content(message.get("content"))
        tool_calls = message.get("tool_calls")
        if not text and isinstance(tool_calls, list) and tool_calls:
            names = [
                str(call.get("function", {}).get("name", "?"))
                for call in tool_calls
                if isinstance(call, Mapping)
            ]
            text = f"(tool_calls: {', '.join(names)})"
        lines.append(f"[{role}] {text}")
    return "\n".join(lines)


def _count_words(text: str) -> int:
    return len(text.split())


# ---------------------------------------------------------------------------
# Task tags
# ---------------------------------------------------------------------------

TASK_TAG_RE: Final = re.compile(
    r"\A\s*\[memory-sidecar:(?P<task>[a-z][a-z0-9_-]*) v(?P<version>\d+)\]"
)


@dataclasses.dataclass(frozen=True, slots=True)
class TaskTag:
    """A parsed ``[memory-sidecar:<task> v<N>]`` tag."""

    task: str
    version: int


def format_task_tag(task: str, version: int = 1) -> str:
    """Build the tag the sidecar puts at the start of its first system message."""
    return f"[memory-sidecar:{task} v{version}]"


def parse_task_tag(body: Mapping[str, Any]) -> TaskTag | None:
    """Return the task tag of a chat request, or ``None`` for an ordinary request.

    Only the first ``system`` (or ``developer``) message is looked at, and the
    tag must be at its very start (leading whitespace is tolerated).
    """
    for message in _messages(body):
        if message.get("role") in ("system", "developer"):
            match = TASK_TAG_RE.match(flatten_content(message.get("content")))
            if match is None:
                return None
            return TaskTag(match["task"], int(match["version"]))
    return None


TaskHandler = Callable[[Mapping[str, Any]], str]
"""A task handler gets the parsed request body and returns the assistant content."""


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
    user_messages = [m for m in _messages(body) if m.get("role") == "user"]
    turn = flatten_content(user_messages[-1].get("content")) if user_messages else ""
    user_text = parse_extract_turn(turn)
    facts = extract_facts(user_text) if user_text else []
    return json.dumps({"facts": facts}, ensure_ascii=False)


DEFAULT_TASK_HANDLERS: Final[Mapping[str, TaskHandler]] = MappingProxyType(
    {
        "extract": handle_extract,
        "dedup": handle_dedup,
        "rewrite": handle_rewrite,
        "rank": handle_rank,
    }
)
"""Task name -> handler.  Add new sidecar tasks (rewrite, dedup, rank) here."""


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class MockConfig:
    """Knobs for latency, faults and output format; changeable at run time."""

    model: str = DEFAULT_MODEL
    """Model id listed by ``/v1/models`` (responses echo the request's model)."""
    latency_ms: float = 0.0
    """Delay before answering any chat request."""
    task_latency_ms: float = 0.0
    """Extra delay before answering task prompts only."""
    stream_chunk_delay_ms: float = 0.0
    """Delay between SSE chunks."""
    stream_chunks: int = 16
    """Most content chunks per streamed answer (split at words); 0 = one per word."""
    error_rate: float = 0.0
    """Share of chat requests (0..1) answered with ``error_status``; seeded RNG."""
    error_status: int = 500
    fail_tasks: bool = False
    """Answer every task prompt with ``error_status``."""
    garbage_tasks: bool = False
    """Answer task prompts with non-JSON text."""
    json_fences: bool = False
    """Wrap task answers in a ```json fenced block."""
    think_tags: bool = False
    """Prefix task answers with a ``<think>...</think>`` block."""
    seed: int = 0
    """Seed of the error-injection RNG (re-seeded when set at run time)."""
    max_requests: int = 256
    """How many recorded requests ``/_mock/requests`` keeps."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def updated(self, changes: Mapping[str, Any]) -> MockConfig:
        """A validated copy with ``changes`` applied; raises ``ValueError``."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        values = self.to_dict()
        for key, value in changes.items():
            if key not in fields:
                raise ValueError(f"unknown config key {key!r}; known: {sorted(fields)}")
            values[key] = _coerce(key, value, type(getattr(self, key)))
        new = MockConfig(**values)
        new.validate()
        return new

    def validate(self) -> None:
        for name in ("latency_ms", "task_latency_ms", "stream_chunk_delay_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError("error_rate must be within 0..1")
        if not 400 <= self.error_status <= 599:
            raise ValueError("error_status must be an HTTP error status (400..599)")
        if self.stream_chunks < 0:
            raise ValueError("stream_chunks must be >= 0")
        if self.max_requests < 1:
            raise ValueError("max_requests must be >= 1")
        if not self.model:
            raise ValueError("model must not be empty")


def _coerce(key: str, value: object, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind is str and isinstance(value, str):
        return value
    raise ValueError(f"config key {key!r} needs a {kind.__name__}, got {value!r}")


# ---------------------------------------------------------------------------
# The service (all mutable state lives here, owned by the app)
# ---------------------------------------------------------------------------


class MockLLMService:
    """Request handlers plus the state they share: config, RNG, record, counters."""

    def __init__(
        self,
        config: MockConfig | None = None,
        *,
        task_handlers: Mapping[str, TaskHandler] | None = None,
    ) -> None:
        self.initial_config = config if config is not None else MockConfig()
        self.initial_config.validate()
        self.config = dataclasses.replace(self.initial_config)
        self.task_handlers: dict[str, TaskHandler] = dict(
            DEFAULT_TASK_HANDLERS if task_handlers is None else task_handlers
        )
        self.rng = random.Random(self.config.seed)
        self.recorded: deque[dict[str, Any]] = deque(maxlen=self.config.max_requests)
        self.stats: dict[str, Any] = self._zero_stats()
        self.started = int(time.time())
        self._ids = itertools.count(1)

    # -- state ----------------------------------------------------------------

    @staticmethod
    def _zero_stats() -> dict[str, Any]:
        return {"chat": 0, "echo": 0, "stream": 0, "tasks": {}, "errors": 0}

    def configure(self, changes: Mapping[str, Any]) -> MockConfig:
        """Apply a partial config update (validated); returns the new config."""
        new = self.config.updated(changes)
        if "seed" in changes:
            self.rng = random.Random(new.seed)
        if new.max_requests != self.recorded.maxlen:
            self.recorded = deque(self.recorded, maxlen=new.max_requests)
        self.config = new
        return new

    def reset(self) -> None:
        """Back to the initial config; empty record; zero counters; fresh RNG."""
        self.config = dataclasses.replace(self.initial_config)
        self.rng = random.Random(self.config.seed)
        self.recorded = deque(maxlen=self.config.max_requests)
        self.stats = self._zero_stats()

    def requests(self) -> list[dict[str, Any]]:
        return list(self.recorded)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/_mock/requests", self.get_requests)
        app.router.add_delete("/_mock/requests", self.clear_requests)
        app.router.add_get("/_mock/config", self.get_config)
        app.router.add_post("/_mock/config", self.post_config)
        app.router.add_get("/_mock/stats", self.get_stats)
        app.router.add_delete("/_mock/stats", self.clear_stats)
        app.router.add_post("/_mock/reset", self.post_reset)

    # -- small routes -----------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(self, request: web.Request) -> web.Response:
        model = {
            "id": self.config.model,
            "object": "model",
            "created": self.started,
            "owned_by": "mock-llm",
        }
        return web.json_response({"object": "list", "data": [model]})

    async def get_requests(self, request: web.Request) -> web.Response:
        return web.json_response(self.requests())

    async def clear_requests(self, request: web.Request) -> web.Response:
        self.recorded.clear()
        return web.json_response({"cleared": True})

    async def get_config(self, request: web.Request) -> web.Response:
        return web.json_response(self.config.to_dict())

    async def post_config(self, request: web.Request) -> web.Response:
        try:
            changes = await request.json()
        except ValueError:
            return _error(400, "body must be a JSON object", "invalid_request_error")
        if not isinstance(changes, dict):
            return _error(400, "body must be a JSON object", "invalid_request_error")
        try:
            new = self.configure(changes)
        except ValueError as exc:
            return _error(400, str(exc), "invalid_request_error")
        return web.json_response(new.to_dict())

    async def get_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats)

    async def clear_stats(self, request: web.Request) -> web.Response:
        self.stats = self._zero_stats()
        return web.json_response(self.stats)

    async def post_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response(self.config.to_dict())

    # -- chat completions ---------------------------------------------------------

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        raw_bytes = await request.read()
        raw = raw_bytes.decode("utf-8", errors="replace")
        body: Any
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        self.recorded.append(
            {
                "path": request.path,
                "headers": {k.lower(): v for k, v in request.headers.items()},
                "body": body,
                # Exactly the bytes received, for byte-identity checks.
                "raw_body_b64": base64.b64encode(raw_bytes).decode("ascii"),
            }
        )
        self.stats["chat"] += 1
        config = self.config  # one consistent view for the whole request

        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return self._fail(400, "body must be a JSON object with a 'messages' list")
        tag = parse_task_tag(body)
        if tag is not None:
            tasks: dict[str, int] = self.stats["tasks"]
            tasks[tag.task] = tasks.get(tag.task, 0) + 1

        delay_ms = config.latency_ms + (config.task_latency_ms if tag is not None else 0.0)
        await _sleep_at_least(delay_ms / 1000.0)

        if tag is not None and config.fail_tasks:
            return self._fail(config.error_status, f"injected failure for task {tag.task!r}")
        if config.error_rate > 0.0 and self.rng.random() < config.error_rate:
            return self._fail(config.error_status, "injected error")

        json_mode = _wants_json(body)
        if tag is None:
            self.stats["echo"] += 1
            content = build_echo(_messages(body))
            if json_mode:
                content = json.dumps({"echo": content}, ensure_ascii=False)
        else:
            handler = self.task_handlers.get(tag.task)
            if handler is None:
                return self._fail(400, f"mock LLM has no handler for task {tag.task!r}")
            content = GARBAGE_TEXT if config.garbage_tasks else handler(body)
            content = _decorate(content, config)

        model = body.get("model")
        model = model if isinstance(model, str) and model else config.model
        completion_id = f"chatcmpl-mock-{next(self._ids):06d}"
        usage = _usage(_messages(body), content)
        if body.get("stream") is True:
            self.stats["stream"] += 1
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            return await self._stream(
                request,
                completion_id=completion_id,
                model=model,
                content=content,
                usage=usage if include_usage else None,
                config=config,
            )
        return web.json_response(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "system_fingerprint": None,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )

    def _fail(self, status: int, message: str) -> web.Response:
        self.stats["errors"] += 1
        kind = "invalid_request_error" if status < 500 else "server_error"
        return _error(status, message, kind)

    async def _stream(
        self,
        request: web.Request,
        *,
        completion_id: str,
        model: str,
        content: str,
        usage: dict[str, int] | None,
        config: MockConfig,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        created = int(time.time())
        include_usage = usage is not None

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            data: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": None,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            if include_usage:
                data["usage"] = None
            return data

        events = [chunk({"role": "assistant", "content": ""}, None)]
        events += [chunk({"content": piece}, None) for piece in split_chunks(content, config)]
        events.append(chunk({}, "stop"))
        if usage is not None:
            events.append(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "system_fingerprint": None,
                    "choices": [],
                    "usage": usage,
                }
            )
        delay = config.stream_chunk_delay_ms / 1000.0
        try:
            for index, event in enumerate(events):
                if index and delay:
                    await _sleep_at_least(delay)
                await response.write(_sse(json.dumps(event, ensure_ascii=False)))
            await response.write(_sse("[DONE]"))
            await response.write_eof()
        except ConnectionError:
            log.debug("client went away during a streamed answer")
        return response


def split_chunks(content: str, config: MockConfig) -> list[str]:
    """Split ``content`` at word boundaries into at most ``stream_chunks`` pieces."""
    pieces = re.findall(r"\S+\s*|\s+", content)
    if not pieces:
        return []
    count = len(pieces) if config.stream_chunks == 0 else min(config.stream_chunks, len(pieces))
    size = len(pieces)
    return ["".join(pieces[i * size // count : (i + 1) * size // count]) for i in range(count)]


def _sse(data: str) -> bytes:
    return f"data: {data}\n\n".encode()


def _wants_json(body: Mapping[str, Any]) -> bool:
    fmt = body.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") in ("json_object", "json_schema")


def _decorate(content: str, config: MockConfig) -> str:
    if config.json_fences:
        content = f"```json\n{content}\n```"
    if config.think_tags:
        content = f"<think>\nThe user wants structured output. Let me think.\n</think>\n{content}"
    return content


def _usage(messages: Sequence[Mapping[str, Any]], content: str) -> dict[str, int]:
    prompt = sum(_count_words(flatten_content(m.get("content"))) for m in messages)
    completion = _count_words(content)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": status}},
        status=status,
    )


async def _sleep_at_least(seconds: float) -> None:
    """Sleep for at least ``seconds`` of monotonic time (never returns early)."""
    if seconds <= 0:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    await asyncio.sleep(seconds)
    remaining = deadline - loop.time()
    if remaining > 0:  # the loop may wake a clock tick early
        await asyncio.sleep(remaining)


SERVICE_KEY: Final = web.AppKey("mock_llm_service", MockLLMService)


def build_app(
    config: MockConfig | None = None,
    *,
    task_handlers: Mapping[str, TaskHandler] | None = None,
) -> web.Application:
    """An aiohttp app serving the mock; its service is ``app[SERVICE_KEY]``."""
    service = MockLLMService(config, task_handlers=task_handlers)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SERVICE_KEY] = service
    service.add_routes(app)
    return app


# ---------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------


class MockLLM:
    """A running mock server (see :func:`start_mock`); also an async context manager."""

    def __init__(self, runner: web.AppRunner, service: MockLLMService, host: str, port: int):
        self._runner = runner
        self.service = service
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        """Root URL, e.g. ``http://127.0.0.1:8000``."""
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI SDK base URL, e.g. ``http://127.0.0.1:8000/v1``."""
        return f"{self.url}/v1"

    @property
    def config(self) -> MockConfig:
        return self.service.config

    def configure(self, **changes: Any) -> MockConfig:
        """Validated partial config update, like ``POST /_mock/config``."""
        return self.service.configure(changes)

    def requests(self) -> list[dict[str, Any]]:
        """Recorded chat requests, oldest first: ``{path, headers, body}``."""
        return self.service.requests()

    def task_requests(self, task: str) -> list[dict[str, Any]]:
        """Recorded requests tagged ``[memory-sidecar:<task> ...]``."""
        return [r for r in self.requests() if _task_of(r["body"]) == task]

    def upstream_requests(self) -> list[dict[str, Any]]:
        """Recorded requests that carry no task tag (the traffic Envoy forwards)."""
        return [r for r in self.requests() if _task_of(r["body"]) is None]

    def clear_requests(self) -> None:
        self.service.recorded.clear()

    def stats(self) -> dict[str, Any]:
        return copy.deepcopy(self.service.stats)

    def reset(self) -> None:
        self.service.reset()

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _task_of(body: object) -> str | None:
    if not isinstance(body, dict):
        return None
    tag = parse_task_tag(body)
    return None if tag is None else tag.task


async def start_mock(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    task_handlers: Mapping[str, TaskHandler] | None = None,
    **config: Any,
) -> MockLLM:
    """Start the mock in this event loop; ``port=0`` picks a free port.

    ``config`` takes :class:`MockConfig` fields (``latency_ms=50, error_rate=0.1``...).
    """
    cfg = MockConfig().updated(config)
    app = build_app(cfg, task_handlers=task_handlers)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        actual_port = int(runner.addresses[0][1])
    except BaseException:
        await runner.cleanup()
        raise
    return MockLLM(runner, app[SERVICE_KEY], host, actual_port)


def _parser() -> argparse.ArgumentParser:
    defaults = MockConfig()
    p = argparse.ArgumentParser(
        prog="python -m e2e.mock_llm",
        description="Deterministic mock OpenAI-compatible LLM server (echo + sidecar tasks).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--model", default=defaults.model)
    p.add_argument("--latency-ms", type=float, default=defaults.latency_ms)
    p.add_argument("--task-latency-ms", type=float, default=defaults.task_latency_ms)
    p.add_argument("--stream-chunk-delay-ms", type=float, default=defaults.stream_chunk_delay_ms)
    p.add_argument("--stream-chunks", type=int, default=defaults.stream_chunks)
    p.add_argument("--error-rate", type=float, default=defaults.error_rate)
    p.add_argument("--error-status", type=int, default=defaults.error_status)
    p.add_argument("--fail-tasks", action="store_true")
    p.add_argument("--garbage-tasks", action="store_true")
    p.add_argument("--json-fences", action="store_true")
    p.add_argument("--think-tags", action="store_true")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--max-requests", type=int, default=defaults.max_requests)
    p.add_argument("--log-level", default="WARNING")
    return p


def _config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(MockConfig)}


async def _serve(args: argparse.Namespace) -> int:
    config = _config_from_args(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    mock = await start_mock(args.host, args.port, **config)
    try:
        print(f"{PORT_LINE_PREFIX}{mock.port}", flush=True)
        log.info("mock LLM listening on %s", mock.url)
        await stop.wait()
    finally:
        await mock.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; runs until SIGTERM/SIGINT and returns 0."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    try:
        MockConfig().updated(_config_from_args(args))
    except ValueError as exc:
        print(f"mock_llm: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
