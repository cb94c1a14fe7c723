#!/usr/bin/env python
"""Embedding backends side by side, in one run: torch, onnx, onnx-int8.

Per backend:

* ``build``      seconds to build the embedder (export/quantize on a cold cache)
* ``encode``     p50/p99 ms of one single-text model call, called directly
* ``embed``      p50/p99 ms of one single-text ``embed()`` through the micro-batcher
* ``c=N``        N coroutines each embedding one query at a time: req/s, latency
                 p50/p99 and the mean micro-batch size; with ``--lanes 1,2,4`` once
                 per number of inference threads (``embedding.lanes``)
* ``cosine``     vectors of ~300 varied texts (questions, facts, chat turns, code,
                 other languages, texts past the 256-token limit), each embedded
                 alone, against the torch backend's; and each text alone against
                 the same text in one batch of all of them

A backend may name the torch device and dtype: ``torch@cuda``, ``torch@cuda/float16``
(``embedding.device`` and ``embedding.dtype``); plain ``torch`` (CPU, float32) stays
the cosine reference. Example::

    .venv/bin/python -m scripts.bench_embedder --json out/bench_embedder.json
    .venv/bin/python -m scripts.bench_embedder --backends torch,torch@cuda/float16,onnx-int8
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from scripts.benchlib import embedding_spec, percentile, write_report
from sidecar.config import EmbeddingConfig
from sidecar.memory.embedding.batching import BatchingEmbedder
from sidecar.memory.embedding.onnx import OnnxEncoder
from sidecar.memory.embedding.protocol import Encoder, Vectors
from sidecar.memory.embedding.torch_backend import load_torch_encoder

BACKENDS = ("torch", "onnx", "onnx-int8")


def sample_texts() -> list[str]:
    """About 310 varied texts: questions, stated facts, chat turns, code, other
    languages, odd spacing, and 14 texts longer than the model's 256 tokens."""
    subjects = [
        ("dog", "Biscuit", "a three-year-old beagle"),
        ("sister", "Maya", "a paediatric nurse in Leeds"),
        ("car", "the old Volvo", "a 2009 estate with a broken heater"),
        ("job", "data engineering", "mostly Spark pipelines and on-call"),
        ("diet", "vegetarian", "no fish, but eggs and cheese are fine"),
        ("flight", "LH 455", "leaving Frankfurt at 10:25 on Friday"),
        ("project", "the billing rewrite", "due before the end of the quarter"),
        ("landlord", "Mr. Okafor", "who still hasn't fixed the boiler"),
        ("bank account", "the joint account", "with a monthly fee of 4.90 EUR"),
        ("garden", "the allotment", "tomatoes, courgettes and far too much mint"),
        ("knee", "the left knee", "injured playing five-a-side football"),
        ("thesis", "my master's thesis", "on graph neural networks for traffic"),
        ("band", "The Midnight Owls", "I play bass, rehearsals on Thursdays"),
        ("daughter", "Ines", "starts primary school in September"),
        ("laptop", "the ThinkPad X1", "battery lasts about three hours now"),
        ("wedding", "our wedding", "planned for June 14th in Porto"),
    ]
    texts: list[str] = []
    for noun, name, detail in subjects:
        texts += [
            f"What did I tell you about my {noun}?",
            f"Do you remember anything about {name}?",
            f"My {noun} is {name}: {detail}.",
            f"User mentioned their {noun} ({name}) — {detail}.",
            f"can u remind me what i said abt my {noun} last week",
            f"Update: {name} is no longer relevant, forget what I said about my {noun}.",
            f"I'm worried about my {noun}. {detail.capitalize()}. Any advice?",
            f"Summarise everything you know about my {noun} in three bullet points.",
            f"Note to self: {detail} ({name}).",
            f"Last time we talked about {name} you suggested something for my {noun}. What was it?",
            f"{name.upper()}!!! {detail}",
            f"Is {name} the right call for my {noun}, given that it is {detail}?",
        ]
    facts = [
        "The user lives in Berlin and works as a nurse.",
        "The user is allergic to peanuts and shellfish.",
        "The user prefers Vim over Emacs and uses a split keyboard.",
        "The user's favourite programming language is Rust because of the borrow checker.",
        "The user drinks oat milk flat whites, never before 8am.",
        "The user runs a half marathon every spring.",
        "The user is learning Japanese and is at JLPT N4 level.",
        "The user's birthday is on 3 March.",
        "The user has two cats named Pixel and Byte.",
        "The user is a vegetarian but eats eggs.",
        "Water boils at 100 degrees Celsius at sea level.",
        "The Eiffel Tower was completed in 1889.",
        "Photosynthesis converts light energy into chemical energy.",
        "The speed of light is about 299,792 kilometres per second.",
        "Python's GIL serialises bytecode execution across threads.",
        "Milvus is a vector database built for similarity search.",
        "Envoy's ext_proc filter streams request and response bodies to a gRPC service.",
        "HNSW indexes trade memory for fast approximate nearest neighbour search.",
        "The Treaty of Westphalia was signed in 1648.",
        "Mount Kilimanjaro is the highest mountain in Africa.",
    ]
    questions = [
        "What's my favourite food?",
        "Which city do I live in?",
        "Where do I work?",
        "How do I reverse a linked list in Python?",
        "Why does my Docker build keep failing with exit code 137?",
        "What is the capital of Australia?",
        "Explain the difference between TCP and UDP.",
        "How many grams of protein should I eat per day?",
        "Can you recommend a book like The Left Hand of Darkness?",
        "Is it going to rain tomorrow?",
        "What's 17% of 2,450?",
        "Translate 'good morning' into Portuguese.",
        "How do I set up SSH keys for GitHub?",
        "What time zone is Auckland in?",
        "Any plans for the weekend?",
        "Which editor do I prefer?",
        "What do I usually order at the coffee shop?",
        "How long should I boil an egg for a soft yolk?",
        "what was the name of that restaurant again??",
        "ok thanks",
    ]
    odd = [
        "",
        " ",
        "?",
        "a",
        "OK",
        "    leading and trailing spaces    ",
        "tabs\tand\nnewlines\n\nin the middle",
        "ALL CAPS QUESTION ABOUT MY SCHEDULE",
        "emoji 🎉🐍🚀 and symbols ©®™ ∑∫√",
        "def add(a: int, b: int) -> int:\n    return a + b",
        "SELECT name, email FROM users WHERE created_at > NOW() - INTERVAL '7 days';",
        '{"user": "u-123", "prefs": {"theme": "dark", "lang": "en-GB"}}',
        "https://example.com/docs/v2/getting-started?ref=chat#install",
        "ERROR 2026-01-03T10:22:01Z worker-3 OOMKilled after 512Mi",
        "Je m'appelle Claire et j'habite à Lyon depuis cinq ans.",
        "Ich arbeite als Softwareentwickler in München.",
        "Me encanta cocinar paella los domingos con mi familia.",
        "私は東京に住んでいて、猫を二匹飼っています。",
        "Моя сестра живёт в Санкт-Петербурге.",
        "我喜欢喝绿茶，不喜欢咖啡。",
        "12345 67890",
        "3.14159 2.71828 1.41421",
        "lol",
        "asdfghjkl qwertyuiop",
        "The the the the the the the the",
    ]
    paragraph = (
        "Yesterday I finally sat down and wrote out the whole plan for the move. "
        "We are leaving the flat in Kreuzberg at the end of March, the movers come on the "
        "28th, and the new place in Potsdam needs a kitchen before we can really live there. "
        "My partner wants to keep the old sofa but I think it will not fit through the door. "
        "The kids are nervous about changing schools, especially Ines, who has just made "
        "friends with the girl next door. "
    )
    long_texts = [
        paragraph * 4,
        " ".join(
            f"Step {i}: check the logs, restart the service, and note the time." for i in range(60)
        ),
        ("The quick brown fox jumps over the lazy dog. " * 60).strip(),
        " ".join(facts) * 2,
        "\n".join(f"- item {i}: {q}" for i, q in enumerate(questions * 3)),
        (
            "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
            "incididunt ut labore et dolore magna aliqua. "
        )
        * 12,
        "word " * 600,
        "".join(chr(0x4E00 + (i * 37) % 2000) for i in range(700)),
    ]
    stories = [
        f"{paragraph * 3}Also, about my {noun}: {name}, {detail}."
        for noun, name, detail in subjects[:6]
    ]
    mixed = [
        f"{q} By the way, {f[0].lower()}{f[1:]}" for q, f in zip(questions, facts, strict=True)
    ]
    chats = [
        f"user: {q}\nassistant: Based on what you told me earlier, {f[0].lower()}{f[1:]}"
        for q, f in zip(questions[::-1], facts, strict=True)
    ]
    return texts + stories + facts + questions + odd + long_texts + mixed + chats


QUERIES = [
    "What did I tell you about my sister's wedding plans?",
    "Which city do I live in?",
    "What do I usually order at the coffee shop?",
    "can u remind me what i said abt my car last week",
    "Any plans for the weekend?",
    "What's my dog's name again?",
    "Why does my Docker build keep failing with exit code 137?",
    "Which editor do I prefer, and what keyboard did I say I use at work?",
]


@dataclass
class Load:
    concurrency: int
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    mean_batch: float


@dataclass
class Result:
    backend: str
    build_s: float
    built_cache: bool | None
    encode_p50_ms: float
    encode_p99_ms: float
    embed_p50_ms: float
    embed_p99_ms: float
    loads: list[Load] = field(default_factory=list)
    cosine_to_torch_mean: float | None = None
    cosine_to_torch_p5: float | None = None
    cosine_to_torch_min: float | None = None
    batch_vs_single_min: float | None = None


def load_encoder(config: EmbeddingConfig) -> tuple[Encoder, bool | None]:
    if config.backend == "torch":
        return load_torch_encoder(config), None
    encoder = OnnxEncoder.load(config)
    return encoder, encoder.artifact.built if encoder.artifact else None


def one_by_one(encoder: Encoder, texts: list[str]) -> Vectors:
    return np.concatenate([encoder.encode([text]) for text in texts])


async def run_load(embedder: BatchingEmbedder, concurrency: int, requests: int) -> Load:
    latencies: list[float] = []
    remaining = requests
    batches_before, texts_before = embedder.stats.batches, embedder.stats.texts

    async def worker(seed: int) -> None:
        nonlocal remaining
        i = seed
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            await embedder.embed([QUERIES[i % len(QUERIES)]], urgent=True)
            latencies.append(time.perf_counter() - started)
            i += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(n) for n in range(concurrency)))
    wall = time.perf_counter() - started
    batches = embedder.stats.batches - batches_before
    texts = embedder.stats.texts - texts_before
    return Load(
        concurrency=concurrency,
        requests=len(latencies),
        rps=len(latencies) / wall,
        p50_ms=1000 * percentile(latencies, 50),
        p99_ms=1000 * percentile(latencies, 99),
        mean_batch=texts / max(batches, 1),
    )


async def bench_backend(
    backend: str,
    config: EmbeddingConfig,
    *,
    single: int,
    requests: int,
    concurrency: list[int],
    corpus: list[str] | None,
    reference: Vectors | None,
) -> tuple[Result, Vectors | None]:
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    encoder, built = await loop.run_in_executor(None, load_encoder, config)
    build_s = time.perf_counter() - started
    for i in range(20):
        encoder.encode([QUERIES[i % len(QUERIES)]])
    encode_times = []
    for i in range(single):
        t0 = time.perf_counter()
        encoder.encode([QUERIES[i % len(QUERIES)]])
        encode_times.append(time.perf_counter() - t0)
    embedder = BatchingEmbedder.for_encoder(encoder, config)
    try:
        embed_times = []
        for i in range(single):
            t0 = time.perf_counter()
            await embedder.embed([QUERIES[i % len(QUERIES)]], urgent=True)
            embed_times.append(time.perf_counter() - t0)
        result = Result(
            backend=backend,
            build_s=build_s,
            built_cache=built,
            encode_p50_ms=1000 * percentile(encode_times, 50),
            encode_p99_ms=1000 * percentile(encode_times, 99),
            embed_p50_ms=1000 * percentile(embed_times, 50),
            embed_p99_ms=1000 * percentile(embed_times, 99),
        )
        for c in concurrency:
            await run_load(embedder, c, min(requests, 50))  # warm the path
            result.loads.append(await run_load(embedder, c, requests))
    finally:
        await embedder.close()
    vectors = None
    if corpus is not None:
        vectors = one_by_one(encoder, corpus)
        batched = np.concatenate(
            [encoder.encode(corpus[i : i + 32]) for i in range(0, len(corpus), 32)]
        )
        result.batch_vs_single_min = float((vectors * batched).sum(axis=1).min())
        if reference is not None:
            cos = (vectors * reference).sum(axis=1)
            result.cosine_to_torch_mean = float(cos.mean())
            result.cosine_to_torch_p5 = float(np.percentile(cos, 5))
            result.cosine_to_torch_min = float(cos.min())
    return result, vectors


def print_table(results: list[Result], concurrency: list[int]) -> None:
    header = f"{'':26}" + "".join(f"{r.backend:>14}" for r in results)
    print(header)
    print("-" * len(header))

    def row(label: str, values: list[str]) -> None:
        print(f"{label:26}" + "".join(f"{v:>14}" for v in values))

    row("build s", [f"{r.build_s:.1f}" + ("*" if r.built_cache else "") for r in results])
    row("encode p50 / p99 ms", [f"{r.encode_p50_ms:.2f}/{r.encode_p99_ms:.2f}" for r in results])
    row("embed p50 / p99 ms", [f"{r.embed_p50_ms:.2f}/{r.embed_p99_ms:.2f}" for r in results])
    for i, c in enumerate(concurrency):
        row(f"c={c} req/s", [f"{r.loads[i].rps:.0f}" for r in results])
        row(
            f"c={c} p50 / p99 ms",
            [f"{r.loads[i].p50_ms:.1f}/{r.loads[i].p99_ms:.1f}" for r in results],
        )
        row(f"c={c} mean batch", [f"{r.loads[i].mean_batch:.1f}" for r in results])

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.5f}"

    row("cosine to torch mean", [fmt(r.cosine_to_torch_mean) for r in results])
    row("cosine to torch p5", [fmt(r.cosine_to_torch_p5) for r in results])
    row("cosine to torch min", [fmt(r.cosine_to_torch_min) for r in results])
    row("batch vs single min", [fmt(r.batch_vs_single_min) for r in results])
    if any(r.built_cache for r in results):
        print("* includes exporting/quantizing into an empty cache")


async def main_async(args: argparse.Namespace) -> int:
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = {b for b in backends if b.partition("@")[0] not in BACKENDS}
    if unknown:
        print(f"unknown backends: {sorted(unknown)}", file=sys.stderr)
        return 2
    concurrency = [int(c) for c in args.concurrency.split(",")]
    corpus = None if args.no_cosine else sample_texts()
    cache_dir = args.cache_dir or Path(tempfile.mkdtemp(prefix="bench-embedder-"))
    if corpus is not None and "torch" in backends:  # the reference goes first
        backends = ["torch", *[b for b in backends if b != "torch"]]
    results: list[Result] = []
    reference: Vectors | None = None
    lanes = [int(n) for n in args.lanes.split(",")]
    for backend in backends:
        for n_lanes in lanes:
            config = EmbeddingConfig(
                model=args.model,
                **embedding_spec(backend),
                cache_dir=str(cache_dir),
                threads=args.threads,
                batch_wait_ms=args.batch_wait_ms,
                max_batch=args.max_batch,
                lanes=n_lanes,
            )
            label = backend if len(lanes) == 1 else f"{backend} x{n_lanes}"
            print(f"== {label}", file=sys.stderr, flush=True)
            result, vectors = await bench_backend(
                backend,
                config,
                single=args.single,
                requests=args.requests,
                concurrency=concurrency,
                corpus=corpus if n_lanes == lanes[0] else None,
                reference=reference,
            )
            result.backend = label
            if backend == "torch" and vectors is not None:
                reference = vectors
            results.append(result)
    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"threads={args.threads}, lanes={args.lanes}, max_batch={args.max_batch}, "
        f"batch_wait_ms={args.batch_wait_ms}, corpus={len(corpus or [])} texts\n"
    )
    print_table(results, concurrency)
    if args.json:
        doc: dict[str, Any] = {
            "machine": {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            },
            "settings": {
                "threads": args.threads,
                "lanes": lanes,
                "max_batch": args.max_batch,
                "batch_wait_ms": args.batch_wait_ms,
                "single": args.single,
                "requests": args.requests,
                "corpus_texts": len(corpus or []),
            },
            "results": [asdict(r) for r in results],
            "summary": {
                r.backend: {
                    "encode_p50_ms": r.encode_p50_ms,
                    "max_rps": max((load.rps for load in r.loads), default=0.0),
                    "mean_rps": statistics.fmean(load.rps for load in r.loads) if r.loads else 0.0,
                }
                for r in results
            },
        }
        write_report(args.json, doc)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument(
        "--model", default=EmbeddingConfig().model, help="model name or local directory"
    )
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--single", type=int, default=300, help="single-query samples")
    parser.add_argument("--requests", type=int, default=600, help="per concurrency level")
    parser.add_argument("--threads", type=int, default=EmbeddingConfig().threads)
    parser.add_argument(
        "--lanes",
        default=str(EmbeddingConfig().lanes),
        help="inference threads (embedding.lanes), comma-separated: one run each",
    )
    parser.add_argument("--max-batch", type=int, default=EmbeddingConfig().max_batch)
    parser.add_argument("--batch-wait-ms", type=float, default=0.0)
    parser.add_argument(
        "--cache-dir", type=Path, help="ONNX cache (default: a fresh temporary directory)"
    )
    parser.add_argument("--no-cosine", action="store_true", help="skip the cosine comparison")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
