"""Tests for chat completion reassembly (sidecar.extproc.chat_response)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.extproc.chat_response import (
    CompletionResult,
    StreamedCompletion,
    ToolCall,
    parse_completion_json,
)
from sidecar.extproc.sse import SSEDecoder, SSEEvent

BASE: dict[str, object] = {
    "id": "chatcmpl-xyz",
    "object": "chat.completion.chunk",
    "created": 1_700_000_000,
    "model": "llama-3.1-8b-instruct",
}
PIECES = ["Hallo", ",", " Grüße", " aus", " Köln", " ü€", "😀", " 中文", "!"]
TEXT = "".join(PIECES)


def chunk(
    delta: dict[str, object] | None = None,
    *,
    finish_reason: str | None = None,
    index: int = 0,
    **extra: object,
) -> dict[str, object]:
    choice = {"index": index, "delta": delta or {}, "finish_reason": finish_reason}
    return {**BASE, "choices": [choice], **extra}


def sse(*payloads: dict[str, object] | str, line_end: str = "\n") -> bytes:
    """Serialize payloads (dicts as JSON, strings verbatim) as SSE data events."""
    parts = [p if isinstance(p, str) else json.dumps(p, ensure_ascii=False) for p in payloads]
    return "".join(f"data: {p}{line_end}{line_end}" for p in parts).encode("utf-8")


def text_chunks() -> list[dict[str, object]]:
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": piece}) for piece in PIECES),
        chunk({}, finish_reason="stop"),
    ]


def run(chunks: Iterable[bytes], *, answer_index: int = 0) -> StreamedCompletion:
    """Feed body chunks to a fresh accumulator, then finish it."""
    completion = StreamedCompletion(answer_index=answer_index)
    for data in chunks:
        completion.feed_bytes(data)
    completion.finish()
    return completion


STREAM = sse(*text_chunks(), "[DONE]")

# -- streaming ------------------------------------------------------------------


def test_reassembles_text_and_metadata() -> None:
    completion = run([STREAM])
    assert completion.text == TEXT
    assert completion.role == "assistant"
    assert completion.finish_reason == "stop"
    assert completion.model == "llama-3.1-8b-instruct"
    assert completion.id == "chatcmpl-xyz"
    assert completion.saw_done
    assert completion.done
    assert completion.complete
    assert not completion.has_tool_calls
    assert completion.tool_calls == ()
    assert completion.error is None
    assert completion.malformed_chunks == 0
    assert completion.chunks == len(PIECES) + 2
    assert completion.result() == CompletionResult(
        text=TEXT, finish_reason="stop", model="llama-3.1-8b-instruct", has_tool_calls=False
    )


def test_every_byte_split_reassembles_the_same_text() -> None:
    body = sse(*text_chunks(), "[DONE]", line_end="\r\n")
    for i in range(len(body) + 1):
        completion = run([body[:i], body[i:]])
        assert completion.text == TEXT, f"split at {i}"
        assert completion.complete


def test_byte_at_a_time() -> None:
    completion = run(STREAM[i : i + 1] for i in range(len(STREAM)))
    assert completion.result() == run([STREAM]).result()


def test_feeding_events_directly_matches_feeding_bytes() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(STREAM) + decoder.finish()
    completion = StreamedCompletion()
    for event in events:
        completion.feed_event(event)
    assert completion.result() == run([STREAM]).result()
    assert completion.saw_done


def test_done_stops_and_junk_after_it_is_ignored() -> None:
    body = sse(
        chunk({"content": "kept"}),
        "[DONE]",
        chunk({"content": " ignored"}, finish_reason="length"),
        "not json at all",
        {"error": {"message": "late"}},
    )
    completion = run([body])
    assert completion.text == "kept"
    assert completion.saw_done
    assert completion.done
    assert completion.finish_reason is None
    assert not completion.complete  # [DONE] without a finish reason
    assert completion.malformed_chunks == 0
    assert completion.error is None


def test_done_with_surrounding_whitespace_is_recognized() -> None:
    completion = run([b"data: [DONE] \n\ndata: {}\n\n"])
    assert completion.saw_done
    assert completion.chunks == 0


def test_malformed_chunks_are_counted_and_skipped() -> None:
    body = sse(
        chunk({"content": "a"}),
        "{not json",
        "[1, 2]",
        '"a string"',
        chunk({"content": "b"}, finish_reason="stop"),
        "[DONE]",
    )
    completion = run([body])
    assert completion.text == "ab"
    assert completion.malformed_chunks == 3
    assert completion.complete


def test_unexpected_shapes_are_skipped_without_raising() -> None:
    body = sse(
        {"choices": "nope"},
        {"choices": [None, 3, {"delta": "x"}, {"delta": {"content": 5, "role": 7}}]},
        {"choices": [{"index": True, "delta": {"content": "ok", "tool_calls": "x"}}]},
        {"usage": None, "model": 3, "id": ["x"]},
    )
    completion = run([body])
    assert completion.text == "ok"
    assert completion.model is None
    assert completion.id is None
    assert completion.role is None
    assert not completion.has_tool_calls
    assert not completion.done
    assert completion.malformed_chunks == 0


def test_incomplete_stream_is_not_done() -> None:
    completion = run([sse(*text_chunks()[:4])])
    assert completion.text == "".join(PIECES[:3])
    assert not completion.done
    assert not completion.complete


def test_finish_reason_without_done_marker_is_done_and_complete() -> None:
    completion = run([sse(*text_chunks())])
    assert completion.done
    assert completion.complete
    assert not completion.saw_done


def test_error_chunk_is_recorded() -> None:
    body = sse(
        chunk({"content": "partial"}),
        {"error": {"message": "upstream overloaded", "type": "server_error", "code": 503}},
    )
    completion = run([body])
    assert completion.text == "partial"
    assert completion.error == {
        "message": "upstream overloaded",
        "type": "server_error",
        "code": 503,
    }
    assert not completion.complete
    assert not completion.done


def test_error_after_finish_reason_makes_it_incomplete() -> None:
    body = sse(chunk({"content": "x"}, finish_reason="stop"), {"error": "went wrong"})
    completion = run([body])
    assert completion.done
    assert not completion.complete
    assert completion.error == {"message": "went wrong"}


def test_first_error_wins_and_vllm_style_errors_are_recognized() -> None:
    body = sse(
        {"object": "error", "message": "bad request", "type": "BadRequestError", "code": 400},
        {"error": {"message": "second"}},
    )
    completion = run([body])
    assert completion.error == {"message": "bad request", "type": "BadRequestError", "code": 400}


def test_error_event_type_with_plain_text_data() -> None:
    completion = run([b"event: error\ndata: something broke\n\n"])
    assert completion.error == {"message": "something broke"}
    assert completion.malformed_chunks == 0
    completion = run([b'event: error\ndata: {"detail": "x"}\n\n'])
    assert completion.error == {"detail": "x"}


def test_error_copy_cannot_mutate_state() -> None:
    completion = run([sse({"error": {"message": "m"}})])
    error = completion.error
    assert error is not None
    error["message"] = "changed"
    assert completion.error == {"message": "m"}


def test_tool_calls_are_accumulated() -> None:
    def call(index: int, **fields: object) -> dict[str, object]:
        return {"index": index, **fields}

    body = sse(
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    call(0, id="call_a", type="function", function={"name": "get_weather"})
                ]
            }
        ),
        chunk({"tool_calls": [call(0, function={"arguments": '{"city": '})]}),
        chunk({"tool_calls": [call(0, function={"arguments": '"Zürich"}'})]}),
        chunk({"tool_calls": [call(1, id="call_b", type="function", function={"name": "get_"})]}),
        chunk({"tool_calls": [call(1, function={"name": "time", "arguments": "{}"})]}),
        chunk({}, finish_reason="tool_calls"),
        "[DONE]",
    )
    completion = run([body])
    assert completion.has_tool_calls
    assert completion.text == ""
    arguments = '{"city": "Zürich"}'
    assert completion.tool_calls == (
        ToolCall(index=0, id="call_a", type="function", name="get_weather", arguments=arguments),
        ToolCall(index=1, id="call_b", type="function", name="get_time", arguments="{}"),
    )
    assert completion.result() == CompletionResult(
        text="", finish_reason="tool_calls", model="llama-3.1-8b-instruct", has_tool_calls=True
    )
    assert "Zürich" not in repr(completion.tool_calls)


def test_empty_tool_calls_list_is_not_a_tool_call() -> None:
    completion = run([sse(chunk({"content": "hi", "tool_calls": []}, finish_reason="stop"))])
    assert not completion.has_tool_calls
    assert completion.tool_calls == ()


def test_legacy_function_call_delta() -> None:
    body = sse(
        chunk({"function_call": {"name": "lookup", "arguments": ""}}),
        chunk({"function_call": {"arguments": '{"q": 1}'}}),
    )
    completion = run([body])
    assert completion.has_tool_calls
    assert completion.tool_calls == (
        ToolCall(index=0, id=None, type="function", name="lookup", arguments='{"q": 1}'),
    )


def test_multiple_choices_are_kept_apart() -> None:
    body = sse(
        chunk({"role": "assistant", "content": "zero "}, index=0),
        chunk({"role": "assistant", "content": "one "}, index=1),
        chunk({"content": "a"}, index=1, finish_reason="length"),
        chunk({"content": "b"}, index=0, finish_reason="stop"),
        "[DONE]",
    )
    completion = run([body])
    assert completion.text == "zero b"
    assert completion.choice_text(1) == "one a"
    assert completion.choice_text(5) == ""
    assert completion.choice_indices == (0, 1)
    assert completion.finish_reason == "stop"
    second = run([body], answer_index=1)
    assert second.text == "one a"
    assert second.result().finish_reason == "length"


def test_usage_chunk_is_recorded() -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}
    body = sse(*text_chunks(), {**BASE, "choices": [], "usage": usage}, "[DONE]")
    completion = run([body])
    assert completion.usage == usage
    assert completion.text == TEXT


def test_unterminated_final_event_is_flushed_by_finish() -> None:
    body = sse(chunk({"content": "a"})) + b'data: {"choices": [{"delta": {"content": "b"}}]}'
    completion = StreamedCompletion()
    completion.feed_bytes(body)
    assert completion.text == "a"
    completion.finish()
    assert completion.text == "ab"
    completion.finish()  # idempotent
    completion.feed_bytes(sse(chunk({"content": "late"})))  # ignored after finish
    assert completion.text == "ab"


def test_custom_decoder_limits_drop_oversized_chunks() -> None:
    big = chunk({"content": "x" * 500})
    body = sse(chunk({"content": "a"}), big, chunk({"content": "b"}, finish_reason="stop"))
    completion = StreamedCompletion(decoder=SSEDecoder(max_line_bytes=256))
    completion.feed_bytes(body)
    completion.finish()
    assert completion.text == "ab"
    assert completion.dropped_events == 1


def test_legacy_text_completion_stream() -> None:
    body = sse(
        {"choices": [{"index": 0, "text": "foo"}]},
        {"choices": [{"index": 0, "text": "bar", "finish_reason": "stop"}]},
    )
    assert run([body]).text == "foobar"


def test_repr_does_not_leak_text() -> None:
    completion = run([STREAM])
    assert "Grüße" not in repr(completion)
    assert "Grüße" not in repr(completion.result())
    assert "llama" in repr(completion)


def test_feed_event_accepts_constructed_events() -> None:
    completion = StreamedCompletion()
    data = json.dumps(chunk({"content": "x"}))
    completion.feed_event(SSEEvent(event=None, data=data, id=None, retry=None))
    completion.feed_event(SSEEvent(event=None, data="[DONE]", id=None, retry=None))
    assert completion.text == "x"
    assert completion.saw_done


@settings(max_examples=300, deadline=None, database=None)
@given(
    pieces=st.lists(st.text(max_size=8), max_size=12),
    line_end=st.sampled_from(["\n", "\r", "\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=10),
)
def test_property_reassembled_text_is_the_concatenation(
    pieces: list[str], line_end: str, cuts: list[int]
) -> None:
    body = sse(
        *(chunk({"content": piece}) for piece in pieces),
        chunk({}, finish_reason="stop"),
        "[DONE]",
        line_end=line_end,
    )
    points = sorted({c % (len(body) + 1) for c in cuts})
    bounds = [0, *points, len(body)]
    completion = run(body[a:b] for a, b in pairwise(bounds))
    assert completion.text == "".join(pieces)
    assert completion.complete
    assert completion.malformed_chunks == 0


# -- non-streaming ---------------------------------------------------------------


def completion_body(message: Mapping[str, object], finish_reason: object = "stop") -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "qwen2.5-7b",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        },
        ensure_ascii=False,
    ).encode("utf-8")


def test_non_stream_string_content() -> None:
    body = completion_body({"role": "assistant", "content": "Grüße ü€😀中文"})
    assert parse_completion_json(body) == CompletionResult(
        text="Grüße ü€😀中文", finish_reason="stop", model="qwen2.5-7b", has_tool_calls=False
    )


def test_non_stream_list_content_joins_text_parts() -> None:
    content = [
        {"type": "text", "text": "Hello"},
        {"type": "image_url", "image_url": {"url": "data:..."}},
        {"type": "refusal", "refusal": "no"},
        {"type": "text", "text": " world"},
        " and more",
        {"type": "text", "text": 42},
    ]
    result = parse_completion_json(completion_body({"role": "assistant", "content": content}))
    assert result is not None
    assert result.text == "Hello world and more"


def test_non_stream_null_content_with_tool_calls() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    result = parse_completion_json(completion_body(message, finish_reason="tool_calls"))
    assert result == CompletionResult(
        text="", finish_reason="tool_calls", model="qwen2.5-7b", has_tool_calls=True
    )


def test_non_stream_tool_calls_detected_from_message_or_finish_reason() -> None:
    legacy = completion_body({"content": None, "function_call": {"name": "f"}}, "stop")
    result = parse_completion_json(legacy)
    assert result is not None
    assert result.has_tool_calls
    by_reason = parse_completion_json(completion_body({"content": None}, "tool_calls"))
    assert by_reason is not None
    assert by_reason.has_tool_calls
    empty = parse_completion_json(completion_body({"content": "x", "tool_calls": []}))
    assert empty is not None
    assert not empty.has_tool_calls


def test_non_stream_missing_fields_are_tolerated() -> None:
    result = parse_completion_json(b'{"choices": [{"message": {}, "finish_reason": null}]}')
    assert result == CompletionResult(text="", finish_reason=None, model=None, has_tool_calls=False)
    legacy = parse_completion_json(b'{"choices": [{"text": "plain", "finish_reason": "length"}]}')
    assert legacy == CompletionResult(
        text="plain", finish_reason="length", model=None, has_tool_calls=False
    )


def test_non_stream_picks_choice_index_zero() -> None:
    body = json.dumps(
        {
            "choices": [
                {"index": 1, "message": {"content": "second"}},
                {"index": 0, "message": {"content": "first"}},
            ]
        }
    ).encode()
    result = parse_completion_json(body)
    assert result is not None
    assert result.text == "first"


def test_non_stream_accepts_utf8_bom() -> None:
    result = parse_completion_json(b"\xef\xbb\xbf" + completion_body({"content": "x"}))
    assert result is not None
    assert result.text == "x"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"<html>502 Bad Gateway</html>",
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        b'"just a string"',
        b"null",
        b"42",
        b"[" * 100_000,
        b"{}",
        b'{"choices": "x"}',
        b'{"choices": []}',
        b'{"choices": [null, 3]}',
        b'{"choices": [{"index": 1, "message": {"content": "not zero"}}]}',
        b'{"error": {"message": "Invalid API key", "type": "invalid_request_error"}}',
        b'{"error": "boom", "choices": [{"message": {"content": "x"}}]}',
        b'{"object": "error", "message": "model not found", "code": 404}',
        sse(chunk({"content": "a streamed body"})),
    ],
)
def test_non_stream_garbage_returns_none(body: bytes) -> None:
    assert parse_completion_json(body) is None
