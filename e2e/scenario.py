"""The scripted conversation shared by the demo and the end-to-end script.

1. Alice states facts in one conversation (non-streaming) and another (streaming).
2. In a fresh conversation she asks about them: the memories reach the model.
3. Bob asks the same question: none of Alice's memories reach the model.
4. The read-only route injects but stores nothing; the disabled route is untouched.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from e2e.stack import Stack

Printer = Callable[[str], None]


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append(Check(name, ok, detail))

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


def injected_block(echo: str) -> str:
    """The memory block the upstream received (from the mock's echo), or ''."""
    start, end = echo.find("<memory>"), echo.find("</memory>")
    return echo[start : end + len("</memory>")] if 0 <= start < end else ""


def _ask(stack: Stack, user: str, text: str, prefix: str = "/v1") -> tuple[str, str | None]:
    raw = stack.client(user, prefix).chat.completions.with_raw_response.create(
        model="mock-llm", messages=[{"role": "user", "content": text}]
    )
    return raw.parse().choices[0].message.content or "", raw.headers.get("x-memory-injected")


def _ask_streaming(stack: Stack, user: str, text: str) -> tuple[str, str | None]:
    with stack.client(user).chat.completions.with_streaming_response.create(
        model="mock-llm", messages=[{"role": "user", "content": text}], stream=True
    ) as response:
        header = response.headers.get("x-memory-injected")
        answer = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
    return answer, header


def run_scenario(stack: Stack, say: Printer = print) -> Report:
    report = Report()
    run = uuid.uuid4().hex[:6]
    alice, bob = f"alice-{run}", f"bob-{run}"

    say(f"\n== Conversation 1 ({alice}, plain JSON) ==")
    statement = "Hi! I live in Berlin. I work as a nurse. Please always answer in French."
    say(f"user> {statement}")
    before = stack.turns_written()
    _ask(stack, alice, statement)
    say(f"\n== Conversation 2 ({alice}, streaming) ==")
    statement = "My sister's name is Ana. I'm allergic to peanuts."
    say(f"user> {statement}")
    _ask_streaming(stack, alice, statement)
    stored = stack.wait_turns_written(before + 2)
    report.check("both turns were written to memory", stored)

    say(f"\n== Conversation 3 ({alice}, fresh) ==")
    for question in ("Where do I live?", "What is my sister called?"):
        echo, header = _ask(stack, alice, question)
        block = injected_block(echo)
        say(f"user> {question}\n(x-memory-injected: {header})\nthe memory block the model saw:")
        say("\n".join("    " + line for line in block.splitlines()) or "    (nothing)")
        report.check(
            f"memories injected for {question!r}", bool(block) and header not in (None, "0")
        )
    echo, header = _ask_streaming(stack, alice, "Remind me: what am I allergic to?")
    report.check(
        "streaming request gets memory too", "peanuts" in injected_block(echo), f"header={header}"
    )

    say(f"\n== Conversation 4 ({bob} asks the same) ==")
    echo, header = _ask(stack, bob, "Where do I live?")
    say(f"user> Where do I live?\n(x-memory-injected: {header})")
    say(f"    {injected_block(echo) or '(nothing injected)'}")
    report.check("another user sees none of it", "Berlin" not in echo and header == "0")

    say("\n== Read-only and disabled routes ==")
    accepted = stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "accepted"})
    _ask(stack, alice, "I have a dog named Rex.", "/readonly/v1")
    echo, header = _ask(stack, alice, "Where do I live?", "/readonly/v1")
    say(f"read-only route: x-memory-injected={header}")
    time.sleep(0.3)
    after = stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "accepted"})
    report.check("read-only route injects", "Berlin" in injected_block(echo))
    report.check("read-only route stores nothing", after == accepted)
    echo, header = _ask(stack, alice, "Where do I live?", "/nomemory/v1")
    say(f"disabled route: x-memory-injected={header}, injected={bool(injected_block(echo))}")
    report.check("disabled route is untouched", header is None and not injected_block(echo))
    return report
