"""Tests for the chat-completions body codec (sidecar.extproc.chat_request)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.extproc.chat_request import ChatRequest, content_text

BLOCK = "<memory>\n- User lives in Berlin.\n</memory>"


def body(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "llama",
        "messages": [{"role": "user", "content": "hello"}],
    }
    base.update(fields)
    return base


def parse(value: Any) -> ChatRequest:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    request = ChatRequest.parse(raw)
    assert request is not None
    return request


def roundtrip(request: ChatRequest) -> dict[str, Any]:
    encoded = request.encode()
    value = json.loads(encoded)
    assert isinstance(value, dict)
    return value


def strict_loads(raw: bytes) -> Any:
    """json.loads that refuses NaN/Infinity, which are not JSON."""

    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    return json.loads(raw, parse_constant=refuse)


# -- parse ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"   ",
        b"not json",
        b"{",
        b'{"messages": [}',
        b"[]",
        b'[{"messages": []}]',
        b'"messages"',
        b"42",
        b"null",
        b"{}",
        b'{"messages": null}',
        b'{"messages": {"role": "user"}}',
        b'{"messages": "hi"}',
        b'{"model": "x"}',
        b'{"messages": [{"role": "user", "content": "caf\xe9"}]}',  # invalid UTF-8
        b"\xff\xfe\x00\x00",
    ],
)
def test_parse_rejects_everything_but_an_object_with_a_messages_list(raw: bytes) -> None:
    assert ChatRequest.parse(raw) is None


def test_parse_survives_deeply_nested_lists() -> None:
    depth = 100_000
    assert ChatRequest.parse(b"[" * depth + b"]" * depth) is None


def test_parse_survives_deeply_nested_values_inside_a_valid_body() -> None:
    depth = 100_000
    raw = b'{"messages": [], "x": ' + b'{"a":' * depth + b"1" + b"}" * depth + b"}"
    assert ChatRequest.parse(raw) is None


def test_parse_accepts_an_empty_messages_list() -> None:
    request = parse({"messages": []})
    assert request.messages == []
    assert request.latest_user_text() is None


def test_parse_accepts_utf8_with_non_ascii() -> None:
    request = parse('{"messages":[{"role":"user","content":"Grüße 😀"}]}'.encode())
    assert request.latest_user_text() == "Grüße 😀"


def test_stream_flag() -> None:
    assert parse(body(stream=True)).stream is True
    assert parse(body(stream=False)).stream is False
    assert parse(body()).stream is False
    assert parse(body(stream="true")).stream is False


# -- unknown fields -----------------------------------------------------------------------

RICH_BODY: dict[str, Any] = {
    "model": "gpt-x",
    "messages": [
        {"role": "system", "content": "Be brief.", "name": "sys", "x_vendor": {"k": [1, 2]}},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this image?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q": "x"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "result"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ],
    "tool_choice": "auto",
    "response_format": {
        "type": "json_schema",
        "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": True},
    },
    "temperature": 0.2,
    "top_p": 1,
    "seed": 12345678901234567890,
    "logit_bias": {"50256": -100},
    "stream": True,
    "stream_options": {"include_usage": True},
    "chat_template_kwargs": {"enable_thinking": False},
    "guided_json": {"nested": {"deeper": [None, True, False, 1.5, "ü"]}},
    "metadata": {"user_id": "u1", "trace": "abc"},
    "x-vendor-ext": {"a": {"b": {"c": []}}},
}


@pytest.mark.parametrize("mode", ["append", "prepend"])
def test_unknown_fields_survive_parse_inject_encode(mode: str) -> None:
    request = parse(RICH_BODY)
    request.inject_system(BLOCK, mode)  # type: ignore[arg-type]
    out = roundtrip(request)
    expected = copy.deepcopy(RICH_BODY)
    if mode == "append":
        expected["messages"][0]["content"] = f"Be brief.\n\n{BLOCK}"
    else:
        expected["messages"].insert(0, {"role": "system", "content": BLOCK})
    assert out == expected
    assert list(out) == list(RICH_BODY)  # key order kept too


def test_encode_without_changes_is_equivalent_to_the_input() -> None:
    assert roundtrip(parse(RICH_BODY)) == RICH_BODY


def test_encode_keeps_non_ascii_as_utf8_and_is_compact() -> None:
    request = parse({"messages": [{"role": "user", "content": "Grüße 😀"}]})
    encoded = request.encode()
    assert "Grüße 😀".encode() in encoded
    assert b", " not in encoded
    assert b": " not in encoded


def test_encoded_length_is_the_content_length() -> None:
    request = parse({"messages": [{"role": "user", "content": "Grüße aus Köln 😀 中文"}]})
    request.inject_system("- Der Nutzer wohnt in Köln. ✓", "append")
    encoded = request.encode()
    assert isinstance(encoded, bytes)
    text = encoded.decode("utf-8")
    assert len(encoded) > len(text)  # multi-byte characters: bytes, not characters
    assert json.loads(encoded)["messages"][0]["content"] == "- Der Nutzer wohnt in Köln. ✓"


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "a\\udc00b", "\\ud83d"])
def test_lone_surrogate_escapes_survive_encode(escape: str) -> None:
    raw = ('{"messages":[{"role":"user","content":"' + escape + '"}],"x":"é"}').encode()
    request = parse(raw)
    request.inject_system(BLOCK, "append")
    encoded = request.encode()
    encoded.decode("utf-8")  # valid UTF-8 ...
    out = strict_loads(encoded)  # ... and valid JSON ...
    assert out["messages"][1]["content"] == json.loads(raw)["messages"][0]["content"]
    assert out["x"] == "é"
    assert out["messages"][0] == {"role": "system", "content": BLOCK}


def test_valid_surrogate_pairs_are_encoded_as_utf8() -> None:
    request = parse(b'{"messages":[{"role":"user","content":"\\ud83d\\ude00"}]}')
    assert request.latest_user_text() == "😀"
    assert "😀".encode() in request.encode()


def test_out_of_range_numbers_never_produce_invalid_json() -> None:
    raw = b'{"messages":[{"role":"user","content":"hi"}],"x_vendor":{"scale":1e400}}'
    request = ChatRequest.parse(raw)
    if request is None:
        return  # declining to touch the body is acceptable
    request.inject_system(BLOCK, "append")
    strict_loads(request.encode())


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150)
@given(
    extra=st.dictionaries(
        st.text(max_size=10).filter(lambda k: k != "messages"), json_values, max_size=5
    ),
    text=st.text(),
    mode=st.sampled_from(["append", "prepend"]),
)
def test_any_extra_fields_round_trip(extra: dict[str, Any], text: str, mode: str) -> None:
    original = {**extra, "messages": [{"role": "system", "content": "S"}, {"role": "user"}]}
    original["messages"][1]["content"] = text
    request = parse(original)
    request.inject_system(BLOCK, mode)  # type: ignore[arg-type]
    out = strict_loads(request.encode())
    assert {k: v for k, v in out.items() if k != "messages"} == extra
    assert out["messages"][-1]["content"] == text


# -- user text ---------------------------------------------------------------------------


def test_latest_user_text_from_a_string() -> None:
    assert parse(body()).latest_user_text() == "hello"


def test_latest_user_text_strips_whitespace() -> None:
    request = parse(body(messages=[{"role": "user", "content": "  hi there \n"}]))
    assert request.latest_user_text() == "hi there"


def test_latest_user_text_from_content_parts_ignores_images() -> None:
    request = parse(
        body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "first"},
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                        {"type": "input_text", "text": "second"},
                        {"type": "text", "text": 5},
                        {"type": "text"},
                        "bare string part",
                        {"type": "input_audio", "input_audio": {"data": "AAA"}},
                    ],
                }
            ]
        )
    )
    assert request.latest_user_text() == "first\nsecond"


def test_latest_user_message_is_picked_not_an_earlier_one() -> None:
    request = parse(
        body(
            messages=[
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "earlier question"},
                {"role": "assistant", "content": "answer"},
                {"role": "user", "content": "latest question"},
                {"role": "assistant", "content": "partial"},
                {"role": "tool", "content": "tool output"},
            ]
        )
    )
    assert request.latest_user_text() == "latest question"


@pytest.mark.parametrize(
    "content",
    [
        "",
        "   \n\t",
        None,
        [],
        [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
        [{"type": "text", "text": "  "}],
        42,
        {"type": "text", "text": "not in a list"},
    ],
)
def test_blank_latest_user_message_gives_none(content: Any) -> None:
    request = parse(
        body(
            messages=[
                {"role": "user", "content": "an earlier, non-blank message"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": content},
            ]
        )
    )
    assert request.latest_user_text() is None


def test_no_user_message_gives_none() -> None:
    request = parse(body(messages=[{"role": "system", "content": "x"}, "junk", 5, None]))
    assert request.latest_user_text() is None


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("plain", "plain"),
        ([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "a\nb"),
        ([{"type": "image_url"}], ""),
        (None, ""),
        (3.5, ""),
        ({"text": "x"}, ""),
    ],
)
def test_content_text(content: object, expected: str) -> None:
    assert content_text(content) == expected


# -- injection -----------------------------------------------------------------------------


def test_append_to_the_first_system_message_string() -> None:
    request = parse(
        body(
            messages=[
                {"role": "system", "content": "You are helpful."},
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "Second system."},
            ]
        )
    )
    request.inject_system(BLOCK, "append")
    messages = roundtrip(request)["messages"]
    assert messages[0] == {"role": "system", "content": f"You are helpful.\n\n{BLOCK}"}
    assert messages[2] == {"role": "system", "content": "Second system."}
    assert len(messages) == 3


def test_append_to_a_system_message_that_is_not_first() -> None:
    request = parse(
        body(
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "Late system."},
            ]
        )
    )
    request.inject_system(BLOCK, "append")
    messages = roundtrip(request)["messages"]
    assert messages == [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": f"Late system.\n\n{BLOCK}"},
    ]


def test_append_to_a_content_part_list() -> None:
    parts = [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
    ]
    request = parse(body(messages=[{"role": "system", "content": parts}, {"role": "user"}]))
    request.inject_system(BLOCK, "append")
    messages = roundtrip(request)["messages"]
    assert messages[0]["content"] == [*parts, {"type": "text", "text": BLOCK}]
    assert len(messages) == 2


@pytest.mark.parametrize("content", ["", "   ", None])
def test_append_to_an_empty_system_message_replaces_it(content: Any) -> None:
    request = parse(body(messages=[{"role": "system", "content": content}, {"role": "user"}]))
    request.inject_system(BLOCK, "append")
    messages = roundtrip(request)["messages"]
    assert messages[0] == {"role": "system", "content": BLOCK}
    assert len(messages) == 2


def test_append_to_a_system_message_without_content() -> None:
    request = parse(body(messages=[{"role": "system", "name": "x"}, {"role": "user"}]))
    request.inject_system(BLOCK, "append")
    messages = roundtrip(request)["messages"]
    assert messages[0] == {"role": "system", "name": "x", "content": BLOCK}


def test_developer_role_counts_as_system() -> None:
    request = parse(
        body(
            messages=[
                {"role": "developer", "content": "Dev rules."},
                {"role": "system", "content": "System rules."},
                {"role": "user", "content": "hi"},
            ]
        )
    )
    request.inject_system(BLOCK, "append")
    messages = roundtrip(request)["messages"]
    assert messages[0] == {"role": "developer", "content": f"Dev rules.\n\n{BLOCK}"}
    assert messages[1] == {"role": "system", "content": "System rules."}
    assert len(messages) == 3


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}],
        [{"role": "developer", "content": "D"}, {"role": "user", "content": "hi"}],
    ],
)
def test_prepend_always_adds_a_new_first_message(messages: list[Any]) -> None:
    request = parse(body(messages=messages))
    request.inject_system(BLOCK, "prepend")
    out = roundtrip(request)["messages"]
    assert out[0] == {"role": "system", "content": BLOCK}
    assert out[1:] == messages


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "user", "content": "hi"}],
        [{"role": "assistant", "content": "a"}, {"role": "user", "content": "hi"}],
        ["junk", {"role": "user", "content": "hi"}],
        [{"role": "System", "content": "not a system role"}, {"role": "user"}],
    ],
)
def test_append_without_a_system_message_adds_a_first_system_message(
    messages: list[Any],
) -> None:
    request = parse(body(messages=messages))
    request.inject_system(BLOCK, "append")
    out = roundtrip(request)["messages"]
    assert out[0] == {"role": "system", "content": BLOCK}
    assert out[1:] == messages


def test_injection_does_not_change_the_latest_user_text() -> None:
    request = parse(body(messages=[{"role": "user", "content": "where do I live?"}]))
    request.inject_system(BLOCK, "append")
    assert request.latest_user_text() == "where do I live?"


# -- body user id --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"user": "alice"}, "alice"),
        ({"metadata": {"user_id": "bob"}}, "bob"),
        ({"user": "alice", "metadata": {"user_id": "bob"}}, "alice"),
        ({"user": "", "metadata": {"user_id": "bob"}}, "bob"),
        ({"user": 5, "metadata": {"user_id": "bob"}}, "bob"),
        ({"user": None}, None),
        ({"metadata": {"user_id": ""}}, None),
        ({"metadata": {"user_id": 7}}, None),
        ({"metadata": "bob"}, None),
        ({"metadata": {"user": "bob"}}, None),
        ({}, None),
    ],
)
def test_body_user_id(fields: dict[str, Any], expected: str | None) -> None:
    assert parse(body(**fields)).body_user_id() == expected


# -- history ---------------------------------------------------------------------------------

CONVERSATION = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": [{"type": "text", "text": "u2"}, {"type": "image_url"}]},
    {"role": "assistant", "content": "a2"},
    {"role": "user", "content": "latest"},
]


def test_history_excludes_the_latest_user_message_and_system() -> None:
    request = parse(body(messages=CONVERSATION))
    assert request.history(10) == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("user", "u2"),
        ("assistant", "a2"),
    ]


def test_history_keeps_the_last_limit_messages() -> None:
    request = parse(body(messages=CONVERSATION))
    assert request.history(2) == [("user", "u2"), ("assistant", "a2")]
    assert request.history(1) == [("assistant", "a2")]


@pytest.mark.parametrize("limit", [0, -1])
def test_history_with_no_limit_is_empty(limit: int) -> None:
    assert parse(body(messages=CONVERSATION)).history(limit) == []


def test_history_of_a_single_message_is_empty() -> None:
    assert parse(body()).history(5) == []


def test_history_skips_tool_and_malformed_messages() -> None:
    request = parse(
        body(
            messages=[
                {"role": "user", "content": "u1"},
                {"role": "tool", "content": "t"},
                "junk",
                {"role": "assistant", "content": None},
                {"role": "user", "content": "latest"},
            ]
        )
    )
    assert request.history(10) == [("user", "u1"), ("assistant", "")]


def test_history_excludes_the_latest_user_message_after_tool_calls() -> None:
    request = parse(
        body(
            messages=[
                {"role": "user", "content": "u1"},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "latest"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
                {"role": "tool", "tool_call_id": "c", "content": "r"},
            ]
        )
    )
    assert request.history(10) == [("user", "u1"), ("assistant", "a1")]


CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "I moved to Leipzig."},
    {"role": "assistant", "content": "Noted!"},
    {"role": "user", "content": "Any good cafés near me?"},
]


def test_the_memory_message_goes_right_before_the_latest_user_message() -> None:
    request = parse(body(messages=copy.deepcopy(CHAT)))
    request.inject_before_latest_user(BLOCK, "system")
    messages = roundtrip(request)["messages"]
    assert messages == [*CHAT[:3], {"role": "system", "content": BLOCK}, CHAT[3]]


def test_the_memory_message_role_is_configurable_and_a_tool_loop_keeps_its_tail() -> None:
    loop = [
        *CHAT,
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3 cafés"},
    ]
    request = parse(body(messages=copy.deepcopy(loop)))
    request.inject_before_latest_user(BLOCK, "developer")
    messages = roundtrip(request)["messages"]
    assert messages == [*loop[:3], {"role": "developer", "content": BLOCK}, *loop[3:]]


def test_the_block_can_go_inside_the_latest_user_message() -> None:
    request = parse(body(messages=copy.deepcopy(CHAT)))
    request.inject_into_latest_user(BLOCK)
    messages = roundtrip(request)["messages"]
    assert messages[:3] == CHAT[:3]
    assert messages[3] == {"role": "user", "content": f"{BLOCK}\n\nAny good cafés near me?"}
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {}}]
    request = parse(body(messages=[{"role": "user", "content": copy.deepcopy(parts)}]))
    request.inject_into_latest_user(BLOCK)
    assert roundtrip(request)["messages"][0]["content"] == [
        {"type": "text", "text": BLOCK},
        *parts,
    ]


def test_the_next_turn_shares_every_byte_up_to_the_previous_user_message() -> None:
    """Turn n+1's upstream body starts with turn n's up to its memory message,
    whatever memories each turn got: the prefix an inference server has cached."""
    first = parse(body(messages=copy.deepcopy(CHAT)))
    first.inject_before_latest_user("<memory>\n- User lives in Leipzig.\n</memory>", "system")
    later = [*CHAT, {"role": "assistant", "content": "Try Café Kowalski."}]
    later.append({"role": "user", "content": "And for dinner?"})
    second = parse(body(messages=later))
    second.inject_before_latest_user("<memory>\n- User is vegetarian.\n</memory>", "system")
    a, b = roundtrip(first)["messages"], roundtrip(second)["messages"]
    assert b[:3] == a[:3]  # the cached part: system prompt and the earlier turns
    assert b[3] == CHAT[3]  # where turn n had its memories, the client's message


ODD = (
    b'{ "model" : "m",\n  "temperature": 0.50, "top_p": 1e0, "seed": 10000000000000000000001,\n'
    b'  "stop": ["\\u00e9", "\\/", "\\ud83d\\ude00"], "x": 1, "x": 2,\n'
    b'  "messages" : [\n    {"role": "system", "content": "Be brief."},\n'
    b'    {"role":"user",   "content": "caf\\u00e9?"}\n  ],\n  "tail": [1.0, -0.0] }'
)


def test_an_injection_keeps_every_byte_outside_the_message_it_adds() -> None:
    request = parse(ODD)
    request.inject_before_latest_user(BLOCK, "system")
    encoded = request.encode()
    added = json.dumps(
        {"role": "system", "content": BLOCK}, ensure_ascii=False, separators=(",", ":")
    )
    at = ODD.index(b'{"role":"user"')
    assert encoded == ODD[:at] + added.encode() + b"," + ODD[at:]
    # What a parser makes of it is what it made of the original, plus the block.
    original = json.loads(ODD)
    original["messages"].insert(1, {"role": "system", "content": BLOCK})
    assert json.loads(encoded) == original


def test_a_rewritten_message_is_the_only_part_that_changes() -> None:
    for inject in (
        lambda r: r.inject_system(BLOCK, "append"),
        lambda r: r.inject_into_latest_user(BLOCK),
    ):
        request = parse(ODD)
        inject(request)
        encoded = request.encode()
        start = ODD.index(b"    {") + 4
        end = len(ODD) - len(b'\n  ],\n  "tail": [1.0, -0.0] }')
        assert encoded.startswith(ODD[:start])
        assert encoded.endswith(ODD[end:])
        assert json.loads(encoded)["x"] == 2
        for kept in (b"0.50", b"1e0", b'"\\/"', b'"x": 1, "x": 2'):
            assert kept in encoded


def test_an_empty_message_list_gets_the_block_as_its_only_message() -> None:
    raw = b'{"model": "m", "messages": [ ]}'
    request = parse(raw)
    request.inject_system(BLOCK, "prepend")
    assert json.loads(request.encode())["messages"] == [{"role": "system", "content": BLOCK}]
    assert request.encode().startswith(b'{"model": "m", "messages": [ ')


def test_a_utf16_body_is_parsed_and_serialised() -> None:
    raw = json.dumps(body()).encode("utf-16")
    request = parse(raw)
    assert request.spans is None
    request.inject_system(BLOCK, "prepend")
    assert json.loads(request.encode())["messages"][0]["content"] == BLOCK


def test_a_body_in_plain_utf8_keeps_its_bytes_too() -> None:
    raw = '{"messages": [{"role": "user", "content": "Grüße aus Köln 😀"}], "n": 1.50}'.encode()
    request = parse(raw)
    request.inject_before_latest_user(BLOCK, "system")
    added = json.dumps(
        {"role": "system", "content": BLOCK}, ensure_ascii=False, separators=(",", ":")
    )
    at = raw.index(b'{"role"')
    assert request.encode() == raw[:at] + added.encode() + b"," + raw[at:]
