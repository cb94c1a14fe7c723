"""Fixtures of the mock LLM's tests: the shared per-test mock, an
OpenAI client pointed at it, and a plain aiohttp session for the wire-level and
``/_mock/*`` routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from openai import AsyncOpenAI

from e2e.mock_llm import MockLLM


@pytest.fixture
def mock(mock_llm: MockLLM) -> MockLLM:
    """The shared per-test mock LLM (tests/conftest.py), by the name these tests use."""
    return mock_llm


@pytest.fixture
async def client(mock: MockLLM) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=mock.base_url, api_key="x", max_retries=0) as c:
        yield c


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session
