"""Incremental, bounded-memory Server-Sent Events decoding (no I/O).

The decoder is layered:

1. :class:`LineSplitter` turns arbitrary byte chunks into complete lines. It
   understands CR, LF and CRLF terminators (including a CRLF pair split across
   two chunks) and decodes each *complete* line as UTF-8, so multi-byte
   characters split across chunks decode correctly. Invalid UTF-8 is replaced
   with U+FFFD, never raised.
2. :class:`SSEDecoder` runs the per-line event state machine of the WHATWG
   "event stream interpretation" algorithm and emits :class:`SSEEvent` objects.

Both layers bound their memory: a line longer than ``max_line_bytes`` and an
event whose data grows beyond ``max_event_bytes`` are discarded and counted in
:attr:`SSEDecoder.dropped`; decoding then continues with the next line/event.

Nothing in this module logs, and the ``repr`` of an :class:`SSEEvent` omits its
data, because event payloads carry user and model content.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "LineSplitter",
    "SSEDecoder",
    "SSEEvent",
]

DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024
"""Default limit on one line's length in bytes, terminator excluded."""

DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024
"""Default limit on one event's data (UTF-8 bytes, joining newlines included)."""

_LINE_END = re.compile(rb"\r\n?|\n")
_CR = 0x0D
_LF = 0x0A
_BOM = "\ufeff"
# ``retry`` values longer than this are ignored rather than converted: they are
# meaningless as milliseconds and int() on a huge digit string is slow (and
# raises above Python's int/str conversion limit).
_MAX_RETRY_DIGITS = 32


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    ``event`` is the event type, ``None`` when the block had no (or an empty)
    ``event:`` field, i.e. the default "message" type. ``data`` is the data
    lines joined with ``"\\n"``. ``id`` is the stream's last event ID at
    dispatch time (it persists across events, per the spec), ``None`` while
    it is unset or empty. ``retry`` is the valid ``retry:`` value given inside
    this event's block, if any. ``data`` is left out of ``repr``.
    """

    event: str | None
    data: str = field(repr=False)
    id: str | None
    retry: int | None


def _check_limit(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _is_retry_value(value: str) -> bool:
    return 0 < len(value) <= _MAX_RETRY_DIGITS and value.isascii() and value.isdigit()


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "replace"))


class LineSplitter:
    """Split a byte stream into decoded lines, incrementally.

    :meth:`feed` returns the lines completed by a chunk, in order, without
    their terminators. A line longer than ``max_line_bytes`` is discarded as
    soon as it is known to be too long (so at most ``max_line_bytes`` bytes are
    ever buffered) and is reported as a single ``None`` item in its place;
    the rest of it, up to its terminator, is skipped. Never raises.
    """

    __slots__ = ("_buffer", "_discarding", "_max_line_bytes", "_skip_lf")

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._max_line_bytes = _check_limit("max_line_bytes", max_line_bytes)
        self._buffer = bytearray()
        self._discarding = False  # inside an oversized line already reported
        self._skip_lf = False  # the previous chunk ended with CR

    @property
    def buffered_bytes(self) -> int:
        """Bytes of the current incomplete line held in memory."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[str | None]:
        """Consume ``data``; return the lines it completes (``None``: dropped line)."""
        out: list[str | None] = []
        size = len(data)
        if size == 0:
            return out
        pos = 0
        if self._skip_lf:
            # A CR ended the previous chunk: an LF starting this one belongs to
            # that CRLF pair and must not terminate an (empty) line of its own.
            self._skip_lf = False
            if data[0] == _LF:
                pos = 1
        for match in _LINE_END.finditer(data, pos):
            self._complete_line(data, pos, match.start(), out)
            pos = match.end()
        if pos == size:
            self._skip_lf = data[size - 1] == _CR
        else:
            self._append_partial(data, pos, out)
        return out

    def finish(self) -> list[str | None]:
        """End of stream: return the final unterminated line, if any, and reset."""
        out: list[str | None] = []
        if self._buffer and not self._discarding:
            out.append(self._buffer.decode("utf-8", "replace"))
        self._buffer.clear()
        self._discarding = False
        self._skip_lf = False
        return out

    def _complete_line(self, data: bytes, start: int, end: int, out: list[str | None]) -> None:
        if self._discarding:
            # The oversized line was already reported when it overflowed.
            self._discarding = False
            return
        if len(self._buffer) + (end - start) > self._max_line_bytes:
            self._buffer.clear()
            out.append(None)
        elif self._buffer:
            self._buffer += memoryview(data)[start:end]
            out.append(self._buffer.decode("utf-8", "replace"))
            self._buffer.clear()
        else:
            out.append(data[start:end].decode("utf-8", "replace"))

    def _append_partial(self, data: bytes, start: int, out: list[str | None]) -> None:
        if self._discarding:
            return
        if len(self._buffer) + (len(data) - start) > self._max_line_bytes:
            self._buffer.clear()
            self._discarding = True
            out.append(None)
        else:
            self._buffer += memoryview(data)[start:]


class SSEDecoder:
    """Incremental WHATWG Server-Sent Events decoder with bounded memory.

    Feed byte chunks of any size with :meth:`feed`; each call returns the
    events completed so far. Call :meth:`finish` once the body has ended.

    Interpretation follows the WHATWG spec: ``data:`` lines accumulate and are
    joined with ``"\\n"``; ``event:`` sets the type; ``id:`` sets the last event
    ID unless the value contains NUL; ``retry:`` is honoured only when it is
    all ASCII digits; lines starting with ``:`` are comments; one space after
    the colon is stripped; a line without a colon is a field name with an
    empty value; unknown fields are ignored; a blank line dispatches the
    pending event, unless it has no data lines. One UTF-8 BOM at the very start
    of the stream is ignored.

    Limits: a line over ``max_line_bytes`` is discarded, and so is the event it
    belongs to (a partial event would be corrupt); an event whose data exceeds
    ``max_event_bytes`` is discarded. Each discarded line and each event
    discarded for its size adds one to :attr:`dropped`. Decoding resumes at the
    next event. No method raises on any input.
    """

    __slots__ = (
        "_at_stream_start",
        "_data",
        "_data_bytes",
        "_discard_event",
        "_dispatch_at_eof",
        "_event",
        "_last_event_id",
        "_lines",
        "_max_event_bytes",
        "_reconnection_time",
        "_retry",
        "dropped",
    )

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        dispatch_at_eof: bool = True,
    ) -> None:
        """Create a decoder.

        ``dispatch_at_eof`` selects what :meth:`finish` does with an event
        still pending when the stream ends; see :meth:`finish`.
        """
        self._lines = LineSplitter(max_line_bytes=max_line_bytes)
        self._max_event_bytes = _check_limit("max_event_bytes", max_event_bytes)
        self._dispatch_at_eof = dispatch_at_eof
        # Public counter: lines and events discarded for exceeding the limits.
        self.dropped = 0
        self._last_event_id = ""
        self._reconnection_time: int | None = None
        self._at_stream_start = True
        self._event = ""
        self._data: list[str] = []
        self._data_bytes = 0
        self._retry: int | None = None
        self._discard_event = False

    @property
    def last_event_id(self) -> str | None:
        """The stream's last event ID (``None`` when unset or empty)."""
        return self._last_event_id or None

    @property
    def reconnection_time(self) -> int | None:
        """The last valid ``retry:`` value seen anywhere in the stream, in ms."""
        return self._reconnection_time

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume a chunk of the body; return the events it completes."""
        return self._process(self._lines.feed(chunk))

    def finish(self) -> list[SSEEvent]:
        """Signal end of stream; return the events still pending.

        The final line is processed even without a terminator. Then, by
        deliberate choice (``dispatch_at_eof=True``, the default), an event
        that has data but was never closed by a blank line is *dispatched*
        too. The WHATWG spec says to discard such an incomplete event; we
        keep it because a proxy reading a finished HTTP body has no reason to
        drop the last complete-looking chunk of an upstream that omitted the
        trailing blank line. Pass ``dispatch_at_eof=False`` for the spec's
        behaviour.

        Afterwards the decoder is ready for a new stream (line buffer, pending
        event and BOM handling start afresh). Like an ``EventSource`` that
        reconnects, it keeps :attr:`last_event_id` and
        :attr:`reconnection_time`; :attr:`dropped` keeps counting.
        """
        events = self._process(self._lines.finish())
        if self._dispatch_at_eof:
            event = self._dispatch()
            if event is not None:
                events.append(event)
        self._reset_event()
        self._at_stream_start = True
        return events

    def _process(self, lines: list[str | None]) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        for line in lines:
            event = self._process_line(line)
            if event is not None:
                events.append(event)
        return events

    def _process_line(self, line: str | None) -> SSEEvent | None:
        if line is None:  # oversized line, already discarded by the splitter
            self._at_stream_start = False
            self.dropped += 1
            self._drop_event()
            return None
        if self._at_stream_start:
            self._at_stream_start = False
            if line.startswith(_BOM):
                line = line[1:]
        if not line:
            return self._dispatch()
        if line[0] == ":":  # comment
            return None
        name, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._add_data(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_event_id = value
        elif name == "retry" and _is_retry_value(value):
            self._retry = self._reconnection_time = int(value)
        return None

    def _add_data(self, value: str) -> None:
        if self._discard_event:
            return
        size = self._data_bytes + _utf8_len(value) + (1 if self._data else 0)
        if size > self._max_event_bytes:
            self.dropped += 1
            self._drop_event()
            return
        self._data.append(value)
        self._data_bytes = size

    def _drop_event(self) -> None:
        self._data = []
        self._data_bytes = 0
        self._discard_event = True

    def _dispatch(self) -> SSEEvent | None:
        event: SSEEvent | None = None
        if self._data and not self._discard_event:
            event = SSEEvent(
                event=self._event or None,
                data="\n".join(self._data),
                id=self._last_event_id or None,
                retry=self._retry,
            )
        self._reset_event()
        return event

    def _reset_event(self) -> None:
        self._event = ""
        self._data = []
        self._data_bytes = 0
        self._retry = None
        self._discard_event = False
