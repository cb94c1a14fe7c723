"""Sample texts and vector helpers shared by the embedding tests: texts of every
kind and length (a long one past the model's 256 tokens), the row-wise cosine of
two normalised matrices, and a text-at-a-time reference encoding.
"""

from __future__ import annotations

import numpy as np

from sidecar.memory.embedding.protocol import Encoder, Vectors

LONG = (
    "We are moving out of the flat at the end of March; the movers come on the 28th and "
    "the new kitchen will not be ready before April, so we will eat out a lot. "
) * 12  # well past 256 tokens

SAMPLES = [
    "What did I tell you about my sister?",
    "Which city do I live in?",
    "What's my dog's name again?",
    "can u remind me what i said abt my car last week",
    "The user lives in Berlin and works as a nurse.",
    "The user is allergic to peanuts and shellfish.",
    "The user prefers Vim over Emacs and uses a split keyboard.",
    "My favourite programming language is Rust because of the borrow checker.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The Eiffel Tower was completed in 1889.",
    "HNSW indexes trade memory for fast approximate nearest neighbour search.",
    "How do I reverse a linked list in Python?",
    "Why does my Docker build keep failing with exit code 137?",
    "Explain the difference between TCP and UDP.",
    "Translate 'good morning' into Portuguese.",
    "Any plans for the weekend?",
    "Note to self: the boiler still isn't fixed (Mr. Okafor).",
    "I'm worried about my knee. Injured playing football. Any advice?",
    "def add(a: int, b: int) -> int:\n    return a + b",
    "SELECT name FROM users WHERE created_at > NOW() - INTERVAL '7 days';",
    "Je m'appelle Claire et j'habite à Lyon depuis cinq ans.",
    "Ich arbeite als Softwareentwickler in München.",
    "私は東京に住んでいて、猫を二匹飼っています。",
    "emoji 🎉🐍🚀 and symbols ©®™",
    "    leading and trailing spaces    ",
    "OK",
    LONG,
    " ".join(f"Step {i}: check the logs and restart the service." for i in range(50)),
]


def cosines(a: Vectors, b: Vectors) -> Vectors:
    return np.asarray((a * b).sum(axis=1), dtype=np.float32)


def one_by_one(encoder: Encoder, texts: list[str]) -> Vectors:
    return np.concatenate([encoder.encode([text]) for text in texts])
