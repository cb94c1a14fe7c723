"""Where each message of a chat body sits in its bytes, so that an injection can be
spliced into the body the client sent instead of re-serialising all of it.

Re-serialising a parsed body changes what the sidecar never meant to touch:
whitespace, number spellings (``0.50`` becomes ``0.5``), escapes (``\\u00e9``
becomes ``é``), duplicate keys (the last one alone survives). A splice keeps every
byte outside the message it inserts or rewrites, and costs a string copy instead of
an encoder pass over a body that may hold megabytes.

:func:`scan` reads the top-level object key by key with the standard library's own
decoder (the same hooks as the parse it replaces, every value parsed in C), and
the ``messages`` array (a Responses body's ``input``) element by element, recording
each element's span. The parsed body is what :func:`json.loads` gives (the last of
duplicate keys wins); the spans are those of the array that survives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_WHITESPACE = re.compile(r"[ \t\n\r]*")


@dataclass(slots=True)
class Spans:
    """The text of a body, its ``messages`` elements' ``(start, end)`` offsets in it,
    the offset of the array's closing bracket, and the edits made so far."""

    text: str
    elements: list[tuple[int, int]]
    close: int
    edits: list[tuple[int, int, str]] = field(default_factory=list)
    #: The body's bytes when they are ASCII (offsets in the text are byte offsets:
    #: the splice needs no encoder pass over the body).
    ascii: bytes | None = None

    def insert(self, index: int, message: Any) -> None:
        """A new element before element ``index`` (after the last when it is past
        the end)."""
        encoded = dump(message)
        if index < len(self.elements):
            at = self.elements[index][0]
            self.edits.append((at, at, f"{encoded},"))
        elif self.elements:
            self.edits.append((self.close, self.close, f",{encoded}"))
        else:
            self.edits.append((self.close, self.close, encoded))

    def replace(self, index: int, message: Any) -> None:
        """Element ``index`` written anew (the others keep their bytes)."""
        start, end = self.elements[index]
        self.edits.append((start, end, dump(message)))

    def spliced(self) -> bytes:
        """The body with the edits, UTF-8 (``UnicodeEncodeError`` when an edit holds a
        lone surrogate)."""
        if self.ascii is not None:
            raw = self.ascii
            for start, end, new in sorted(self.edits, reverse=True):
                raw = raw[:start] + new.encode("utf-8") + raw[end:]
            return raw
        text = self.text
        for start, end, new in sorted(self.edits, reverse=True):
            text = text[:start] + new + text[end:]
        return text.encode("utf-8")


def dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def scan(
    raw: bytes,
    parse_constant: Callable[[str], Any],
    parse_float: Callable[[str], Any],
    key: str = "messages",
) -> tuple[dict[str, Any], Spans | None] | None:
    """``raw`` parsed as a JSON object, with the spans of its ``key`` array's elements
    (``None`` when there is no such array). ``None`` when ``raw`` is not a JSON
    object; raises ``ValueError`` when it is not UTF-8 (the caller's plain parse
    reads the other encodings JSON allows)."""
    text = raw.decode("utf-8")
    decoder = json.JSONDecoder(parse_constant=parse_constant, parse_float=parse_float)
    try:
        found = _object(text, decoder, key)
    except (ValueError, IndexError, RecursionError):
        return None
    if found is not None and found[1] is not None and raw.isascii():
        found[1].ascii = raw
    return found


def _skip(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    return match.end() if match else at


def _object(
    text: str, decoder: json.JSONDecoder, wanted: str
) -> tuple[dict[str, Any], Spans | None] | None:
    at = _skip(text, 0)
    if text[at] != "{":
        return None
    at = _skip(text, at + 1)
    body: dict[str, Any] = {}
    spans: Spans | None = None
    if text[at] == "}":
        at += 1
    else:
        while True:
            key, at = decoder.raw_decode(text, at)
            if not isinstance(key, str):
                return None
            at = _skip(text, at)
            if text[at] != ":":
                return None
            at = _skip(text, at + 1)
            if key == wanted and text[at] == "[":
                body[key], spans, at = _array(text, at, decoder)
            else:
                body[key], at = decoder.raw_decode(text, at)
                if key == wanted:
                    spans = None
            at = _skip(text, at)
            if text[at] == ",":
                at = _skip(text, at + 1)
                continue
            if text[at] != "}":
                return None
            at += 1
            break
    if _skip(text, at) != len(text):
        return None
    return body, spans


def _array(text: str, at: int, decoder: json.JSONDecoder) -> tuple[list[Any], Spans, int]:
    at = _skip(text, at + 1)
    values: list[Any] = []
    elements: list[tuple[int, int]] = []
    if text[at] == "]":
        return values, Spans(text, elements, at), at + 1
    while True:
        start = at
        value, at = decoder.raw_decode(text, at)
        values.append(value)
        elements.append((start, at))
        at = _skip(text, at)
        if text[at] == ",":
            at = _skip(text, at + 1)
            continue
        if text[at] != "]":
            raise ValueError("unterminated array")
        return values, Spans(text, elements, at), at + 1
