"""One wrapper for every LLM call the sidecar makes (extraction, rewrite, judge, rank).

It owns the OpenAI client, applies the timeout, strips ``<think>`` blocks and code
fences, parses JSON tolerantly, counts outcomes, and translates the SDK's errors to
:class:`sidecar.errors.LLMError` subclasses. Every prompt starts with a task tag
``[memory-sidecar:<task> v<N>]`` so logs, metrics and the test mock can tell them apart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, TypedDict

import openai

from sidecar.config import LLMConfig
from sidecar.errors import LLMBadOutput, LLMTimeout, LLMUnavailable
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

_THINK = re.compile(r"<think(?:ing)?>.*?(?:</think(?:ing)?>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


class ChatMessage(TypedDict):
    role: str
    content: str


class ChatModel(Protocol):
    """What the memory code asks of an LLM: whether one is configured, and a task's
    JSON answer. :class:`LLMClient` is the one the sidecar runs; the tests' fake
    stands in for it where only the answers matter."""

    @property
    def configured(self) -> bool: ...

    async def chat_json(
        self,
        task: str,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """The parsed JSON value of the answer to ``messages``; ``task`` (the prompt's
        tag) labels metrics and logs. Raises :class:`sidecar.errors.LLMError`."""
        ...


def task_tag(task: str, version: int) -> str:
    return f"[memory-sidecar:{task} v{version}]"


def strip_reasoning(text: str) -> str:
    """Remove ``<think>…</think>`` blocks (an unterminated one runs to the end)."""
    return _THINK.sub("", text).strip()


def parse_json_loose(text: str) -> Any:
    """The first JSON value in ``text``: tolerates think tags, code fences, prose
    before or after, trailing commas, and an answer cut off by the token limit (the
    complete elements before the cut are kept). Raises :class:`LLMBadOutput` when
    there is none.
    """
    cleaned = strip_reasoning(text)
    candidates = [m.group(1).strip() for m in _FENCE.finditer(cleaned)] + [cleaned.strip()]
    for candidate in candidates:
        # The value that starts at the first bracket, as it is, without trailing
        # commas, or closed after its last complete element; then any later one.
        fixed = _without_trailing_commas(candidate)
        for attempt in (candidate, fixed, _complete_prefix(fixed)):
            value = _first_value(attempt, only_first=True)
            if value is not _NONE:
                return value
        value = _first_value(candidate, only_first=False)
        if value is not _NONE:
            return value
    raise LLMBadOutput("no JSON value in the LLM answer")


_NONE = object()


def _structural(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """The characters of ``text`` from ``start`` that are outside JSON strings (a
    string's quotes count as inside), with their index."""
    in_string = escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        else:
            yield index, char


def _without_trailing_commas(candidate: str) -> str:
    """``candidate`` without commas right before a closing bracket, outside strings
    (``[1, 2,]`` -> ``[1, 2]``; ``"a, ]"`` stays as it is)."""
    drop: set[int] = set()
    for index, char in _structural(candidate):
        if char in "}]":
            before = index - 1
            while before >= 0 and candidate[before].isspace():
                before -= 1
            if before >= 0 and candidate[before] == ",":
                drop.add(before)  # outside any string: the bracket after it is
    return "".join(c for i, c in enumerate(candidate) if i not in drop)


def _first_value(candidate: str, *, only_first: bool) -> Any:
    """The JSON value starting at the first bracket of ``candidate`` (or, unless
    ``only_first``, at any later one); ``_NONE`` when there is none."""
    decoder = json.JSONDecoder()
    for start, char in enumerate(candidate):
        if char not in "{[":
            continue
        try:
            value, _ = decoder.raw_decode(candidate, start)
        except json.JSONDecodeError:
            if only_first:
                break
            continue
        except RecursionError:  # nested too deep: give up on this candidate (each
            break  # later start inside it would parse it all again)
        return value
    return _NONE


def _complete_prefix(candidate: str) -> str:
    """A JSON text cut off mid-value, closed after its last complete element
    (``{"facts": [{...}, {"text": "Us`` -> ``{"facts": [{...}]}``); ``""`` when
    nothing before the cut is complete."""
    start = min((i for i in (candidate.find("{"), candidate.find("[")) if i >= 0), default=-1)
    if start < 0:
        return ""
    stack: list[str] = []
    safe: tuple[int, list[str]] | None = None
    for index, char in _structural(candidate, start):
        if char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if not stack:
                return ""
            stack.pop()
            if not stack:
                return candidate[start : index + 1]
            safe = (index + 1, list(stack))
    if safe is None:
        return ""
    cut, open_ = safe
    return candidate[start:cut] + "".join(reversed(open_))


def answer_text(raw: bytes) -> str | None:
    """The first choice's message text of a chat completion's JSON body (None when
    it has none); :class:`LLMBadOutput` when the body is not a chat completion."""
    return _answer(_completion(raw))


def _completion(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep
        raise LLMBadOutput("the LLM's response is not JSON") from exc


def token_usage(completion: Any) -> tuple[int, int]:
    """(prompt, completion) tokens a chat completion reports; (0, 0) without usage."""
    usage = completion.get("usage") if isinstance(completion, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    counts = []
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        counts.append(value if isinstance(value, int) and value >= 0 else 0)
    return counts[0], counts[1]


def _answer(completion: Any) -> str | None:
    choices = completion.get("choices") if isinstance(completion, dict) else None
    if not isinstance(choices, list):
        raise LLMBadOutput("the LLM's response is not a chat completion")
    first = choices[0] if choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else None


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a connection the server refused or dropped. The
    aiohttp transport reports a refused connection as a connect *timeout*
    (``APITimeoutError``); the cause it chains says what happened."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ConnectionError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class LLMClient:
    """Calls an OpenAI-compatible chat endpoint; one instance per process."""

    def __init__(self, config: LLMConfig, metrics: Metrics) -> None:
        self._config = config
        self._metrics = metrics
        self._client: openai.AsyncOpenAI | None = None
        if config.base_url:
            self._client = openai.AsyncOpenAI(
                base_url=config.base_url,
                api_key=config.api_key.get_secret_value(),
                timeout=config.timeout_s,
                max_retries=0,
                http_client=(
                    openai.DefaultAioHttpClient(timeout=config.timeout_s)
                    if config.transport == "aiohttp"
                    else None
                ),
            )

    @property
    def configured(self) -> bool:
        return self._client is not None

    async def chat(
        self,
        task: str,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        timeout_s: float | None = None,
    ) -> str:
        """The assistant text (reasoning stripped). ``task`` labels the metrics."""
        text = await self._complete(task, messages, max_tokens, temperature, False, timeout_s)
        self._metrics.llm_calls.labels(task=task, outcome="ok").inc()
        return text

    async def chat_json(
        self,
        task: str,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Like :meth:`chat` but returns the parsed JSON value of the answer."""
        text = await self._complete(task, messages, max_tokens, temperature, True, timeout_s)
        try:
            value = parse_json_loose(text)
        except LLMBadOutput:
            self._metrics.llm_calls.labels(task=task, outcome="bad_output").inc()
            raise
        self._metrics.llm_calls.labels(task=task, outcome="ok").inc()
        return value

    async def _complete(
        self,
        task: str,
        messages: Sequence[ChatMessage],
        max_tokens: int | None,
        temperature: float | None,
        json_mode: bool,
        timeout_s: float | None,
    ) -> str:
        """One call; failures are counted here, successes by the caller."""
        if self._client is None:
            raise LLMUnavailable("no LLM is configured")
        body: dict[str, Any] = {
            "model": self._config.model,
            "messages": list(messages),
            "max_tokens": max_tokens or self._config.max_tokens,
            "temperature": self._config.temperature if temperature is None else temperature,
        }
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        budget = timeout_s if timeout_s is not None else self._config.timeout_s
        with self._metrics.llm_seconds.labels(task=task).time():
            try:
                # The client's plain POST (its documented way to call any endpoint):
                # the same transport, retries, auth and errors as
                # ``chat.completions.create`` without its request transform and
                # response models: CPU that every turn and every rewrite would pay for
                # nothing (docs/design/ext-proc-flow.md).
                raw = await asyncio.wait_for(
                    self._client.post(
                        "/chat/completions",
                        body=body,
                        cast_to=bytes,
                        options={"timeout": budget},
                    ),
                    timeout=budget,
                )
            except (TimeoutError, openai.APITimeoutError) as exc:
                if refused(exc):
                    self._metrics.llm_calls.labels(task=task, outcome="unavailable").inc()
                    raise LLMUnavailable(f"{task}: {type(exc).__name__}") from exc
                self._metrics.llm_calls.labels(task=task, outcome="timeout").inc()
                raise LLMTimeout(f"{task}: no answer within {budget:.1f}s") from exc
            except openai.APIStatusError as exc:
                self._metrics.llm_calls.labels(task=task, outcome="http_error").inc()
                raise LLMUnavailable(f"{task}: HTTP {exc.status_code}") from exc
            except openai.APIError as exc:
                self._metrics.llm_calls.labels(task=task, outcome="unavailable").inc()
                raise LLMUnavailable(f"{task}: {type(exc).__name__}") from exc
        try:
            completion = _completion(raw)
            content = _answer(completion)
        except LLMBadOutput:
            self._metrics.llm_calls.labels(task=task, outcome="bad_output").inc()
            raise
        prompt_tokens, completion_tokens = token_usage(completion)
        self._metrics.llm_tokens.labels(task=task, kind="prompt").inc(prompt_tokens)
        self._metrics.llm_tokens.labels(task=task, kind="completion").inc(completion_tokens)
        if content is None or not content.strip():
            self._metrics.llm_calls.labels(task=task, outcome="empty").inc()
            raise LLMBadOutput(f"{task}: empty answer")
        return strip_reasoning(content)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
