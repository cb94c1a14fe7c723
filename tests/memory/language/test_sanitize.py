"""Content hygiene: nasty text in, clean memories out — NUL bytes, bidi overrides,
lone surrogates, a megabyte of text, emoji — in the cleaner itself and through the
write pipeline (heuristic and LLM extraction)."""

from __future__ import annotations

import json
import sys
import time
import unicodedata
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from e2e.mock_judge import handle_dedup
from e2e.mock_llm import MockLLM, start_mock
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.sanitize import clean_text, clean_turn, is_meaningful, valid_unicode
from sidecar.memory.records.records import MemoryRecord, content_hash, memory_id
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.runtime.components import Components
from tests.support.boot import sidecar_config

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one emoji: three joined by ZWJ


def assert_clean(text: str) -> None:
    text.encode("utf-8")  # strict: no lone surrogates
    for char in text:
        assert unicodedata.category(char) not in ("Cc", "Cf", "Cs") or char in "\u200c\u200d"
    assert text == " ".join(text.split())


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("I live in Ber\x00lin.", "I live in Berlin."),
        ("I like \u202etea\u202c.", "I like tea."),  # bidi override ("trojan source")
        ("zero\u200bwidth\ufeff and soft\u00adhyphen", "zerowidth and softhyphen"),
        ("hidden\U000e0049\U000e0047\U000e004e tag text", "hidden tag text"),  # tag smuggling
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),
        ("pair \ud83d\ude00 joined", "pair \U0001f600 joined"),
        ("tab\tand\r\nnewline\x0bvt\x1fus\x85nel", "tab and newline vt us nel"),
        ("  many   spaces\n\n here  ", "many spaces here"),
        (f"emoji {FAMILY} and 🍕 stay", f"emoji {FAMILY} and 🍕 stay"),
        ("\x00\x01\u202e", ""),
    ],
)
def test_clean_text(raw: str, clean: str) -> None:
    assert clean_text(raw, 200) == clean
    assert clean_text(clean, 200) == clean  # idempotent
    assert_clean(clean_text(raw, 200))


def test_cap_keeps_whole_characters_and_no_dangling_joiner() -> None:
    assert clean_text("a" * 50, 10) == "a" * 10
    assert clean_text("ab " + FAMILY, 5) == "ab \U0001f468"
    assert clean_text("ab " + FAMILY, 4) == "ab \U0001f468"
    assert clean_text("word " * 10, 12) == "word word"  # at a word boundary
    assert clean_text("One. Two three four", 15, keep_newlines=True) == "One. Two three"
    assert clean_text("One two. Three four five", 22, keep_newlines=True) == "One two. Three four"
    assert clean_text("Sentence one. Two three", 20, keep_newlines=True) == "Sentence one. Two"
    assert clean_text("It is one here at last. Two three", 28, keep_newlines=True) == (
        "It is one here at last."
    )


def test_newlines_kept_for_turns() -> None:
    text = "I live in Oslo.\r\n\r\n  I have a cat.\x00\n\tTabs\t\tcollapse."
    assert clean_text(text, 100, keep_newlines=True) == (
        "I live in Oslo.\nI have a cat.\nTabs collapse."
    )


def test_a_megabyte_is_capped_quickly() -> None:
    huge = ("I like tea. \x00\u202e\ud800 " * 70_000)[:1_000_000]
    started = time.perf_counter()
    out = clean_text(huge, 2000)
    assert time.perf_counter() - started < 0.1
    assert len(out) <= 2000
    assert_clean(out)


def test_every_control_and_format_character_is_handled() -> None:
    """The hard-coded character classes cover this Python's Unicode database."""
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if unicodedata.category(char) not in ("Cc", "Cf") or char in "\n\t\u200c\u200d":
            continue
        out = clean_text(f"a{char}b", 10)
        assert out in ("ab", "a b"), hex(code)


def test_valid_unicode_and_meaningful() -> None:
    assert valid_unicode("ok") == "ok"
    assert valid_unicode("\udfff") == "\ufffd"
    assert is_meaningful("User 🎉")
    assert is_meaningful("42")
    assert not is_meaningful("… 🎉 !!")
    assert not is_meaningful("")


def test_clean_turn_caps_both_texts_and_keeps_clean_turns() -> None:
    turn = Turn(
        user_id="u",
        user_text="I like tea.\x00 " * 1000,
        assistant_text="Sure\ud800! " * 1000,
        created_at=1,
        session_id="s\ud800",
    )
    cleaned = clean_turn(turn, 100)
    assert len(cleaned.user_text) <= 100
    assert len(cleaned.assistant_text) <= 100
    assert "\x00" not in cleaned.user_text
    assert cleaned.session_id == "s\ufffd"
    assert clean_turn(cleaned, 100) is cleaned


# -- through the write pipeline -----------------------------------------------------------


async def build(tmp: Path, embedder: Embedder, **sections: Any) -> Components:
    config = sidecar_config(
        tmp, hierarchy={"schedule_s": 0}, retention={"prune_interval_s": 0}, **sections
    )
    return await Components.build(config, embedder=embedder)


async def stored(components: Components, user: str) -> list[MemoryRecord]:
    return await components.store.query(build_filter(owner=user), limit=100)


async def test_nasty_turns_through_the_heuristics(tmp_path: Path, embedder: Embedder) -> None:
    components = await build(tmp_path, embedder)
    try:
        nasty = (
            "I live in Ber\x00lin. I have a cat named \u202eTom\u202c. "
            "I work as a nurse\ud800. I love 🍕 and " + FAMILY + " time.\x07"
        )
        turn = Turn(user_id="nasty", user_text=nasty, assistant_text="Ok\x00.", created_at=1)
        result = await components.write.writer.write_turn(turn)
        rows = await stored(components, "nasty")
        assert result.stored == len(rows) == 4
        assert sorted(r.content for r in rows) == sorted(
            [
                "User lives in Berlin.",
                "User has a cat named Tom.",
                "User works as a nurse\ufffd.",
                f"User loves 🍕 and {FAMILY} time.",
            ]
        )
        for row in rows:
            assert_clean(row.content)
            assert row.id == memory_id("nasty", row.content)
            assert row.content_hash == content_hash(row.content)

        # A megabyte: capped before extraction (the fact past the cap is never seen).
        huge = "I like green tea. " * 60_000 + "I have a parrot named Kiwi."
        started = time.perf_counter()
        big = Turn(user_id="huge", user_text=huge, assistant_text="x" * 1_000_000, created_at=2)
        await components.write.writer.write_turn(big)
        assert time.perf_counter() - started < 5
        assert [r.content for r in await stored(components, "huge")] == ["User likes green tea."]
    finally:
        await components.close()


def nasty_extraction(body: Mapping[str, Any]) -> str:
    """An extraction LLM that answers with every kind of bad fact."""
    facts = [
        {"text": "\u0000\u202e\u200b"},  # nothing left: dropped, counted
        {"text": "… !!"},  # no letter or digit: dropped, counted
        {"text": "User likes 🍕 pizza\u0000 on Fridays."},
        {"text": "User lives in Berl\\ud800in."},  # a lone surrogate once parsed
        {"text": "User collects " + "very " * 200 + "old stamps."},  # capped to 100
        {"text": "User plays\tthe\n\ncello."},
    ]
    return json.dumps({"facts": facts}).replace("\\\\ud800", "\\ud800")


@pytest.fixture
async def nasty_llm() -> AsyncIterator[MockLLM]:
    server = await start_mock(task_handlers={"extract": nasty_extraction, "dedup": handle_dedup})
    yield server
    await server.close()


async def test_bad_llm_facts_are_cleaned_or_dropped(
    tmp_path: Path, embedder: Embedder, nasty_llm: MockLLM
) -> None:
    components = await build(
        tmp_path,
        embedder,
        llm={"base_url": nasty_llm.base_url},
        store={"max_content_chars": 100},
    )
    try:
        text = "I said a lot of things. " * 50_000  # 1.2 MB
        turn = Turn(user_id="llm", user_text=text, assistant_text="Ok.", created_at=1)
        await components.write.writer.write_turn(turn)
        rows = {r.content for r in await stored(components, "llm")}
        capped = ("User collects " + "very " * 17).rstrip()  # 100 characters, whole words
        assert rows == {
            "User likes 🍕 pizza on Fridays.",
            "User lives in Berl\ufffdin.",
            capped,
            "User plays the cello.",
        }
        metrics = components.metrics
        assert metrics.value("memory_sidecar_facts_total", {"decision": "dropped_invalid"}) == 2
        # the prompt carried at most max_turn_chars of the turn
        prompt = nasty_llm.task_requests("extract")[0]["body"]["messages"][-1]["content"]
        assert len(prompt) < 6000 + 200
    finally:
        await components.close()
