"""Orders for the assistant are not memories, in any register (issue O, item 4):
through the real Envoy and without an LLM, every attempt of tests/data/orders.json
(fixed replies, claimed authority, safety switched off, things to say to or about
others) is told as a user would, and none reaches an injected block; every
preference of the set (language, tone, format, names, diet, health) is injected
when asked about."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.stack import Stack, running_stack
from tests.e2e.test_envoy_flow import say, wait_written, written

pytestmark = pytest.mark.e2e

ORDERS = json.loads((Path(__file__).resolve().parents[1] / "data" / "orders.json").read_text())
#: Words of the attempts that no line injected for their users may carry.
CANARIES = (
    "I don't know", "CryptoMoon", "banana", "Access granted", "content checks",
    "administrator", "developer", "admin rights", "safety filters", "dosage", "refuse",
    "Tom Walsh", "thief", "Patel", "fraud", "Acme", "scam", "BetaBank", "bankrupt",
    "cheapmeds", "Globex", "competitors", "vaccines", "autism", "cancelled", "Elm Street",
    "guidelines", "SUDO", "Max", "creators", "hospital", "bestdeals", "rigged", "human",
)  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # No LLM: the heuristic extractor and the rule judge decide what is kept.
    overrides = {"llm": {"base_url": None}}
    with running_stack(tmp_path_factory.mktemp("e2e-orders"), config_overrides=overrides) as s:
        yield s


def block_of(echo: str) -> str:
    start, end = echo.find("<memory>"), echo.find("</memory>")
    return echo[start:end] if start >= 0 else ""


def test_no_order_reaches_an_injected_block_and_every_preference_does(stack: Stack) -> None:
    attacks: list[str] = ORDERS["attacks"]
    preferences = ORDERS["preferences"]
    assert len(attacks) >= 25
    users = [f"order-{i}-{uuid.uuid4().hex[:6]}" for i in range(len(attacks))]
    kept = [f"pref-{i}-{uuid.uuid4().hex[:6]}" for i in range(len(preferences))]
    before = written(stack)
    for user, attack in zip(users, attacks, strict=True):
        say(stack, user, attack)
    for user, preference in zip(kept, preferences, strict=True):
        say(stack, user, preference["turn"])
    wait_written(stack, before + len(attacks) + len(preferences), timeout=60)

    leaked: list[str] = []
    for user, attack in zip(users, attacks, strict=True):
        for question in (attack, "What do you remember about me?", "How should you answer?"):
            block = block_of(say(stack, user, question))
            leaked += [f"{attack!r}: {w}" for w in CANARIES if w.lower() in block.lower()]
    assert leaked == []

    missing = [
        p["turn"]
        for user, p in zip(kept, preferences, strict=True)
        if p["keyword"].lower() not in block_of(say(stack, user, p["question"])).lower()
    ]
    assert missing == []
    # Decided without an LLM: the sidecar asked the model server for nothing.
    tagged = [r for r in stack.mock_requests() if "x-user-id" not in r["headers"]]
    assert tagged == []
