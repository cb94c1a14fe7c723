"""Tests for the incremental SSE decoder (sidecar.extproc.sse)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.extproc.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_LINE_BYTES,
    LineSplitter,
    SSEDecoder,
    SSEEvent,
)

# -- helpers ----------------------------------------------------------------

LF, CR, CRLF = "\n", "\r", "\r\n"


def join_lines(lines: Sequence[str], endings: Sequence[str]) -> bytes:
    """Terminate each line with the matching ending, cycling ``endings``.

    A CR ending followed by an empty line ended by LF would read as one CRLF
    terminator (merging two lines into one), so that LF is turned into CRLF.
    """
    out: list[str] = []
    previous = ""
    for position, line in enumerate(lines):
        ending = endings[position % len(endings)]
        if previous == CR and line == "" and ending == LF:
            ending = CRLF
        out.append(line + ending)
        previous = ending
    return "".join(out).encode("utf-8")


def decode(
    chunks: Iterable[bytes],
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    dispatch_at_eof: bool = True,
) -> list[SSEEvent]:
    """Feed ``chunks`` to a fresh decoder, then finish it; return all events."""
    decoder = SSEDecoder(
        max_line_bytes=max_line_bytes,
        max_event_bytes=max_event_bytes,
        dispatch_at_eof=dispatch_at_eof,
    )
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.finish())
    return events


def ev(
    data: str, event: str | None = None, id: str | None = None, retry: int | None = None
) -> SSEEvent:
    return SSEEvent(event=event, data=data, id=id, retry=retry)


# -- fixture streams --------------------------------------------------------

FIELD_LINES = [
    ": this is a comment",
    "retry: 3000",
    "event: greeting",
    "id: 1",
    "data: hello ü€😀中文",
    "",
    "data: first line",
    "data:second line",
    "data:  two spaces",
    "data",
    "",
    ": keep-alive",
    "",
    "event: update",
    "id: bad\0id",
    "retry: 12x",
    "foo: bar",
    'data: {"k": "中文"}',
    "",
    "id",
    "data: after reset",
    "",
    "event: no-data",
    "id: 7",
    "",
    "data: x",
    "retry: 10",
    "",
]
FIELD_EVENTS = [
    ev("hello ü€😀中文", event="greeting", id="1", retry=3000),
    ev("first line\nsecond line\n two spaces\n", id="1"),
    ev('{"k": "中文"}', event="update", id="1"),
    ev("after reset"),
    ev("x", id="7", retry=10),
]


def openai_stream() -> tuple[bytes, list[str]]:
    """A realistic chat.completion.chunk stream; returns (body, data payloads)."""
    base = {
        "id": "chatcmpl-abc123",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_0123",
    }
    pieces = ["Hello", "!", " Grüße", " aus", " München", " — ü€", "😀", " 中文", "."]
    chunks: list[dict[str, object]] = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    ]
    chunks += [
        {**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
        for p in pieces
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    payloads = [json.dumps(c, ensure_ascii=False) for c in chunks] + ["[DONE]"]
    body = "".join(f"data: {p}\n\n" for p in payloads).encode("utf-8")
    return body, payloads


OPENAI_BODY, OPENAI_PAYLOADS = openai_stream()

STREAMS: dict[str, tuple[bytes, list[SSEEvent]]] = {
    "lf": (join_lines(FIELD_LINES, [LF]), FIELD_EVENTS),
    "cr": (join_lines(FIELD_LINES, [CR]), FIELD_EVENTS),
    "crlf": (join_lines(FIELD_LINES, [CRLF]), FIELD_EVENTS),
    "mixed": (join_lines(FIELD_LINES, [CRLF, CR, LF, CR, CR, CRLF, LF]), FIELD_EVENTS),
    "bom-crlf": (b"\xef\xbb\xbf" + join_lines(FIELD_LINES, [CRLF]), FIELD_EVENTS),
    "bom-data-first": (b"\xef\xbb\xbfdata: a\r\n\r\n", [ev("a")]),
    "openai": (OPENAI_BODY, [ev(p) for p in OPENAI_PAYLOADS]),
    "unterminated": (
        "data: x\r\n\r\ndata: ü€\r\ndata: tail".encode(),
        [ev("x"), ev("ü€\ntail")],
    ),
    "invalid-utf8": (b"data: \xff\xfe ok \xe2\x82\n\n", [ev("\ufffd\ufffd ok \ufffd")]),
}

SMALL_STREAM = join_lines(
    ["\ufeffretry: 5", "event: e", "data: ü€😀", ":c", "data", "", "data: 中", ""],
    [CR, CRLF, LF],
)
SMALL_EVENTS = [ev("ü€😀\n", event="e", retry=5), ev("中")]


# -- every-split equivalence -------------------------------------------------


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_whole_stream_decodes_to_expected_events(name: str) -> None:
    body, expected = STREAMS[name]
    assert decode([body]) == expected


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_every_two_way_split_matches_whole(name: str) -> None:
    body, expected = STREAMS[name]
    for i in range(len(body) + 1):
        assert decode([body[:i], body[i:]]) == expected, f"split at {i}"


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_byte_at_a_time_matches_whole(name: str) -> None:
    body, expected = STREAMS[name]
    assert decode(body[i : i + 1] for i in range(len(body))) == expected


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_empty_chunks_are_harmless(name: str) -> None:
    body, expected = STREAMS[name]
    chunks = [b""] + [part for i in range(len(body)) for part in (body[i : i + 1], b"")]
    assert decode(chunks) == expected


def test_every_three_way_split_of_small_stream() -> None:
    assert decode([SMALL_STREAM]) == SMALL_EVENTS
    size = len(SMALL_STREAM)
    for i in range(size + 1):
        for j in range(i, size + 1):
            chunks = [SMALL_STREAM[:i], SMALL_STREAM[i:j], SMALL_STREAM[j:]]
            assert decode(chunks) == SMALL_EVENTS, f"split at {i}, {j}"


def test_events_are_emitted_as_soon_as_complete() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\n") == [ev("a")]
    assert decoder.feed(b"data: b\r") == []
    assert decoder.feed(b"\r") == [ev("b")]
    assert decoder.finish() == []


# -- line splitting -----------------------------------------------------------


def test_split_crlf_does_not_produce_spurious_empty_line() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"a\r") == ["a"]
    assert splitter.feed(b"\nb\n") == ["b"]
    assert splitter.feed(b"c\r") == ["c"]
    assert splitter.feed(b"") == []
    assert splitter.feed(b"\n") == []
    assert splitter.feed(b"\n") == [""]
    assert splitter.finish() == []


def test_split_crlf_keeps_data_lines_in_one_event() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r") == []
    # The LF completes the CRLF after "b"; the CR is the blank line.
    assert decoder.feed(b"\n\r") == [ev("a\nb")]
    assert decoder.feed(b"\n") == []
    assert decoder.finish() == []


def test_cr_cr_is_two_lines() -> None:
    assert LineSplitter().feed(b"a\r\rb\r\n\n") == ["a", "", "b", ""]


def test_multibyte_character_split_across_chunks() -> None:
    splitter = LineSplitter()
    encoded = "€😀".encode()
    assert splitter.feed(encoded[:1]) == []
    assert splitter.feed(encoded[1:5]) == []
    assert splitter.feed(encoded[5:] + b"\n") == ["€😀"]


def test_splitter_finish_flushes_unterminated_line_and_resets() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"x\ny") == ["x"]
    assert splitter.buffered_bytes == 1
    assert splitter.finish() == ["y"]
    assert splitter.buffered_bytes == 0
    assert splitter.finish() == []


# -- field semantics -----------------------------------------------------------


def test_only_ascii_digit_retry_values_are_accepted() -> None:
    body = "".join(
        f"retry:{value}\ndata: {n}\n\n"
        for n, value in enumerate([" 5", "5", "٣", "²", "", "-1", " 7 ", "1" * 40, "0042"])
    ).encode()
    events = decode([body])
    assert [e.retry for e in events] == [5, 5, None, None, None, None, None, None, 42]


def test_retry_is_per_event_and_reconnection_time_persists() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"retry: 100\n\ndata: a\n\nretry: 200\ndata: b\n\ndata: c\n\n")
    assert events == [ev("a"), ev("b", retry=200), ev("c")]
    assert decoder.reconnection_time == 200


def test_last_event_id_persists_and_nul_ids_are_ignored() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"id: 1\ndata: a\n\ndata: b\n\nid: x\x00y\ndata: c\n\nid:\ndata: d\n\n")
    assert [e.id for e in events] == ["1", "1", "1", None]
    assert decoder.last_event_id is None


def test_empty_event_type_means_default() -> None:
    assert decode([b"event:\ndata: a\n\nevent: \ndata: b\n\n"]) == [ev("a"), ev("b")]


def test_event_type_does_not_leak_into_next_event() -> None:
    body = b"event: one\n\nevent: two\ndata: a\n\ndata: b\n\n"
    assert decode([body]) == [ev("a", event="two"), ev("b")]


def test_field_names_are_case_sensitive_and_need_exact_match() -> None:
    assert decode([b"Data: a\ndata : b\nDATA\ndata: c\n\n"]) == [ev("c")]


def test_data_line_without_colon_is_empty_value() -> None:
    assert decode([b"data\ndata\n\n"]) == [ev("\n")]
    assert decode([b"data\n\n"]) == [ev("")]


def test_blocks_without_data_are_not_dispatched() -> None:
    assert decode([b"event: x\nid: 3\nretry: 9\n: hi\n\n\n\n"]) == []


def test_bom_is_stripped_only_once_and_only_at_stream_start() -> None:
    assert decode([b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n"]) == [ev("b")]
    assert decode([b"data: a\n\n\xef\xbb\xbfdata: b\n\n"]) == [ev("a")]
    assert decode([b"\xef\xbb\xbf\ndata: a\n\n"]) == [ev("a")]
    assert decode([b"data: \xef\xbb\xbfa\n\n"]) == [ev("\ufeffa")]


def test_comment_data_lines_are_ignored() -> None:
    assert decode([b":data: no\ndata: yes\n:\n\n"]) == [ev("yes")]


# -- end of stream ---------------------------------------------------------------


def test_finish_dispatches_pending_event_by_default() -> None:
    assert decode([b"data: a\n"]) == [ev("a")]
    assert decode([b"data: a"]) == [ev("a")]
    assert decode([b"data: a\r"]) == [ev("a")]
    assert decode([b"event: e\n"]) == []


def test_finish_can_follow_the_spec_and_discard_incomplete_event() -> None:
    assert decode([b"data: a\n\ndata: b\n"], dispatch_at_eof=False) == [ev("a")]
    assert decode([b"data: a\n\ndata: b"], dispatch_at_eof=False) == [ev("a")]


def test_finish_resets_for_a_new_stream_but_keeps_last_event_id() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"\xef\xbb\xbfid: 9\nretry: 50\ndata: a\n\ndata: part") == [
        ev("a", id="9", retry=50)
    ]
    assert decoder.finish() == [ev("part", id="9")]
    assert decoder.finish() == []
    assert decoder.feed(b"\xef\xbb\xbfdata: b\n\n") == [ev("b", id="9")]
    assert decoder.last_event_id == "9"
    assert decoder.reconnection_time == 50


# -- limits ------------------------------------------------------------------------


def test_line_at_limit_is_kept_and_longer_line_dropped() -> None:
    line = b"data: " + b"x" * 10  # 16 bytes
    assert decode([line + b"\n\n"], max_line_bytes=16) == [ev("x" * 10)]
    decoder = SSEDecoder(max_line_bytes=15)
    assert decoder.feed(line + b"\n\ndata: ok\n\n") == [ev("ok")]
    assert decoder.dropped == 1


def test_oversized_line_discards_its_event_and_decoding_continues() -> None:
    body = b"data: a\ndata: " + b"y" * 100 + b"\ndata: b\n\ndata: next\n\n"
    for chunks in ([body], [body[i : i + 1] for i in range(len(body))]):
        decoder = SSEDecoder(max_line_bytes=50)
        events = [e for chunk in chunks for e in decoder.feed(chunk)] + decoder.finish()
        assert events == [ev("next")]
        assert decoder.dropped == 1


def test_oversized_line_memory_is_bounded_while_streaming() -> None:
    splitter = LineSplitter(max_line_bytes=64)
    results: list[str | None] = []
    for _ in range(1000):
        results += splitter.feed(b"z" * 7)
        assert splitter.buffered_bytes <= 64
    results += splitter.feed(b"zz\r")
    results += splitter.feed(b"\nok\n")
    assert results == [None, "ok"]
    assert splitter.finish() == []


def test_oversized_unterminated_final_line_is_not_flushed() -> None:
    decoder = SSEDecoder(max_line_bytes=8)
    assert decoder.feed(b"data: a\n\ndata: 0123456789") == [ev("a")]
    assert decoder.finish() == []
    assert decoder.dropped == 1


def test_oversized_event_is_dropped_and_counted() -> None:
    # 2 bytes per "ü": 4 + 1 (newline) + 4 = 9 bytes of data.
    body = "data: üü\ndata: üü\n\ndata: üü\ndata: üüü\ndata: ü\n\ndata: ok\n\n".encode()
    decoder = SSEDecoder(max_event_bytes=9)
    assert decoder.feed(body) == [ev("üü\nüü"), ev("ok")]
    assert decoder.dropped == 1


@pytest.mark.parametrize(("max_line_bytes", "max_event_bytes"), [(0, 10), (10, -1), (True, 10)])
def test_invalid_limits_are_rejected(max_line_bytes: int, max_event_bytes: int) -> None:
    with pytest.raises(ValueError, match="positive integer"):
        SSEDecoder(max_line_bytes=max_line_bytes, max_event_bytes=max_event_bytes)


def test_limited_streams_are_split_invariant() -> None:
    body = (
        b"data: short\r\n\r\ndata: "
        + "ü".encode() * 20
        + b"\r\n\r\nevent: big\rdata: 123456\rdata: 123456\r\rdata: end\r\r"
    )
    expected = [ev("short"), ev("end")]
    for i in range(len(body) + 1):
        chunks = [body[:i], body[i:]]
        assert decode(chunks, max_line_bytes=30, max_event_bytes=12) == expected, f"split at {i}"


def test_repr_does_not_contain_data() -> None:
    event = ev("secret words", event="e")
    assert "secret" not in repr(event)
    assert "'e'" in repr(event)


# -- property: serialize, chunk randomly, decode -----------------------------------

_TEXT = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
    max_size=12,
)
_ID = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n\0"),
    max_size=6,
)
_NOISE = [": comment", ":", "unknown: field", "ignored"]


@dataclass(frozen=True)
class _Spec:
    event: str | None
    data: list[str]
    id: str | None
    retry: int | None


_SPECS = st.lists(
    st.builds(
        _Spec,
        event=st.none() | _TEXT,
        data=st.lists(_TEXT, min_size=1, max_size=4),
        id=st.none() | _ID,
        retry=st.none() | st.integers(min_value=0, max_value=10**12),
    ),
    max_size=6,
)


@st.composite
def _serialized(draw: st.DrawFn) -> tuple[bytes, list[SSEEvent]]:
    specs = draw(_SPECS)
    lines: list[str] = []
    expected: list[SSEEvent] = []
    last_id: str | None = None
    for spec in specs:
        if draw(st.booleans()):
            lines.append(draw(st.sampled_from(_NOISE)))
        if draw(st.booleans()):  # a data-less block: never dispatched
            lines += ["event: skipped", "retry: 1", ""]
        fields: list[tuple[str, str]] = [("data", value) for value in spec.data]
        if spec.event is not None:
            fields.append(("event", spec.event))
        if spec.id is not None:
            fields.append(("id", spec.id))
            last_id = spec.id
        if spec.retry is not None:
            fields.append(("retry", str(spec.retry)))
        # Shuffle the fields, keeping the data lines in their order.
        shuffled = draw(st.permutations(fields))
        data_values = iter(spec.data)
        shuffled = [(n, next(data_values) if n == "data" else v) for n, v in shuffled]
        for name, value in shuffled:
            if value == "" and draw(st.booleans()):
                lines.append(name)
            elif not value.startswith(" ") and draw(st.booleans()):
                lines.append(f"{name}:{value}")
            else:
                lines.append(f"{name}: {value}")
        lines.append("")
        expected.append(
            SSEEvent(
                event=spec.event or None,
                data="\n".join(spec.data),
                id=last_id or None,
                retry=spec.retry,
            )
        )
    drop_final_blank = draw(st.booleans())
    if lines and drop_final_blank:
        lines.pop()  # no final blank line: finish() dispatches the last event
    endings = draw(st.lists(st.sampled_from([LF, CR, CRLF]), min_size=1, max_size=8))
    body = join_lines(lines, endings)
    drop_final_terminator = draw(st.booleans())
    if lines and lines[-1] and drop_final_terminator:
        body = body.rstrip(b"\r\n")  # no terminator on the final (field) line
    if draw(st.booleans()):
        body = b"\xef\xbb\xbf" + body
    return body, expected


def _chunked(body: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = sorted({c for c in cuts if 0 < c < len(body)})
    bounds = [0, *points, len(body)]
    return [body[a:b] for a, b in pairwise(bounds)]


@settings(max_examples=400, deadline=None, database=None)
@given(case=_serialized(), cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12))
def test_property_random_events_round_trip(
    case: tuple[bytes, list[SSEEvent]], cuts: list[int]
) -> None:
    body, expected = case
    assert decode([body]) == expected
    assert decode(_chunked(body, [c % (len(body) + 1) for c in cuts])) == expected


@settings(max_examples=300, deadline=None, database=None)
@given(body=st.binary(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=8))
def test_property_arbitrary_bytes_never_raise_and_are_split_invariant(
    body: bytes, cuts: list[int]
) -> None:
    whole = decode([body], max_line_bytes=40, max_event_bytes=60)
    assert decode(_chunked(body, cuts), max_line_bytes=40, max_event_bytes=60) == whole


def test_decode_helper_sanity() -> None:
    # Guards the join_lines ambiguity fix the property test relies on.
    assert join_lines(["a", ""], [CR, LF]) == b"a\r\r\n"
    assert decode([join_lines(["data: a", "", "data: b", ""], [CR, LF])]) == [ev("a"), ev("b")]
