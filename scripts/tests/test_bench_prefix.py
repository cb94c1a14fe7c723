"""bench_prefix's measure: the share of a request's tokens that open the one before."""

from __future__ import annotations

from typing import Any

from scripts.bench_prefix import load_tokenizer, render, reuse, shared_prefix

SYSTEM = {"role": "system", "content": "You are a helpful assistant. " * 30}


def turn(n: int, block: str | None, placement: str) -> list[dict[str, Any]]:
    """Request n of a conversation, the memory block placed as ``placement`` says."""
    history: list[dict[str, Any]] = []
    for i in range(n):
        history += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    latest = {"role": "user", "content": f"question {n}"}
    if block is None:
        return [SYSTEM, *history, latest]
    if placement == "system":
        system = {"role": "system", "content": f"{SYSTEM['content']}\n\n{block}"}
        return [system, *history, latest]
    return [SYSTEM, *history, {"role": "system", "content": block}, latest]


def test_shared_prefix_counts_leading_equal_tokens() -> None:
    assert shared_prefix([1, 2, 3, 4], [1, 2, 9]) == 2
    assert shared_prefix([], [1]) == 0


def test_a_block_before_the_latest_message_keeps_the_history_a_system_block_does_not() -> None:
    tokenizer = load_tokenizer()
    facts = ["lives in Leipzig", "is vegetarian", "plays the cello", "has a dog", "runs", "swims"]
    blocks = [f"<memory>\nReference data.\n- User {fact}.\n</memory>" for fact in facts]
    message = reuse(tokenizer, [turn(n, blocks[n], "message") for n in range(6)])
    system = reuse(tokenizer, [turn(n, blocks[n], "system") for n in range(6)])
    assert len(message) == len(system) == 5
    # Before the latest message, only the newest exchange and the block are new:
    # the share grows with the history. In the system prompt, a new block ends
    # the shared part at the system prompt, whatever the history holds.
    assert message == sorted(message)
    # (Turn 2 alone shares as little either way: the system prompt, and in the
    # system placement the block's fixed first line.)
    assert all(m > s for m, s in zip(message[1:], system[1:], strict=True))
    assert system == sorted(system, reverse=True)
    plain = reuse(tokenizer, [turn(n, None, "message") for n in range(6)])
    # Without memory, the ceiling: above the block's share at every turn.
    assert all(p > m for p, m in zip(plain, message, strict=True))


def test_render_reads_content_parts() -> None:
    text = render([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n"
