#!/usr/bin/env python
"""Prefix reuse: how much of each upstream prompt an inference server could serve
from its prefix cache, per injection placement, through the real Envoy.

Each conversation (``--turns`` user/assistant pairs, ≥ 20, after a long fixed
system prompt) is replayed turn by turn as a chat client does: request *n* holds
the system prompt, the conversation's first *n* − 1 exchanges as scripted, and the
*n*-th user message. The same conversations go through one route per mode, each
mode with users of its own (seeded with the same facts first, then written to by
the conversation itself, as in production):

* ``none`` — a route without memory (Envoy alone): the ceiling;
* ``message`` — ``injection.placement: message`` (the default);
* ``user`` — ``injection.placement: user``;
* ``system`` — ``injection.placement: system`` (the block in the system prompt).

The echo mock records every upstream request body. Each body's messages are
rendered as ChatML (``<|im_start|>role\\ncontent<|im_end|>``) and tokenized with the
embedding model's tokenizer (all-MiniLM-L6-v2's WordPiece, packaged offline; the
served model's own tokenizer splits differently, the shares barely move). For
turns ≥ 2 the reuse of request *n* is the number of leading tokens it shares with
request *n* − 1 of the same conversation, over its length: what automatic prefix
caching (vLLM) or a hosted prompt cache can skip prefilling. Printed as a table
(mean, p10 per mode) and written as JSON.

    .venv/bin/python -m scripts.bench_prefix --json out/bench_prefix.json

vLLM's own prefix-cache hit rate needs a GPU host with vLLM and a small model
installed; this script does not start vLLM.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import openai

from e2e.stack import Stack, http_get, running_stack
from scripts.benchlib import percentile, write_report
from sidecar.memory.embedding.protocol import PACKAGED_MODEL, resolve_model_path

#: A long, fixed system prompt, as agents and assistants ship them.
SYSTEM_PROMPT = " ".join(
    [
        "You are Atlas, the personal assistant of a busy professional.",
        "Answer in plain language, briefly, and say so when you are unsure.",
        "Keep track of the user's plans, preferences and commitments across the conversation.",
        "Suggest concrete next steps, with times and places when they matter.",
        "Never invent bookings, prices or opening hours; offer to check instead.",
        "When the user mentions health, food or travel, take their constraints into account.",
    ]
    * 12
)
#: What each user told the assistant before the measured conversation.
SEED_FACTS = (
    "I live in Leipzig with my partner Jonas.",
    "I'm vegetarian and allergic to hazelnuts.",
    "I work as a data analyst at Siemens.",
    "My sister Ana lives in Porto.",
    "I play the cello in an amateur orchestra on Tuesdays.",
    "I have a dog called Biscuit.",
    "I'm training for the Berlin half marathon in April.",
    "I prefer trains to planes whenever I can.",
    "My birthday is on March 3.",
    "I don't drink alcohol.",
)
#: Two scripted conversations: (user message, the assistant's reply as replayed).
CONVERSATIONS: tuple[tuple[tuple[str, str], ...], ...] = (
    (
        ("Morning! Can you help me plan the week?", "Of course. What's on your plate?"),
        ("Work is busy, a quarterly report due Friday.", "Block two mornings for it."),
        ("Good idea. Tuesday evening I have rehearsal though.", "Then Monday and Wednesday."),
        ("What should I cook tonight?", "A lentil curry: quick and filling."),
        ("No nuts in it, right?", "None; skip the cashew garnish."),
        ("Jonas wants pasta instead.", "A tomato and aubergine pasta, then."),
        ("How long should my long run be on Sunday?", "About 16 km at an easy pace."),
        ("Biscuit could come along for the first part.", "Good, keep him to 5 km."),
        ("I need a gift for Ana, her birthday is next month.", "A Leipzig photo book?"),
        ("She loves ceramics actually.", "Then a handmade mug from a local studio."),
        ("Can I visit her in Porto in May?", "Yes; by train it is long, flights are 3 h."),
        ("Hmm, I'd rather not fly.", "A night train via Paris and Hendaye works."),
        ("How long would that take?", "About 30 hours with one night on board."),
        ("Too long. Let's look at flights after all.", "Direct flights leave from Berlin."),
        ("What about my training that week?", "Swap the long run for two shorter ones."),
        ("Remind me what I said about the report?", "Due Friday; Monday and Wednesday."),
        ("Also, my manager wants slides.", "Ten slides: results, risks, next steps."),
        ("Any tips for a calm presentation?", "Rehearse twice and open with the result."),
        ("What should we eat on Saturday with friends?", "A vegetarian paella for six."),
        ("One friend is vegan.", "Keep it vegan: no butter, veg stock."),
        ("And dessert?", "Sorbet with fresh berries, nut-free."),
        ("Do I have anything on Tuesday morning?", "Nothing planned before rehearsal."),
        ("Great, book me a dentist then.", "I can't book, but 9:00 would fit."),
        ("Thanks, that's the week sorted.", "Enjoy it, and good luck on Friday!"),
    ),
    (
        ("I want to get fitter this spring.", "Let's build on your half-marathon plan."),
        ("How many runs a week?", "Four: two easy, one tempo, one long."),
        ("My knee hurt a bit yesterday.", "Rest a day; ice it and see how it feels."),
        ("Should I see someone?", "If it lasts past a week, a physiotherapist."),
        ("What should I eat before a long run?", "Porridge with banana, two hours before."),
        ("I get bored of porridge.", "Toast with jam or rice pudding work too."),
        ("What protein can I get without meat?", "Lentils, tofu, eggs, Greek yoghurt."),
        ("Jonas cooks with a lot of nuts.", "Ask him to keep hazelnuts out of yours."),
        ("Can Biscuit run 10 km?", "Depends on his age and breed; build up slowly."),
        ("He's three, a beagle.", "He can, on soft ground, with water breaks."),
        ("Which shoes for the half?", "The pair you trained in, not new ones."),
        ("How do I taper?", "Cut the volume by a third in the last two weeks."),
        ("Will rehearsals tire me out?", "Playing is fine; sleep matters more."),
        ("I sleep about six hours.", "Aim for seven and a half in the last weeks."),
        ("What about coffee on race day?", "A small one an hour before, if you're used to it."),
        ("And the evening before?", "Pasta with tomato sauce, no new foods."),
        ("How do I get to Berlin for the race?", "The train from Leipzig takes about 75 min."),
        ("Where should I stay?", "Near the start, so you can walk there."),
        ("Can Jonas and Biscuit come?", "Yes; choose a dog-friendly flat."),
        ("What pace for 1:50?", "About 5:13 per kilometre."),
        ("Is that realistic for me?", "With your long runs so far, it is within reach."),
        ("What do I do right after the finish?", "Walk, drink, eat within the hour."),
        ("And the week after?", "Easy runs only, and a rest day or two."),
        ("Thanks, this helps a lot.", "Happy to help. Good luck in April!"),
    ),
)
MODES = ("none", "message", "user", "system")


def stack_overrides() -> dict[str, Any]:
    """One profile per placement, each with a route of its own (``/<mode>/v1/``);
    ``/nomemory/v1/`` is the demo stack's route without memory."""
    profiles = {
        mode: {
            "paths": [f"/{mode}/v1/chat/completions"],
            "injection": {"placement": mode},
        }
        for mode in ("message", "user", "system")
    }
    routes: list[dict[str, Any]] = [
        {"prefix": f"/{mode}/v1/", "rewrite": "/v1/", "profile": mode}
        for mode in ("message", "user", "system")
    ]
    routes += [
        {"prefix": "/nomemory/v1/", "rewrite": "/v1/", "profile": None},
        {"prefix": "/", "profile": "default"},
    ]
    return {"profiles": profiles, "envoy": {"routes": routes}}


def route(mode: str) -> str:
    return "/nomemory/v1" if mode == "none" else f"/{mode}/v1"


def client(stack: Stack, mode: str, user: str) -> openai.OpenAI:
    return stack.client(user, route(mode), timeout=60)


def seed(stack: Stack, users: Sequence[str]) -> None:
    """Every user tells the seed facts, one turn each, through the full route."""
    before = stack.turns_written()
    for user in users:
        for fact in SEED_FACTS:
            client(stack, "message", user).chat.completions.create(
                model="mock-llm", messages=[{"role": "user", "content": fact}]
            )
    if not stack.wait_turns_written(before + len(users) * len(SEED_FACTS), timeout=120):
        raise RuntimeError("the sidecar did not write the seed turns in time")


def replay(
    stack: Stack, mode: str, user: str, conversation: Sequence[tuple[str, str]]
) -> list[list[dict[str, Any]]]:
    """Replay ``conversation``; the upstream messages of each of its requests."""
    seen: list[list[dict[str, Any]]] = []
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    api = client(stack, mode, user)
    for n, (said, reply) in enumerate(conversation):
        marker = f"[{uuid.uuid4().hex[:8]}]"
        messages.append({"role": "user", "content": f"{said} {marker}"})
        api.chat.completions.create(model="mock-llm", messages=messages)  # type: ignore[arg-type]
        seen.append(upstream_messages(stack, marker))
        messages.append({"role": "assistant", "content": reply})
        if n % 4 == 3:
            time.sleep(0.3)  # let the write path keep up, as between real turns
    return seen


def upstream_messages(stack: Stack, marker: str) -> list[dict[str, Any]]:
    status, body = http_get(f"{stack.mock_url}/_mock/requests", timeout=10)
    if status != 200:
        raise RuntimeError(f"mock request log: HTTP {status}")
    for request in reversed(json.loads(body)):
        if "x-user-id" not in request["headers"]:
            continue  # the sidecar's own LLM calls (their turn text carries the marker)
        messages = request["body"].get("messages", [])
        if messages and marker in str(messages[-1].get("content")):
            return list(messages)
    raise RuntimeError(f"no upstream request carries {marker}")


def render(messages: Sequence[Mapping[str, Any]]) -> str:
    """ChatML, the shape most served chat templates render."""
    parts = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|im_start|>{message.get('role')}\n{content or ''}<|im_end|>\n")
    return "".join(parts)


def load_tokenizer() -> Any:
    from tokenizers import Tokenizer

    path = Path(resolve_model_path(PACKAGED_MODEL)) / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def reuse(tokenizer: Any, requests: Sequence[Sequence[Mapping[str, Any]]]) -> list[float]:
    """For turns ≥ 2: the share of request n's tokens that open request n − 1 too."""
    ids = [tokenizer.encode(render(r), add_special_tokens=False).ids for r in requests]
    return [shared_prefix(ids[n - 1], ids[n]) / len(ids[n]) for n in range(1, len(ids))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=24, help="turns replayed per conversation")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    args = parser.parse_args(argv)
    if not 2 <= args.turns <= min(len(c) for c in CONVERSATIONS):
        parser.error(f"--turns must be 2..{min(len(c) for c in CONVERSATIONS)}")
    tokenizer = load_tokenizer()
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    injected: dict[str, int] = {mode: 0 for mode in MODES}
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="bench-prefix-") as tmp,
        running_stack(
            Path(tmp),
            config_overrides=stack_overrides(),
            mock_args=("--max-requests", "20000"),
        ) as stack,
    ):
        users = {
            (mode, c): f"prefix-{mode}-{c}-{uuid.uuid4().hex[:6]}"
            for mode in MODES
            for c in range(len(CONVERSATIONS))
        }
        print(f"seeding {len(users)} users with {len(SEED_FACTS)} facts each ...", flush=True)
        seed(stack, list(users.values()))
        for c, conversation in enumerate(CONVERSATIONS):
            for mode in MODES:
                requests = replay(stack, mode, users[mode, c], conversation[: args.turns])
                injected[mode] += sum(
                    1 for r in requests if any("<memory>" in render([m]) for m in r)
                )
                results[mode] += reuse(tokenizer, requests)
                print(f"  conversation {c + 1}, {mode}: done", flush=True)
    rows = {
        mode: {
            "mean": statistics.fmean(values),
            "p10": percentile(values, 10),
            "min": min(values),
            "requests": len(values),
            "requests_with_memory": injected[mode],
        }
        for mode, values in results.items()
    }
    print()
    print(f"prefix reuse, turns >= 2 ({len(CONVERSATIONS)} conversations x {args.turns} turns)")
    print(f"{'mode':<10} {'mean':>7} {'p10':>7} {'min':>7} {'with memory':>12}")
    for mode, row in rows.items():
        print(
            f"{mode:<10} {row['mean']:>7.1%} {row['p10']:>7.1%} {row['min']:>7.1%} "
            f"{row['requests_with_memory']:>6} / {args.turns * len(CONVERSATIONS)}"
        )
    print("vLLM prefix-cache hit rate: not measured (no vLLM on this host)")
    write_report(
        args.json,
        {
            "benchmark": "bench_prefix",
            "date": time.strftime("%Y-%m-%d"),
            "host": {"machine": platform.machine(), "python": platform.python_version()},
            "tokenizer": f"{PACKAGED_MODEL} (WordPiece), ChatML rendering",
            "conversations": len(CONVERSATIONS),
            "turns": args.turns,
            "seconds": round(time.perf_counter() - started, 1),
            "reuse": rows,
            "vllm_prefix_cache_hit_rate": None,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
