"""Shared fixtures: the embedding model is loaded once per test session."""

from __future__ import annotations

import asyncio
import os

import pytest

from sidecar.config import EmbeddingConfig
from sidecar.memory.embedder import SentenceTransformerEmbedder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
async def embedder() -> SentenceTransformerEmbedder:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, SentenceTransformerEmbedder.load, EmbeddingConfig())
